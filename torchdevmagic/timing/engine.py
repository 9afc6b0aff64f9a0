"""The timing engine: plan (everything that can refuse: :mod:`.plan`), then run on the device
or the host.

The stream discipline is in the package docstring (:mod:`torchdevmagic.timing`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Protocol

from torchdevmagic.timing.backends import Backend, default_backend
from torchdevmagic.timing.plan import Plan, make_plan
from torchdevmagic.timing.result import TimingResult
from torchdevmagic.timing.verdict import Samples


@dataclass
class Measurement:
    """The result, the code's last return value, and the exception it raised (if any)."""

    result: TimingResult
    value: Any = None
    error: Optional[Exception] = None


class Loop(Protocol):
    """Runs the timed code ``times`` times in one call (the magic compiles a cell into such a
    function, as ``%timeit`` does, so a run costs no Python call of ours)."""

    def __call__(self, times: int) -> Any: ...

    def runs_done(self, exc: BaseException) -> int:
        """How many runs had started when ``exc`` stopped the loop (the failing one too)."""
        ...


class _Repeat:
    """A plain callable as a :class:`Loop`: one call of ``fn`` per run."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._failed_at = 1

    def __call__(self, times: int) -> Any:
        __tracebackhide__ = True  # IPython leaves this frame out of the user's traceback
        fn, value, done = self._fn, None, 0
        try:
            for done in range(times):  # noqa: B007 - read in the except branch
                value = fn()
        except Exception:
            self._failed_at = done + 1
            raise
        return value

    def runs_done(self, exc: BaseException) -> int:
        return self._failed_at


@contextlib.contextmanager
def _faults_kept(guard: contextlib.AbstractContextManager[Any], acc: Samples) -> Iterator[None]:
    """``guard`` whose exit cannot lose the measurement: a CUDA error there is kept in ``acc``."""
    guard.__enter__()
    try:
        yield
    finally:
        try:
            guard.__exit__(None, None, None)
        except Exception as exc:
            acc.keep_fault(exc)


def _own_peak(peak: Optional[int], start: Optional[int]) -> Optional[int]:
    """The most the cell's own allocations reached above what was allocated when it started
    (the allocator's peak counter is the device's absolute high-water mark)."""
    if peak is None:
        return None
    return max(peak - start, 0) if start is not None else peak


def source_key(source: str, device: str) -> str:
    return hashlib.sha1(f"{device}\0{source}".encode()).hexdigest()


class Timer:
    """The timing engine. Keeps the per-device streams (via the backend) and the cold set.

    ``backend``: one accelerator backend (tests inject a fake); ``None`` picks the real one
    for the requested device on first use. ``clock``/``cpu_clock``/``sleep`` are the host's.
    ``origin`` of :meth:`plan`/:meth:`measure` words what it says: "call" (the default, the
    Python API's keywords and calls), or "cell" (``%%cuda_time``'s options and cells).
    """

    def __init__(
        self,
        backend: Optional[Backend] = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
        sleep: Callable[[float], None] = time.sleep,
        spin_s: float = 1e-3,
        max_poll_s: float = 1e-3,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self._injected = backend
        self.environ = environ  # CUDA_LAUNCH_BLOCKING changes what the figures mean
        self._backends: dict[Optional[str], Optional[Backend]] = {}
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.sleep = sleep
        self.spin_s = spin_s
        self.max_poll_s = max_poll_s
        self.seen: set[str] = set()

    # -- planning: everything that can refuse, before any user code runs ------------------

    def plan(
        self,
        *,
        n: int = 1,
        r: int = 1,
        warmup: Optional[int] = 0,
        device: Optional[str] = None,
        stream: str = "dedicated",
        origin: str = "call",
    ) -> Plan:
        """:func:`~.plan.make_plan` with this timer's backends."""
        return make_plan(
            self._backend_for, n=n, r=r, warmup=warmup, device=device, stream=stream, origin=origin
        )

    def _backend_for(self, kind: Optional[str]) -> Optional[Backend]:
        if self._injected is not None:
            ok = (kind is None or kind == self._injected.kind) and self._injected.is_available()
            return self._injected if ok else None
        if kind not in self._backends:
            self._backends[kind] = default_backend(kind)
        return self._backends[kind]

    # -- running ---------------------------------------------------------------------------

    def run(
        self,
        plan: Plan,
        fn: Callable[[], Any],
        key: Optional[str] = None,
        *,
        loop: Optional[Loop] = None,
    ) -> Measurement:
        """Run ``fn`` as planned (or ``loop``, which runs the same code n times per call).
        The code's exception is returned in ``error``, not raised (so the caller can show
        what was measured first); KeyboardInterrupt propagates."""
        cold = plan.warmup == 0 and key is not None and key not in self.seen
        if key is not None:
            self.seen.add(key)
        calls: Loop = loop if loop is not None else _Repeat(fn)
        if plan.backend is None:
            m = self._run_host(plan, calls)
        else:
            m = self._run_device(plan, plan.backend, calls)
        m.result.cold = cold
        return m

    def measure(
        self,
        fn: Callable[[], Any],
        *,
        n: int = 1,
        r: int = 1,
        warmup: Optional[int] = 0,
        device: Optional[str] = None,
        stream: str = "dedicated",
        key: Optional[str] = None,
        origin: str = "call",
    ) -> Measurement:
        plan = self.plan(n=n, r=r, warmup=warmup, device=device, stream=stream, origin=origin)
        return self.run(plan, fn, key=source_key(key, plan.device) if key else None)

    def _call(self, calls: Loop, times: int) -> tuple[Any, Optional[Exception], int]:
        """Run the code ``times`` times; stop at the first exception."""
        __tracebackhide__ = True  # IPython leaves this frame out of the user's traceback
        try:
            return calls(times), None, times
        except Exception as exc:
            return None, exc, calls.runs_done(exc)

    def _run_host(self, plan: Plan, fn: Loop) -> Measurement:
        if plan.emulated is not None:  # the emulated torch.cuda.device, restored after
            from torchdevmagic._torch import require_torch

            with require_torch().cuda.device(plan.emulated):
                return self._run_host(replace(plan, emulated=None), fn)
        acc = Samples()
        if plan.warmup:
            acc.value, acc.error, acc.warmup_done = self._call(fn, plan.warmup)
        for _ in range(plan.r if acc.error is None else 0):
            c0 = self.cpu_clock()
            t0 = self.clock()
            acc.value, acc.error, done = self._call(fn, plan.n)
            t1 = self.clock()
            c1 = self.cpu_clock()
            acc.add(done, host=t1 - t0, wall=t1 - t0, cpu=c1 - c0)
            if acc.error is not None:
                break
        result = TimingResult(device="cpu", clock="host", note=plan.note, origin=plan.origin)
        acc.fill(result, plan)
        return Measurement(result, acc.value, acc.error)

    def _wait(self, backend: Backend, event: Any) -> float:
        """Poll the event: a blocking synchronize would not let Ctrl-C through. Returns the
        seconds waited (0 when it was done at the first query).

        Spin for the first ``spin_s`` (a Python loop still sees Ctrl-C), then sleep for a
        fiftieth of the time waited so far (at most ``max_poll_s``): the wall figure then
        overshoots by about 2 % plus the OS's sleep granularity, without burning a core.
        """
        began: Optional[float] = None
        while not backend.query(event):
            now = self.clock()
            began = now if began is None else began
            waited = now - began
            if waited >= self.spin_s:
                self.sleep(min(self.max_poll_s, waited / 50))
        return 0.0 if began is None else self.clock() - began

    def _run_device(self, plan: Plan, b: Backend, fn: Loop) -> Measurement:
        acc = Samples()
        # Events exist before the timed region: creating them inside would be timed too.
        pairs = [(b.new_event(), b.new_event()) for _ in range(plan.r)]
        ready = b.new_event()
        warm_done = b.new_event() if plan.warmup else None
        # torch.cuda.device(k), not set_device: restoring the caller's device must not create
        # a context (hundreds of MB) on a GPU the caller never touched.
        with _faults_kept(b.device_guard(plan.index), acc):
            p = b.current_stream(plan.index)
            separate = plan.stream == "dedicated" and b.has_streams
            s = b.timed_stream(plan.index) if separate else p
            try:
                if separate:
                    b.wait_stream(s, p)  # start after the work already queued on p
                    b.set_stream(s)  # the code enqueues on s
                self._prepare(plan, b, s, [*(e for pair in pairs for e in pair), ready])
                # The wall clock starts when earlier work is done (Run All queues a lot).
                acc.queued_ms = self._wait(b, ready) * 1e3
                if warm_done is not None:
                    acc.value, acc.error, acc.warmup_done = self._call(fn, plan.warmup)
                    b.record(warm_done, s)
                    self._wait(b, warm_done)  # timed runs start on an idle stream
                acc.start_bytes = b.allocated_bytes(plan.index)
                b.reset_peak(plan.index)
                for pair in pairs if acc.error is None else ():
                    self._timed_repeat(plan, b, fn, stream=s, events=pair, acc=acc)
                    if acc.error is not None:
                        break
            except Exception as exc:  # ours failed: a sticky CUDA error the cell's kernels left
                acc.keep_fault(exc)
            finally:
                if separate:
                    self._restore(b, p, s, acc)
        peak = b.peak_bytes(plan.index) if acc.walls else None
        result = TimingResult(
            device=plan.device,
            device_name=b.device_name(plan.index),
            clock="events",
            stream=plan.stream,
            peak_bytes=_own_peak(peak, acc.start_bytes),
            queued_ms=acc.queued_ms,
            origin=plan.origin,
        )
        acc.fill(result, plan, launch_blocking=self.environ.get("CUDA_LAUNCH_BLOCKING") == "1")
        return Measurement(result, acc.value, acc.error)

    def _prepare(self, plan: Plan, b: Backend, stream: Any, events: list[Any]) -> None:
        """Record every event once before timing: torch creates a CUDA event at its first
        record and binds it to that stream's device, which must not happen inside the bracket."""
        for event in events:
            b.record(event, stream)

    @staticmethod
    def _restore(b: Backend, p: Any, s: Any, acc: Samples) -> None:
        """Join and restore the caller's stream, each step on its own: after a device fault
        the join raises (the cell's CUDA error, kept for the user), the restore must still
        happen."""
        try:
            b.wait_stream(p, s)  # later work on p sees the cell's results
        except Exception as exc:
            acc.keep_fault(exc)
        try:
            b.set_stream(p)
        except Exception as exc:
            acc.keep_fault(exc)

    def _timed_repeat(
        self,
        plan: Plan,
        b: Backend,
        fn: Loop,
        *,
        stream: Any,
        events: tuple[Any, Any],
        acc: Samples,
    ) -> None:
        start, end = events
        # The sync counter is armed before the start record and disarmed after the end record:
        # its ~16 µs of setup are not inside the GPU bracket, and our polling is not counted.
        with b.sync_counter() as counter:
            c0 = self.cpu_clock()
            t0 = self.clock()
            b.record(start, stream)
            try:
                acc.value, acc.error, done = self._call(fn, plan.n)
            except BaseException:  # Ctrl-C: nothing may stay unbracketed, the interrupt wins
                with contextlib.suppress(Exception):
                    b.record(end, stream)
                raise
            b.record(end, stream)
            t1 = self.clock()
            c1 = self.cpu_clock()
        acc.add_syncs(counter.count)
        self._wait(b, end)
        t2 = self.clock()
        acc.add(done, host=t1 - t0, wall=t2 - t0, cpu=c1 - c0, gpu_ms=b.elapsed_ms(start, end))
