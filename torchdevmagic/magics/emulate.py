"""``%emulate_cuda``: run the notebook as if it had a GPU, on the CPU."""

from __future__ import annotations

import math
from typing import Any, Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

# the command's ranges (that module imports no torch)
from torchdevmagic.emulate.fronts.command import (
    MAX_DEVICES,
    MAX_GIB,
    MIN_GIB,
    devices_range,
    memory_range,
)
from torchdevmagic.magics._args import argument, magic_arguments, parse, refuse_combined
from torchdevmagic.magics._show import say

ACTIONS = ("on", "off", "status")


def _devices(value: str) -> int:
    """An argparse ``type`` for ``--devices``: a one-line ``UsageError`` with the range."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_DEVICES:
        raise UsageError(f"%emulate_cuda: {devices_range(repr(value))}")
    return number


def _memory(value: str) -> float:
    """An argparse ``type`` for ``--memory`` (GiB per GPU): finite and in range (``inf``,
    ``nan`` and ``1e-10`` are numbers to ``float`` but no GPU's size)."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not MIN_GIB <= number <= MAX_GIB:  # False for nan
        raise UsageError(f"%emulate_cuda: {memory_range(repr(value))}")
    return number


@magics_class
class EmulateMagics(Magics):
    _started: Optional[Any] = None  # the session this magic started (stopped on unload)

    @magic_arguments("%emulate_cuda")
    @argument("action", nargs="?", default="status", help="on, off or status (default)")
    @argument(
        "--devices", type=_devices, default=None, help=f"emulated GPUs, 1-{MAX_DEVICES} (default 1)"
    )
    @argument("--memory", type=_memory, default=None, help="GiB per GPU (default 16)")
    @argument(
        "--to",
        choices=["cpu"],
        default=None,
        help="off: first bring every tensor still on an emulated GPU to the CPU",
    )
    @argument("-o", "--output", action="store_true", help="return the status object")
    @line_magic
    def emulate_cuda(self, line: str = "") -> Any:
        """Emulate CUDA GPUs on the CPU: code written for a GPU runs, and fails where a GPU would.

        Usage: %emulate_cuda on [--devices N] [--memory GiB] [-o]
               %emulate_cuda off [--to cpu] [-o]
               %emulate_cuda status [-o]

        While on, torch.cuda.is_available() is True and tensors put on "cuda" / "cuda:N"
        compute on the CPU (the same values) but report their CUDA device; mixing devices
        raises PyTorch's own CUDA errors, which %%devcheck explains. %devices lists the
        emulated GPUs and %%cuda_time times them on the host clock; NCCL runs on gloo,
        with NCCL's device rules. Not emulated: custom CUDA ops, Triton, torch.compile GPU
        kernels, GPU timing (each a clear error).

        off names the variables still on an emulated GPU (their next use fails: this torch
        has no CUDA); off --to cpu brings them to the CPU first, in place: a model's
        parameters, an optimizer's state and every variable holding them follow.

        Examples::

            %emulate_cuda on --devices 2
            model = Net().to("cuda:1")      # cuda:1, computed on the CPU
            %emulate_cuda status
            %emulate_cuda off --to cpu      # model back on the CPU, ready to use
        """
        args = parse(self.emulate_cuda, line, "%emulate_cuda")
        action = str(args.action).lower()
        if action not in ACTIONS:
            raise UsageError(
                f"%emulate_cuda: unknown action {args.action!r}: use on, off or status"
            )
        if action != "on":  # the sizes of GPUs that off/status do not start
            given = {"--devices": args.devices is not None, "--memory": args.memory is not None}
            given["--to"] = action == "status" and args.to is not None
            refuse_combined("%emulate_cuda", action, given, "only -o")
        elif args.to is not None:
            refuse_combined("%emulate_cuda", action, {"--to": True}, "--devices, --memory, -o")
        from dataclasses import replace

        from torchdevmagic.emulate.fronts import leaving
        from torchdevmagic.emulate.fronts import session as _session

        result = None
        if action == "on":
            self._on(args)
        elif action == "off":
            if _session.active() is not None and _session.active() is not self._started:
                raise UsageError(
                    "CUDA emulation was turned on by emulate_cuda() in code: leave that block"
                )
            shell = self.shell
            assert shell is not None  # a registered Magics instance always has its shell
            hidden = shell.user_ns_hidden
            before = leaving.left_behind(shell.user_ns, hidden)
            _session.end()
            self._started = None
            if args.to == "cpu":
                leaving.to_cpu()
            left = leaving.left_behind(shell.user_ns, hidden) if args.to else before
            moved = tuple(n for n in before if n not in left) if args.to else ()
            result = replace(_session.status(), left_behind=left, moved=moved)
        result = result or _session.status()
        if args.output:
            return result
        say(self.shell, result)
        return None

    def _on(self, args: Any) -> None:
        from torchdevmagic.emulate import EmulationUnsupported
        from torchdevmagic.emulate.fronts import session as _session

        running = _session.active()
        # (a session taken on at torch's import, from the parent's variable, gives way)
        if running is not None and not running.inherited:
            raise UsageError(
                f"CUDA emulation is already on ({running.count} GPU(s)): %emulate_cuda off first"
            )
        try:
            self._started = _session.start(
                int(args.devices or 1), int((args.memory or 16) * (1 << 30))
            )
        except EmulationUnsupported as exc:
            raise UsageError(str(exc)) from None

    def on_unload(self) -> None:
        from torchdevmagic.emulate.fronts import session as _session

        if self._started is not None and _session.active() is self._started:
            _session.end()
        self._started = None
