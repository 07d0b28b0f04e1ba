"""Optional integrations with other tools (each behind an extra of its own):
Prometheus metrics and OpenTelemetry traces. They build on the seams the
runtime offers (``App(metrics=...)``, producer hooks, middleware) and never
sit on the settle path."""
