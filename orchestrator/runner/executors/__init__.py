"""Where a run's server groups execute: this process, or Ray actors on a cluster."""
