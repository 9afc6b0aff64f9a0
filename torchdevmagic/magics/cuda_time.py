"""``%%cuda_time``: time a cell on the GPU with events; ``%cuda_time on``: time every cell.

Thin glue: parse options, compile the cell like ``%%time`` does, run it under the engine in
:mod:`torchdevmagic.timing`, show the line, return the cell's value (or the result with -o).
``%cuda_time on|off|status`` registers :class:`torchdevmagic.timing.percell.CellClock` on
IPython's ``pre_run_cell`` / ``post_run_cell`` events (as ipython-autotime does for wall time).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from torchdevmagic.magics._args import MAX_COUNT, argument, count, magic_arguments, parse
from torchdevmagic.magics._show import show

if TYPE_CHECKING:
    from torchdevmagic.timing import Timer
    from torchdevmagic.timing.percell import CellClock

CELL_ACTIONS = ("on", "off", "status")


@magics_class
class CudaTimeMagics(Magics):
    """Holds one :class:`Timer`: its long-lived streams and the set of cells already seen."""

    def __init__(
        self, shell: Any, timer: Optional[Timer] = None, cells: Optional[CellClock] = None
    ) -> None:
        super().__init__(shell)
        self._timer = timer
        self._cells = cells
        self._hooks: Optional[tuple[Callable[..., None], Callable[..., None]]] = None

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

    @magic_arguments("%%cuda_time")
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
    @argument("-q", action="store_true", help="quiet: print nothing (the value is still shown)")
    @argument(
        "-o",
        action="store_true",
        help="return the TimingResult (shown as Out[n]) instead of the value; prints nothing else",
    )
    @cell_magic
    def cuda_time(self, line: str, cell: str) -> Any:
        """Time a cell on the GPU: CUDA events on a dedicated stream, host and wall time.

        Runs the body like %%time (variables persist, the last expression is the cell's
        output) and prints one line: GPU time from events, host (enqueue) time, wall time
        until the GPU finished, peak allocator memory (its peak counter is reset), the
        stream, "cold" on a cell's first run, and a verdict (GPU-bound, launch-bound, host
        syncs) where the numbers tell one. -n/-r turn on benchmark statistics. Without a
        GPU it says so and times on the host clock (wall + CPU time). `%cuda_time on`
        times every cell.

        Example::

            %%cuda_time -n 10 -r 5 -w 1
            y = x @ x
        """
        __tracebackhide__ = True  # the traceback starts at the user's cell
        from torchdevmagic.magics._cell import compile_cell, quiet, run_compiled
        from torchdevmagic.magics._loop import build_loop
        from torchdevmagic.timing import CaptureInProgress, source_key

        args = parse(self.cuda_time, line, "%%cuda_time")
        if args.n * args.r + (args.w or 0) > MAX_COUNT:
            raise UsageError(
                f"%%cuda_time: -n x -r + -w is {args.n * args.r + (args.w or 0):,} runs; "
                f"at most {MAX_COUNT:,} in all"
            )
        try:
            plan = self.timer.plan(
                n=args.n,
                r=args.r,
                warmup=args.w,
                device=args.device,
                stream=args.stream,
                origin="cell",  # its messages name the magic's options (-w, not warmup=)
            )
        except (ValueError, CaptureInProgress) as exc:
            raise UsageError(f"%%cuda_time: {exc}") from None
        try:
            compiled = compile_cell(self.shell, cell, "cuda_time")
        except SyntaxError as exc:  # the user's, shown as IPython shows it: none of our frames
            BaseException.with_traceback(exc, None)  # a bare raise adds none back
            del exc
            raise
        key = source_key(compiled.source, plan.device)

        def body() -> Any:
            __tracebackhide__ = True
            return run_compiled(self.shell, compiled)

        # -n/-r: the cell compiled once into a function with the loop inside (as %timeit)
        loop = build_loop(self.shell, compiled) if args.n * args.r > 1 or plan.warmup else None
        try:
            m = self.timer.run(plan, body, key=key, loop=loop)
            if not args.q and not (args.o and m.error is None):  # -o: Out[n] shows it
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

    # ---------------------------------------------------------------- %cuda_time on|off

    @property
    def cells(self) -> CellClock:
        if self._cells is None:
            from torchdevmagic.timing.percell import CellClock

            self._cells = CellClock()
        return self._cells

    @magic_arguments("%cuda_time", usage="%(prog)s [on|off|status]")
    @argument("action", nargs="*", metavar="on|off|status", help="on, off or status (the default)")
    # IPython types line_magic("name") as returning `_F | Callable[[_F], _F]`; the str form
    # always returns the decorator, which the union cannot express.
    @line_magic("cuda_time")  # type: ignore[arg-type]
    def cuda_time_line(self, line: str = "") -> None:
        """Time every cell: after each one, print its GPU time and wall time in one line.

        on      after each cell: "cell time: GPU 8.52 ms · wall 9.10 ms (cuda:0)"; GPU time
                from CUDA events on the stream current when the cell began, wall time until
                the GPU finished. Without CUDA in use: wall time and why there is no GPU time.
        off     stop
        status  say whether it is on (default)

        A cell that starts CUDA itself is timed from the next cell on; nothing here starts
        CUDA. Use %%cuda_time for one cell's details (host time, peak memory, statistics).

        Example::

            %cuda_time on
        """
        args = parse(self.cuda_time_line, line, "%cuda_time")
        action = str(args.action[0]).lower() if len(args.action) == 1 else "status"
        if len(args.action) > 1 or action not in CELL_ACTIONS:
            raise UsageError(
                f"%cuda_time takes on, off or status, not {' '.join(args.action)!r}; to time "
                "one cell, "
                "put %%cuda_time on its first line"
            )
        if action == "on":
            self.turn_on()
        elif action == "off":
            self.turn_off()
        print(self.status())

    def status(self) -> str:
        if self._hooks is None:
            return "cell timing is off (%cuda_time on: GPU and wall time after every cell)"
        return "cell timing is on: GPU and wall time after every cell (%cuda_time off to stop)"

    def turn_on(self) -> None:
        if self._hooks is not None:
            return
        shell = self.shell
        assert shell is not None  # a registered Magics instance always has its shell
        clock = self.cells
        stop = clock.stop

        def post(*_: Any) -> None:
            try:
                timed = stop()
                if timed is not None:
                    print(timed.line())
            except Exception:  # printing failed (a closed stdout): the cell is not ours
                pass

        pre = clock.start  # never raises: it catches its own errors
        self._hooks = (pre, post)
        shell.events.register("pre_run_cell", pre)
        shell.events.register("post_run_cell", post)

    def turn_off(self) -> None:
        hooks, self._hooks = self._hooks, None
        if hooks is None:
            return
        shell = self.shell
        assert shell is not None
        for event, hook in zip(("pre_run_cell", "post_run_cell"), hooks):
            with contextlib.suppress(ValueError):  # already unregistered by someone else
                shell.events.unregister(event, hook)
        self.cells.reset()  # post_run_cell of this cell still runs: it finds nothing started

    def on_unload(self) -> None:
        self.turn_off()
