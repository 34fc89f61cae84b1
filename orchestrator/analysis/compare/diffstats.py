"""The statistics of `orchestrate diff` (analysis/compare/rundiff.py), pure numpy: the seed-level percentile bootstrap
interval of a mean paired difference, the paired sign-flip permutation p-value and the smallest p it can
give, and the Holm and Benjamini-Hochberg corrections.

The p-value is not read off the bootstrap: at 8 seeds the percentile bootstrap is anti-conservative, and with
one seed (or equal differences) it gives p = 0. Under "no change" each paired difference is as likely
negated, so p is the share of sign vectors whose |mean| reaches the observed one: all 2^k vectors over the k
nonzero differences when k <= 16 (a zero flips to itself, so leaving it out changes no share), else
`resamples` random vectors from the recorded seed with the (count + 1) / (resamples + 1) correction.
"""

from __future__ import annotations

import numpy as np

from orchestrator.core.stats import DEFAULT_BOOTSTRAP, BootstrapSettings, bootstrap_mean_interval

EXACT_MAX_NONZERO = 16  # 2^16 sign vectors: enumerated in milliseconds; beyond, Monte Carlo
PERMUTATION_TEST = f"sign-flip permutation (exact for n <= {EXACT_MAX_NONZERO})"
FLOAT_NOISE = 12  # decimals: a resampled mean of +x and -x must land on 0, not on 1e-17 of either side
_TOLERANCE = 10.0**-FLOAT_NOISE  # a flipped mean equal to the observed one must count, whatever its last bits


def nonzero(differences: np.ndarray) -> np.ndarray:
    """The differences that are not 0 up to float noise: the only ones a sign flip moves."""
    values = np.asarray(differences, dtype=float)
    return values[np.round(values, FLOAT_NOISE) != 0]


def paired_bootstrap(differences: np.ndarray, settings: BootstrapSettings = DEFAULT_BOOTSTRAP) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean paired difference: core's one bootstrap, unclipped (differences
    run from -1 to 1) and with each resample mean rounded to FLOAT_NOISE decimals. Differences that are all
    equal have no spread: the interval is the point (the verdict still needs the permutation p, which is 1 for
    one seed)."""
    values = np.asarray(differences, dtype=float)
    if values.size == 0:
        raise ValueError("a paired bootstrap needs at least one difference")
    return bootstrap_mean_interval(values, settings, clip=None, decimals=FLOAT_NOISE)


def _sign_vectors(k: int, settings: BootstrapSettings) -> tuple[np.ndarray, bool]:
    """Every ±1 vector of length k (a (2^k, k) matrix) when k is small enough, else `resamples` random ones
    from the recorded seed. The bool says whether the set is exact."""
    if k <= EXACT_MAX_NONZERO:
        bits = (np.arange(2**k)[:, None] >> np.arange(k)) & 1
        return 1 - 2 * bits, True
    rng = np.random.default_rng(settings.rng_seed)
    return 1 - 2 * rng.integers(0, 2, size=(settings.resamples, k)), False


def sign_flip_p(differences: np.ndarray, settings: BootstrapSettings = DEFAULT_BOOTSTRAP) -> float:
    """Two-sided paired sign-flip permutation p-value of the mean difference: the share of sign vectors whose
    |mean| >= the observed |mean|. Zero differences are left out of the flips (a zero flips to itself, so the
    share is the same), which keeps more cells exact. All zeros, or one nonzero difference, give p = 1."""
    values = np.asarray(differences, dtype=float)
    if values.size == 0:
        raise ValueError("a sign-flip test needs at least one difference")
    moved = nonzero(values)
    if moved.size == 0:
        return 1.0
    observed = abs(float(moved.sum())) / values.size
    signs, exact = _sign_vectors(moved.size, settings)
    flipped = np.abs(signs @ moved) / values.size
    count = int(np.count_nonzero(flipped >= observed - _TOLERANCE))
    if exact:
        return count / signs.shape[0]
    return (count + 1) / (signs.shape[0] + 1)  # the observed vector counts too: p is never 0


def p_floor(n_nonzero: int, resamples: int = DEFAULT_BOOTSTRAP.resamples) -> float:
    """The smallest p `sign_flip_p` can give with this many nonzero differences: only the observed signs and
    their negation reach the observed |mean| (2 / 2^k); 1 / (resamples + 1) when it samples."""
    if n_nonzero <= 0:
        return 1.0
    if n_nonzero <= EXACT_MAX_NONZERO:
        return min(1.0, 2.0 / 2**n_nonzero)
    return 1.0 / (resamples + 1)


def holm(p_values: list[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error), in the input order."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    steps = np.minimum(1.0, (p.size - np.arange(p.size)) * p[order])
    adjusted = np.empty_like(p)
    adjusted[order] = np.maximum.accumulate(steps)  # an adjusted p never falls below a smaller one's
    return adjusted.tolist()


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg step-up adjusted p-values (false discovery rate), in the input order."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * p.size / np.arange(1, p.size + 1)
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    return adjusted.tolist()
