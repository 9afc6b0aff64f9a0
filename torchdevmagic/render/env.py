"""The environment verdict in words: its headline, fix and also-lines worded for where they
are pasted, the facts table, and its layout (:mod:`.blocks`) for text, HTML and rich.

Its fix lines are worded for where they will be pasted: an IPython cell (``%devices --env``,
or the Python API inside a running IPython shell) gets ``%pip install ...`` and ``%env
NAME=VALUE``; a plain script gets ``python -m pip install ...`` marked as a shell command and
``os.environ[...] = ...`` (a ``%`` line there is a SyntaxError).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence

from torchdevmagic.env.facts import EnvFacts
from torchdevmagic.env.verdicts import Piece, Pip, Say, SetEnv, Shell, Text, Verdict
from torchdevmagic.render.blocks import Block, Code, Line, Table

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


def status(code: str) -> str:
    """The verdict's one word: OK, NO GPU or PROBLEM."""
    return {"ok": "OK", "cpu_only": "NO GPU"}.get(code, "PROBLEM")


STATUS_STYLE = {"ok": "ok", "cpu_only": "note"}  # else "warning"


def fact_rows(f: EnvFacts) -> dict[str, str]:
    """The facts table's rows, each fact in words."""
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


def env_blocks(
    verdict: Verdict,
    notes: Sequence[Text],
    facts: Mapping[str, str],
    raw: EnvFacts,
    in_ipython: bool,
) -> list[Block]:
    """The report's layout: the verdict's line, its fix (code to paste where it is code),
    the also-lines, the facts table (its values wrap in a narrow terminal)."""
    code = verdict.code
    fix = words(verdict.fix, in_ipython, raw)
    headline = words(verdict.headline, in_ipython, raw)
    return [
        Line(f"{status(code)} [{code}]: {headline}", STATUS_STYLE.get(code, "warning")),
        Code(fix, indent=0) if _is_code(fix) else Line(f"fix: {fix}", "", 5),
        *(Line(f"also: {words(n, in_ipython, raw)}", "note", 6) for n in notes),
        Line(""),
        Table(("fact", "value"), list(facts.items()), wrap=(1,)),
    ]


def _is_code(text: str) -> bool:
    try:
        compile(text, "<fix>", "exec")
    except SyntaxError:
        return False
    return True
