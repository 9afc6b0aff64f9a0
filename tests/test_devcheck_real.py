"""%%devcheck on device bugs from real reports (tests/data/devcheck_real_cases.py), each solved.

Each case runs through a real InteractiveShell: the setup cell, then the failing cell under
``%%devcheck``. Fully solved = the right kind, the right culprit named first, and the printed
fix, applied where the tool says (run before the cell, a cell line replaced or inserted, or a
line of the named function replaced in its cell or ``.py`` file), makes the cell run.
``test_real_case`` runs every case and fails on
any not fully solved; a case this version cannot solve goes in ``KNOWN_FAILURES`` with its
reason, as a strict xfail. ``python tests/test_devcheck_real.py`` prints the table and the
count solved.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import linecache
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

pytest.importorskip("torch")

from _fixrun import cell_filename, pasted

_CASES_PATH = Path(__file__).parent / "data" / "devcheck_real_cases.py"
_spec = importlib.util.spec_from_file_location("devcheck_real_cases", _CASES_PATH)
assert _spec is not None and _spec.loader is not None
cases_module = importlib.util.module_from_spec(_spec)
sys.modules["devcheck_real_cases"] = cases_module
_spec.loader.exec_module(cases_module)
CASES = cases_module.CASES
Case = cases_module.Case
PRE = cases_module.PRE

# Cases this version does not solve fully, with the reason (kept honest: strict xfail).
KNOWN_FAILURES: dict[str, str] = {}

# Cases whose error is a CPU-only build's. On a CUDA build without a driver (Colab's CPU
# runtime, CI's Python 3.12 and torch 2.1 legs) the same cell raises "Found no NVIDIA driver"
# (devcheck's no-driver verdict) or, for set_default_tensor_type, raises nothing and leaves
# every later tensor of the process on cuda: they are skipped there, never run.
CPU_BUILD_CASES = frozenset(
    {
        "set_default_tensor_type_cuda",
        "module_cuda_on_cpu_machine",
        "torch_load_cuda_checkpoint_in_helper",
    }
)


def _cuda_build() -> Optional[str]:
    import torch

    return torch.version.cuda


@dataclass
class Outcome:
    kind: bool = False
    culprit: bool = False
    fixed: bool = False
    detail: str = ""
    fix: str = ""
    strategy: str = ""  # the fix planner's strategy that fired, or the shape that fell through
    fix_file: str = ""  # the file the fix edits ("" when it runs before the cell)

    @property
    def solved(self) -> bool:
        return self.kind and self.culprit and self.fixed


def _edit(lines: list[str], d: Any) -> list[str]:
    """Replace lines ``fix_lineno``-``fix_end_lineno`` (1-based), or insert before
    ``fix_lineno``, with the fix, indented like the line it meets."""
    return pasted("\n".join(lines), d).split("\n")


class Runner:
    """Runs one case in ``shell``; helper files go to ``tmp``."""

    def __init__(self, shell: Any, case: Any, tmp: Path):
        self.shell, self.case, self.tmp = shell, case, tmp
        self.setup = case.setup
        self.helper_path: Optional[Path] = None
        if case.helper is not None:
            folder = tmp / ("site-packages" if case.library else "user")
            folder.mkdir(parents=True, exist_ok=True)
            self.helper_path = folder / case.helper[0]
            self.helper_path.write_text(case.helper[1])
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))

    def _fresh_state(self) -> None:
        if self.helper_path is not None:
            sys.modules.pop(self.helper_path.stem, None)
            linecache.checkcache(str(self.helper_path))
        self.shell.reset(new_session=False)
        result = self.shell.run_cell(self.setup)
        assert result.error_in_exec is None, ("setup failed", result.error_in_exec)

    def _run_cell(self, body: str) -> Any:
        return self.shell.run_cell("%%devcheck\n" + body).error_in_exec

    def run(self) -> Outcome:
        out = Outcome()
        self._fresh_state()
        cell = self.case.cell
        err = self._run_cell(cell)
        if err is None:
            out.detail = "the cell did not fail"
            return out
        d = self.shell.run_line_magic("devcheck", "-o")
        if d is None:
            out.detail = f"no diagnosis for {type(err).__name__}: {str(err)[:80]}"
            return out
        out.kind = d.kind == self.case.kind
        names = [c.expression for c in d.culprits]
        out.culprit = self.case.culprit is None or names[:1] == [self.case.culprit]
        out.fix = d.fix or ""
        fell = getattr(d, "fell_through", "")
        out.strategy = getattr(d, "strategy", "") or (f"none ({fell})" if fell else "")
        out.fix_file = d.fix_file if d.fix_lineno is not None else ""
        if not (out.kind and out.culprit):
            out.detail = f"kind {d.kind}, culprits {names}"
        if d.fix is None:
            out.detail += "; no fix"
            return out
        cell_file = cell_filename(self.shell, err)
        err = self._apply_and_rerun(d, cell, cell_file)
        out.fixed = err is None
        if not out.fixed:
            out.detail += f"; after the fix: {type(err).__name__}: {str(err)[:90]}"
        return out

    def _apply_and_rerun(self, d: Any, cell: str, cell_file: Optional[str]) -> Any:
        fix_file = getattr(d, "fix_file", "") or cell_file
        if d.fix_lineno is None:
            result = self.shell.run_cell(d.fix)
            if result.error_in_exec is not None:
                return result.error_in_exec
            return self._run_cell(cell)
        if fix_file == cell_file:
            lines = ["%%devcheck", *cell.splitlines()]
            if d.fix_lineno > len(lines):
                raise AssertionError(
                    f"the fix names line {d.fix_lineno} of a {len(lines)}-line cell"
                )
            return self._run_cell("\n".join(_edit(lines, d)[1:]))
        if self.helper_path is not None and Path(fix_file) == self.helper_path:
            lines = self.helper_path.read_text().splitlines()
            self.helper_path.write_text("\n".join(_edit(lines, d)) + "\n")
            self._fresh_state()
            return self._run_cell(cell)
        source = "".join(linecache.getlines(fix_file))
        if source.strip() == self.setup.strip():
            self.setup = "\n".join(_edit(self.setup.splitlines(), d)) + "\n"
            self._fresh_state()
            return self._run_cell(cell)
        raise AssertionError(f"the fix names a file the user did not write: {fix_file}")


# The kinds whose error is "no GPU here": those cases run without the emulated GPU.
NO_GPU_KINDS = frozenset({"no_cuda", "deserialize_device"})


def on_gpu(case: Any) -> bool:
    """Does the case run on the emulated GPU (``%emulate_cuda on``, DEVICE is cuda)?"""
    return case.kind not in NO_GPU_KINDS


@contextlib.contextmanager
def emulated_gpu(shell: Any, case: Any) -> Any:
    """``%emulate_cuda on`` for a case on the GPU, stopped afterwards with every emulated
    tensor still alive brought to the CPU (a helper module stays imported, its model too) and
    no failed cell's traceback left holding one."""
    if not on_gpu(case):
        yield
        return
    from torchdevmagic.emulate import stop

    shell.run_line_magic("emulate_cuda", "on")
    try:
        yield
    finally:
        stop(to="cpu")
        shell.run_cell("pass")
        shell.InteractiveTB.tb = None
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                setattr(sys, name, None)


def run_case(shell: Any, case: Any) -> Outcome:
    import torch

    try:
        with emulated_gpu(shell, case), tempfile.TemporaryDirectory() as tmp:
            return Runner(shell, case, Path(tmp)).run()
    finally:
        # A fix such as torch.set_default_device('cpu') installs a torch function mode for
        # the rest of the process: later tests must not run under it.
        torch.set_default_device(None)


# Cases whose user code calls an API torch deprecates: its warning is part of the case.
DEPRECATED_CALL_CASES = {
    "set_default_tensor_type_cuda": (
        r"ignore:torch.set_default_tensor_type\(\) is deprecated:UserWarning"
    ),
}


def _params() -> list[Any]:
    out = []
    for case in CASES:
        marks = []
        if case.name in KNOWN_FAILURES:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[case.name]))
        if case.name in CPU_BUILD_CASES and _cuda_build():
            reason = f"a CPU-only build's error; this torch is built for CUDA {_cuda_build()}"
            marks.append(pytest.mark.skip(reason=reason))
        if on_gpu(case):  # skipped where emulation is refused (torch before 2.3)
            marks.append(pytest.mark.emulate)
        if case.name in DEPRECATED_CALL_CASES:  # the user's own call warns, as it did for them
            marks.append(pytest.mark.filterwarnings(DEPRECATED_CALL_CASES[case.name]))
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


def test_case_set_is_large_and_cited() -> None:
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)
    assert all(c.url.startswith("https://") for c in CASES)


@pytest.mark.parametrize("case", _params())
def test_real_case(shell: Any, case: Any) -> None:
    outcome = run_case(shell, case)
    assert outcome.solved, (outcome.detail, outcome.fix)


def main() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    solved = 0
    print(f"{'case':40} kind culprit fix  strategy / detail")
    for case in CASES:
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                o = run_case(shell, case)
        except Exception as exc:  # a broken harness step is a failure of that case
            o = Outcome(detail=f"harness: {type(exc).__name__}: {exc}")
        solved += o.solved
        marks = " ".join("yes " if ok else "NO  " for ok in (o.kind, o.culprit, o.fixed))
        print(f"{case.name:40} {marks} {o.strategy or '-'}  {o.detail[:100]}")
        if not o.solved and o.fix:
            print(f"{'':40} fix was: {o.fix[:110]}")
    print(f"\nfully solved: {solved} of {len(CASES)}")


if __name__ == "__main__":
    main()
