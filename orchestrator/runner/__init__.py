"""Runner: matrix files, task suites, modes, the agent loop, sweep and store. Imports serving and core."""
