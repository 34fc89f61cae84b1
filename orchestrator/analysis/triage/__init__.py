"""Why a cell is low: one verdict per cell with its evidence."""
