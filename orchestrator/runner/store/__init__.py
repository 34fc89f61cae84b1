"""The run directory on disk: turns, cell files, streams, damage and repair."""
