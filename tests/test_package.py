"""The package itself: cheap import, symmetric load/unload, configuration loading."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import torchdevmagic
from torchdevmagic.magics import MAGIC_CLASSES


@pytest.mark.slow
def test_import_pulls_in_nothing_heavy() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        import torchdevmagic
        print(json.dumps([m for m in ("torch", "IPython", "pynvml", "rich") if m in sys.modules]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_version_and_lazy_api() -> None:
    assert torchdevmagic.__version__.count(".") == 2
    for name in torchdevmagic.__all__:
        assert hasattr(torchdevmagic, name), name


def _our_magics(shell: Any) -> set[tuple[str, str]]:
    found = set()
    for kind, table in shell.magics_manager.magics.items():
        for name, fn in table.items():
            owner = getattr(fn, "__self__", None)  # a made instance's method, or at load
            module = type(owner).__module__ if owner is not None else fn.__module__  # a stub
            if module.startswith("torchdevmagic"):
                found.add((kind, name))
    return found


def test_load_unload_reload_are_symmetric(_ipython: Any) -> None:
    shell = _ipython
    shell.extension_manager.load_extension("torchdevmagic")
    loaded = _our_magics(shell)
    assert len(loaded) >= len(MAGIC_CLASSES)
    shell.extension_manager.unload_extension("torchdevmagic")
    assert _our_magics(shell) == set()
    ours = {spec.split(":")[1] for spec in MAGIC_CLASSES}
    assert ours.isdisjoint(shell.magics_manager.registry)
    shell.run_line_magic("load_ext", "torchdevmagic")
    shell.run_line_magic("reload_ext", "torchdevmagic")
    assert _our_magics(shell) == loaded
    shell.run_line_magic("unload_ext", "torchdevmagic")
    assert _our_magics(shell) == set()


@pytest.mark.slow
def test_extension_loads_from_ipython_configuration(tmp_path: Any) -> None:
    """c.InteractiveShellApp.extensions = ["torchdevmagic"] in a profile loads it."""
    profile = tmp_path / "profile_tdm"
    profile.mkdir()
    (profile / "ipython_config.py").write_text(
        'c.InteractiveShellApp.extensions = ["torchdevmagic"]\n', encoding="utf-8"
    )
    code = "import torch; x = torch.zeros(3)\n%devices\n"
    script = tmp_path / "cell.ipy"
    script.write_text(code, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "IPython", f"--profile-dir={profile}", "--no-banner", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**__import__("os").environ, "IPYTHONDIR": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    assert "x     Tensor  cpu     float32  [3]" in out.stdout


@pytest.mark.slow
def test_public_names_survive_importing_every_submodule() -> None:
    """A submodule named like a public function would replace it on the package once
    imported (``torchdevmagic.scan`` the module instead of ``scan()`` the function)."""
    code = textwrap.dedent(
        """
        import importlib, json, pkgutil
        import torchdevmagic
        for info in pkgutil.walk_packages(torchdevmagic.__path__, "torchdevmagic."):
            importlib.import_module(info.name)
        kinds = {n: type(getattr(torchdevmagic, n)).__name__ for n in torchdevmagic.__all__}
        print(json.dumps(kinds))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    kinds = json.loads(out.stdout.strip().splitlines()[-1])
    assert "module" not in kinds.values(), kinds
    assert kinds["scan"] == "function" and kinds["diagnose"] == "function"


def test_readme_links_work_on_a_package_index_page() -> None:
    """The README is the project's page on a package index, where a link relative to the
    repository (docs/env.md) leads nowhere: every link is absolute or an in-page anchor."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)", readme) + re.findall(
        r"<(?:a|img)\s[^>]*?(?:href|src)=\"([^\"]+)", readme
    )
    relative = [t for t in targets if not re.match(r"(https?://|#)", t)]
    assert relative == []


def test_a_magic_is_made_at_first_use_and_unloaded_with_what_it_hooked(_ipython: Any) -> None:
    """Loading registers thin functions (%load_ext no costlier than autotime's); the
    first use puts the real methods in their place, and unloading takes back the methods,
    the thin functions left and the hooks ``%cuda_time on`` added, but not a user's magic."""
    from torchdevmagic.magics import MAGICS, implementation

    shell, manager = _ipython, _ipython.magics_manager
    callbacks = {event: len(fns) for event, fns in shell.events.callbacks.items()}
    shell.extension_manager.load_extension("torchdevmagic")
    try:
        assert all(not hasattr(fn, "__self__") for fn in _tables(manager, MAGICS))
        for magic in MAGICS:  # what %magic lists is the method's own first line
            doc = implementation(magic).__doc__.splitlines()[0]
            assert manager.lsmagic_docs(brief=True)[magic.kind][magic.name] == doc
        shell.run_line_magic("cuda_time", "on")
        line, cell = manager.magics["line"]["cuda_time"], manager.magics["cell"]["cuda_time"]
        assert line.__self__ is cell.__self__ is manager.registry["CudaTimeMagics"]
        assert not hasattr(manager.magics["line"]["devices"], "__self__")  # not used yet
        assert len(shell.events.callbacks["post_run_cell"]) == callbacks["post_run_cell"] + 1
        shell.register_magic_function(lambda line: "mine", "line", "devices")
    finally:
        shell.extension_manager.unload_extension("torchdevmagic")
    try:
        assert {event: len(fns) for event, fns in shell.events.callbacks.items()} == callbacks
        assert manager.magics["line"]["devices"]("") == "mine"  # the user's stays
        assert (
            "cuda_time" not in manager.magics["line"] and "devcheck" not in manager.magics["cell"]
        )
        assert not {"CudaTimeMagics", "DevicesMagics"} & set(manager.registry)
    finally:
        del manager.magics["line"]["devices"]


def _tables(manager: Any, magics: Any) -> list[Any]:
    return [manager.magics[m.kind][m.name] for m in magics]
