"""Fit measured decode step times to ``overhead + bytes / BW_eff (+ FLOPs / F_eff)``.

The model is linear in (overhead, 1/BW_eff, 1/F_eff), so it is a bounded linear
least-squares problem (scipy ``lsq_linear``, all three ≥ 0), weighted by 1/t so
that every point counts by its relative error. The FLOP term is kept only when
the data contain points the spec roofline calls compute-bound (or ``flops=True``);
otherwise bytes and FLOPs, which both grow with batch and context, would trade
off against each other. Leave-one-out refits give each point's prediction error.

Before a fitted bandwidth means anything the sweep must be memory-dominated: ``DecodeRegime`` says
which term the fitted step time is made of (fixed overhead, the byte read or the FLOP term), with the
points' arithmetic intensity beside the machine's ridge point.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.optimize import lsq_linear


class FitError(ValueError):
    """Too few or degenerate points to fit."""


RegimeKind = Literal["overhead", "memory", "compute"]


@dataclass
class DecodeRegime:
    """What a sweep's decode steps are made of, by the fit: the median share of the fitted step that is
    fixed overhead, byte read (bytes / BW_eff) and FLOPs (FLOPs / F_eff), and the points' median
    arithmetic intensity (FLOP per byte) beside the ridge point of the ceilings (peak FLOP/s ÷ bandwidth)."""

    kind: RegimeKind
    overhead_share: float
    memory_share: float
    compute_share: float
    arithmetic_intensity: float | None = None
    ridge_point: float | None = None
    ridge_source: str | None = None

    @property
    def roofline_bound(self) -> str | None:
        """Which side of the ridge point the median point lies on (None without ceilings)."""
        if self.arithmetic_intensity is None or not self.ridge_point:
            return None
        return "compute" if self.arithmetic_intensity > self.ridge_point else "memory"

    @property
    def sentence(self) -> str:
        """The regime in words, said before any fitted bandwidth is quoted."""
        shares = (f"fixed overhead {100 * self.overhead_share:.0f}%, byte read {100 * self.memory_share:.0f}%, "
                  f"FLOP term {100 * self.compute_share:.0f}% of the fitted step (median over points)")
        ai = ""
        if self.arithmetic_intensity is not None:
            ai = f"; arithmetic intensity {self.arithmetic_intensity:.3g} FLOP/byte"
            if self.ridge_point:
                ai += (f", {'above' if self.roofline_bound == 'compute' else 'below'} the ridge point "
                       f"{self.ridge_point:.3g} ({self.ridge_source or 'ceilings'})")
        head = {
            "memory": "Memory-dominated sweep: the step time is mostly the weight + KV read, so the fitted "
                      "bandwidth is a memory bandwidth",
            "overhead": "Overhead-dominated sweep: the step time is mostly fixed per-step cost, so the fitted "
                        "bandwidth rests on a small part of the step and does not measure the memory system",
            "compute": "Compute-dominated sweep: the step time is mostly arithmetic, so a bandwidth fitted to it "
                       "is not a memory bandwidth",
        }[self.kind]
        return f"{head} ({shares}{ai})."


def classify_regime(bytes_: Any, flops: Any, *, step_overhead_s: float, effective_bandwidth_Bps: float | None,
                    effective_flops: float | None = None, ridge_point: float | None = None,
                    ridge_source: str | None = None) -> DecodeRegime:
    """Overhead-, memory- or compute-dominated, from the fitted terms at each point.

    The kind is the term with the largest median share of the fitted step. Without a FLOP term in the fit,
    points beyond the ridge point (median arithmetic intensity above peak FLOP/s ÷ bandwidth) are
    compute-bound by the roofline, so the time the fit put on bytes is arithmetic: compute-dominated.
    A fit that found no bandwidth and no FLOP rate is all overhead.
    """
    b = np.asarray(bytes_, dtype=float)
    f = np.zeros_like(b) if flops is None else np.asarray(flops, dtype=float)
    mem = b / effective_bandwidth_Bps if effective_bandwidth_Bps else np.zeros_like(b)
    comp = f / effective_flops if effective_flops else np.zeros_like(b)
    total = step_overhead_s + mem + comp
    ok = np.isfinite(total) & (total > 0)
    if not ok.any():
        raise FitError("no point with a positive fitted step time")
    shares = {"overhead": float(np.median(step_overhead_s / total[ok])),
              "memory": float(np.median(mem[ok] / total[ok])),
              "compute": float(np.median(comp[ok] / total[ok]))}
    ai = None
    if flops is not None and np.isfinite(f[ok]).all() and (b[ok] > 0).all():
        ai = float(np.median(f[ok] / b[ok]))
    kind: RegimeKind = max(shares, key=lambda k: shares[k])  # type: ignore[assignment]
    if kind == "memory" and not effective_flops and ai is not None and ridge_point and ai > ridge_point:
        kind = "compute"
    return DecodeRegime(kind=kind, overhead_share=shares["overhead"], memory_share=shares["memory"],
                        compute_share=shares["compute"], arithmetic_intensity=ai, ridge_point=ridge_point,
                        ridge_source=ridge_source)


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
    spec_flops: float | None = None
    probe_flops: float | None = None
    regime: DecodeRegime | None = None
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
        if self.regime is not None:
            d["regime"].update(roofline_bound=self.regime.roofline_bound, sentence=self.regime.sentence)
        return d


def _solve(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    w = 1.0 / y
    try:
        res = lsq_linear(X * w[:, None], y * w, bounds=(0, np.inf), method="bvls")
    except (np.linalg.LinAlgError, ValueError) as exc:  # e.g. a step time so small its weight 1/t overflows
        raise FitError(f"the weighted least-squares solve failed ({exc})") from None
    return res.x


def fit_decode(bytes_: Any, step_s: Any, flops: Any = None, *, use_flops: bool = False,
               spec_bandwidth_Bps: float | None = None, probe_bandwidth_Bps: float | None = None,
               spec_flops: float | None = None, probe_flops: float | None = None) -> DecodeFit:
    """Fit ``t = overhead + bytes/BW (+ flops/F)`` to measured step times (seconds), and classify the
    sweep's regime (the ridge point from the probe's ceilings when given, else the spec sheet's)."""
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
    f_ok = None if flops is None else np.asarray(flops, dtype=float)[ok]
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
    bw = 1.0 / coef[1] if coef[1] > 0 else None
    eff_flops = (1.0 / coef[2] if coef[2] > 0 else None) if use_flops else None
    ridge, ridge_source = None, None
    if probe_bandwidth_Bps and probe_flops:
        ridge, ridge_source = probe_flops / probe_bandwidth_Bps, "probe"
    elif spec_bandwidth_Bps and spec_flops:
        ridge, ridge_source = spec_flops / spec_bandwidth_Bps, "spec sheet"
    regime = classify_regime(X[:, 1], f_ok, step_overhead_s=float(coef[0]), effective_bandwidth_Bps=bw,
                             effective_flops=eff_flops, ridge_point=ridge, ridge_source=ridge_source)
    return DecodeFit(
        note=note,
        effective_bandwidth_Bps=bw,
        step_overhead_s=float(coef[0]),
        effective_flops=eff_flops,
        r2=r2, n=len(y), loo_rel_errors=loo,
        spec_bandwidth_Bps=spec_bandwidth_Bps, probe_bandwidth_Bps=probe_bandwidth_Bps,
        spec_flops=spec_flops, probe_flops=probe_flops, regime=regime,
    )


def fit_decode_selected(bytes_: Any, step_s: Any, flops: Any, *, compute_bound: bool, **ceilings: Any) -> DecodeFit:
    """The decode fit with the FLOP term where it belongs: where the roofline calls some points compute-bound,
    or where cross-validation asks for it — the FLOP term cuts the leave-one-out median error to under three
    quarters, and by at least a percentage point. That happens where arithmetic does not overlap the byte
    stream (one CPU thread: a batch of 8 float32 sequences adds a third to the step). Otherwise bytes and FLOPs,
    which both grow with batch and context, would trade off against each other for nothing."""
    base = fit_decode(bytes_, step_s, flops, use_flops=compute_bound, **ceilings)
    if compute_bound or flops is None or base.loo_median_abs_rel_error is None:
        return base
    try:
        with_flops = fit_decode(bytes_, step_s, flops, use_flops=True, **ceilings)
    except FitError:
        return base
    b, w = base.loo_median_abs_rel_error, with_flops.loo_median_abs_rel_error
    if with_flops.effective_flops and w is not None and w < 0.75 * b and b - w >= 0.01:
        with_flops.note = "; ".join(x for x in (
            f"FLOP term kept: step time grows with the batch's arithmetic beyond its bytes (leave-one-out median "
            f"error {100 * b:.1f}% without it, {100 * w:.1f}% with it)", with_flops.note) if x)
        return with_flops
    return base


def calibration_dict(fit: DecodeFit, *, device: str | None, vllm_version: str | None, model: str | None,
                     kv_cache_dtype: str | None, reserve_bytes: int | None, source: str,
                     model_dtype: str | None = None, device_type: str | None = None,
                     device_memory_bytes: int | None = None, model_dir: str | None = None,
                     model_sha256: str | None = None, weights: str | None = None) -> dict[str, Any]:
    """What ``kvprof plan --calibration`` reads (analysis.planning.plan.Calibration), with its provenance (the device,
    the model by name and config digest, the vLLM version: a plan refuses another GPU's or model's calibration
    unless told to transfer it) and the device it was measured on (``measured_on``: the ceilings the fit was
    set against — the probe's where one ran, else the spec sheet's — and the device memory), so a plan needs
    no ``--gpu`` to use it."""
    bw, flops, ceilings = fit.probe_bandwidth_Bps, fit.probe_flops, "probe"
    if not (bw and flops):
        bw, flops, ceilings = fit.spec_bandwidth_Bps, fit.spec_flops, "spec sheet"
    measured_on = None
    if device and bw and flops and device_memory_bytes:
        measured_on = {"name": str(device), "kind": device_type, "bandwidth_Bps": bw, "peak_flops": flops,
                       "memory_total_bytes": int(device_memory_bytes), "ceilings": ceilings}
    return {
        "effective_bandwidth_Bps": fit.effective_bandwidth_Bps,
        "effective_flops": fit.effective_flops,
        "step_overhead_s": fit.step_overhead_s,
        "reserve_bytes": reserve_bytes,
        "source": source,
        "device": device, "vllm_version": vllm_version, "model": model, "kv_cache_dtype": kv_cache_dtype,
        "model_dtype": model_dtype,
        "model_config_sha256": _config_digest(model_dir, model_sha256, weights),
        "regime": fit.regime.kind if fit.regime else None,
        "measured_on": measured_on,
        "fit": fit.to_dict(),
    }


def _config_digest(model_dir: str | None, model_sha256: str | None, weights: str | None) -> str | None:
    """The calibrated model's config digest (analysis.catalog.config_sha256): the engine's ``model_sha256``
    where the run used dummy weights (it is that digest, of the config that ran), else its config.json where
    that is readable here (a real-weight fingerprint also counts the weight files); None when neither is known."""
    from analysis.catalog import config_sha256

    if weights == "dummy" and isinstance(model_sha256, str) and re.fullmatch(r"[0-9a-f]{64}", model_sha256):
        return model_sha256
    if model_dir:
        try:
            return config_sha256(model_dir)
        except (OSError, ValueError):
            pass
    return None
