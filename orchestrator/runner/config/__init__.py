"""Matrix files and the full stack config each cell records."""
