"""The bootstrap's command-line options, defined once for every command that takes them (`stats`, `diff`,
`audit`). Their bounds are read from BootstrapSettings (core/stats.py), the one place they are set, so an
out-of-range `--resamples` or `--rng-seed` is the usual one-line usage error (exit 2) in every command, never a
ValidationError traceback from building the settings."""

from __future__ import annotations

from typing import Annotated, Any

import annotated_types
import typer

from orchestrator.core.stats import BootstrapSettings

__all__ = ["DEFAULT_RESAMPLES", "DEFAULT_RNG_SEED", "Resamples", "RngSeed", "resamples_option"]

DEFAULT_RESAMPLES = BootstrapSettings().resamples
DEFAULT_RNG_SEED = BootstrapSettings().rng_seed


def setting_bounds(name: str) -> tuple[int, int]:
    """The inclusive (min, max) BootstrapSettings accepts for the integer field `name`."""
    metadata = BootstrapSettings.model_fields[name].metadata
    low = next(item.ge for item in metadata if isinstance(item, annotated_types.Ge))
    high = next(item.le for item in metadata if isinstance(item, annotated_types.Le))
    return int(low), int(high)


def resamples_option(help: str = "Bootstrap resamples.") -> Any:
    low, high = setting_bounds("resamples")
    return typer.Option(min=low, max=high, help=help)


def _rng_seed_option() -> Any:
    low, high = setting_bounds("rng_seed")
    return typer.Option(min=low, max=high, help="Bootstrap RNG seed (recorded).")


Resamples = Annotated[int, resamples_option()]
RngSeed = Annotated[int, _rng_seed_option()]
