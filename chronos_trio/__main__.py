"""``python -m chronos_trio``: see :mod:`chronos_trio.cli`."""

import gc
import sys

# The command line's imports make tens of thousands of objects that live as
# long as the process (modules, classes, functions): the cyclic collector,
# run dozens of times meanwhile, would walk them again and again (about 10 ms
# of start-up here). It is off while they load, and what they made is then
# frozen (no later collection walks it); the APP is imported with it on.
gc.disable()
from .cli import main  # noqa: E402

gc.freeze()
gc.enable()

if __name__ == "__main__":
    sys.exit(main())
