"""The package's version: one place, read by packaging (pyproject.toml's
dynamic version), re-exported as ``chronos_trio.__version__``, and used by
integrations that name the library (the OpenTelemetry tracer)."""

VERSION = "0.1.0"
