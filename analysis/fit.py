"""Fit measured decode step times to ``overhead + bytes / BW_eff (+ FLOPs / F_eff)``.

The model is linear in (overhead, 1/BW_eff, 1/F_eff), so it is a bounded linear
least-squares problem (scipy ``lsq_linear``, all three ≥ 0), weighted by 1/t so
that every point counts by its relative error. The FLOP term is kept only when
the data contain points the spec roofline calls compute-bound (or ``flops=True``);
otherwise bytes and FLOPs, which both grow with batch and context, would trade
off against each other. Leave-one-out refits give each point's prediction error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear


class FitError(ValueError):
    """Too few or degenerate points to fit."""


@dataclass
class DecodeFit:
    """step time = step_overhead_s + bytes / effective_bandwidth_Bps (+ FLOPs / effective_flops),
    fitted over a run's decode points, with R² and leave-one-out relative errors."""

    effective_bandwidth_Bps: float | None
    step_overhead_s: float
    effective_flops: float | None
    r2: float
    n: int
    loo_rel_errors: list[float] = field(default_factory=list)
    spec_bandwidth_Bps: float | None = None
    probe_bandwidth_Bps: float | None = None
    note: str = ""

    @property
    def mbu_spec(self) -> float | None:
        if self.effective_bandwidth_Bps is None or not self.spec_bandwidth_Bps:
            return None
        return self.effective_bandwidth_Bps / self.spec_bandwidth_Bps

    @property
    def mbu_probe(self) -> float | None:
        if self.effective_bandwidth_Bps is None or not self.probe_bandwidth_Bps:
            return None
        return self.effective_bandwidth_Bps / self.probe_bandwidth_Bps

    @property
    def loo_median_abs_rel_error(self) -> float | None:
        return float(np.median(np.abs(self.loo_rel_errors))) if self.loo_rel_errors else None

    def predict(self, bytes_: Any, flops: Any = 0.0) -> Any:
        t = self.step_overhead_s + np.asarray(bytes_, dtype=float) / (self.effective_bandwidth_Bps or np.inf)
        if self.effective_flops:
            t = t + np.asarray(flops, dtype=float) / self.effective_flops
        return t

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(mbu_spec=self.mbu_spec, mbu_probe=self.mbu_probe,
                 loo_median_abs_rel_error=self.loo_median_abs_rel_error)
        return d


def _solve(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    w = 1.0 / y
    res = lsq_linear(X * w[:, None], y * w, bounds=(0, np.inf), method="bvls")
    return res.x


def fit_decode(bytes_: Any, step_s: Any, flops: Any = None, *, use_flops: bool = False,
               spec_bandwidth_Bps: float | None = None, probe_bandwidth_Bps: float | None = None) -> DecodeFit:
    """Fit ``t = overhead + bytes/BW (+ flops/F)`` to measured step times (seconds)."""
    b = np.asarray(bytes_, dtype=float)
    y = np.asarray(step_s, dtype=float)
    ok = np.isfinite(b) & np.isfinite(y) & (y > 0)
    cols = [np.ones_like(b), b]
    if use_flops:
        if flops is None:
            raise FitError("a FLOP term needs FLOP counts")
        f = np.asarray(flops, dtype=float)
        ok &= np.isfinite(f)
        cols.append(f)
    X = np.column_stack(cols)[ok]
    y = y[ok]
    if len(y) < X.shape[1] + 1:
        raise FitError(f"{len(y)} usable decode points; the fit needs at least {X.shape[1] + 1}")
    if np.ptp(X[:, 1]) == 0:
        raise FitError("every point reads the same number of bytes: bandwidth and overhead cannot be separated")
    coef = _solve(X, y)
    pred = X @ coef
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    loo = []
    if len(y) > X.shape[1] + 1:
        for i in range(len(y)):
            keep = np.arange(len(y)) != i
            c = _solve(X[keep], y[keep])
            loo.append(float((X[i] @ c - y[i]) / y[i]))
    note = ""
    if r2 < 0.5:
        note = (f"poor fit (R² {r2:.2f}): step times vary with something the bytes-read model does not "
                f"capture (overhead, compute or noise dominate)")
    if coef[1] <= 0:
        # The bounded fit put no time on bytes: across these points step time does not grow with
        # the bytes read, so no bandwidth can be read off them (overhead or compute dominates).
        note = "step time does not grow with bytes read across these points: bandwidth not identifiable" + (
            f"; {note}" if note else "")
    return DecodeFit(
        note=note,
        effective_bandwidth_Bps=1.0 / coef[1] if coef[1] > 0 else None,
        step_overhead_s=float(coef[0]),
        effective_flops=(1.0 / coef[2] if coef[2] > 0 else None) if use_flops else None,
        r2=r2, n=len(y), loo_rel_errors=loo,
        spec_bandwidth_Bps=spec_bandwidth_Bps, probe_bandwidth_Bps=probe_bandwidth_Bps,
    )


def calibration_dict(fit: DecodeFit, *, device: str | None, vllm_version: str | None, model: str | None,
                     kv_cache_dtype: str | None, reserve_bytes: int | None, source: str) -> dict[str, Any]:
    """What ``kvprof plan --calibration`` reads (analysis.plan.Calibration), with its provenance."""
    return {
        "effective_bandwidth_Bps": fit.effective_bandwidth_Bps,
        "effective_flops": fit.effective_flops,
        "step_overhead_s": fit.step_overhead_s,
        "reserve_bytes": reserve_bytes,
        "source": source,
        "device": device, "vllm_version": vllm_version, "model": model, "kv_cache_dtype": kv_cache_dtype,
        "fit": fit.to_dict(),
    }
