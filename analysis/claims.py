"""The seeds' quantitative claims, each checked against the measurements with a verdict.

A verdict is "holds" (within the stated tolerance), "diverges" (with by how much),
or "not tested" (the sweep has no points that can test it, and why).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.fit import DecodeFit
from analysis.kv import kv_bytes_per_sequence
from analysis.theory_vs_measured import architecture, rel

HOLDS, DIVERGES, UNTESTED = "holds", "diverges", "not tested"


def _claim(claim: str, verdict: str, evidence: str, error: float | None = None,
           tolerance: float | None = None) -> dict[str, Any]:
    return {"claim": claim, "verdict": verdict, "error": error, "tolerance": tolerance, "evidence": evidence}


def linear_past_crossover(dec: pd.DataFrame, min_r2: float = 0.95) -> dict[str, Any]:
    claim = "Decode TPOT grows linearly with context past the crossover"
    if dec.empty or "crossover_context" not in dec:
        return _claim(claim, UNTESTED, "no decode points with a modelled architecture")
    results = []
    for (eid, c), g in dec.groupby(["engine_id", "concurrency"]):
        past = g[g["mean_context"] >= g["crossover_context"]]
        if past["mean_context"].nunique() < 3:
            continue
        x, y = past["mean_context"].to_numpy(float), past["decode_step_s"].to_numpy(float)
        slope, icpt = np.polyfit(x, y, 1)
        pred = slope * x + icpt
        r2 = 1 - np.sum((y - pred) ** 2) / max(np.sum((y - y.mean()) ** 2), 1e-30)
        results.append((eid, int(c), float(r2), len(x)))
    if not results:
        t = dec["crossover_context"].min()
        return _claim(claim, UNTESTED, f"fewer than 3 contexts past the predicted crossover at any batch "
                                       f"(smallest t* = {t:,.0f} tokens; longest context measured "
                                       f"{dec['mean_context'].max():,.0f})")
    worst = min(results, key=lambda r: r[2])
    verdict = HOLDS if worst[2] >= min_r2 else DIVERGES
    return _claim(claim, verdict, f"linear fit of step time vs context past t*, {len(results)} curves; worst R² "
                                  f"{worst[2]:.3f} ({worst[0]}, batch {worst[1]}, {worst[3]} contexts)",
                  error=1 - worst[2], tolerance=1 - min_r2)


def batching_amortises_weights(dec: pd.DataFrame, fit: DecodeFit | None, tol: float = 0.25) -> dict[str, Any]:
    claim = "Batching amortises the weight read but not the KV read"
    if dec.empty or fit is None or fit.effective_bandwidth_Bps is None:
        return _claim(claim, UNTESTED, "no fitted effective bandwidth")
    errs, notes = [], []
    for (_eid, ctx), g in dec.groupby(["engine_id", "mean_context"]):
        if g["concurrency"].nunique() < 2:
            continue
        a = architecture(g["model_dir"].iloc[0], g["model"].iloc[0])
        if a is None:
            continue
        slope, _ = np.polyfit(g["concurrency"].to_numpy(float), g["decode_step_s"].to_numpy(float), 1)
        per_seq = kv_bytes_per_sequence(a, round(ctx), g["kv_cache_dtype"].iloc[0]) / fit.effective_bandwidth_Bps
        per_seq_time = (g["decode_step_s"] / g["concurrency"]).to_numpy()
        amortised = bool(np.all(np.diff(per_seq_time[np.argsort(g["concurrency"].to_numpy())]) < 0))
        errs.append(rel(per_seq, slope))
        notes.append(amortised)
    if not errs:
        return _claim(claim, UNTESTED, "no context measured at two or more batch sizes")
    worst = max(errs, key=lambda e: abs(e) if e is not None else 0)
    ok = all(notes) and all(e is not None and abs(e) <= tol for e in errs)
    return _claim(claim, HOLDS if ok else DIVERGES,
                  f"marginal step time per added sequence vs its KV read at BW_eff, {len(errs)} contexts; "
                  f"time per sequence falls with batch in {sum(notes)}/{len(notes)}",
                  error=worst, tolerance=tol)


def fp8_doubles_capacity(cap: pd.DataFrame, tol: float = 0.05) -> dict[str, Any]:
    claim = "fp8 KV halves KV bytes and roughly doubles the batch that fits"
    if cap.empty or "kv_cache_dtype" not in cap:
        return _claim(claim, UNTESTED, "no engines")
    keys = ["model", "block_size", "max_model_len"]
    auto = cap[cap["kv_cache_dtype"].isin(["auto", "bfloat16", "float16", "bf16", "fp16"])]
    fp8 = cap[cap["kv_cache_dtype"].str.startswith("fp8")]
    pairs = auto.merge(fp8, on=keys, suffixes=("_16", "_8"))
    if pairs.empty:
        return _claim(claim, UNTESTED, "no pair of engines that differ only in kv_cache_dtype (auto vs fp8)")
    errs, budgets = [], []
    for r in pairs.itertuples(index=False):
        measured = r.max_concurrency_vllm_8 / r.max_concurrency_vllm_16
        predicted = r.kv_bytes_per_token_16 / r.kv_bytes_per_token_8  # 2.0 for 16-bit → 8-bit
        errs.append(rel(predicted, measured))
        budgets.append(r.kv_budget_bytes_8 / r.kv_budget_bytes_16)
    worst = max(errs, key=lambda e: abs(e or 0))
    return _claim(claim, HOLDS if abs(worst or 0) <= tol else DIVERGES,
                  f"max concurrency fp8 ÷ auto vs the KV-bytes ratio, {len(errs)} pairs; KV budgets fp8 ÷ auto "
                  f"{min(budgets):.3f}–{max(budgets):.3f}", error=worst, tolerance=tol)


def block_waste_below_one_block(rounding: pd.DataFrame) -> dict[str, Any]:
    claim = "Block rounding wastes less than one block per sequence"
    if rounding.empty:
        return _claim(claim, UNTESTED, "no capacity-phase measurements")
    worst = rounding["waste_tokens_per_sequence"].max()
    bs = rounding.loc[rounding["waste_tokens_per_sequence"].idxmax(), "block_size"]
    exact = bool((rounding["blocks_error"].abs() < 1e-6).all())
    ok = bool(rounding["waste_below_one_block"].all()) and exact
    return _claim(claim, HOLDS if ok else DIVERGES,
                  f"{len(rounding)} (engine, length) measurements; largest waste {worst:.0f} tokens per sequence "
                  f"with block {bs}; used blocks {'equal' if exact else 'differ from'} n·ceil(L/block)",
                  error=float(worst / bs), tolerance=1.0)


def throughput_flat_past_full_pool(sat: pd.DataFrame, tol: float = 0.10) -> dict[str, Any]:
    claim = "Throughput stops rising once the KV pool is full"
    if sat.empty:
        return _claim(claim, UNTESTED, "no saturation points")
    gains = []
    for eid, g in sat.groupby("engine_id"):
        at = g[g["concurrency"] <= g["predicted_ceiling"]]
        above = g[g["concurrency"] > g["predicted_ceiling"]]
        if at.empty or above.empty:
            continue
        gains.append((eid, above["output_tokens_per_s"].max() / at["output_tokens_per_s"].max() - 1))
    if not gains:
        return _claim(claim, UNTESTED, "no engine measured both at or below and above its predicted ceiling")
    worst = max(gains, key=lambda x: x[1])
    return _claim(claim, HOLDS if worst[1] <= tol else DIVERGES,
                  f"best throughput above the predicted ceiling vs at or below it, {len(gains)} engines; "
                  f"largest gain {100 * worst[1]:+.1f} % ({worst[0]})", error=float(worst[1]), tolerance=tol)


def check_all(cap: pd.DataFrame, dec: pd.DataFrame, rounding: pd.DataFrame, sat: pd.DataFrame,
              fit: DecodeFit | None) -> pd.DataFrame:
    """Every claim of the seed documents with its verdict (holds / diverges / untestable) and evidence."""
    return pd.DataFrame([
        linear_past_crossover(dec),
        batching_amortises_weights(dec, fit),
        fp8_doubles_capacity(cap),
        block_waste_below_one_block(rounding),
        throughput_flat_past_full_pool(sat),
    ])

