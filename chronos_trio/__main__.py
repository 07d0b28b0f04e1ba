"""``python -m chronos_trio``: see ``chronos_trio._cli``."""

import sys

from ._cli import main

if __name__ == "__main__":
    sys.exit(main())
