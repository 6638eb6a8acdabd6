"""A point's energy from a counter or from power samples, and the host's RAPL counter (issue #29).

The arithmetic is written out: a counter sampled at known times and values, a fake powercap sysfs tree.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from profiler.telemetry.cpu_source import CpuSource
from profiler.telemetry.energy import counter_rise, device_energy, integrate
from profiler.telemetry.rapl import Rapl


def test_a_counter_is_interpolated_at_both_ends_of_the_window():
    # samples at t = 0, 1, 2, 3 s of a counter at 0, 100, 300, 400 J (100 W, then 200 W, then 100 W)
    ts, vs = np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.0, 100.0, 300.0, 400.0])
    # window 0.5 → 2.5: at 0.5 the line between (0, 0) and (1, 100) gives 50; at 2.5, 350: 300 J
    assert counter_rise(ts, vs, 0.5, 2.5) == (300.0, None)
    assert counter_rise(ts, vs, 1.0, 2.0) == (200.0, None)


def test_a_window_without_samples_around_it_or_with_a_reset_counter_is_not_measured():
    ts, vs = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    assert counter_rise(ts, vs, 0.5, 2.5) == (None, "no sample at the point's start")
    assert counter_rise(ts, vs, 1.5, 3.5) == (None, "no sample at the point's end")
    # a sample more than max(1 s, 5 gaps) before the start does not stand for it
    far = np.array([0.0, 10.0, 10.1, 10.2, 10.3, 10.4])
    assert counter_rise(far, far * 100, 9.5, 10.2)[1] == "no sample at the point's start"
    assert counter_rise(ts, np.array([10.0, 5.0, 30.0]), 1.0, 3.0) == (None, "the counter went down (a driver "
                                                                              "reload or a wrap)")


def test_power_samples_are_integrated_by_trapezoids_with_the_ends_interpolated():
    ts, ws = np.array([0.0, 1.0, 2.0]), np.array([100.0, 300.0, 300.0])
    # 0.5 → 2.0: the power at 0.5 is 200 W; trapezoids (200 + 300) / 2 · 0.5 + 300 · 1 = 425 J
    assert integrate(ts, ws, 0.5, 2.0) == (425.0, None)


def _frame(rows):
    return pd.DataFrame(rows, columns=["t", "read_s", "phase", "energy_j", "energy_t", "power_w"])


def test_device_energy_prefers_the_counter_and_says_how_it_measured():
    g = _frame([(0.0, 0.0, "baseline", 1000.0, 0.0, 50.0), (1.0, 0.0, "baseline", 1060.0, 1.0, 70.0),
                (2.0, 0.0, "decode", 1260.0, 2.0, 200.0), (3.0, 0.0, "decode", 1460.0, 3.0, 200.0),
                (4.0, 0.0, "idle", 1520.0, 4.0, 60.0)])
    e = device_energy(g, "nvml", 2.0, 3.0)
    assert e["energy_j"] == 200.0 and e["energy_method"] == "counter: NVML total-energy counter"
    assert e["idle_power_w"] == 60.0  # the baseline's counter: 60 J over 1 s (its power readings say 60 W too)
    assert e["energy_above_idle_j"] == 140.0 and e["window_s"] == 1.0


def test_device_energy_falls_back_to_power_and_quotes_why():
    g = _frame([(0.0, 0.0, "baseline", None, None, 50.0), (1.0, 0.0, "decode", None, None, 150.0),
                (2.0, 0.0, "decode", None, None, 150.0)])
    e = device_energy(g, "nvml", 1.0, 2.0, missing="not supported by this device or driver")
    assert e["energy_j"] == 150.0
    assert e["energy_method"] == ("integrated: NVML power samples (NVML total-energy counter: not supported by "
                                  "this device or driver)")
    assert e["idle_power_w"] == 50.0  # one baseline reading


def test_a_counter_stamped_at_its_own_read_is_placed_there_not_at_the_rows_time():
    # the row's read began at t and took 0.4 s; the counter itself was read 0.3 s in
    g = _frame([(0.0, 0.4, "decode", 0.0, 0.3, None), (1.0, 0.4, "decode", 100.0, 1.3, None),
                (2.0, 0.4, "decode", 200.0, 2.3, None)])
    # at 100 J/s through (0.3, 0), (1.3, 100): 0.8 → 50 J, 1.8 → 150 J
    assert device_energy(g, "nvml", 0.8, 1.8)["energy_j"] == pytest.approx(100.0)
    assert counter_rise(np.array([0.3, 1.3, 2.3]), np.array([0.0, 100.0, 200.0]), 0.8, 1.8)[0] == pytest.approx(100)


def _powercap(root, domains):
    for name, sub, energy, rng in domains:
        d = root / name
        d.mkdir(parents=True)
        (d / "name").write_text(f"{sub}\n")
        (d / "energy_uj").write_text(f"{energy}\n")
        (d / "max_energy_range_uj").write_text(f"{rng}\n")


def test_rapl_counts_the_packages_unwrapped_and_not_psys_or_subdomains(tmp_path):
    _powercap(tmp_path, [("intel-rapl:0", "package-0", 1_000_000, 10_000_000),
                         ("intel-rapl:1", "package-1", 9_500_000, 10_000_000),
                         ("intel-rapl:0:0", "core", 7, 10_000_000),
                         ("intel-rapl:2", "psys", 5, 10_000_000)])
    r = Rapl(tmp_path)
    assert r.unavailable is None and [d.name for d in r.domains] == ["package-0", "package-1"]
    assert r.read_j() == 0.0
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("3000000\n")  # +2 J
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("500000\n")  # wrapped: 10 − 9.5 + 0.5 = +1 J
    assert r.read_j() == 3.0
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("1500000\n")  # +1 J
    assert r.read_j() == 4.0


def test_rapl_missing_or_root_only_is_a_reason_never_a_zero(tmp_path, monkeypatch):
    r = Rapl(tmp_path)
    assert r.read_j() is None and "has no intel-rapl domain" in r.unavailable
    _powercap(tmp_path, [("intel-rapl:0", "package-0", 1, 10)])
    real = type(tmp_path).read_text

    def root_only(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(type(tmp_path), "read_text", root_only)
    r = Rapl(tmp_path)
    assert r.read_j() is None and "readable by root only" in r.unavailable
    src = CpuSource(powercap=tmp_path)
    assert "readable by root only" in src.unavailable["rapl_energy_j"]
    assert src.sample()[0]["rapl_energy_j"] is None


def test_the_host_source_samples_rapl_from_its_tree(tmp_path):
    _powercap(tmp_path, [("intel-rapl:0", "package-0", 0, 2**32)])
    src = CpuSource(powercap=tmp_path)
    (tmp_path / "intel-rapl:0" / "energy_uj").write_text("2500000\n")
    row = src.sample()[0]
    assert row["rapl_energy_j"] == 2.5 and row["rapl_energy_t"] is not None
    assert src.describe()["rapl_domains"] == ["package-0"] and "rapl_energy_j" not in src.unavailable
