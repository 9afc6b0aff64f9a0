"""A real InteractiveShell for the GPU self-check (this package is the one that imports IPython)."""

from __future__ import annotations

from typing import Any


def fresh_shell() -> Any:
    """The process's InteractiveShell with torchdevmagic loaded and an empty user namespace.

    The self-check drives the magics exactly as a notebook does (``shell.run_cell``), so each
    check starts from a clean namespace: a check never sees another check's tensors.
    """
    from IPython.core.interactiveshell import InteractiveShell

    shell: Any = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")  # no-op when already loaded
    shell.reset(new_session=False)
    return shell
