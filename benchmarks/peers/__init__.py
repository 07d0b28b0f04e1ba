"""Peers run side by side with chronos_trio (see docs/BENCHMARKS.md).

Each peer lives in its own virtual environment (``benchmarks/.venv/<peer>``;
their redis-py pins conflict with each other and with ours), so everything
here uses the standard library, ``benchmarks._common`` and the peer itself.
``python -m benchmarks.peers PEER WORKLOAD ...`` runs one workload once and
prints one JSON object.
"""

PEERS = ("arq", "saq", "taskiq", "streaq", "dramatiq", "huey", "celery")
#: Peers that run the result round trip (workload 10): arq's ``job.result()``
#: and SAQ's ``Queue.apply``.
ROUNDTRIP_PEERS = ("arq", "saq")
