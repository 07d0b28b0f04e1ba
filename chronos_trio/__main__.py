"""``python -m chronos_trio``: see :mod:`chronos_trio.cli`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
