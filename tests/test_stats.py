"""Intervals of tracegym.stats: success rates stay inside [0, 1] and are never of zero width."""

from __future__ import annotations

import pytest

from tracegym.stats import mean_interval, paired_difference


def test_a_success_rate_interval_is_wilsons():
    none = mean_interval([0] * 7)
    assert none["mean"] == 0.0 and none["low"] == 0.0 and none["high"] == pytest.approx(0.354, abs=1e-3)
    one_of_seven = mean_interval([1] + [0] * 6)
    assert one_of_seven["low"] > 0 and one_of_seven["high"] == pytest.approx(0.513, abs=1e-3)
    assert mean_interval([1] * 4)["low"] == pytest.approx(0.510, abs=1e-3) and mean_interval([1] * 4)["high"] == 1.0


def test_other_means_get_the_normal_interval():
    interval = mean_interval([0.5, 0.25, 0.75, 0.5])
    assert interval["mean"] == 0.5 and interval["low"] == pytest.approx(0.5 - 1.96 * 0.2041 / 2, abs=1e-3)


def test_paired_difference_of_identical_scores_is_zero():
    assert paired_difference([0.2, 0.4], [0.2, 0.4])["low"] == 0.0
