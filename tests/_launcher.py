"""accelerate's ``notebook_launcher`` as far as its refusal, for tests without accelerate:
the function runs in forked processes (as accelerate starts them on CUDA), and a worker's
"Cannot re-initialize CUDA in forked subprocess" comes back as the RuntimeError accelerate
raises then (its words read in accelerate 1.16.0's launchers.py), chained to the worker's."""

from __future__ import annotations

from typing import Any, Callable

REFUSAL = (
    "CUDA has been initialized before the `notebook_launcher` could create a forked "
    "subprocess. This likely stems from an outside import causing issues once the "
    "`notebook_launcher()` is called. Please review your imports and test them when running "
    "the `notebook_launcher()` to identify which one is problematic and causing CUDA to be "
    "initialized."
)


def _run(index: int, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    function(*args)


def notebook_launcher(
    function: Callable[..., Any], args: tuple[Any, ...] = (), num_processes: int = 2
) -> None:
    from torch.multiprocessing import start_processes
    from torch.multiprocessing.spawn import ProcessRaisedException

    try:
        start_processes(_run, (function, args), nprocs=num_processes, start_method="fork")
    except ProcessRaisedException as e:
        if "Cannot re-initialize CUDA in forked subprocess" in e.args[0]:
            raise RuntimeError(REFUSAL) from e
        raise
