"""The seeds' quantitative claims, each checked against the measurements with a verdict.

A verdict is "holds" (within the stated tolerance), "diverges" (with by how much),
or "not tested" (the sweep has no points that can test it, and why).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.measured.decode_fit import DecodeFit
from analysis.measured.theory_vs_measured import architecture, rel
from analysis.model.kv import is_fp8, kv_bytes_per_sequence
from analysis.model.roofline import decode_step

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


def batching_amortises_weights(dec: pd.DataFrame, fit: DecodeFit | None, tol: float = 0.25,
                               engines: pd.DataFrame | None = None) -> dict[str, Any]:
    claim = "Batching amortises the weight read but not the KV read"
    if dec.empty or fit is None or fit.effective_bandwidth_Bps is None:
        return _claim(claim, UNTESTED, "no fitted effective bandwidth")
    # The model config.json each engine record keeps (the engine table's model_config_json), by engine id.
    configs = {} if engines is None or "model_config_json" not in engines else {
        e: c for e, c in zip(engines["engine_id"], engines["model_config_json"], strict=True) if isinstance(c, str)}
    errs, notes = [], []
    for (eid, ctx), g in dec.groupby(["engine_id", "mean_context"]):
        if g["concurrency"].nunique() < 2:
            continue
        dtype = g["model_dtype"].iloc[0] if "model_dtype" in g else None
        a = architecture(g["model_dir"].iloc[0], g["model"].iloc[0], dtype if isinstance(dtype, str) else None,
                         configs.get(eid))
        if a is None:
            continue
        slope, _ = np.polyfit(g["concurrency"].to_numpy(float), g["decode_step_s"].to_numpy(float), 1)
        per_seq = kv_bytes_per_sequence(a, round(ctx), g["kv_cache_dtype"].iloc[0]) / fit.effective_bandwidth_Bps
        if fit.effective_flops:  # a fit with a FLOP term: each added sequence's arithmetic costs time too
            one, two = (decode_step(a, batch=b, context=round(ctx), bandwidth_Bps=1.0, peak_flops=1.0,
                                    kv_cache_dtype=g["kv_cache_dtype"].iloc[0]) for b in (1, 2))
            per_seq += (two.flops - one.flops) / fit.effective_flops
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


def batching_amortises_energy(dec: pd.DataFrame, energy: pd.DataFrame | None, tol: float = 0.5) -> dict[str, Any]:
    """The energy of an output token falls with the batch as its share of the step does: J/token at the largest
    batch ÷ at the smallest, against (step ÷ batch) at the largest ÷ at the smallest, per engine and context.
    The boards draw more as the batch keeps them busier, so energy falls less than time per token: the tolerance
    is wide, and a J/token that does not fall at all diverges."""
    claim = "Batching amortises the weights' energy the way it amortises their read"
    if energy is None or energy.empty or energy["j_per_output_token"].notna().sum() == 0 or dec.empty:
        return _claim(claim, UNTESTED, "no decode point measured its energy")
    d = dec.merge(energy[["point_id", "j_per_output_token"]], on="point_id", how="inner")
    d = d[d["j_per_output_token"].notna() & d["decode_step_s"].notna()]
    errs, falls, pairs = [], [], []
    for _, g in d.groupby(["engine_id", "mean_context"]):
        if g["concurrency"].nunique() < 2:
            continue
        g = g.sort_values("concurrency")
        lo, hi = g.iloc[0], g.iloc[-1]
        j_ratio = hi["j_per_output_token"] / lo["j_per_output_token"]
        t_ratio = (hi["decode_step_s"] / hi["concurrency"]) / (lo["decode_step_s"] / lo["concurrency"])
        errs.append(j_ratio / t_ratio - 1)
        falls.append(bool(np.all(np.diff(g["j_per_output_token"].to_numpy(float)) < 0)))
        pairs.append(f"batch {int(lo['concurrency'])}→{int(hi['concurrency'])}: J/token ×{j_ratio:.3f}, "
                     f"step/batch ×{t_ratio:.3f}")
    if not errs:
        return _claim(claim, UNTESTED, "no context measured its energy at two or more batch sizes")
    worst = max(errs, key=abs)
    ok = all(falls) and abs(worst) <= tol
    return _claim(claim, HOLDS if ok else DIVERGES,
                  f"J per output token falls with batch in {sum(falls)}/{len(falls)} contexts; "
                  + "; ".join(pairs[:3]) + ("…" if len(pairs) > 3 else ""), error=worst, tolerance=tol)


# --- fp8 KV: seed 001 ("storing keys and values in ... FP8 instead of 16-bit halves the cache and halves
# the bytes streamed per step"), tested on pairs of engines that differ in the KV dtype alone ---------------

SIXTEEN_BIT_KV = ("auto", "bfloat16", "float16", "bf16", "fp16")


def _pair_keys(engines: pd.DataFrame | None, table: pd.DataFrame) -> pd.Series:
    """Per row of ``table`` (which has engine_id): every engine setting but the KV dtype, as one string.
    From the engine table's requested_* and engine_arg_* columns where it has them, else the few
    settings the table itself carries (model, block size, max_model_len)."""
    if engines is not None and not engines.empty and "requested_max_model_len" in engines:
        cols = sorted(c for c in engines.columns
                      if (c.startswith("requested_") or c.startswith("engine_arg_"))
                      and c not in ("requested_kv_cache_dtype", "requested_model_dir"))
        keys = dict(zip(engines["engine_id"], _joined(engines, cols), strict=True))
        return pd.Series([keys.get(e, f"?{e}") for e in table["engine_id"]], index=table.index, dtype=object)
    cols = [c for c in ("model", "block_size", "max_model_len") if c in table]
    return pd.Series(_joined(table, cols), index=table.index, dtype=object)


def _joined(df: pd.DataFrame, cols: list[str]) -> list[str]:
    return ["|".join(map(str, row)) for row in df[cols].itertuples(index=False, name=None)]


def _pairs(table: pd.DataFrame, engines: pd.DataFrame | None, on: list[str] | None = None) -> pd.DataFrame:
    """Rows of 16-bit engines beside the fp8 rows of otherwise equal engines (suffixes _16, _8)."""
    if table.empty or "kv_cache_dtype" not in table:
        return pd.DataFrame()
    t = table.assign(_pair=_pair_keys(engines, table))
    auto = t[t["kv_cache_dtype"].astype(str).isin(SIXTEEN_BIT_KV)]
    fp8 = t[t["kv_cache_dtype"].map(is_fp8)]
    return auto.merge(fp8, on=["_pair", *(on or [])], suffixes=("_16", "_8"))


def _why_no_pair(engines: pd.DataFrame | None, dropped: list[dict[str, Any]] | None) -> str:
    """Why a sweep has no auto/fp8 pair of otherwise equal engines that ran."""
    skipped = [d for d in dropped or [] if d.get("engine") and is_fp8(d["engine"].get("kv_cache_dtype", ""))]
    if skipped:
        reasons = "; ".join(dict.fromkeys(str(d["reason"]) for d in skipped))
        return f"the sweep's {len(skipped)} fp8 engine(s) never started — {reasons}"
    if engines is None or engines.empty or "kv_cache_dtype" not in engines:
        return "no engines"
    fp8 = engines[engines["kv_cache_dtype"].map(is_fp8)]
    if fp8.empty:
        return "the sweep has no fp8 KV engine (add fp8 to engine.kv_cache_dtype)"
    failed = fp8[fp8["status"] != "ok"]
    if len(failed) == len(fp8):
        first = failed.iloc[0]
        msg = " ".join(str(first.get("message") or "").split())[:160]
        return f"every fp8 engine failed ({', '.join(sorted(set(failed['status'])))}): {msg}"
    if not engines["kv_cache_dtype"].astype(str).isin(SIXTEEN_BIT_KV).any():
        return "no 16-bit (auto) engine beside the fp8 ones"
    return "no auto and fp8 engines that ran with otherwise equal settings"


def _ratio(num: Any, den: Any) -> float | None:
    """num / den, or None where either is missing or not finite, or den is zero."""
    try:
        n, d = float(num), float(den)
    except (TypeError, ValueError):
        return None
    if not (np.isfinite(n) and np.isfinite(d)) or d == 0:
        return None
    return n / d


def _span(values: Any, fmt: str = "{:.3f}") -> str:
    v = [float(x) for x in values if x is not None and not pd.isna(x)]
    if not v:
        return "—"
    lo, hi = min(v), max(v)
    return fmt.format(lo) if abs(hi - lo) < 5e-4 * max(abs(hi), 1e-30) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def fp8_doubles_capacity(cap: pd.DataFrame, tol: float = 0.05, engines: pd.DataFrame | None = None,
                         dropped: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """vLLM's pool with fp8 KV vs 16-bit, engines otherwise equal: blocks, KV tokens and max
    concurrency fp8 ÷ auto against the KV-bytes ratio (2 for 16-bit → 8-bit); the worst of the three
    over every pair is the error."""
    claim = "fp8 KV halves KV bytes and roughly doubles the batch that fits"
    need = ["num_blocks_vllm", "kv_tokens_vllm", "max_concurrency_vllm", "kv_bytes_per_token", "kv_budget_bytes"]
    pairs = _pairs(cap[cap[need[0]].notna()] if not cap.empty and need[0] in cap else cap, engines)
    if pairs.empty:
        return _claim(claim, UNTESTED, _why_no_pair(engines, dropped))
    if any(f"{c}_8" not in pairs for c in need) or pairs[["kv_bytes_per_token_8", "kv_bytes_per_token_16"]].isna().any(
            axis=None):
        return _claim(claim, UNTESTED, "auto and fp8 engines ran, but the model's KV bytes per token are not "
                                       "modelled (its architecture or budget is unknown to the analysis)")
    errs: list[float] = []
    ratios: dict[str, list[float]] = {"blocks": [], "tokens": [], "conc": [], "bytes": [], "budget": []}
    predicted = []
    for r in pairs.to_dict("records"):
        pred = _ratio(r["kv_bytes_per_token_16"], r["kv_bytes_per_token_8"])  # 2.0 for 16-bit → 8-bit
        if pred is None:
            continue
        predicted.append(pred)
        for name, col in (("blocks", "num_blocks_vllm"), ("tokens", "kv_tokens_vllm"),
                          ("conc", "max_concurrency_vllm")):
            if (ratio := _ratio(r[f"{col}_8"], r[f"{col}_16"])) is not None:
                ratios[name].append(ratio)
                errs.append(rel(pred, ratio))
        if (budget := _ratio(r["kv_budget_bytes_8"], r["kv_budget_bytes_16"])) is not None:
            ratios["budget"].append(budget)
        # Bytes per pool token as vLLM sized the pool: its KV budget over the tokens its blocks hold.
        per_token = [_ratio(r[f"kv_budget_bytes_{b}"], r[f"num_blocks_vllm_{b}"] * r[f"block_size_{b}"])
                     for b in (8, 16)]
        if (bytes_ratio := _ratio(*per_token)) is not None:
            ratios["bytes"].append(bytes_ratio)
    errs = [e for e in errs if e is not None]
    if not errs:  # e.g. a 16-bit engine whose pool vLLM sized at zero blocks: no ratio to hold the claim to
        return _claim(claim, UNTESTED, f"{len(pairs)} auto/fp8 pair(s) ran, but none with a nonzero 16-bit pool "
                                       "(KV blocks, tokens or concurrency) to divide by")
    worst = max(errs, key=abs)
    ran = ""
    if "ceiling_measured_at_least_8" in pairs:  # the saturation phase: the batch that really ran together
        both = pairs.dropna(subset=["ceiling_measured_at_least_8", "ceiling_measured_at_least_16"])
        if not both.empty:
            ran = (f"; the saturation phase ran {_span(both['ceiling_measured_at_least_8'], '{:.0f}')} sequences of "
                   f"{_span(both['saturation_length_8'], '{:.0f}')} tokens together with fp8 against "
                   f"{_span(both['ceiling_measured_at_least_16'], '{:.0f}')} with auto")
    return _claim(claim, HOLDS if abs(worst) <= tol else DIVERGES,
                  f"{len(pairs)} auto/fp8 pair(s) of otherwise equal engines, fp8 ÷ auto: KV blocks "
                  f"{_span(ratios['blocks'])}, KV tokens {_span(ratios['tokens'])}, max concurrency "
                  f"{_span(ratios['conc'])} against {_span(predicted)} from the bytes per token; KV bytes per "
                  f"pool token {_span(ratios['bytes'])} (budget ÷ blocks × block size); KV budgets "
                  f"{_span(ratios['budget'])}{ran}", error=worst, tolerance=tol)


# A decode point whose steps' interquartile range exceeds this fraction of their median is too noisy to
# compare step times by (over a quarter of its steps are stalls: on a shared CPU, other work's slices).
NOISY_STEP_IQR = 0.5


def fp8_decode_step(dec: pd.DataFrame, fit: DecodeFit | None, tol: float = 0.10,
                    engines: pd.DataFrame | None = None,
                    dropped: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The decode step with fp8 KV vs 16-bit at equal batch, prompt and output (engines otherwise
    equal), over the matched points whose step times are steady (IQR ≤ NOISY_STEP_IQR of the median).
    Predicted with the decode fit (overhead + bytes / BW_eff, fp8's KV read halved) where the fit is
    sound (a bandwidth, R² ≥ 0.5); else only bounded: between the bytes-read ratio (a purely
    memory-bound step) and 1 (a step the KV read does not touch). Error: the median over those points
    of the measured ratio against that prediction (0 inside the bounds)."""
    claim = "fp8 KV halves the KV bytes read per decode step (the step shrinks by the KV read's share)"
    need = ["decode_step_s", "bytes", "kv_bytes"]
    pairs = _pairs(dec, engines, on=["concurrency", "prompt_len", "output_len"]) if not dec.empty else dec
    if pairs.empty or any(f"{c}_8" not in pairs for c in need):
        ran = engines[engines["status"] == "ok"] if engines is not None and "status" in engines else None
        if ran is not None and not _pairs(ran, engines).empty:
            return _claim(claim, UNTESTED, "auto and fp8 engines ran, but no decode point was measured at the "
                                           "same batch, prompt and output on both")
        return _claim(claim, UNTESTED, _why_no_pair(engines, dropped))
    matched = len(pairs)
    if "decode_step_spread_s_8" in pairs:
        noise = np.fmax(pairs["decode_step_spread_s_8"] / pairs["decode_step_s_8"],
                        pairs["decode_step_spread_s_16"] / pairs["decode_step_s_16"]).fillna(0.0)
        pairs = pairs[noise <= NOISY_STEP_IQR]
    noisy = (f"; {matched - len(pairs)} of {matched} left out as too noisy (steps' IQR over "
             f"{NOISY_STEP_IQR:.0%} of their median)" if len(pairs) < matched else "")
    if pairs.empty:
        return _claim(claim, UNTESTED, f"all {matched} matched decode points too noisy to compare: their steps' "
                                       f"IQR is over {NOISY_STEP_IQR:.0%} of the median (stalls from other work "
                                       f"on the machine); rerun on a quiet machine")
    measured = (pairs["decode_step_s_8"] / pairs["decode_step_s_16"]).to_numpy(float)
    bytes_ratio = (pairs["bytes_8"] / pairs["bytes_16"]).to_numpy(float)
    kv_share = (pairs["kv_bytes_16"] / pairs["bytes_16"]).to_numpy(float)
    where = (f"{len(pairs)} matched decode point(s) (batch {_span(pairs['concurrency'], '{:.0f}')}, context "
             f"{_span(pairs['mean_context_16'], '{:,.0f}')} tokens{noisy}), fp8 ÷ auto step time measured median "
             f"{np.median(measured):.3f} ({_span(measured)})")
    share = (f"the KV read is {_span(100 * kv_share, '{:.0f}')} % of the bytes a 16-bit step reads "
             f"(bytes read fp8 ÷ auto {_span(bytes_ratio)})")
    sound = fit is not None and fit.effective_bandwidth_Bps is not None and not fit.note and "fitted_s_8" in pairs
    if sound:
        predicted = (pairs["fitted_s_8"] / pairs["fitted_s_16"]).to_numpy(float)
        errs = np.array([rel(p, m) for p, m in zip(predicted, measured, strict=True)], dtype=float)
        against = (f"against {np.median(predicted):.3f} ({_span(predicted)}) from the decode fit "
                   f"(overhead + bytes / BW_eff)")
    else:  # no sound fit: only the bounds a halved KV read allows
        errs = np.array([m - 1.0 if m > 1.0 else (m - b) / b if m < b else 0.0
                         for m, b in zip(measured, bytes_ratio, strict=True)], dtype=float)
        why = fit.note if fit is not None and fit.note else "no decode fit"
        against = (f"against the bounds a halved KV read allows, {_span(bytes_ratio)} (memory-bound) to 1 "
                   f"(untouched), as the decode fit cannot say where between ({why})")
    err = float(np.median(errs))
    # Each auto/fp8 engine pair measured on its own: pairs that disagree by more than the tolerance both
    # ways measure the difference between engine launches, not fp8.
    by_pair = pd.Series(errs, index=pd.MultiIndex.from_arrays([pairs["engine_id_16"], pairs["engine_id_8"]]))
    per_pair = by_pair.groupby(level=[0, 1]).median()
    if len(per_pair) > 1 and per_pair.max() - per_pair.min() > 2 * tol:
        return _claim(claim, UNTESTED, f"the {len(per_pair)} auto/fp8 engine pairs disagree (their median errors "
                                       f"run {per_pair.min():+.1%} to {per_pair.max():+.1%}): launch-to-launch "
                                       f"variation is larger than fp8's effect here; {where} {against}; {share}")
    return _claim(claim, HOLDS if abs(err) <= tol else DIVERGES, f"{where} {against}; {share}",
                  error=err, tolerance=tol)


def block_waste_below_one_block(rounding: pd.DataFrame) -> dict[str, Any]:
    claim = "Block rounding wastes less than one block per sequence"
    if rounding.empty:
        return _claim(claim, UNTESTED, "no capacity-phase measurements")
    exact = bool((rounding["blocks_error"].abs() < 1e-6).all())
    one_group = rounding.dropna(subset=["waste_tokens_per_sequence"])  # several groups' blocks make no one waste
    if one_group.empty:
        return _claim(claim, HOLDS if exact else DIVERGES,
                      f"{len(rounding)} (engine, length) measurements of models whose sequences hold blocks in several "
                      f"KV-cache groups; used blocks {'equal' if exact else 'differ from'} the sum over the groups of "
                      "n·ceil(L / the group's block)")
    worst = one_group["waste_tokens_per_sequence"].max()
    bs = one_group.loc[one_group["waste_tokens_per_sequence"].idxmax(), "block_size"]
    ok = bool(one_group["waste_below_one_block"].all()) and exact
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
              fit: DecodeFit | None, engines: pd.DataFrame | None = None,
              dropped: list[dict[str, Any]] | None = None, energy: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every claim of the seed documents with its verdict (holds / diverges / untestable) and evidence.
    ``engines`` (the loaded engine table) pairs engines on every setting but the one compared, and
    ``dropped`` (the manifest's) says why a comparison is missing when engines were skipped."""
    return pd.DataFrame([
        linear_past_crossover(dec),
        batching_amortises_weights(dec, fit, engines=engines),
        batching_amortises_energy(dec, energy),
        fp8_doubles_capacity(cap, engines=engines, dropped=dropped),
        fp8_decode_step(dec, fit, engines=engines, dropped=dropped),
        block_waste_below_one_block(rounding),
        throughput_flat_past_full_pool(sat),
    ])

