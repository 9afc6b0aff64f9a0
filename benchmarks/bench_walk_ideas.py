"""Ideas for a faster module walk, each against the stage of the walk it would replace.

    python benchmarks/bench_walk_ideas.py [--blocks 500] [--rounds 31] [--inner 3]

The target was the module walk within 1.5x of ``modules()`` + ``_parameters``; these are
the ideas tried for it, kept here so that the verdict on each can be rerun. Every idea gives
the same answer as the stage it would replace (checked before timing) and runs no user code.
The model is ``bench_modules.py``'s (``--blocks`` blocks of ``namespaces.Block``); every
round times each stage and each idea once, in a random order, with the cyclic collector
paused as the scan runs them; the figure is the median over rounds of idea / stage, with its
interquartile range (below 0.90: the idea buys the 10% the house rules ask for).

* ``plain_attributes`` by set difference: each instance dict's keys less nn.Module's own
  bookkeeping keys (``training``, ``_parameters``, ...: C-level), so that only the few
  custom attributes are type-checked instead of every value.
* ``owned_tensors`` column-wise: every module's ``_parameters``/``_buffers`` (plain dicts
  with exact-str keys) read by C methods mapped over all tables, paths joined by ``map``.
* ``module_tree`` level by level: each level's instance dicts, ``_modules`` tables, child
  names and paths by C methods mapped over the whole level (no Python frame per module),
  then ``named_modules()`` order restored by sorting the modules' rank keys (a tuple of
  child positions from the root).
* device and dtype of every tensor by ``torch._C._group_tensors_by_device_and_dtype`` (the
  foreach optimizers' C++ grouping: one device object per group, not one per tensor).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from itertools import chain, compress, cycle, islice, repeat
from operator import add, is_, itemgetter, sub
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_scan import quartiles  # the scripts' own folder
from bench_modules import _gc_paused, _model

Pair = tuple[Callable[[], Any], Callable[[], Any]]  # (the walk's stage, the idea)


def ideas(model: Any) -> dict[str, Pair]:
    import torch
    from torch import nn

    from torchdevmagic.safe import modules as walk
    from torchdevmagic.safe.classes import Classifier
    from torchdevmagic.safe.handles import handles
    from torchdevmagic.safe.tensors import device_text, dtype_text

    tt = handles()
    assert tt is not None
    classes = Classifier(tt)
    namespaces, paths = walk.module_tree(model, "model", classes, set())
    tensors = walk.owned_tensors(namespaces, paths, classes)[0]
    own_keys = frozenset(vars(nn.Module()))
    group = torch._C._group_tensors_by_device_and_dtype

    def attributes_by_difference() -> list[tuple[str, Any]]:
        extras = list(map(sub, map(dict.keys, namespaces), repeat(own_keys)))
        keys = list(chain.from_iterable(extras))
        assert all(map(is_, map(type, keys), repeat(str)))
        owners = list(chain.from_iterable(map(repeat, namespaces, map(len, extras))))
        values = list(map(dict.get, owners, keys))
        if classes.tensor_type_ids.isdisjoint(map(id, map(type, values))):
            return []
        raise AssertionError("the benchmark model has no plain tensor attribute")

    def device_dtype() -> tuple[list[str], list[str]]:
        devices = list(map(device_text, map(tt.get.device, tensors)))
        return devices, list(map(dtype_text, map(tt.get.dtype, tensors)))

    def device_dtype_grouped() -> tuple[list[str], list[str]]:
        n = len(tensors)
        devices, dtypes = [""] * n, [""] * n
        for (device, dtype), (_, indices) in group([tensors], True).items():
            d, t = device_text(device), dtype_text(dtype)
            for i in indices:
                devices[i], dtypes[i] = d, t
        return devices, dtypes

    return {
        "plain_attributes by set difference": (
            lambda: walk.plain_tensor_attributes(namespaces, paths, classes),
            attributes_by_difference,
        ),
        "owned_tensors column-wise": (
            lambda: walk.owned_tensors(namespaces, paths, classes),
            lambda: owned_column_wise(namespaces, paths, tt),
        ),
        "device+dtype by C++ grouping": (device_dtype, device_dtype_grouped),
        "module_tree level by level": (
            lambda: walk.module_tree(model, "model", classes, set()),
            lambda: tree_by_levels(model, "model"),
        ),
    }


_RANKS = [(i,) for i in range(4096)]  # a child's rank as a one-item key: (0,), (1,), ...


def tree_by_levels(model: Any, path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """``module_tree`` for a tree of plain-dict ``_modules`` tables with exact-str names,
    no module met twice, fewer than 4,096 children a module (asserted)."""
    from torchdevmagic.safe.paths import module_child_path

    suffixes: dict[str, str] = {}
    modules_table = itemgetter("_modules")
    level, paths, keys = [model], [path], [()]
    all_dicts: list[dict[str, Any]] = []
    all_paths: list[str] = []
    all_keys: list[tuple[int, ...]] = []
    while level:
        dicts = list(map(vars, level))
        all_dicts += dicts
        all_paths += paths
        all_keys += keys
        tables = list(map(modules_table, dicts))
        assert all(map(is_, map(type, tables), repeat(dict)))
        sizes = list(map(len, tables))
        names = list(chain.from_iterable(map(dict.keys, tables)))
        assert all(map(is_, map(type, names), repeat(str)))
        found = list(map(suffixes.get, names))
        if None in found:  # names not met yet (a level's names repeat: "0", "ln1")
            for name in set(names) - suffixes.keys():
                suffixes[name] = module_child_path("", name)
            found = list(map(suffixes.__getitem__, names))
        level = list(chain.from_iterable(map(dict.values, tables)))
        paths = list(map(add, chain.from_iterable(map(repeat, paths, sizes)), found))
        ranks = chain.from_iterable(map(islice, repeat(_RANKS), sizes))
        keys = list(map(add, chain.from_iterable(map(repeat, keys, sizes)), ranks))
    assert len(set(map(id, all_dicts))) == len(all_dicts)
    order = sorted(range(len(all_keys)), key=all_keys.__getitem__)
    return list(map(all_dicts.__getitem__, order)), list(map(all_paths.__getitem__, order))


def owned_column_wise(
    namespaces: list[dict[str, Any]], paths: list[str], tt: Any
) -> tuple[list[Any], list[str], list[bool]]:
    """``owned_tensors`` for plain-dict tables with exact-str keys, column-wise."""
    from torchdevmagic.safe.paths import attribute_path

    tables: list[Any] = list(
        chain.from_iterable(
            zip(
                map(dict.get, namespaces, repeat("_parameters")),
                map(dict.get, namespaces, repeat("_buffers")),
            )
        )
    )
    assert all(map(is_, map(type, tables), repeat(dict)))
    copies = list(map(list, map(dict.items, tables)))  # one C copy per table
    names, tensors = map(list, zip(*chain.from_iterable(copies)))
    assert all(map(is_, map(type, names), repeat(str)))
    sizes = list(map(len, copies))
    suffixes = {name: attribute_path("", name) for name in set(names)}
    owners = chain.from_iterable(map(repeat, chain.from_iterable(zip(paths, paths)), sizes))
    full = list(map(add, owners, map(suffixes.__getitem__, names)))
    roles = list(chain.from_iterable(map(repeat, cycle((True, False)), sizes)))
    keep = list(map(is_, map(type, tensors), repeat(tt.parameter)))  # the model: Parameters
    return list(compress(tensors, keep)), list(compress(full, keep)), list(compress(roles, keep))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--inner", type=int, default=3, help="calls per timing")
    args = parser.parse_args()
    pairs = ideas(_model(args.blocks))
    for name, (stage, idea) in pairs.items():
        assert stage() == idea(), name  # the same answer, or the idea is no replacement
    timed = {
        (name, side): _gc_paused(fn)
        for name, pair in pairs.items()
        for side, fn in zip(("stage", "idea"), pair)
    }
    times: dict[tuple[str, str], list[float]] = {k: [] for k in timed}
    rng = random.Random(0)
    for _ in range(args.rounds):
        order = list(timed)
        rng.shuffle(order)
        for key in order:
            t0 = time.perf_counter()
            for _ in range(args.inner):
                timed[key]()
            times[key].append((time.perf_counter() - t0) / args.inner)
    print(f"{args.blocks} blocks, {args.rounds} interleaved rounds, collector paused")
    for name in pairs:
        ours, theirs = times[name, "stage"], times[name, "idea"]
        q1, median, q3 = quartiles([i / s for i, s in zip(theirs, ours)])
        print(
            f"  {name}: stage {statistics.median(ours) * 1e3:.2f} ms, idea "
            f"{statistics.median(theirs) * 1e3:.2f} ms, idea / stage {median:.2f} "
            f"(IQR {q1:.2f}-{q3:.2f})"
        )


if __name__ == "__main__":
    main()
