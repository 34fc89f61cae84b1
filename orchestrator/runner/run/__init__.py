"""A run's life outside the sweep: its directory, manifest, resume and provenance."""
