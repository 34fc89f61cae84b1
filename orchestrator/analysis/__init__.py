"""Analysis: tables and reports from stored results only, in subpackages (each imports only those before it):
compare (two runs or two configs, seed by seed), audit (other harnesses' trajectories), product (channel
verdicts, guard effects, gates), report (tables, the page, the notebook reader), triage (why a cell is low).
Imports runner (the store), serving and core."""
