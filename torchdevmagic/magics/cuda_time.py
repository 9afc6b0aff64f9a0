"""``%%cuda_time``: time a cell on the GPU with events, next to host and wall time.

Thin glue: parse options, compile the cell like ``%%time`` does, run it under the engine in
:mod:`torchdevmagic.timing`, show the line, return the cell's value (or the result with -o).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from torchdevmagic.magics._args import MAX_COUNT, count, parse
from torchdevmagic.magics._cell import compile_cell, quiet, run_compiled
from torchdevmagic.magics._loop import build_loop
from torchdevmagic.magics._show import show

if TYPE_CHECKING:
    from torchdevmagic.timing import Timer


@magics_class
class CudaTimeMagics(Magics):
    """Holds one :class:`Timer`: its long-lived streams and the set of cells already seen."""

    def __init__(self, shell: Any, timer: Optional[Timer] = None) -> None:
        super().__init__(shell)
        self._timer = timer

    @property
    def timer(self) -> Timer:
        # Built on first use: %load_ext stays cheap (the engine module costs ~25 ms to import).
        if self._timer is None:
            from torchdevmagic.timing import Timer

            self._timer = Timer()
        return self._timer

    @timer.setter
    def timer(self, timer: Timer) -> None:
        """Inject another engine (tests drive the magic with a fake CUDA backend)."""
        self._timer = timer

    @magic_arguments()
    @argument("-n", type=count, default=1, metavar="N", help="runs per repeat (default 1). -n 10")
    @argument(
        "-r", type=count, default=1, metavar="R", help="repeats, one sample each (default 1). -r 5"
    )
    @argument(
        "-w",
        type=count,
        default=None,
        metavar="W",
        help="untimed warm-up runs first (default: 1 with -n/-r, else 0). -w 0",
    )
    @argument(
        "--stream",
        choices=("dedicated", "current"),  # timing.STREAM_MODES; a test keeps them equal
        default="dedicated",
        help="dedicated: a long-lived timing stream (default); current: the caller's stream, "
        "for code that launches on the legacy default stream. --stream current",
    )
    @argument(
        "--device", default=None, help="device to time on (default: current). --device cuda:1"
    )
    @argument("-q", action="store_true", help="quiet: print nothing. -q -o")
    @argument("-o", action="store_true", help="return the TimingResult instead of the value")
    @cell_magic
    def cuda_time(self, line: str, cell: str) -> Any:
        """Time a cell on the GPU: CUDA events on a dedicated stream, host and wall time.

        Runs the body like %%time (variables persist, the last expression is the cell's
        output) and prints one line: GPU time from events, host (enqueue) time, wall time
        until the GPU finished, peak allocator memory (its peak counter is reset), the
        stream, "cold" on a cell's first run, and a verdict (GPU-bound, launch-bound, host
        syncs) where the numbers tell one. -n/-r turn on benchmark statistics. Without a
        GPU it says so and times on the host clock (wall + CPU time).

        Example::

            %%cuda_time -n 10 -r 5 -w 1
            y = x @ x
        """
        __tracebackhide__ = True  # the traceback starts at the user's cell
        from torchdevmagic.timing import CaptureInProgress, source_key

        args = parse(self.cuda_time, line, "%%cuda_time")
        if args.n * args.r + (args.w or 0) > MAX_COUNT:
            raise UsageError(
                f"%%cuda_time: -n x -r + -w is {args.n * args.r + (args.w or 0):,} runs; "
                f"at most {MAX_COUNT:,} in all"
            )
        try:
            plan = self.timer.plan(
                n=args.n, r=args.r, warmup=args.w, device=args.device, stream=args.stream
            )
        except (ValueError, CaptureInProgress) as exc:
            raise UsageError(f"%%cuda_time: {exc}") from None
        compiled = compile_cell(self.shell, cell, "cuda_time")
        key = source_key(compiled.source, plan.device)

        def body() -> Any:
            __tracebackhide__ = True
            return run_compiled(self.shell, compiled)

        # -n/-r: the cell compiled once into a function with the loop inside (as %timeit)
        loop = build_loop(self.shell, compiled) if args.n * args.r > 1 or plan.warmup else None
        try:
            m = self.timer.run(plan, body, key=key, loop=loop)
            if not args.q:
                show(self.shell, m.result)
            if m.error is not None:
                error, m.error = m.error, None  # drop our reference before re-raising
                try:
                    raise error
                finally:
                    del error
        except BaseException as exc:
            # The user's frames only: not this magic's, the engine's (Ctrl-C while it waits
            # for the GPU lands there) or the cell runner's. A bare raise adds none back.
            from torchdevmagic.diagnosis.traceback import without_own_frames

            BaseException.with_traceback(exc, without_own_frames(exc.__traceback__))
            del exc
            raise
        if args.o:
            return m.result
        return None if quiet(compiled.source) else m.value
