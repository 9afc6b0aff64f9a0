"""``%%devcheck`` and ``%devcheck on|off``: device errors explained with the user's names.

The cell runs like ``%%time`` runs it. When it fails, the *same* exception object propagates
(same type, message and args, so nbclient reports the original ``ename``) with our frames
left out of its traceback. While IPython shows it, it carries our rendering
(:mod:`._shown`: PyTorch-internal frames collapsed, the explanation under them); the cell's
end takes that back. On Python 3.11+ the explanation also travels as an exception note.
``%devcheck tb`` prints the full original traceback. The rendering itself lives in
:mod:`torchdevmagic.diagnosis.traceback`; this module parses, calls and shows.
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import TYPE_CHECKING, Any, Callable, Optional

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from torchdevmagic.magics import _shown
from torchdevmagic.magics._args import argument, magic_arguments, parse
from torchdevmagic.magics._show import say

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

DiagnoseFn = Callable[..., Any]


def _default_diagnose(exc: BaseException, namespace: Any, **kw: Any) -> Any:
    from torchdevmagic.diagnosis import diagnose

    return diagnose(exc, namespace, **kw)


def _tbr() -> Any:
    """The traceback renderer, imported on first use (%load_ext stays cheap)."""
    from torchdevmagic.diagnosis import traceback

    return traceback


def _warned() -> Any:
    """The catcher of warnings a rule knows, imported on first use."""
    from torchdevmagic.diagnosis import warned

    return warned


def _fixing() -> Any:
    """``%devcheck fix``'s front-end part, imported on first use."""
    from torchdevmagic.magics import _fixcell

    return _fixcell


def _add_note(exc: BaseException, text: str) -> None:
    """The explanation as an exception note, where notes exist; never twice."""
    if sys.version_info < (3, 11):
        return
    notes = _shown.instance_dict(exc)
    present = notes.get("__notes__") if notes is not None else None
    if isinstance(present, list) and text in present:
        return
    BaseException.add_note(exc, text)


@magics_class
class DevcheckMagics(Magics):
    """Explain device errors in terms of the notebook's own variables."""

    def __init__(self, shell: Any, diagnose: DiagnoseFn = _default_diagnose):
        super().__init__(shell)
        self._diagnose = diagnose
        self.auto = False
        self.last: Any = None  # the last Diagnosis (plain data, no frames)
        self.last_cell: Any = None  # the CellSource it was made for (text only)
        self._installed: Any = None  # the CustomTB we put on the shell
        self._previous: Optional[tuple[tuple[type, ...], Any]] = None
        self._lent: list[BaseException] = []  # exceptions holding our rendering this cell

    @property
    def _shell(self) -> InteractiveShell:
        shell = self.shell
        assert shell is not None  # a registered Magics instance always has its shell
        return shell

    # ------------------------------------------------------------------ the magics

    @magic_arguments("%%devcheck")
    @argument("--full", action="store_true", help="keep PyTorch-internal frames in the traceback")
    @cell_magic
    def devcheck(self, line: str, cell: str) -> Any:
        """Run the cell; if it fails with a device error, name the variables and the fix.

        Usage: %%devcheck [--full]

          --full   keep PyTorch-internal frames in the traceback (default: collapsed)

        The same exception is re-raised (same type and message). `%devcheck tb` prints the
        full original traceback; `%devcheck on` explains errors in every cell.

        Example:
            %%devcheck
            y = model(x)
        """
        from torchdevmagic.magics._cell import compile_cell, quiet, run_compiled  # not at load

        full = parse(self.devcheck, line, "%%devcheck").full
        try:
            compiled = compile_cell(self._shell, cell, "devcheck")
        except SyntaxError as exc:  # the user's, shown as IPython shows it: none of our frames
            BaseException.with_traceback(exc, None)  # a bare raise adds none back
            del exc
            raise
        seen = _warned().ShownWarnings()
        try:
            with seen:
                value = run_compiled(self._shell, compiled)
        except BaseException as exc:
            # Our frames (this one, the cell runner) leave the traceback; a bare raise adds
            # none back.
            BaseException.with_traceback(exc, _tbr().without_own_frames(exc.__traceback__))
            self._explain_warnings(seen, line, cell, compiled)
            if isinstance(exc, Exception):
                source = _fixing().magic_cell(self._shell, line, cell, compiled)
                self._explain_for_display(exc, collapse=not full, source=source)
            del exc
            raise
        self._explain_warnings(seen, line, cell, compiled)
        return None if quiet(compiled.source) else value

    def _explain_warnings(self, seen: Any, line: str, cell: str, compiled: Any) -> None:
        """Each warning a rule knows that the cell showed (it was shown as usual), explained
        under it as an error would be; the last one is what ``%devcheck -o`` returns, unless
        the cell then failed (the error's explanation replaces it)."""
        shell = self._shell
        try:
            for warning in seen.caught:
                diagnosis = self._diagnose(warning, shell.user_ns, made_by="%%devcheck")
                if diagnosis is None:
                    continue
                self.last = diagnosis
                self.last_cell = _fixing().magic_cell(shell, line, cell, compiled)
                say(shell, diagnosis)
        except Exception as err:  # never in the way of the cell's own outcome
            print(_tbr().failure_line(err), file=sys.stderr)
        finally:
            seen.clear()

    @magic_arguments("%devcheck")
    @argument(
        "action",
        nargs="?",
        default="status",
        choices=["on", "off", "status", "tb", "fix"],
        help="on/off: explain errors in every cell; tb: full traceback of the last error; "
        "fix: the failing cell with its fix, as the next input",
    )
    @argument("-o", "--output", action="store_true", help="return the last Diagnosis")
    # IPython types line_magic("name") as returning `_F | Callable[[_F], _F]`; the str form
    # always returns the decorator, which the union cannot express.
    @line_magic("devcheck")  # type: ignore[arg-type]
    def devcheck_line(self, line: str) -> Any:
        """Explain device errors in every cell, or show the last error in full.

        Usage: %devcheck [on|off|status|tb|fix] [-o]

          on       explain every failing cell (chains with an installed custom handler)
          off      stop doing so
          status   say whether it is on, and show the last explanation (default)
          tb       print the full original traceback of the last error
          fix      put the last failing cell, with its fix applied, in the next input (in
                   Colab: print it to copy); where the fix goes elsewhere, say where
          -o       return the last Diagnosis object

        Example:
            %devcheck on
        """
        args = parse(self.devcheck_line, line, "%devcheck")
        if args.action == "on":
            self.turn_on()
            print(f"{self.status()}: failing cells are explained (%devcheck off to stop)")
        elif args.action == "off":
            self.turn_off()
            print(self.status())
        elif args.action == "tb":
            self.show_full_traceback()
        elif args.action == "fix":
            _fixing().offer(self._shell, self.last, self.last_cell)
        elif not args.output:  # -o returns the Diagnosis (Out[n]) and prints nothing else
            print(self.status())
            if self.last is not None:
                say(self._shell, self.last)
        elif self.last is None:  # returning None alone would look like a silent failure
            print(self._nothing_to_return())
        return self.last if args.output else None

    @staticmethod
    def _nothing_to_return() -> str:
        if not isinstance(getattr(sys, "last_value", None), BaseException):
            return "%devcheck -o: no error yet in this session, so no Diagnosis to return"
        return (
            "%devcheck -o: no device error explained yet (the last error was not one that "
            "%%devcheck or %devcheck on explained), so no Diagnosis to return"
        )

    def status(self) -> str:
        """The truth about ``%devcheck on``: whether our handler is the one the shell calls."""
        if not self.auto:
            return "%devcheck is off"
        if self.in_charge():
            return "%devcheck is on"
        return (
            "%devcheck is on but not in charge: another exception handler replaced ours "
            "(shell.set_custom_exc), so errors are explained only if it passes them on. "
            "%devcheck on puts ours back in front of it"
        )

    def in_charge(self) -> bool:
        shell = self._shell
        types_ = tuple(shell.custom_exceptions or ())
        return (
            self._installed is not None
            and shell.CustomTB is self._installed
            and (Exception in types_ or BaseException in types_)
        )

    # ------------------------------------------------------------------ explanation

    def explain(
        self, exc: BaseException, collapse: bool = True, source: Any = None
    ) -> Optional[list[str]]:
        """Diagnose ``exc``; return the traceback to show with the explanation under it, or
        ``None`` for IPython's own. Never raises, whatever fails (Ctrl-C included): the
        user's exception always comes out as it went in, with at most a note added.
        ``source`` is the failing cell (a CellSource), found in the traceback when absent."""
        shell = self._shell
        try:
            try:
                diagnosis = self._diagnose(
                    exc,
                    shell.user_ns,
                    last_traceback=getattr(sys, "last_traceback", None),
                    made_by="%%devcheck",  # its fixes name the magics' ways
                )
                self.last = diagnosis
                self.last_cell = source or _fixing().failing_cell(shell, exc.__traceback__)
                if diagnosis is None:
                    return None
                text = diagnosis.to_text()
                _add_note(exc, text)
                if _shown.renders_itself(exc):
                    return None  # its own rendering (e.g. a remote traceback) wins
                # the traceback as the shell shows any error: an emulated GPU's without the
                # emulator's frames (its stand-in for the shell's _get_exc_info drops them)
                exc.with_traceback(shell._get_exc_info((type(exc), exc, exc.__traceback__))[2])
                keep = None
                if collapse:
                    from torchdevmagic.diagnosis.culprits import default_user_frame

                    keep = default_user_frame(shell.user_ns)
                lines: list[str] = _tbr().explained(shell.InteractiveTB, exc, text, keep)
                return lines
            except BaseException as err:
                return self._failure(exc, err)
        except BaseException:  # even the failure report failed (or a second Ctrl-C)
            return None

    def _failure(self, exc: BaseException, err: BaseException) -> Optional[list[str]]:
        line = _tbr().failure_line(err)
        del err
        if _shown.renders_itself(exc):
            print(line, file=sys.stderr)
            return None
        try:
            lines: list[str] = _tbr().with_line(self._shell.InteractiveTB, exc, line)
            return lines
        except BaseException:
            print(line, file=sys.stderr)
            return None

    def _explain_for_display(self, exc: BaseException, collapse: bool, source: Any) -> None:
        """%%devcheck: lend ``exc`` the explained rendering until the cell ends."""
        if any(e is exc for e in self._lent):
            return  # already explained (e.g. %%devcheck inside %%devcheck)
        stb = self.explain(exc, collapse=collapse, source=source)
        if stb is not None and _shown.lend(exc, stb):
            self._lent.append(exc)
            self._watch_cells()

    def _watch_cells(self) -> None:
        """Take our rendering back when the cell ends (registered once, on first use, so an
        instance registered without ``%load_ext`` cleans up too)."""
        callbacks = self._shell.events.callbacks["post_run_cell"]
        if not any(cb == self.take_back for cb in callbacks):
            self._shell.events.register("post_run_cell", self.take_back)

    def take_back(self, *_: Any) -> None:
        """``post_run_cell``: no exception keeps our rendering past its cell."""
        lent, self._lent = self._lent, []
        for exc in lent:
            _shown.take_back(exc)

    def show_full_traceback(self) -> None:
        """The last error as IPython showed it in full. A magic's ``UsageError`` has no
        traceback of the user's code (IPython shows it in one line, as ``type(value) is
        UsageError``): its frames would be argparse's and the magic's. A syntax error has
        none either: IPython's own rendering of it (the cell, its line, the caret)."""
        from IPython.core.error import UsageError

        value = getattr(sys, "last_value", None)
        if not isinstance(value, BaseException):
            print("No error to show.")
            return
        if type(value) is UsageError:
            print(f"The last error was a usage error of a magic (no traceback): {value}")
            return
        shell = self._shell
        if isinstance(value, SyntaxError):
            stb = shell.SyntaxTB.structured_traceback(type(value), value, None)
            print(shell.SyntaxTB.stb2text(stb))
            return
        tbf = shell.InteractiveTB
        stb = tbf.structured_traceback(type(value), value, value.__traceback__)
        print(tbf.stb2text(stb))

    # ------------------------------------------------------------------ %devcheck on

    def _custom_tb(
        self, shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None
    ) -> None:
        """Installed as ``shell.CustomTB`` by ``%devcheck on``. Must never raise: IPython
        calls it from ``run_code`` without protection when set directly."""
        lent = False
        try:
            prev = self._previous
            if prev is not None and prev[0] and isinstance(value, prev[0]) and prev[1] is not None:
                prev[1](etype, value, tb, tb_offset=tb_offset)
                return
            if self.auto and not _shown.is_lent(value):
                stb = self.explain(value)
                lent = stb is not None and _shown.lend(value, stb)
        except BaseException as err:  # pragma: no cover - explain() already guards itself
            print(_tbr().failure_line(err), file=sys.stderr)
        try:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
        finally:
            if lent:
                _shown.take_back(value)

    def turn_on(self) -> None:
        self.auto = True
        if self.in_charge():
            return
        old_types = tuple(self._shell.custom_exceptions or ())
        self._previous = (old_types, self._shell.CustomTB)
        self._installed = types.MethodType(self._custom_tb_unbound(), self._shell)
        self._shell.CustomTB = self._installed
        self._shell.custom_exceptions = (*old_types, Exception)

    def _custom_tb_unbound(self) -> Callable[..., None]:
        magic = self

        def custom_tb(
            shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None
        ) -> None:
            magic._custom_tb(shell, etype, value, tb, tb_offset)

        return custom_tb

    def turn_off(self) -> None:
        self.auto = False
        if self._installed is not None and self._shell.CustomTB is self._installed:
            previous: tuple[tuple[type, ...], Any] = self._previous or ((), None)
            old_types, old_handler = previous
            self._shell.CustomTB = old_handler
            self._shell.custom_exceptions = old_types
            self._installed = None
            self._previous = None
        # If another handler was chained on top of ours, ours stays but passes through.

    def on_unload(self) -> None:
        self.turn_off()
        self.take_back()
        with contextlib.suppress(ValueError):  # already gone
            self._shell.events.unregister("post_run_cell", self.take_back)
