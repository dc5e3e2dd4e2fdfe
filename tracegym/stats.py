"""Intervals for held-out comparisons: a mean with its 95% interval, and the paired bootstrap
interval of a difference between two policies scored on the same seeds."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def mean_interval(values: Sequence[float]) -> dict[str, float]:
    """Mean, n and the 95% normal interval (mean ± 1.96·s/√n; zero width for n < 2)."""
    array = np.asarray(values, dtype=np.float64)
    half = 1.96 * array.std(ddof=1) / math.sqrt(len(array)) if len(array) > 1 else 0.0
    return {"mean": float(array.mean()), "low": float(array.mean() - half), "high": float(array.mean() + half), "n": len(array)}


def paired_difference(before: Sequence[float], after: Sequence[float], resamples: int = 10_000,
                      seed: int = 0) -> dict[str, float]:
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
