"""The chronos_trio benchmark suite: ``python -m benchmarks`` (see docs/BENCHMARKS.md).

This package is imported by worker processes of the peers too, from their own
virtual environments, so only ``_common`` and ``peers`` may be imported there:
they use the standard library alone.
"""
