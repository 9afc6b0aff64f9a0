"""What %devices cannot name the usual way: values behind a ``weakref.proxy`` and values
under a namespace key that is not a str (``globals()[1] = t``). Through a real shell: a
proxy is named in the footer (following it would run the referent's code), a non-str key's
value is a row whose path, pasted into the shell, gives the value back."""

from __future__ import annotations

from typing import Any

SETUP = """
import torch, weakref
from torch import nn

ran = []

class Loud(nn.Linear):
    # any attribute read through a proxy runs this: the scan must not
    def __getattribute__(self, name):
        ran.append(name)
        return super().__getattribute__(name)

class Holder:
    pass

model = Loud(4, 4)
ran.clear()
p = weakref.proxy(model)
h = Holder()
h.ref = weakref.proxy(torch.nn.Parameter(torch.zeros(2)))
refs = {"first": weakref.proxy(model), "second": weakref.proxy(model)}
many = [weakref.proxy(model) for _ in range(5)]
"""


def run(shell: Any, code: str) -> Any:
    result = shell.run_cell(code)
    if result.error_before_exec or result.error_in_exec:
        raise AssertionError(f"cell failed: {result.error_before_exec or result.error_in_exec!r}")
    return result.result


def test_weakref_proxies_are_named_in_the_footer_and_never_followed(
    shell: Any, capsys: Any
) -> None:
    run(shell, SETUP)
    capsys.readouterr()
    run(shell, "%devices")
    out = capsys.readouterr().out
    assert shell.user_ns["ran"] == []  # the referent's __getattribute__ never ran
    footer = [line for line in out.splitlines() if "weakref.prox" in line]
    assert footer == [
        "9 weakref.proxies not followed (a proxy keeps nothing alive): p, h.ref, "
        "refs['first'] and 6 more"
    ]
    report = run(shell, "%devices -o")
    assert (report.stats.proxies, report.stats.proxy_paths) == (9, ("p", "h.ref", "refs['first']"))
    assert report.row("model").nbytes == (16 + 4) * 4  # counted where it is held
    assert report.to_dict()["stats"]["proxies"] == 9
    assert shell.user_ns["ran"] == []


def test_one_proxy_alone_is_named_in_the_singular(shell: Any, capsys: Any) -> None:
    run(shell, "import torch, weakref\nt = torch.zeros(3)\nq = weakref.proxy(t)")
    capsys.readouterr()
    run(shell, "%devices")
    out = capsys.readouterr().out
    assert "1 weakref.proxy not followed (a proxy keeps nothing alive): q" in out


KEYS = """
import torch

calls = []

class Key:
    # a key whose every method is user code: none may run
    def __hash__(self):
        calls.append("hash")
        return 7

    def __eq__(self, other):
        calls.append("eq")
        return self is other

    def __repr__(self):
        calls.append("repr")
        return "Key()"

key = Key()
globals()[1] = torch.zeros(100)
globals()[(2, "a")] = torch.zeros(10)
globals()[key] = torch.zeros(3)
calls.clear()
"""


def test_values_under_keys_that_are_not_str_are_rows(shell: Any, capsys: Any) -> None:
    run(shell, KEYS)
    report = run(shell, "%devices -o")
    rows = {r.path: r.nbytes for r in report.rows}
    assert rows["globals()[1]"] == 400 and rows["globals()[(2, 'a')]"] == 40
    (odd,) = [p for p in rows if p.startswith("globals()[<key ")]
    assert rows[odd] == 12
    assert report.totals() == {"cpu": 452}
    capsys.readouterr()
    run(shell, "%devices")
    out = capsys.readouterr().out
    assert "globals()[1]" in out and "globals()[(2, 'a')]" in out
    assert shell.user_ns["calls"] == []  # no hash, eq or repr of the user's key ran
    # the paths are what the user types: pasted into the shell, they give the tensors back
    assert run(shell, "globals()[1]") is shell.user_ns[1]
    assert run(shell, "globals()[(2, 'a')]") is shell.user_ns[(2, "a")]
    run(shell, "del globals()[key]")  # while calls exists: the shell's reset would hash it


def test_a_value_also_under_a_name_is_counted_once_under_the_name(shell: Any) -> None:
    run(shell, "import torch\nt = torch.zeros(50)\nglobals()[3] = t")
    report = run(shell, "%devices -o")
    assert report.row("t").nbytes == 200
    assert report.row("globals()[3]").alias_of == "t"
    assert report.totals() == {"cpu": 200}
