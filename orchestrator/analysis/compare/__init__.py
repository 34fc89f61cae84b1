"""Two runs, or two stack configs of one run, compared seed by seed."""
