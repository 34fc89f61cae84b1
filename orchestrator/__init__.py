"""toolcall-matrix: tool-calling fidelity of a model on a serving configuration."""

__version__ = "0.1.0"
