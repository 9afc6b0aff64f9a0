"""``python -m torchdevmagic.emulate``: see :mod:`torchdevmagic.emulate.fronts.command`."""

from __future__ import annotations

if __name__ == "__main__":
    import sys

    from torchdevmagic.emulate.fronts.command import main

    sys.exit(main())
