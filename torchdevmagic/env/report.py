"""The environment report: verdict, secondary findings and the facts table, in text, HTML, rich.

Its fix lines are worded for where they will be pasted (:attr:`EnvReport.in_ipython`): an
IPython cell (``%devices --env``, or the Python API inside a running IPython shell) gets
``%pip install ...`` and ``%env NAME=VALUE``; a plain script gets ``python -m pip install ...``
marked as a shell command and ``os.environ[...] = ...`` (a ``%`` line there is a SyntaxError).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import asdict, dataclass
from typing import Any, Optional

from torchdevmagic._display import (
    ERROR_COLOR,
    OK_COLOR,
    WARN_COLOR,
    Displayable,
    html_block,
    html_lines,
    html_table,
    text_table,
)
from torchdevmagic.env.facts import EnvFacts, collect_facts
from torchdevmagic.env.verdicts import Piece, Pip, Say, SetEnv, Shell, Text, Verdict, decide

# The phrases that name the process, for an IPython cell and for a plain script.
PHRASES = {
    "restart": {True: "restart the kernel", False: "restart Python"},
    "here": {True: "this kernel", False: "this Python"},
}


def words(text: Text, in_ipython: bool, facts: EnvFacts) -> str:
    """``text`` in the words of where its lines are pasted (see the module's docstring)."""
    if isinstance(text, str):
        return text
    return "".join(_piece(p, in_ipython, facts) for p in text)


def _piece(piece: Piece, ipython: bool, f: EnvFacts) -> str:
    if isinstance(piece, str):
        return piece
    if isinstance(piece, Say):
        return PHRASES[piece.what][ipython]
    if isinstance(piece, Pip):
        if ipython:
            return "`" + " ".join(["%pip install", *piece.args]) + "`"
        python = _shell_word(f.python_executable or "python", f.platform)
        return "`" + " ".join([python, "-m pip install", *piece.args]) + "` in a shell"
    if isinstance(piece, SetEnv):
        if ipython:
            return f"`%env {piece.name}={piece.value}`"
        # One line that pastes anywhere in a script: the import comes with it.
        name, value = json.dumps(piece.name), json.dumps(piece.value)
        return f"`import os; os.environ[{name}] = {value}` before torch initialises CUDA"
    if isinstance(piece, Shell):
        return f"`!{piece.command}`" if ipython else f"`{piece.command}` in a shell"
    raise TypeError(f"not a piece of a verdict's words: {piece!r}")  # pragma: no cover


def _shell_word(path: str, platform: str) -> str:
    """``path`` as one word of a shell command line (cmd.exe quotes with double quotes)."""
    if platform.startswith("win"):
        return f'"{path}"' if " " in path else path
    return shlex.quote(path)


def ipython_running() -> bool:
    """Whether an IPython shell runs in this process (looked up, never imported: a script
    that never started one has none, and a ``%`` line would be a SyntaxError there)."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    try:
        return callable(get) and get() is not None
    except Exception:
        return False


def _fact_rows(f: EnvFacts) -> dict[str, str]:
    if f.torch_version is None:
        build = "not importable"
    elif f.torch_hip:
        build = f"ROCm/HIP {f.torch_hip}"
    elif f.torch_cuda:
        build = f"CUDA {f.torch_cuda}"
    else:
        build = "CPU-only"
    caps = ", ".join(
        f"cuda:{d.index} sm_{d.capability[0]}{d.capability[1]}" for d in f.devices if d.capability
    )
    driver = f.driver_version or (f"N/A ({f.nvml_error})" if f.nvml_error else "N/A")
    pip = f.pip_path or "not on PATH"
    if f.pip_target:  # a pyenv shim: the pip it runs
        pip += f", a pyenv shim for {f.pip_target}"
    if f.pip_path:
        pip += {
            True: " (this kernel's Python)",
            False: f" (runs {f.pip_python})",
            None: " (interpreter unknown)",
        }[f.pip_matches]
    where = "Colab" if f.on_colab else "Kaggle" if f.on_kaggle else "neither Colab nor Kaggle"
    return {
        "python": f"{f.python_executable} ({f.python_version}, {f.platform})",
        "torch": f"{f.torch_version or 'N/A'} ({build})",
        "cuda.is_available": str(f.cuda_available)
        + ("" if f.cuda_initialized or not f.cuda_built else " (from device_count, no context)"),
        "devices": ", ".join(f"cuda:{d.index} {d.name or '?'}" for d in f.devices)
        or str(f.device_count),
        "compute capability": caps or "N/A",
        "arch list": " ".join(f.arch_list) or "N/A",
        "driver": driver + (f" (supports CUDA ≤ {f.driver_cuda})" if f.driver_cuda else ""),
        "NVML GPUs": ", ".join(f.nvml_gpu_names) or ("N/A" if f.nvml_error else "none"),
        "torch CUDA": f.torch_cuda or "N/A",
        "cuDNN": str(f.cudnn_version) if f.cudnn_version else "N/A",
        "CUDA_VISIBLE_DEVICES": "unset"
        if f.cuda_visible_devices is None
        else repr(f.cuda_visible_devices),
        "MPS / XPU": f"{f.mps_available} / {f.xpu_available}",
        "notebook host": where,
        "pip": pip,
        "nvidia-smi": f.nvidia_smi or "not on PATH",
    }


# repr=False: a dataclass __repr__ would win over Displayable._repr_pretty_ in IPython.
@dataclass(frozen=True, repr=False)
class EnvReport(Displayable):
    """The verdict (``code``, ``headline``, ``fix``), secondary findings (``also``) and the
    facts. ``in_ipython``: its lines are for an IPython cell, not for a script and a shell."""

    verdict: Verdict
    notes: tuple[Text, ...]  # the secondary findings, as data (``also`` is their words)
    facts: dict[str, str]
    raw: EnvFacts
    in_ipython: bool = False

    @property
    def code(self) -> str:
        return self.verdict.code

    @property
    def headline(self) -> str:
        return words(self.verdict.headline, self.in_ipython, self.raw)

    @property
    def fix(self) -> str:
        return words(self.verdict.fix, self.in_ipython, self.raw)

    @property
    def also(self) -> tuple[str, ...]:
        return tuple(words(n, self.in_ipython, self.raw) for n in self.notes)

    @property
    def ok(self) -> bool:
        return self.code == "ok"

    @property
    def status(self) -> str:
        return {"ok": "OK", "cpu_only": "NO GPU"}.get(self.code, "PROBLEM")

    def _color(self) -> str:
        return {"ok": OK_COLOR, "cpu_only": WARN_COLOR}.get(self.code, ERROR_COLOR)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "headline": self.headline,
            "fix": self.fix,
            "also": list(self.also),
            "facts": dict(self.facts),
            "raw": asdict(self.raw),
            "in_ipython": self.in_ipython,
        }

    def to_text(self) -> str:
        lines = [
            f"{self.status} [{self.code}]: {self.headline}",
            f"fix: {self.fix}",
        ]
        lines += [f"also: {a}" for a in self.also]
        table = text_table(["fact", "value"], list(self.facts.items()))
        return "\n".join([*lines, "", table])

    def to_html(self) -> str:
        color = self._color()
        lines = [
            (f"{self.status} [{self.code}]: {self.headline}", color),
            (f"fix: {self.fix}", None),
            *((f"also: {a}", WARN_COLOR) for a in self.also),
        ]
        return html_block(
            html_lines(lines), html_table(["fact", "value"], list(self.facts.items()))
        )

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table("fact", "value", box=None, show_edge=False, pad_edge=False)
        for key, value in self.facts.items():
            table.add_row(key, value)
        style = {"ok": "green", "cpu_only": "yellow"}.get(self.code, "bold red")
        parts: list[Any] = [
            Text(f"{self.status} [{self.code}]: {self.headline}", style=style),
            # Never wrapped: a fix is copied as one line (a wrapped comment breaks the paste).
            Text(f"fix: {self.fix}", no_wrap=True, overflow="ignore"),
            *(Text(f"also: {a}", style="yellow") for a in self.also),
            table,
        ]
        return Group(*parts)


def check_environment(
    *, facts: Optional[EnvFacts] = None, in_ipython: Optional[bool] = None
) -> EnvReport:
    """The verdict for this machine (or for ``facts``, when given).

    ``in_ipython`` says where its fix lines will be pasted: an IPython cell (``%pip install``,
    ``%env``) or a plain script (``os.environ[...]``) and a shell (``python -m pip install``).
    By default, whether an IPython shell is running in this process."""
    facts = facts if facts is not None else collect_facts()
    verdict, also = decide(facts)
    ipython = ipython_running() if in_ipython is None else in_ipython
    return EnvReport(verdict, also, _fact_rows(facts), facts, ipython)
