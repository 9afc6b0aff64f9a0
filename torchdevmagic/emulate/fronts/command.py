"""``python -m torchdevmagic.emulate``: run a script or a notebook as if on a GPU machine.

A script runs in this process under emulation (``runpy``, ``sys.argv`` as the script would
see it); a device error prints its traceback and the %%devcheck diagnosis, and the exit status
is 1. A notebook runs in a real Jupyter kernel (nbclient), emulation and ``%devcheck on``
switched on first, code cell N as ``In[N]``; it stops at the first cell that fails, as Run
All does (what follows builds on it), reports that cell with its diagnosis and fix, names
the cells not run, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

USAGE = (
    "python -m torchdevmagic.emulate [--devices N] [--memory GiB] [--nproc-per-node N] "
    "script.py [args] | notebook.ipynb"
)
# torch numbers CUDA devices with an 8-bit index: cuda:0 to cuda:127.
MAX_DEVICES = 128
# GiB per emulated GPU: from about a MiB (a test of an out-of-memory path) to a PiB.
MIN_GIB, MAX_GIB = 0.001, float(1 << 20)


def devices_range(given: object) -> str:
    """What ``--devices`` takes, for the command's and the magic's errors."""
    return f"--devices takes a whole number from 1 to {MAX_DEVICES}, not {given}"


def memory_range(given: object) -> str:
    return (
        f"--memory takes GiB per GPU, a number from {MIN_GIB:g} to {MAX_GIB:.0f} (1 PiB), "
        f"not {given}"
    )


_PROBE = (
    "import json as _tdm_json\n"
    "_tdm_d = get_ipython().run_line_magic('devcheck', '-o')\n"
    "print('@@torchdevmagic@@' + _tdm_json.dumps(None if _tdm_d is None else "
    "{'text': _tdm_d.to_text(), 'fix': _tdm_d.fix}))\n"
    "del _tdm_json, _tdm_d"
)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m torchdevmagic.emulate", usage=USAGE)
    parser.add_argument("--devices", type=int, default=None, help="emulated GPUs (default 1)")
    parser.add_argument("--memory", type=float, default=16.0, help="GiB per GPU (default 16)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per notebook cell")
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        help="run a script in N processes as torchrun does (RANK, LOCAL_RANK, WORLD_SIZE...); "
        "--devices defaults to N",
    )
    # optional to argparse, so that its error does not call the script's arguments required
    parser.add_argument("target", nargs="?", help="a .py script or an .ipynb notebook")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    args = parser.parse_args(argv)
    if args.target is None:
        parser.error("give a script.py (and its arguments, if any) or a notebook.ipynb to run")
    if args.nproc_per_node is not None:
        if not 1 <= args.nproc_per_node <= MAX_DEVICES:
            parser.error(
                f"--nproc-per-node takes a whole number from 1 to {MAX_DEVICES}, "
                f"not {args.nproc_per_node}"
            )
        if args.target.endswith(".ipynb"):
            parser.error("--nproc-per-node runs a script, not a notebook")
    if args.devices is None:
        args.devices = args.nproc_per_node or 1
    if not 1 <= args.devices <= MAX_DEVICES:
        parser.error(devices_range(args.devices))
    if not MIN_GIB <= args.memory <= MAX_GIB:  # False for nan
        parser.error(memory_range(f"{args.memory:g}"))
    if not Path(args.target).is_file():
        parser.error(f"no such file: {args.target}")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.nproc_per_node is not None:
        from torchdevmagic.emulate.fronts.launch import launch

        return launch(args.target, args.args, args.nproc_per_node, args.devices, args.memory)
    if args.target.endswith(".ipynb"):
        return run_notebook(Path(args.target), args.devices, args.memory, args.timeout)
    return run_script(args.target, args.args, args.devices, args.memory)


def run_script(path: str, script_args: Sequence[str], devices: int, memory: float) -> int:
    from torchdevmagic.emulate.fronts import session as _session

    _session.start(devices, int(memory * (1 << 30)))
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *script_args]
    sys.path.insert(0, str(Path(path).resolve().parent))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:
        traceback.print_exc()
        _explain(exc, path)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        _session.end()
    print(f"torchdevmagic: {path} ran without device errors on {devices} emulated GPU(s)")
    return 0


def _explain(exc: BaseException, path: str) -> None:
    from torchdevmagic.diagnosis import diagnose
    from torchdevmagic.emulate.fronts.namespace import user_globals

    try:
        diagnosis = diagnose(exc, user_globals(exc))
    except Exception as err:
        print(f"torchdevmagic: the device-error analysis failed ({err})", file=sys.stderr)
        return
    if diagnosis is None:
        print(f"torchdevmagic: {path} failed; the error is not a device error we know")
    else:
        print("\n" + diagnosis.to_text(), file=sys.stderr)


def _kernel_manager(workdir: Path) -> Any:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = workdir / "kernels" / "tdm-emulate"
    spec_dir.mkdir(parents=True)
    spec = {
        # (its log at ERROR: the warnings of a kernel on localhost are not the notebook's)
        "argv": [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--IPKernelApp.log_level=ERROR",
        ],
        "display_name": "torchdevmagic emulate",
        "language": "python",
        # (debugpy's warning about frozen modules, under ipykernel 6 on Python 3.11+, too)
        "env": {
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        },
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    specs = KernelSpecManager(kernel_dirs=[str(workdir / "kernels")], ensure_native_kernel=False)
    return KernelManager(kernel_name="tdm-emulate", kernel_spec_manager=specs)


def run_notebook(path: Path, devices: int, memory: float, timeout: int) -> int:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    setup = nbformat.v4.new_code_cell(
        f"%load_ext torchdevmagic\n%emulate_cuda on --devices {devices} --memory {memory}\n"
        "%devcheck on"
    )
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    failed: Optional[int] = None
    with tempfile.TemporaryDirectory() as tmp:
        client = NotebookClient(
            nb,
            km=_kernel_manager(Path(tmp)),
            timeout=timeout,
            allow_errors=True,
            resources={"metadata": {"path": str(path.resolve().parent)}},
        )
        with client.setup_kernel():
            _run_hidden(client, setup, 0)
            for number, (index, cell) in enumerate(code, 1):
                # Code cell N runs as In[N] (the runner's own cells are kept out of the
                # history; an empty cell, which nbclient skips, is counted as "pass"), so the
                # diagnosis's "Cell In[N], line L" is the code cell this report numbers.
                if not cell.source.strip():
                    _run_hidden(client, nbformat.v4.new_code_cell("pass"), index, counted=True)
                    continue
                client.execute_cell(cell, index)
                error = next((o for o in cell.outputs if o.output_type == "error"), None)
                if error is None:
                    continue
                report = _run_hidden(client, nbformat.v4.new_code_cell(_PROBE), index)
                nb.cells[index] = cell
                _print_failure(number, cell, error, report)
                failed = number
                break  # as Run All stops: what follows builds on what failed
    name = path.name
    if failed is not None:
        rest = len(code) - failed
        after = "" if not rest else f"; {_cells_not_run(failed + 1, len(code))} not run"
        print(
            f"torchdevmagic: {name}: code cell {failed} failed on {devices} emulated GPU(s){after}"
        )
        return 1
    print(f"torchdevmagic: {name} ran without errors on {devices} emulated GPU(s)")
    return 0


def _cells_not_run(first: int, last: int) -> str:
    return f"code cell {first}" if first == last else f"code cells {first} to {last}"


def _run_hidden(
    client: Any, cell: Any, index: int, counted: bool = False
) -> Optional[dict[str, Any]]:
    """Run one of the runner's own cells, kept out of the notebook and, unless ``counted``,
    out of IPython's history (the user's cells keep their numbers)."""
    saved = client.nb.cells[index] if client.nb.cells else None
    client.execute_cell(cell, index, store_history=counted)
    if saved is not None:
        client.nb.cells[index] = saved
    for out in cell.outputs:
        if out.output_type == "error":
            raise RuntimeError(
                f"torchdevmagic setup failed in the kernel: {out.ename}: {out.evalue}"
            )
        text = out.get("text", "")
        if out.output_type == "stream" and "@@torchdevmagic@@" in text:
            payload = text.split("@@torchdevmagic@@", 1)[1].strip()
            found: dict[str, Any] = json.loads(payload)
            return found
    return None


def _print_failure(number: int, cell: Any, error: Any, report: Optional[dict[str, Any]]) -> None:
    first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
    print(f"--- code cell {number}: {first}")
    print(f"{error.ename}: {error.evalue}")
    if report is not None:
        print(report["text"])
    else:
        print("(not a device error torchdevmagic knows)")
    print()
