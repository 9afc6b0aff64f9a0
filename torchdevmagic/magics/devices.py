"""``%devices``: where the notebook's tensors, modules and optimizers live."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class, needs_local_scope

from torchdevmagic.magics._args import argument, magic_arguments, parse, refuse_combined
from torchdevmagic.magics._show import show

SORT_KEYS = ("size", "name", "device")  # report.sort_rows understands these


def _top(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"--top takes a whole number, not {value!r}") from None
    if n < 0:
        raise UsageError("--top takes 0 (all rows) or a positive number")
    return n


def _depth(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise UsageError(f"--depth takes 0 or a positive whole number, not {value!r}")
    return n


def _positive(option: str) -> Any:
    """An argparse ``type`` for a limit of the walk: a whole number of at least 1, or a
    one-line ``UsageError`` naming ``option``."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(f"{option} takes a positive whole number, not {value!r}")
        return n

    return parse


def _scan_only(args: Any) -> dict[str, bool]:
    """Which of the options only a scan reads were typed (--env and --free refuse them)."""
    return {
        "-a": args.all,
        "--sort": args.sort is not None,
        "--top": args.top is not None,
        "--diff": args.diff,
        "--depth": args.depth is not None,
        "--max-items": args.max_items is not None,
        "--max-objects": args.max_objects is not None,
        "--ranks": args.ranks,
    }


def parse_device(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    from torchdevmagic._device import Device  # not at load: see test_cuda_time_magic

    try:
        return str(Device.parse(text))
    except ValueError:
        raise UsageError(
            f"unknown device {text!r}: use cpu, cuda, cuda:N, mps or meta (e.g. %devices cuda:0)"
        ) from None


_OUTPUT = re.compile(r"Out\[(\d+)\]|_(\d+)")


def _refuse_missing_outputs(words: list[str], history: Any) -> None:
    """``Out[N]`` / ``_N`` named for ``--free`` where the output history has no N: a typo or
    a count from another session, which "nothing held by Out[N]" would hide."""
    keys = sorted(k for k in dict.keys(history) if type(k) is int) if type(history) is dict else []
    for word in words:
        m = _OUTPUT.fullmatch(word)
        if m is None or int(m.group(1) or m.group(2)) in keys:
            continue
        if not keys:
            have = "no cell has had an output yet"
        else:
            shown = ", ".join(f"Out[{k}]" for k in keys[-5:])
            have = f"the outputs are {'..., ' if len(keys) > 5 else ''}{shown}"
        raise UsageError(f"%devices --free: there is no {word} ({have})")


@magics_class
class DevicesMagics(Magics):
    @magic_arguments("%devices")
    @argument("device", nargs="?", help="only rows on this device: cpu, cuda, cuda:1, mps, meta")
    @argument("-a", "--all", action="store_true", help="include _private and IPython names")
    @argument("-s", "--sort", default=None, choices=SORT_KEYS, help="row order (default: size)")
    @argument("--top", type=_top, default=None, help="show N rows (default 30; 0 shows all)")
    @argument(
        "--depth",
        type=_depth,
        default=None,
        metavar="N",
        help="walk N levels into containers and objects (default 6)",
    )
    @argument(
        "--max-items",
        type=_positive("--max-items"),
        default=None,
        metavar="N",
        help="inspect N items of each container (default 100000)",
    )
    @argument(
        "--max-objects",
        type=_positive("--max-objects"),
        default=None,
        metavar="N",
        help="inspect N objects in all (default 2000000)",
    )
    @argument("--diff", action="store_true", help="what changed since the previous %%devices")
    @argument("--env", action="store_true", help="CUDA environment verdict instead of variables")
    @argument(
        "--free",
        nargs="*",
        metavar="HOLDER",
        default=None,
        help="give back memory pinned by the last traceback and Out[n] (all, or: traceback, "
        "Out, Out[N], _)",
    )
    @argument(
        "--ranks",
        action="store_true",
        help="every rank of a torch.distributed program in one table, on rank 0 (every rank "
        "must run it)",
    )
    @argument("-o", "--output", action="store_true", help="return the report object")
    @needs_local_scope
    @line_magic
    def devices(self, line: str = "", local_ns: Any = None) -> Any:
        """Show where your tensors, modules and optimizers live, and what each GPU holds.

        Usage: %devices [DEVICE] [-a] [-s size|name|device] [--top N] [--depth N]
                        [--max-items N] [--max-objects N] [-o]
               %devices [DEVICE] --diff [-a] [--top N] [--depth N] [--max-items N]
                        [--max-objects N] [-o]
               %devices --env [-o]
               %devices [DEVICE] --free [traceback|Out|Out[N]|_ ...] [-o]
               %devices [DEVICE] --ranks [-a] [-s size|name|device] [--top N] [-o]

        Findings (a module split across devices, a tensor attribute .to() will not move,
        optimizer state on another device) come first, then one row per variable, then one
        row per GPU (named bytes, allocator, NVML). Nothing is copied, synchronised or run.

        --env answers "why is the GPU (not) there?": a verdict and its one-line fix (CPU-only
        build, no driver, CUDA_VISIBLE_DEVICES hides the GPUs, driver too old, architecture
        missing from the build, pip installing into another Python), then the facts. It
        never creates a CUDA context.

        --diff shows what changed since the previous %devices in this kernel: new, freed,
        grown, shrunk and moved (device changed) variables, and each device's totals.

        --free gives back memory that notebook history pins after an error: the locals of
        the stored traceback's frames (IPython's copies too) and old results in Out[n] (with
        IPython's _n, _ aliases), never a variable of yours. It shows what each holder kept,
        drops those references, collects, empties the CUDA cache, and prints what came back
        per device. Name holders to drop only those; give a DEVICE to drop only the ones
        holding memory there.

        --ranks, in a torch.distributed program (notebook_launcher, torchrun), gathers every
        rank's report to rank 0 with torch.distributed's object collective: one table with a
        Rank column (--top N rows per rank), each device's total across ranks, and what no
        one rank can see (two ranks on one GPU, a model or optimizer state on another kind
        of device on one rank). Rank 0 shows it; the other ranks show nothing (-o gives them
        None). It is a collective: every rank must run it. In a function it reads the
        function's names too.

        Examples::

            %devices                # everything, biggest first
            %devices cuda:0 --top 10
            %devices --depth 10     # walk deeper nesting than the default 6 levels
            %devices --max-items 1000000   # look further into a container of a million items
            report = %devices -o    # the report object: report.rows, report.totals()
            %devices --env          # why torch does (not) see the GPU
            %devices --diff         # new, freed, grown, moved since the previous %devices
            %devices --free         # after an out-of-memory error: give back what it pins
            %devices --ranks        # in every rank: one table of all of them, on rank 0
        """
        args = parse(self.devices, line, "%devices")  # an unmatched quote: UsageError
        shell = self.shell
        assert shell is not None  # a registered Magics instance always has its shell
        if args.env:
            return self._env(args)
        if args.free is not None:
            return self._free(args)
        # --diff lists changes biggest first: a --sort there would go unread.
        refuse_combined(
            "%devices",
            "--diff",
            {"--sort": args.diff and args.sort is not None},
            "a DEVICE, -a, --top, --depth, --max-items, --max-objects, -o",
        )
        if args.ranks:
            return self._ranks(args, local_ns)
        report = replace(
            self._scan(shell.user_ns, args), made_by="%devices"
        )  # its notes name this magic's options
        previous, self._previous = self._previous, report  # kept for the next --diff
        if args.diff:
            return self._finish(self._diff(previous, report), args.output)
        return self._finish(report, args.output)

    def _ranks(self, args: Any, local_ns: Any) -> Any:
        refuse_combined(
            "%devices",
            "--ranks",
            {"--diff": args.diff},
            "a DEVICE, -a, --sort, --top, --depth, --max-items, --max-objects, -o",
        )
        from torchdevmagic.ranks import gather_ranks, process_group_problem

        problem = process_group_problem("%devices --ranks")
        if problem is not None:
            raise UsageError(problem)
        shell = self.shell
        assert shell is not None
        namespace = shell.user_ns
        if isinstance(local_ns, dict) and local_ns is not namespace:
            namespace = {**namespace, **local_ns}  # a function's names shadow the notebook's
        report = self._scan(namespace, args)
        gathered = gather_ranks(replace(report, made_by="%devices"))
        if gathered is None:  # not rank 0: rank 0 shows every rank
            return None
        return self._finish(gathered, args.output)

    def _scan(self, namespace: Any, args: Any) -> Any:
        from torchdevmagic.api import scan
        from torchdevmagic.scanning import (
            DEFAULT_MAX_DEPTH,
            DEFAULT_MAX_ITEMS,
            DEFAULT_MAX_OBJECTS,
        )

        shell = self.shell
        assert shell is not None
        return scan(
            namespace,
            device=parse_device(args.device),
            include_hidden=args.all,
            hidden=shell.user_ns_hidden,
            sort=args.sort or "size",
            top=args.top,
            max_depth=DEFAULT_MAX_DEPTH if args.depth is None else args.depth,
            max_items=DEFAULT_MAX_ITEMS if args.max_items is None else args.max_items,
            max_objects=DEFAULT_MAX_OBJECTS if args.max_objects is None else args.max_objects,
        )

    # The last report this kernel's %devices made: records only, it keeps no tensor alive.
    _previous: Any = None

    @staticmethod
    def _diff(previous: Any, report: Any) -> Any:
        from torchdevmagic.diff import nothing_to_compare

        return nothing_to_compare(report) if previous is None else report.diff(previous)

    def _env(self, args: Any) -> Any:
        given = {"a DEVICE": args.device is not None, "--free": args.free is not None}
        refuse_combined("%devices", "--env", {**given, **_scan_only(args)}, "only -o")
        from torchdevmagic.env.report import check_environment

        # Its fix lines are pasted into a cell: %pip and %env, not a script's ways.
        return self._finish(check_environment(in_ipython=True), args.output)

    def _free(self, args: Any) -> Any:
        takes = "a DEVICE, holders to drop and -o"
        refuse_combined("%devices", "--free", _scan_only(args), takes)
        from torchdevmagic.free import choose, drop_pinned

        try:
            choose((), args.free)  # the holder names alone: a typo is a UsageError
        except ValueError as exc:
            raise UsageError(f"%devices: {exc}") from None
        shell = self.shell
        assert shell is not None
        _refuse_missing_outputs(args.free, shell.user_ns.get("Out"))
        report = drop_pinned(
            shell.user_ns,
            shell=shell,
            hidden=shell.user_ns_hidden,
            wanted=args.free,
            device=parse_device(args.device),
        )
        return self._finish(report, args.output)

    def _finish(self, report: Any, output: bool) -> Any:
        """-o returns the object (shown as Out[n]); otherwise show it once."""
        if output:
            return report
        show(self.shell, report)
        return None
