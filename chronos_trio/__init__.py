"""chronos_trio: reliable distributed delayed jobs on Redis, built on Trio."""
