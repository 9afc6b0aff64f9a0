"""``python -m torchdevmagic.selfcheck``: see :mod:`torchdevmagic.selfcheck.cli`."""

import sys

from torchdevmagic.selfcheck.cli import main

if __name__ == "__main__":  # importing this module (pkgutil.walk_packages) must not run it
    sys.exit(main())
