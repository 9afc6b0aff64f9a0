"""Each report names the ways of the front door that made it: ``%devices`` its
options, the Python API (``scan()``, ``report.diff()``, ``free_memory()``) its keywords and
functions. A report made by ``torchdevmagic.scan()`` said "free with: %devices --free" and
"%devices -a shows them", and its diff "--top 0 shows all": ways a script does not have.

Both doors go through a real shell, on the emulated GPU (its ``memory_allocated`` is exact):
the words each report prints are read back from its text and HTML, and run.
"""

from __future__ import annotations

import gc
import re
import sys
import weakref
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torchdevmagic.emulate.fronts import session as _session  # noqa: E402

MiB = 2**20
# What each door's report is made by, and what only the other door's words contain.
MAKE = {"%devices": "report = %devices -o", "scan": "report = torchdevmagic.scan()"}
FOREIGN = {
    "%devices": ("free_memory", "include_hidden", "scan("),
    "scan": ("%devices", "--", " -a "),
}

PINNED = """
import torch, torchdevmagic
_cache = torch.zeros(MiB // 4, device="cuda")          # the user's own _name: 1 MiB
def forward():
    activation = torch.ones(MiB // 2, device="cuda")   # 2 MiB a stored traceback keeps
    raise RuntimeError("boom")
"""


def run(shell: Any, cell: str) -> Any:
    return shell.run_cell(cell, store_history=True)


@pytest.fixture
def emu(shell: Any) -> Any:
    shell.run_line_magic("emulate_cuda", "on --memory 1")
    yield shell
    _session.stop()
    shell.run_cell("pass")
    shell.InteractiveTB.tb = None
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)


def ways(text: str, what: str) -> list[str]:
    """The advice after ``what`` in each holder's note: ``(...; free with: WAY)``."""
    return re.findall(rf"{what}: ([^;]*?)\)(?:;|$)", text, re.M)


@pytest.mark.parametrize("door", ["%devices", "scan"])
def test_the_holders_notes_name_the_ways_of_their_door_and_the_ways_work(
    emu: Any, door: str
) -> None:
    emu.user_ns["MiB"] = MiB
    assert run(emu, PINNED).error_in_exec is None
    assert run(emu, "torch.ones(MiB // 4, device='cuda') * 2").error_in_exec is None  # Out[n]
    assert type(run(emu, "forward()").error_in_exec) is RuntimeError
    run(emu, "pass")
    assert run(emu, MAKE[door]).error_in_exec is None
    report = emu.user_ns.pop("report")
    assert report.made_by == door
    text, html = str(report), report.to_html()
    magic = door == "%devices"
    free = "%devices --free" if magic else "torchdevmagic.free_memory()"
    show = "%devices -a" if magic else "scan(include_hidden=True)"
    assert "your _names hold 1.0 MiB (_cache; " in text
    assert "IPython output history holds 1.0 MiB (Out[" in text
    assert "the last traceback's frames hold 2.0 MiB (free with: " in text
    assert ways(text, "free with") == [free, free]
    assert re.findall(r"\(_cache; (.*?) shows them\)", text) == [show]
    for words in FOREIGN[door]:
        assert words not in text, words
    assert html.count(f"free with: {free}") == 2 and f"_cache; {show} shows them" in html
    del report
    # The ways, as said: one shows the _names, the other gives back what history pins.
    way = f"{show} -o" if magic else f"torchdevmagic.{show}"
    assert run(emu, f"shown = {way}").error_in_exec is None
    shown = emu.user_ns.pop("shown")
    assert "_cache" in [r.path for r in shown.rows]
    del shown
    gc.collect()
    before = torch.cuda.memory_allocated()
    assert run(emu, free).error_in_exec is None
    gc.collect()
    assert before - torch.cuda.memory_allocated() == 3 * MiB  # the Out entry and the frame
    assert emu.user_ns["_cache"].is_cuda


@pytest.mark.parametrize("door", ["%devices", "scan"])
def test_a_diffs_notes_name_the_ways_of_its_door_and_the_ways_work(shell: Any, door: str) -> None:
    """Past 30 changes the footer says how to see them all; a diff of a report with the
    private names and one without says which way showed them."""
    run(shell, "import torch, torchdevmagic\nkept = torch.zeros(1)")
    first = "%devices -o" if door == "%devices" else "torchdevmagic.scan()"
    assert run(shell, f"before = {first}").error_in_exec is None
    run(shell, "\n".join(f"t{i} = torch.zeros({i + 1})" for i in range(40)))
    later = "%devices --diff -o" if door == "%devices" else "torchdevmagic.scan().diff(before)"
    assert run(shell, f"d = {later}").error_in_exec is None
    d = shell.user_ns["d"]
    text, html = str(d), d.to_html()
    magic = door == "%devices"
    show_all = "--top 0" if magic else "scan(top=0).diff(...)"
    assert f"… 10 more changes not shown ({show_all} shows all)" in text
    assert f"… 10 more changes not shown ({show_all} shows all)" in html
    for words in FOREIGN[door]:
        assert words not in text.replace(show_all, ""), words
    if magic:  # the magic compares with its own previous report: 40 changes again
        run(shell, "%devices -o")
        run(shell, "\n".join(f"t{i} = torch.zeros({i + 2})" for i in range(40)))
    everything = "%devices --top 0 --diff -o" if magic else "torchdevmagic.scan(top=0).diff(before)"
    assert run(shell, f"d = {everything}").error_in_exec is None
    whole = str(shell.user_ns["d"])
    assert "more changes" not in whole and all(f"t{i} " in whole for i in range(40))
    with_hidden = "%devices -a --diff -o" if magic else "torchdevmagic.scan(include_hidden=True)"
    if not magic:
        with_hidden += ".diff(before)"
    assert run(shell, f"d = {with_hidden}").error_in_exec is None
    hidden = "(-a)" if magic else "(include_hidden=True)"
    assert f"this one also showed _private names and Out[n] {hidden}" in str(shell.user_ns["d"])


FAILING = """
import torch, torchdevmagic
def step():
    held = torch.ones(10_000)
    refs.append(weakref.ref(held))
    raise ValueError("boom")
"""


def test_free_memory_without_a_shell_clears_the_stored_traceback() -> None:
    """A script's ``sys.last_traceback`` (set by ``python -i`` and by IPython): no shell is
    running for this namespace, so only what Python itself keeps is dropped."""
    import torchdevmagic

    namespace: dict[str, Any] = {"weakref": weakref, "refs": []}
    exec(FAILING, namespace)
    try:
        namespace["step"]()
    except ValueError:
        sys.last_traceback = sys.exc_info()[2]
    try:
        gc.collect()
        assert namespace["refs"][0]() is not None
        assert torchdevmagic.free_memory(namespace=namespace, device="cuda").dropped == ()
        report = torchdevmagic.free_memory("traceback", namespace=namespace)
        gc.collect()
        assert namespace["refs"][0]() is None
        assert [p.path for p in report.dropped] == ["<step>"]
        assert "cpu: 39.1 KiB no longer held by the history" in str(report)
    finally:
        sys.last_traceback = None


def test_free_memory_names_its_own_argument_when_given_a_wrong_holder(shell: Any) -> None:
    import torchdevmagic

    with pytest.raises(ValueError, match=r"^free_memory\(\) takes traceback, Out, Out\[N\]"):
        torchdevmagic.free_memory("model")
    with pytest.raises(ValueError, match="unknown device"):
        torchdevmagic.free_memory(device="tpu")
    # in a shell, what it picks is what the magic picks: here only the Out entries
    run(shell, "import torch, torchdevmagic, weakref")
    run(shell, "torch.ones(20_000) + 1")
    key = max(shell.user_ns["Out"])
    ref = weakref.ref(shell.user_ns["Out"][key])
    run(shell, "freed = torchdevmagic.free_memory('Out')")
    gc.collect()
    assert [p.path for p in shell.user_ns["freed"].dropped] == [f"Out[{key}]"]
    assert ref() is None


# ------------------------------------------------------------------------ timing


def fake_timer(**kwargs: Any) -> Any:
    from fake_backend import Clock, FakeBackend

    from torchdevmagic import Timer

    backend = FakeBackend([], **kwargs)
    return Timer(backend, clock=Clock(), cpu_clock=Clock(), sleep=lambda s: None), backend


def test_a_timer_speaks_of_calls_and_keywords_the_magic_of_cells_and_options(shell: Any) -> None:
    """``Timer`` is the Python API's too: its verdict, cold mark and fault note said "cell",
    "per run" and "-w 1" (what ``%%cuda_time`` says) to a caller timing a function."""
    timer, backend = fake_timer(syncs=3)
    r = timer.measure(lambda: None, n=2, r=2, key="step").result
    text = r.line() + r.to_html()
    assert "host syncs inside the function (1.5 per call)" in text
    assert "cold (first call of this function: the first sample includes start-up; " in text
    assert "use warmup=1)" in text
    for words in ("cell", " run", "-w", "-n"):
        assert words not in text, words
    timer, backend = fake_timer()
    m = timer.measure(backend.fault)
    assert m.result.note is not None and m.result.note.startswith(
        "the function's GPU work failed (CUDA error: device-side assert triggered); the error "
        "surfaced after the function returned"
    )
    assert "cell" not in m.result.to_text() and "restart Python" in m.result.note
    # %%cuda_time through the shell keeps its own words
    magic = shell.magics_manager.registry["CudaTimeMagics"]
    magic.timer, backend = fake_timer(syncs=3)
    res = run(shell, "%%cuda_time -o -q -n 2 -r 2 -w 0\nx = 1").result
    assert "host syncs inside the cell (1.5 per run)" in res.line()
    assert "cold (first run of this cell: the first sample includes start-up; use -w 1)" in (
        res.line()
    )
    # (its fault note, "the cell's GPU work failed ... restart the kernel": through the shell
    # in tests/test_cuda_time_gpu_truth.py)
