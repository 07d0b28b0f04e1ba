"""``python -m chronos_trio``: see :mod:`chronos_trio.cli`.

The package's import has held the cyclic collector off (``_collector``):
the command gives it back once it runs (a worker once its app is imported)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
