"""Score %%devcheck on a set of device-bug cases, as a user would meet them.

Each case runs in a real InteractiveShell with the extension loaded: its setup cell (with
``%emulate_cuda on`` first, unless the case is about a machine without CUDA), then its cell
under ``%%devcheck``. A case is **solved** when the Diagnosis has the right kind, names one
of the case's culprits, and its printed fix, pasted where the tool says (run before the
cell, a line of the failing cell replaced or inserted, a line of the earlier cell or of the
user's ``.py`` file), makes the cell run (and the case's ``check`` hold, where it has one).
Otherwise the case gets the first failure shape it meets, in this order:

    case broken        the setup failed, or the cell did not fail (the harness, not the tool)
    no diagnosis       %devcheck -o has no Diagnosis for the error
    wrong kind         the Diagnosis is of another kind
    wrong culprit      none of the culprits it names is one the case accepts
    no fix             no fix line
    fix edits library code   the fix is for a file under site-packages/dist-packages/stdlib
    fix does not parse the fix, pasted where it says, is no valid Python
    fix does not run   the fix itself raises (run before the cell, or on its own pasted lines)
    fix does not hold  the fix ran, and the cell still fails (or the check is false)

Run from the repository root:

    PYTHONPATH=. python benchmarks/score_devcheck.py            # the held-out cases
    PYTHONPATH=. python benchmarks/score_devcheck.py -v         # with the printed fixes
    PYTHONPATH=. python benchmarks/score_devcheck.py --cases tests/data/devcheck_real_cases.py
    PYTHONPATH=. python benchmarks/score_devcheck.py --only NAME [NAME ...]

The case files are data: ``CASES``, a list of records with the fields of
``tests/data/devcheck_heldout_cases.py``'s ``Case``; a record with ``culprit`` and
``helper`` instead (the older real-case records) is read as one case with that culprit and
file, run without emulation.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import linecache
import sys
import sysconfig
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the suite's way of pasting a fix: one for both
import _fixrun  # noqa: E402

DEFAULT_CASES = ROOT / "tests" / "data" / "devcheck_heldout_cases.py"

SOLVED = "solved"
BROKEN = "case broken"
NO_DIAGNOSIS = "no diagnosis"
WRONG_KIND = "wrong kind"
WRONG_CULPRIT = "wrong culprit"
NO_FIX = "no fix"
EDITS_LIBRARY = "fix edits library code"
NO_PARSE = "fix does not parse"
NO_RUN = "fix does not run"
NO_HOLD = "fix does not hold"
FAILURES = (
    BROKEN,
    NO_DIAGNOSIS,
    WRONG_KIND,
    WRONG_CULPRIT,
    NO_FIX,
    EDITS_LIBRARY,
    NO_PARSE,
    NO_RUN,
    NO_HOLD,
)


@dataclass
class Spec:
    """One case as the scorer reads it (whatever the record type of its file)."""

    name: str
    shape: str
    setup: str
    cell: str
    kind: str
    culprits: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()
    libs: tuple[tuple[str, str], ...] = ()
    emulate: bool = True
    check: Optional[str] = None
    later: Optional[str] = None
    url: str = ""


@dataclass
class Outcome:
    name: str
    shape: str
    result: str = BROKEN
    detail: str = ""
    fix: str = ""
    where: str = ""
    culprits: list[str] = field(default_factory=list)

    @property
    def solved(self) -> bool:
        return self.result == SOLVED


def spec_of(record: Any) -> Spec:
    """A case record of either kind as a Spec."""
    if hasattr(record, "culprits"):
        return Spec(
            name=record.name,
            shape=record.shape,
            setup=record.setup,
            cell=record.cell,
            kind=record.kind,
            culprits=tuple(record.culprits),
            files=tuple(record.files),
            libs=tuple(record.libs),
            emulate=record.emulate,
            check=record.check,
            later=getattr(record, "later", None),
            url=record.url,
        )
    helper = getattr(record, "helper", None)
    library = bool(getattr(record, "library", False))
    files = () if helper is None or library else (tuple(helper),)
    libs = () if helper is None or not library else (tuple(helper),)
    culprit = getattr(record, "culprit", None)
    return Spec(
        name=record.name,
        shape="real",
        setup=record.setup,
        cell=record.cell,
        kind=record.kind,
        culprits=() if culprit is None else (culprit,),
        files=files,
        libs=libs,
        emulate=False,
        later=getattr(record, "later", None),
        url=getattr(record, "url", ""),
    )


def load_cases(path: Path) -> list[Spec]:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return [spec_of(record) for record in module.CASES]


def _normal(text: str) -> str:
    return "".join(text.split()).replace('"', "'")


def culprit_matches(named: list[str], accepted: tuple[str, ...]) -> bool:
    """Whether one of the names is one the case accepts (a trailing ``*``: a prefix); a
    case that accepts none leaves the culprit unchecked."""
    if not accepted:
        return True
    for name in named:
        have = _normal(name)
        for want in accepted:
            w = _normal(want)
            if (w.endswith("*") and have.startswith(w[:-1])) or have == w:
                return True
    return False


def pasted(source: str, d: Any) -> str:
    """``source`` with the fix pasted where it says, as the suite pastes it (a file's text:
    ending in a newline)."""
    return _fixrun.pasted(source, d) + "\n"


def _library_path(path: str) -> bool:
    if "site-packages" in path or "dist-packages" in path:
        return True
    stdlib = sysconfig.get_paths().get("stdlib", "")
    return bool(stdlib) and path.startswith(stdlib)


def _raised_on_fix(exc: BaseException, fix: str) -> bool:
    """Whether the innermost frame of code the user wrote (not a library's) is on one of the
    fix's lines: the fix itself raised, wherever it was pasted."""
    fix_lines = {line.strip() for line in fix.splitlines() if line.strip()}
    text = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not _library_path(filename):
            text = linecache.getline(filename, tb.tb_lineno).strip()
        tb = tb.tb_next
    return text is not None and text in fix_lines


def _device_error(exc: BaseException) -> bool:
    import torchdevmagic

    try:
        return torchdevmagic.diagnose(exc) is not None
    except Exception:
        return False


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:110] if str(exc) else ''}"


class Runner:
    """Runs one case in ``shell``; its files go under ``tmp`` (libraries under a
    ``site-packages`` folder, so they count as installed)."""

    def __init__(self, shell: Any, case: Spec, tmp: Path):
        self.shell, self.case = shell, case
        self.setup = case.setup
        self.paths: dict[str, Path] = {}
        self.folders: list[str] = []
        for kind, entries in (("user", case.files), ("site-packages", case.libs)):
            if not entries:
                continue
            folder = tmp / kind
            folder.mkdir(parents=True, exist_ok=True)
            self.folders.append(str(folder))
            for name, text in entries:
                path = folder / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                self.paths[str(path)] = path
        for folder in self.folders:
            sys.path.insert(0, folder)

    def close(self) -> None:
        for folder in self.folders:
            while folder in sys.path:
                sys.path.remove(folder)
        self._forget_modules()

    def _forget_modules(self) -> None:
        for path in self.paths.values():
            for folder in self.folders:
                if str(path).startswith(folder):
                    rel = path.relative_to(folder).with_suffix("")
                    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
                    dotted = ".".join(parts)
                    for mod in [
                        m for m in sys.modules if m == dotted or m.startswith(dotted + ".")
                    ]:
                        del sys.modules[mod]
            linecache.checkcache(str(path))

    def _emulation(self, on: bool) -> None:
        from torchdevmagic.emulate import stop

        stop()
        if on:
            self.shell.run_line_magic("emulate_cuda", "on")

    def fresh(self) -> Optional[BaseException]:
        """A fresh namespace and the setup cell run; the setup's error, if any."""
        self._forget_modules()
        self._emulation(False)
        self.shell.reset(new_session=False)
        self._emulation(self.case.emulate)
        return self.shell.run_cell(self.setup).error_in_exec

    def run_cell(self, body: str) -> Optional[BaseException]:
        return self.shell.run_cell("%%devcheck\n" + body).error_in_exec

    def _ok(self, err: Optional[BaseException]) -> bool:
        later = self.case.later
        if err is None:
            return True
        return later is not None and f"{type(err).__name__}: {err}".startswith(later)

    def _checked(self, out: Outcome) -> Outcome:
        if self.case.check is None:
            out.result = SOLVED
            return out
        try:
            holds = bool(eval(self.case.check, self.shell.user_ns))  # the case's own check
        except Exception as exc:
            holds, out.detail = False, f"check raised {_short(exc)}"
        if holds:
            out.result = SOLVED
        else:
            out.result = NO_HOLD
            out.detail = out.detail or f"the cell ran, but {self.case.check} is false"
        return out

    def score(self) -> Outcome:
        case = self.case
        out = Outcome(case.name, case.shape)
        err = self.fresh()
        if err is not None:
            out.detail = f"setup failed: {_short(err)}"
            return out
        err = self.run_cell(case.cell)
        if err is None:
            out.detail = "the cell did not fail"
            return out
        cell_file = _fixrun.cell_filename(self.shell, err)
        d = self.shell.run_line_magic("devcheck", "-o")
        if d is None:
            out.result, out.detail = NO_DIAGNOSIS, _short(err)
            return out
        out.culprits = [c.expression for c in d.culprits]
        out.fix = d.fix or ""
        if d.kind != case.kind:
            out.result, out.detail = WRONG_KIND, f"kind {d.kind}, expected {case.kind}"
            return out
        if not culprit_matches(out.culprits, case.culprits):
            out.result = WRONG_CULPRIT
            out.detail = f"named {out.culprits}, expected one of {list(case.culprits)}"
            return out
        if not d.fix:
            out.result = NO_FIX
            return out
        return self._apply(d, cell_file, out)

    def _apply(self, d: Any, cell_file: Optional[str], out: Outcome) -> Outcome:
        fix_file = getattr(d, "fix_file", "") or cell_file or ""
        if d.fix_lineno is None:
            out.where = "run before the cell"
            return self._before_cell(d, out)
        if fix_file == cell_file:
            out.where = "the failing cell"
            source = "\n".join(["%%devcheck", *self.case.cell.splitlines()])
            if d.fix_lineno > len(source.splitlines()):
                out.result, out.detail = NO_RUN, f"names line {d.fix_lineno} past the cell"
                return out
            body = pasted(source, d).split("\n", 1)[1]
            if not _parses(body):
                out.result = NO_PARSE
                return out
            return self._after(self.run_cell(body), d.fix, out)
        if fix_file in self.paths and not _library_path(str(self.paths[fix_file])):
            out.where = "the .py file"
            path = self.paths[fix_file]
            text = pasted(path.read_text(), d)
            if not _parses(text):
                out.result = NO_PARSE
                return out
            path.write_text(text)
            err = self.fresh()
            if err is not None:
                out.result, out.detail = NO_RUN, f"setup then: {_short(err)}"
                return out
            return self._after(self.run_cell(self.case.cell), d.fix, out)
        if _library_path(fix_file) or fix_file in self.paths:
            out.result, out.where = EDITS_LIBRARY, fix_file
            return out
        source = "".join(linecache.getlines(fix_file))
        if source.strip() and source.strip() == self.setup.strip():
            out.where = "the earlier cell"
            text = pasted(self.setup, d)
            if not _parses(text):
                out.result = NO_PARSE
                return out
            self.setup = text
            err = self.fresh()
            if err is not None:
                out.result, out.detail = NO_RUN, f"the earlier cell then: {_short(err)}"
                return out
            return self._after(self.run_cell(self.case.cell), d.fix, out)
        out.result, out.where = EDITS_LIBRARY, fix_file or "(no file)"
        out.detail = "a file the user did not write"
        return out

    def _before_cell(self, d: Any, out: Outcome) -> Outcome:
        if not _parses(d.fix):
            out.result = NO_PARSE
            return out
        err = self.shell.run_cell(d.fix).error_in_exec
        if err is not None:
            out.result, out.detail = NO_RUN, _short(err)
            return out
        return self._after(self.run_cell(self.case.cell), d.fix, out)

    def _after(self, err: Optional[BaseException], fix: str, out: Outcome) -> Outcome:
        if self._ok(err):
            return self._checked(out)
        assert err is not None
        out.detail = _short(err)
        on_fix = _raised_on_fix(err, fix)
        out.result = NO_RUN if on_fix and not _device_error(err) else NO_HOLD
        return out


def _parses(text: str) -> bool:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("%")]
    try:
        ast.parse("\n".join(lines))
    except SyntaxError:
        return False
    return True


def shell_instance() -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    if "torchdevmagic" not in shell.extension_manager.loaded:
        shell.extension_manager.load_extension("torchdevmagic")
    return shell


def run_case(shell: Any, case: Spec) -> Outcome:
    """Score one case in ``shell``; the shell is left with emulation off and no default
    device installed by a fix."""
    import torch

    from torchdevmagic.emulate import stop

    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(shell, case, Path(tmp))
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                return runner.score()
        except Exception as exc:  # a broken harness step is that case's failure
            return Outcome(case.name, case.shape, BROKEN, f"harness: {_short(exc)}")
        finally:
            runner.close()
            stop()
            torch.set_default_device(None)
            shell.reset(new_session=False)


def table(outcomes: list[Outcome]) -> str:
    """Counts per shape and result, one row per shape."""
    shapes = sorted({o.shape for o in outcomes})
    cols = [SOLVED, *FAILURES]
    used = [c for c in cols if any(o.result == c for o in outcomes)]
    counts = Counter((o.shape, o.result) for o in outcomes)
    head = ["shape", "cases", *used]
    rows = [head]
    for s in shapes:
        n = sum(1 for o in outcomes if o.shape == s)
        rows.append([s, str(n), *(str(counts[(s, c)] or "") for c in used)])
    rows.append(
        ["all", str(len(outcomes)), *(str(sum(counts[(s, c)] for s in shapes)) for c in used)]
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, default=DEFAULT_CASES, help="a case file")
    parser.add_argument("--only", nargs="+", default=None, help="case names to run")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each fix")
    args = parser.parse_args(argv)
    cases = load_cases(args.cases)
    if args.only:
        cases = [c for c in cases if c.name in set(args.only)]
    shell = shell_instance()
    outcomes = []
    for case in cases:
        o = run_case(shell, case)
        outcomes.append(o)
        print(f"{o.name:44} {o.shape:11} {o.result:24} {o.detail[:120]}", flush=True)
        if args.verbose and o.fix:
            print(f"{'':44} fix ({o.where or '?'}): {o.fix[:200]!r}")
    solved = sum(o.solved for o in outcomes)
    print()
    print(table(outcomes))
    print(f"\nsolved: {solved} of {len(outcomes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
