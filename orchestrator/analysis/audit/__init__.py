"""Trajectories from other harnesses, recounted."""
