"""The deterministic simulator: one seeded world that drives the pure core with faults."""
