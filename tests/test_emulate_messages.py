"""Every error text the emulated GPU raises is torch's, not typed by hand from memory.

The test reads every ``torchdevmagic/emulate`` source file and collects each message handed
to an exception (``raise RuntimeError(f"...")``, a variable assigned a string just before,
a string a ``*_error``/``*_text`` helper returns), as a pattern: its literal parts, anything
formatted in between. Each must be either

- a PyTorch message: it matches (all of it) an example, template or variant of the corpus of
  verbatim PyTorch messages (``tests/data/device_errors.jsonl``) or of the CUDA-side facts
  gathered for the emulator (``tests/data/torch_messages.jsonl``: PyTorch messages the corpus
  lacks, each with the torch source it comes from and where its words were read; C++ builds
  some from several literals, which the next check cannot see whole), or its literal parts
  are all in the installed torch's own text (its Python source, its libraries' strings); or
- the emulator's own, raised as ``EmulationUnsupported`` or ``UsageError`` (they name the
  emulator), or listed in ``OWN`` with why it is not a PyTorch message.

A new message that is neither fails here, with its file and line.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
EMULATE = ROOT / "torchdevmagic" / "emulate"
DATA = Path(__file__).resolve().parent / "data"
HOLE = "\x00"  # where a message formats a value

# Messages of the emulator's own API, which no PyTorch call makes: the argument checks of
# start()/stop() and the module's attribute lookup, and an internal guard.
OWN = {
    "devices must be a positive int (got \x00)": "start()'s argument",
    "memory must be a positive int of bytes, e.g. 8 << 30 (got \x00)": "start()'s argument",
    "stop(to=...) takes 'cpu' (got \x00)": "stop()'s argument",
    "module 'torchdevmagic.emulate' has no attribute \x00": "the package's __getattr__",
    "torchdevmagic.emulate.core is only half imported": "a guard of the emulator's imports",
    "CUDA emulation is already on (\x00 device(s)); stop() it first": "start() twice",
    "\x00=\x00: expected a number of devices, optionally ':' and the bytes of each (e.g. '2' "
    "or '2:\x00')": "the emulator's own environment variable for child processes",
    "torchdevmagic setup failed in the kernel: \x00: \x00": "the notebook runner's own setup",
}
OWN_CLASSES = {"EmulationUnsupported", "UsageError"}


@dataclass(frozen=True)
class Message:
    where: str
    raised_as: str
    text: str  # literal parts joined by HOLE
    function: str = ""

    def pattern(self) -> re.Pattern[str]:
        parts = [re.escape(p) for p in self.text.split(HOLE)]
        return re.compile("(?s)" + ".+?".join(parts))


def _text(node: Optional[ast.AST], assigned: dict[str, ast.AST]) -> Optional[str]:
    """A string expression as literal parts joined by HOLE; None when it is not one."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            else:
                out.append(HOLE)
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, assigned), _text(node.right, assigned)
        if left is None and right is None:
            return None
        return (left if left is not None else HOLE) + (right if right is not None else HOLE)
    if isinstance(node, ast.Name) and node.id in assigned:
        return _text(assigned[node.id], {})
    if isinstance(node, ast.Call):  # "...".format(...) and the like: the literal, formatted
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            inner = _text(func.value, assigned)
            return None if inner is None else re.sub(r"\{[^{}]*\}", HOLE, inner)
    return None


def _class_name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _is_exception(name: str) -> bool:
    return name.endswith(("Error", "Unsupported", "Exception")) or name == "cls"


def _constants(tree: ast.Module) -> dict[str, ast.AST]:
    """A module's string constants (``NAME = "..."`` at its top level)."""
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and _text(node.value, {}) is not None:
                out[target.id] = node.value
    return out


def collect() -> list[Message]:
    found: dict[tuple[str, str], Message] = {}
    for path in sorted(EMULATE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(ROOT).as_posix()
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        constants = _constants(tree)  # raised by name: RuntimeError(WORDS)
        for fn in sorted(functions, key=lambda f: -f.lineno):  # the innermost function first
            assigned: dict[str, ast.AST] = dict(constants)
            body = list(ast.walk(fn))
            for node in body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target = node.targets[0]
                    if isinstance(target, ast.Name) and _text(node.value, {}) is not None:
                        assigned[target.id] = node.value
            helper = fn.name.endswith(("_error", "_text"))
            grown = {  # names a message is built in piece by piece: checked by value below
                n.target.id
                for n in body
                if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)
            }
            for node in body:
                text, raised_as = None, ""
                if isinstance(node, ast.Call) and _is_exception(_class_name(node.func)):
                    arg = node.args[0] if node.args else None
                    text = _text(arg, assigned)
                    raised_as = _class_name(node.func)
                    if isinstance(arg, ast.Name) and arg.id in grown:
                        raised_as = "composed"
                elif helper and isinstance(node, ast.Return):
                    text, raised_as = _text(node.value, assigned), "returned"
                key = (f"{rel}:{getattr(node, 'lineno', 0)}", text or "")
                if text is not None and text.strip(HOLE) and key not in found:
                    found[key] = Message(key[0], raised_as, text, f"{rel}::{fn.name}")
        for node in ast.walk(tree):  # at module level
            if isinstance(node, ast.Call) and _is_exception(_class_name(node.func)):
                text = _text(node.args[0] if node.args else None, {})
                key = (f"{rel}:{node.lineno}", text or "")
                if text is not None and text.strip(HOLE) and key not in found:
                    found[key] = Message(key[0], _class_name(node.func), text, rel)
    return sorted(found.values(), key=lambda m: m.where)


def _facts(name: str) -> list[str]:
    texts: list[str] = []
    with (DATA / name).open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            entry: dict[str, Any] = json.loads(line)
            for item in [entry, *entry.get("variants", [])]:
                for key in ("example", "template"):
                    if isinstance(item.get(key), str):
                        texts.append(item[key])
    return texts


@lru_cache(maxsize=1)
def _torch_texts() -> list[Any]:
    """The installed torch's own text: its Python source, and its libraries' strings."""
    import mmap

    torch = pytest.importorskip("torch")
    root = Path(torch.__file__).resolve().parent
    texts: list[Any] = [
        "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*.py"))
    ]
    for pattern in ("lib/*torch*", "lib/*c10*"):
        for lib in sorted((root).glob(pattern)):
            if lib.is_file() and (lib.suffix in (".so", ".dylib", ".dll") or ".so." in lib.name):
                with lib.open("rb") as fh:
                    texts.append(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
    return texts


def _in_corpus(message: Message, facts: list[str]) -> bool:
    pattern = message.pattern()
    filled = message.text.replace(HOLE, "X")
    for fact in facts:
        if pattern.fullmatch(fact):  # the message's pattern matches a verbatim example
            return True
        if "{" in fact:  # or a template's pattern (placeholders: anything) matches it
            parts = re.split(r"\{[a-zA-Z_0-9]+\}", fact)
            if re.fullmatch("(?s)" + ".*?".join(re.escape(p) for p in parts), filled):
                return True
    return False


def _in_torch(message: Message) -> bool:
    chunks = [c for c in message.text.split(HOLE) if c.strip()]
    if not chunks:
        return False
    for chunk in chunks:
        if str(chunk) in _torch_texts()[0]:
            continue
        needle = chunk.encode("utf-8")
        if not any(t.find(needle) >= 0 for t in _torch_texts()[1:]):
            return False
    return True


MESSAGES = collect()


def test_the_scan_finds_the_messages() -> None:
    texts = {m.text for m in MESSAGES}
    # one of each way a message is written: a literal, an f-string, a helper's return, a
    # variable assigned just before, a module's constant
    assert "Trying to pass too many CPU scalars to non-CPU kernel!" in texts
    assert "called a synchronizing CUDA operation" in texts  # syncs.SYNCHRONIZING
    assert any(t.startswith("Input type (") for t in texts)
    assert any(t.startswith("Expected all tensors to be on the same device, but") for t in texts)
    assert "Both events must be recorded before calculating elapsed time." in texts
    assert len(MESSAGES) >= 40


@pytest.mark.parametrize("message", MESSAGES, ids=[m.where for m in MESSAGES])
def test_each_message_is_pytorchs_or_the_emulators_own(message: Message) -> None:
    if message.raised_as in OWN_CLASSES or message.text in OWN:
        return
    if message.raised_as == "composed":  # built piece by piece: its value is checked below
        assert message.function in COMPOSED, f"{message.where}: add a test of its value"
        return
    facts = _facts("device_errors.jsonl") + _facts("torch_messages.jsonl")
    assert _in_corpus(message, facts) or _in_torch(message), (
        f"{message.where}: {message.text!r} ({message.raised_as}) is in neither the corpus "
        "of PyTorch messages, tests/data/torch_messages.jsonl, nor torch's own source"
    )


def test_the_kernel_facts_name_their_source() -> None:
    with (DATA / "torch_messages.jsonl").open(encoding="utf-8") as fh:
        entries = [json.loads(line) for line in fh if line.strip()]
    assert entries
    for entry in entries:
        assert entry["source"] and entry["seen_in"] and entry["example"], entry["id"]


# -- messages built piece by piece, checked by their value on the installed torch -----------
COMPOSED = {
    "torchdevmagic/emulate/core/faults.py::cuda_error",
    "torchdevmagic/emulate/cuda/devices.py::invalid_ordinal",
}
VERSION = tuple(int(p) for p in __import__("torch").__version__.split(".")[:2])


def _corpus(key: str) -> dict[str, Any]:
    with (DATA / "device_errors.jsonl").open(encoding="utf-8") as fh:
        return next(e for e in map(json.loads, fh) if e["id"] == key)


def _template_matches(template: str, text: str) -> bool:
    parts = re.split(r"\{[a-zA-Z_0-9]+\}", template)
    return re.fullmatch("(?s)" + ".+?".join(re.escape(p) for p in parts), text) is not None


@pytest.mark.skipif(VERSION < (2, 9), reason="the corpus gives these words for 2.9+")
def test_composed_cuda_errors_are_the_corpus_words() -> None:
    from torchdevmagic.emulate.core import faults
    from torchdevmagic.emulate.cuda.devices import invalid_ordinal

    assert (
        str(faults.device_side_assert()) == _corpus("cuda_device_side_assert_v2_9_plus")["template"]
    )
    generic = _corpus("cuda_error_generic_search_for")["template"]
    for what, name in (("device not ready", "cudaErrorNotReady"), ("x", "cudaErrorX")):
        assert _template_matches(generic, str(faults.cuda_error(what, name)))
    assert str(invalid_ordinal()) == _corpus("cuda_error_invalid_device_ordinal")["template"]
    assert type(faults.device_side_assert()).__name__ == "AcceleratorError"


def test_a_message_typed_from_memory_is_caught() -> None:
    """Near misses of real messages: a word changed, a clause added. None may pass."""
    typed = [
        "Expected all tensors to be on the same device, but found two devices, \x00 and \x00!",
        "Invalid device, must be cuda device (got \x00)",
        "Both events must be completed before computing elapsed time.",
        "CUDA error: device side assert triggered",
    ]
    facts = _facts("device_errors.jsonl") + _facts("torch_messages.jsonl")
    for text in typed:
        message = Message("typed", "RuntimeError", text)
        assert not _in_corpus(message, facts), text
        assert not _in_torch(message), text
