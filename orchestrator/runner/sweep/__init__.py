"""Servers over their life and seeds over them: the one way a sweep runs."""
