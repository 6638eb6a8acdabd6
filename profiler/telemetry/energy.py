"""A point's energy, per GPU and for the host's CPUs, from its launch's telemetry (issue #29).

A point's window is its record's ``[started_at, finished_at]``. Its energy is a cumulative counter's value
at the window's end less its value at the start, each interpolated between the samples either side of it:
NVML's total-energy counter for a GPU (``energy_j``, Volta on), RAPL's package counter for the host
(``rapl_energy_j``). Where a GPU has no counter, its power samples are integrated over the window instead
(trapezoids, the ends interpolated), and ``energy_method`` says which was used, or why neither could be.
A counter's value is stamped with the middle of its own read (``energy_t``, ``rapl_energy_t``), not the
row's ``t``: a source reads every device and every signal in turn.

What is counted: the GPUs' boards (NVML), and the CPU packages where RAPL is readable; not the host's
DRAM, fans or power supplies. The idle draw is the launch's baseline, read before the engine started.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

COUNTER = "counter"
INTEGRATED = "integrated"
METHODS = {  # source → (its counter column, how the counter is named in energy_method)
    "nvml": ("energy_j", "NVML total-energy counter"),
    "cpu": ("rapl_energy_j", "RAPL package counter"),
}
STAMPS = {"energy_j": "energy_t", "rapl_energy_j": "rapl_energy_t"}  # when each counter was itself read
EDGE_GAPS = 5  # a window's end interpolated over at most this many typical sample gaps (or 1 s)


def _series(g: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of a column's non-null samples, in time order: a counter's own read time where the
    source stamped it, else the middle of the source's read."""
    g = g[g[col].notna()]
    stamp = g["t"] + (g["read_s"].fillna(0.0) / 2 if "read_s" in g else 0.0)
    own = STAMPS.get(col)
    if own in g:
        stamp = g[own].fillna(stamp)
    order = np.argsort(stamp.to_numpy(), kind="stable")
    return stamp.to_numpy()[order], g[col].to_numpy(dtype=float)[order]


def _bracket(ts: np.ndarray, start: float, end: float) -> str | None:
    """Why ``ts`` cannot bound the window (None: it can): a sample at or before the start, one at or after
    the end, each close enough to it that a straight line between samples stands for what happened."""
    if len(ts) < 2:
        return f"{len(ts)} sample(s)"
    gap = max(1.0, EDGE_GAPS * float(np.median(np.diff(ts))))
    before, after = ts[ts <= start], ts[ts >= end]
    if before.size == 0 or start - before[-1] > gap:
        return "no sample at the point's start"
    if after.size == 0 or after[0] - end > gap:
        return "no sample at the point's end"
    return None


def counter_rise(ts: np.ndarray, vs: np.ndarray, start: float, end: float) -> tuple[float | None, str | None]:
    """A cumulative counter's rise over ``[start, end]``, each end interpolated; (None, why) where it cannot be."""
    why = _bracket(ts, start, end)
    if why:
        return None, why
    lo, hi = np.searchsorted(ts, start, "right") - 1, np.searchsorted(ts, end, "left")
    if (np.diff(vs[lo:hi + 1]) < 0).any():
        return None, "the counter went down (a driver reload or a wrap)"
    return float(np.interp(end, ts, vs) - np.interp(start, ts, vs)), None


def integrate(ts: np.ndarray, ws: np.ndarray, start: float, end: float) -> tuple[float | None, str | None]:
    """Power samples integrated over ``[start, end]`` (trapezoids; the ends interpolated)."""
    why = _bracket(ts, start, end)
    if why:
        return None, why
    grid = np.concatenate([[start], ts[(ts > start) & (ts < end)], [end]])
    w = np.interp(grid, ts, ws)
    return float(np.sum((w[1:] + w[:-1]) / 2 * np.diff(grid))), None  # trapezoids (numpy 1.26 has no trapezoid)


def idle_power(g: pd.DataFrame, counter: str) -> float | None:
    """The device's draw before the engine started: its counter's rate over the baseline samples, or the mean
    of their power readings."""
    base = g[g["phase"] == "baseline"] if "phase" in g else g.iloc[0:0]
    if counter in base:
        ts, vs = _series(base, counter)
        if len(ts) >= 2 and ts[-1] > ts[0] and vs[-1] >= vs[0]:
            return float((vs[-1] - vs[0]) / (ts[-1] - ts[0]))
    if "power_w" in base:
        w = base["power_w"].dropna()
        if not w.empty:
            return float(w.mean())
    return None


@dataclass(frozen=True)
class DeviceSeries:
    """One device's samples of a launch, prepared once for every point that ran in it: its counter and power
    series in time order, its idle draw, and why its counter is missing (if it is)."""

    source: str
    counter: tuple[np.ndarray, np.ndarray] | None  # None: never sampled
    power: tuple[np.ndarray, np.ndarray] | None
    idle_w: float | None
    missing: str | None

    @classmethod
    def of(cls, g: pd.DataFrame, source: str, missing: str | None = None) -> DeviceSeries:
        counter = METHODS[source][0]
        sampled = counter in g and not g[counter].isna().all()
        return cls(source, _series(g, counter) if sampled else None,
                   _series(g, "power_w") if source == "nvml" and "power_w" in g else None,
                   idle_power(g, counter), missing)

    def energy(self, start: float, end: float) -> dict[str, Any]:
        """The GpuPointTelemetry / HostPointTelemetry energy fields over ``[start, end]``."""
        name = METHODS[self.source][1]
        out: dict[str, Any] = {"energy_j": None, "energy_method": None, "window_s": end - start,
                               "idle_power_w": self.idle_w, "energy_above_idle_j": None}
        energy, why = (None, self.missing or "not sampled") if self.counter is None else \
            counter_rise(*self.counter, start, end)
        if energy is not None:
            out.update(energy_j=energy, energy_method=f"{COUNTER}: {name}")
        elif self.power is not None:
            energy, why_power = integrate(*self.power, start, end)
            if energy is not None:
                out.update(energy_j=energy, energy_method=f"{INTEGRATED}: NVML power samples ({name}: {why})")
            else:
                out["energy_method"] = f"unavailable: {name}: {why}; power samples: {why_power}"
        else:
            out["energy_method"] = f"unavailable: {name}: {why}"
        if out["energy_j"] is not None and self.idle_w is not None:
            out["energy_above_idle_j"] = out["energy_j"] - self.idle_w * (end - start)
        return out


def device_energy(g: pd.DataFrame, source: str, start: float, end: float,
                  missing: str | None = None) -> dict[str, Any]:
    """One device's energy over a point's window. ``missing``: why the source could not read the counter at all
    (its ``unavailable`` reason)."""
    return DeviceSeries.of(g, source, missing).energy(start, end)


def launch_series(launch: pd.DataFrame, unavailable: dict[str, str] | None = None) -> dict[str, DeviceSeries]:
    """Every GPU's and the host's series of one launch (those around each point too: they bound its ends), split
    and sorted once for all its points. ``unavailable``: the launch's reasons, quoted where a counter is missing."""
    unavailable = unavailable or {}
    out = {}
    for label, g in launch.groupby("device", sort=True):
        source = str(g["source"].iloc[0])
        if source in METHODS:
            out[str(label)] = DeviceSeries.of(g, source, unavailable.get(METHODS[source][0]))
    return out


def point_energy(series: dict[str, DeviceSeries], start: float | None, end: float | None) -> dict[str, dict[str, Any]]:
    """Each device's energy over one point's window (empty without one)."""
    if start is None or end is None or not end > start:
        return {}
    return {label: d.energy(start, end) for label, d in series.items()}
