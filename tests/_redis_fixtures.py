"""Redis fixtures (filled in by the Redis backend work)."""
