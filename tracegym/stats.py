"""Intervals for held-out comparisons: a mean with its 95% interval, and the paired bootstrap
interval of a difference between two policies scored on the same seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.96  # the standard normal's 97.5% quantile


def mean_interval(values: Sequence[float]) -> dict[str, float]:
    """Mean, n and a 95% interval. When every value is 0 or 1 (a success rate), Wilson's score
    interval: inside [0, 1] and not of zero width at 0/n or n/n. Otherwise the normal interval
    mean ± 1.96·s/√n (zero width for n < 2)."""
    array = np.asarray(values, dtype=np.float64)
    mean, n = float(array.mean()), len(array)
    if n and np.isin(array, (0.0, 1.0)).all():
        centre = (mean + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
        half = Z95 * math.sqrt(mean * (1 - mean) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
        return {"mean": mean, "low": max(0.0, centre - half), "high": min(1.0, centre + half), "n": n}
    half = Z95 * array.std(ddof=1) / math.sqrt(n) if n > 1 else 0.0
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def paired_difference(
    before: Sequence[float], after: Sequence[float], resamples: int = 10_000, seed: int = 0
) -> dict[str, float]:
    """Mean of `after - before` over paired items (the same seeds) and its 95% bootstrap interval
    (percentile method, `resamples` resamples of the items with replacement). The interval
    excludes no change when `low > 0` or `high < 0`."""
    differences = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    if differences.ndim != 1 or len(differences) == 0:
        raise ValueError(f"need two equally long, non-empty lists of paired values, got {len(before)} and {len(after)}")
    rng = np.random.default_rng(seed)
    means = differences[rng.integers(0, len(differences), size=(resamples, len(differences)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return {"mean": float(differences.mean()), "low": float(low), "high": float(high), "n": len(differences)}
