"""A notebook's cells run by each rank of a two-rank job, through ``%%devcheck`` in a real
shell: what failed, the diagnosis, and the cell run again with the fix pasted where it says.

``devcheck_then_fixed(rank, cases)`` is a function for ``_distributed.spawn_two``; ``cases``
is a list of ``(setup, body, ports)``, run in one shell per rank (torch's import and the
shell's start are paid once). Before each run the rank is (re)started as a user restarts
one: no process group, cuda:0 the current device, the group's store on a port of its own
(a failed group's may still be held by the other rank).
"""

from __future__ import annotations

import json
import os
from typing import Any


def _fresh(port: int) -> None:
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    torch.cuda.set_device(0)
    os.environ["MASTER_PORT"] = str(port)


def devcheck_then_fixed(rank: int, cases: list[tuple[str, str, tuple[int, int]]]) -> str:
    from _fixrun import pasted
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("torchdevmagic")
    results = []
    for setup, body, (failing, fixed) in cases:
        _fresh(failing)
        assert shell.run_cell(setup).error_in_exec is None
        cell = "%%devcheck\n" + body
        err = shell.run_cell(cell).error_in_exec
        d: Any = shell.run_line_magic("devcheck", "-o")
        out: dict[str, Any] = {
            "error": f"{type(err).__name__}: {err}" if err is not None else None,
            "rule": getattr(d, "rule", None),
            "summary": getattr(d, "summary", None),
            "culprits": [c.expression for c in getattr(d, "culprits", ())],
            "fix": getattr(d, "fix", None),
            "fix_lineno": getattr(d, "fix_lineno", None),
            "fix_insert": getattr(d, "fix_insert", None),
        }
        if d is not None and d.fix and d.fix_lineno is not None:
            _fresh(fixed)
            again = shell.run_cell(pasted(cell, d)).error_in_exec
            out["fixed_error"] = f"{type(again).__name__}: {again}" if again is not None else None
            out["after"] = eval("_after()", shell.user_ns) if "_after" in shell.user_ns else None
        results.append(out)
        shell.run_line_magic("devcheck", "off")  # (nothing kept between cases but the shell)
    return json.dumps(results)
