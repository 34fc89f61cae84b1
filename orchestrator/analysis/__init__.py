"""Analysis: tables and reports from stored results only. Imports runner (the store), serving and core."""
