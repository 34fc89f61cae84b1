"""Runner: a run, in subpackages from the bottom up (each imports only those before it): store (the run
directory), suites (task suites and their tools), turn (one seed's conversation), config (matrix files, what a
run resolves once, a cell's recorded config), run (a run's life and provenance), product (the product channel and
its ablation), sweep (servers over their life, seeds over them), executors (the one way a sweep runs: here or on
Ray). Imports serving and core."""
