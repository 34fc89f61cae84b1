"""Pure core: types, call parsing, classification, statistics. Imports nothing above it (no Docker, no HTTP)."""
