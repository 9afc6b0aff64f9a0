"""``%%devcheck`` and ``%devcheck on|off``: device errors explained with the user's names.

The cell runs like ``%%time`` runs it. When it fails, the *same* exception object propagates
(same type, same message, so nbclient reports the original ``ename``); before it leaves, the
magic diagnoses it and gives it a ``_render_traceback_`` that IPython (7.34 and 9.x alike)
uses to print a traceback with PyTorch-internal frames collapsed and the explanation under it.
On Python 3.11+ the explanation also travels as exception notes. ``%devcheck tb`` prints the
full original traceback.
"""

from __future__ import annotations

import sys
import types
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Optional

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from torchdevmagic.magics._args import ParsedLines
from torchdevmagic.magics._cell import compile_cell, run_compiled

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

NOTE_PREFIX = "torchdevmagic:"
DiagnoseFn = Callable[..., Any]


def _default_diagnose(exc: BaseException, namespace: Any, **kw: Any) -> Any:
    from torchdevmagic.diagnosis import diagnose

    return diagnose(exc, namespace, **kw)


def _is_torch_file(filename: str) -> bool:
    norm = filename.replace("\\", "/")
    return "/torch/" in norm or "/torch_" in norm


def collapsed_traceback(
    tb: Optional[TracebackType], keep: Callable[[Any], bool]
) -> tuple[Optional[TracebackType], int]:
    """A new traceback chain holding the user's frames and the innermost one; returns it with
    the number of PyTorch frames dropped. The original chain is not modified."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    kept = [e for i, e in enumerate(entries) if keep(e.tb_frame) or i == len(entries) - 1]
    hidden = sum(
        1 for e in entries if e not in kept and _is_torch_file(e.tb_frame.f_code.co_filename)
    )
    new: Optional[TracebackType] = None
    for e in reversed(kept):
        new = types.TracebackType(new, e.tb_frame, e.tb_lasti, e.tb_lineno)
    return new, hidden


def _plain(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@magics_class
class DevcheckMagics(Magics):
    """Explain device errors in terms of the notebook's own variables."""

    def __init__(self, shell: Any, diagnose: DiagnoseFn = _default_diagnose):
        super().__init__(shell)
        self._diagnose = diagnose
        self.auto = False
        self.last: Any = None  # the last Diagnosis (plain data, no frames)
        self._installed: Any = None  # the CustomTB we put on the shell
        self._previous: Optional[tuple[tuple[type, ...], Any]] = None
        self._options = ParsedLines(self.devcheck)

    @property
    def _shell(self) -> InteractiveShell:
        shell = self.shell
        assert shell is not None  # a registered Magics instance always has its shell
        return shell

    # ------------------------------------------------------------------ the magics

    @magic_arguments()
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
        full = self._options(line).full
        compiled = compile_cell(self._shell, cell, "devcheck")
        try:
            return run_compiled(self._shell, compiled)
        except Exception as exc:
            self.explain(exc, collapse=not full)
            raise

    @magic_arguments()
    @argument(
        "action",
        nargs="?",
        default="status",
        choices=["on", "off", "status", "tb"],
        help="on/off: explain errors in every cell; tb: full traceback of the last error",
    )
    @argument("-o", "--output", action="store_true", help="return the last Diagnosis")
    # IPython types line_magic("name") as returning `_F | Callable[[_F], _F]`; the str form
    # always returns the decorator, which the union cannot express.
    @line_magic("devcheck")  # type: ignore[arg-type]
    def devcheck_line(self, line: str) -> Any:
        """Explain device errors in every cell, or show the last error in full.

        Usage: %devcheck [on|off|status|tb] [-o]

          on       explain every failing cell (chains with an installed custom handler)
          off      stop doing so
          status   say whether it is on, and show the last explanation (default)
          tb       print the full original traceback of the last error
          -o       return the last Diagnosis object

        Example:
            %devcheck on
        """
        args = parse_argstring(self.devcheck_line, line)
        if args.action == "on":
            self.turn_on()
        elif args.action == "off":
            self.turn_off()
        elif args.action == "tb":
            self.show_full_traceback()
        else:
            print(f"%devcheck is {'on' if self.auto else 'off'}")
            if self.last is not None and not args.output:
                print(self.last.to_text())
        return self.last if args.output else None

    # ------------------------------------------------------------------ explanation

    def explain(self, exc: BaseException, collapse: bool = True) -> None:
        """Diagnose ``exc`` and attach the explanation to it; never raises over it."""
        if "_render_traceback_" in getattr(exc, "__dict__", {}):
            return  # already explained (e.g. %%devcheck inside %devcheck on)
        try:
            diagnosis = self._diagnose(
                exc, self._shell.user_ns, last_traceback=getattr(sys, "last_traceback", None)
            )
        except Exception as err:
            self._attach_failure(exc, err)
            return
        self.last = diagnosis
        if diagnosis is None:
            return
        text = diagnosis.to_text()
        try:
            if sys.version_info >= (3, 11):
                notes = getattr(exc, "__notes__", [])
                if text not in notes:
                    exc.add_note(text)
            stb = self._render(exc, text, collapse)
        except Exception as err:
            self._attach_failure(exc, err)
            return
        exc._render_traceback_ = lambda: list(stb)  # type: ignore[attr-defined]

    def _render(self, exc: BaseException, text: str, collapse: bool) -> list[str]:
        tbf = self._shell.InteractiveTB
        hidden = 0
        tb = exc.__traceback__
        if collapse:
            from torchdevmagic.diagnosis.culprits import default_user_frame

            tb, hidden = collapsed_traceback(tb, default_user_frame(self._shell.user_ns))
        try:
            stb = list(tbf.structured_traceback(type(exc), exc, tb, tb_offset=0))
        finally:
            del tb
        extra = []
        if hidden:
            extra.append(
                f"[{hidden} PyTorch-internal frames hidden; %devcheck tb shows the full traceback]"
            )
        if text.splitlines()[0] not in _plain("\n".join(stb)):
            extra.append(text)  # IPython 7.x does not print exception notes
        if extra:
            stb.append("\n" + "\n".join(extra))
        return stb

    def _attach_failure(self, exc: BaseException, err: BaseException) -> None:
        line = f"{NOTE_PREFIX} the device-error analysis failed ({type(err).__name__}: {err})"
        try:
            stb = list(
                self._shell.InteractiveTB.structured_traceback(
                    type(exc), exc, exc.__traceback__, tb_offset=0
                )
            )
            stb.append(line)
            exc._render_traceback_ = lambda: list(stb)  # type: ignore[attr-defined]
        except Exception:
            print(line, file=sys.stderr)

    def show_full_traceback(self) -> None:
        value = getattr(sys, "last_value", None)
        if value is None:
            print("No error to show.")
            return
        tbf = self._shell.InteractiveTB
        stb = tbf.structured_traceback(type(value), value, value.__traceback__)
        print(tbf.stb2text(stb))

    # ------------------------------------------------------------------ %devcheck on

    def _custom_tb(
        self, shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None
    ) -> None:
        """Installed as ``shell.CustomTB`` by ``%devcheck on``. Must never raise: IPython
        calls it from ``run_code`` without protection when set directly."""
        try:
            prev = self._previous
            if prev is not None and prev[0] and isinstance(value, prev[0]) and prev[1] is not None:
                prev[1](etype, value, tb, tb_offset=tb_offset)
                return
            if self.auto:
                self.explain(value)
        except Exception as err:  # pragma: no cover - explain() already guards itself
            print(f"{NOTE_PREFIX} {type(err).__name__}: {err}", file=sys.stderr)
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)

    def turn_on(self) -> None:
        self.auto = True
        if self._installed is not None and self._shell.CustomTB is self._installed:
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
