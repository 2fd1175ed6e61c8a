"""`bench fleet --repeats`: the spread of a figure over repeats of the same code, and the ratios of
their medians (the numbers here are hand-made rows, not a run)."""

from __future__ import annotations

from timely_tools.bench.fleet_bench import median_row, repeat_summary, standby_ratios


def _row(mean: float | None, p90: float, cpu: float, journal: float) -> dict:
    return {"n": 1000, "inflation_mean": mean, "inflation_p90": p90,
            "processes": {"planner": {"load_cpu_pct": cpu}}, "journal": {"cpu_pct_of_core": journal}}


NONE = [_row(1.35, 2.33, 64.0, 0.1), _row(1.54, 2.96, 66.0, 0.1), _row(1.40, 1.90, 65.0, 0.2)]
STANDBY = [_row(1.61, 4.68, 68.0, 6.8), _row(None, 6.0, 70.0, 7.0)]


def test_each_figure_is_given_with_every_run_its_median_and_spread():
    s = repeat_summary(1000, {False: NONE, True: STANDBY})
    assert s["inflation_mean"]["none"] == {"runs": [1.35, 1.54, 1.40], "median": 1.40, "min": 1.35, "max": 1.54}
    assert s["inflation_p90"]["none"]["median"] == 2.33
    # an even count: the mean of the middle two; a run without the figure does not count
    assert s["inflation_p90"]["standby"]["median"] == 5.34
    assert s["inflation_mean"]["standby"] == {"runs": [1.61, None], "median": 1.61, "min": 1.61, "max": 1.61}
    assert s["planner_load_cpu_pct"]["standby"]["median"] == 69.0


def test_the_standby_ratios_are_of_the_medians():
    r = standby_ratios(median_row(NONE), median_row(STANDBY))
    assert r["planner_cpu_ratio"] == round(69.0 / 65.0, 3)
    assert r["inflation_mean"] == {"none": 1.40, "standby": 1.61}
    assert r["inflation_p90"] == {"none": 2.33, "standby": 5.34}
    assert NONE[0]["processes"]["planner"]["load_cpu_pct"] == 64.0  # the runs themselves are left as they were
    assert median_row(NONE[:1]) is NONE[0]
