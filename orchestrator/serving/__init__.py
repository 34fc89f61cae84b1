"""Serving: stack specs, launchers, readiness, the HTTP client, probe, assets, compose. Imports only core."""
