"""How does the time to match an error message grow with its length?

Every rule must be linear in the message: a rule that backtracks quadratically turns a long
message (``raise KeyError('deadbeef' * 3750)`` under ``%devcheck on``) into seconds of a
frozen notebook that Ctrl-C cannot stop. For message shapes that defeated the old rules,
prints match_message's time on the whole text (``limit=None``) for lengths doubling up to
1 MiB, the ratio to the previous length (linear: about 2) and the capped time the magics pay.

Run from the repository root:  PYTHONPATH=. python benchmarks/bench_rules.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import timeit

from torchdevmagic.diagnosis.rules import MESSAGE_LIMIT, match_message

# A run of word characters (per_op_expected, index_add_copy_device backtracked over it), an
# op name repeated before its literal, an unclosed parenthesis, a plain letter.
SHAPES = {
    "word run": "deadbeef",
    "op(): repeated": "self(): self",
    "Input type ( repeated": "Input type (",
    "name: expected repeated": "a b c: expected '",
    "one letter": "x",
}
LENGTHS = [2**k for k in range(14, 21)]  # 16 KiB .. 1 MiB


def _best_s(text: str, limit: int | None, repeat: int) -> float:
    """The fastest of ``repeat`` single runs of ``match_message``, in seconds."""
    return min(timeit.repeat(lambda: match_message(text, limit=limit), number=1, repeat=repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per point, best kept")
    args = parser.parse_args()
    print(f"match_message time vs message length (best of {args.repeat}); cap {MESSAGE_LIMIT}")
    for name, seed in SHAPES.items():
        print(f"{name}:")
        previous = None
        for n in LENGTHS:
            text = (seed * (n // len(seed) + 1))[:n]
            whole = _best_s(text, None, args.repeat)
            capped = _best_s(text, MESSAGE_LIMIT, args.repeat)
            ratio = f"x{whole / previous:.2f}" if previous else "     "
            print(
                f"  {n:>8} chars  whole {whole * 1e3:8.2f} ms {ratio}   "
                f"capped {capped * 1e3:6.2f} ms"
            )
            previous = whole


if __name__ == "__main__":
    main()
