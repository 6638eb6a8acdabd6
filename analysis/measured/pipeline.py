"""The single-run analysis pipeline: a loaded results directory → ``Analysis`` (theory vs measured tables,
the decode fit, claims, divergences) with its formatted tables, headline and setup lines, calibration and results table.

Rendering lives elsewhere: analysis.report.run writes these into report.pdf and summary.md.
"""

from __future__ import annotations

import datetime as dt
import math
import textwrap
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.measured import claims as claims_mod
from analysis.measured import energy as energy_mod
from analysis.measured import serve as serve_analysis
from analysis.measured import theory_vs_measured as tvm
from analysis.measured.decode_fit import DecodeFit, calibration_dict
from analysis.planning.calibration import Calibration
from analysis.results.load import Results
from analysis.table import Table, fbw, fbytes, fms, fnum, format_columns, fpct

# --- the analysis bundle ----------------------------------------------------------------------

@dataclass
class Analysis:
    """One run analysed: every theory-vs-measured table, the fit, the claims, and their formatted tables."""

    res: Results
    ceilings: tvm.Ceilings
    capacity: pd.DataFrame
    decode: pd.DataFrame
    fit: DecodeFit | None
    crossover: pd.DataFrame
    rounding: pd.DataFrame
    saturation: pd.DataFrame
    claims: pd.DataFrame
    divergences: pd.DataFrame
    tables: dict[str, Table] = field(default_factory=dict)
    serve: serve_analysis.ServeAnalysis | None = None  # None: the run has no serve point that ran
    energy: pd.DataFrame = field(default_factory=pd.DataFrame)  # per point: energy over its window, per token
    energy_unavailable: str | None = None  # why the run has no energy figure (None: it has)


def analyse(res: Results, include_flagged: bool = False) -> Analysis:
    """Set a loaded run's measurements beside the analytic model: capacity, decode (with the fit),
    crossover, block rounding, saturation, the seeds' claims and the largest divergences. Decode points
    flagged as noisy or contended are left out of the fit unless ``include_flagged``."""
    ce = tvm.Ceilings.of(res)
    cap = tvm.capacity_table(res)
    dec = tvm.decode_table(res, ce)
    f = tvm.fit(dec, ce, include_flagged)
    dec = tvm.with_fit(dec, f)
    rnd = tvm.rounding_table(res)
    sat = tvm.saturation_table(res)
    energy = energy_mod.energy_table(res)
    a = Analysis(res=res, ceilings=ce, capacity=cap, decode=dec, fit=f, crossover=tvm.measured_crossover(dec, f),
                 rounding=rnd, saturation=sat,
                 claims=claims_mod.check_all(cap, dec, rnd, sat, f, engines=res.engines,
                                             dropped=res.manifest.get("dropped"), energy=energy),
                 divergences=tvm.divergences(cap, dec, rnd), serve=serve_analysis.analyse_serve(res))
    a.energy = energy
    a.energy_unavailable = energy_mod.unavailable_reason(res, a.energy)
    a.tables = build_tables(a)
    return a


def build_tables(a: Analysis) -> dict[str, Table]:
    """The report's tables as formatted strings, built once for the PDF and summary.md alike."""
    t: dict[str, Table] = {}
    t["capacity"] = Table("KV capacity: the allocator model vs vLLM", format_columns(a.capacity, {
        "engine_id": ("engine", str), "block_size": ("block", fnum), "max_model_len": ("max len", fnum),
        "kv_cache_dtype": ("kv dtype", str), "kv_budget_bytes": ("KV budget", fbytes),
        "num_blocks_predicted": ("blocks (model)", fnum), "num_blocks_vllm": ("blocks (vLLM)", fnum),
        "blocks_error": ("error", fnum), "kv_tokens_predicted": ("tokens (model)", fnum),
        "kv_tokens_vllm": ("tokens (vLLM)", fnum), "max_concurrency_vllm": ("max conc. (vLLM)", fnum),
        "ideal_max_concurrency": ("ideal conc.", fnum)}),
        note="Predicted from the KV budget vLLM used (kv_cache_memory_bytes exactly, or the logged "
             "'Available KV cache memory' rounded to 0.01 GiB); 'ideal' is the textbook budget ÷ bytes per sequence.")
    if "predicted_kv_budget_bytes" in a.capacity:
        t["budget"] = Table("KV budget on the GPU: memory × utilisation − weights − reserve vs vLLM", format_columns(
            a.capacity, {"engine_id": ("engine", str), "predicted_kv_budget_bytes": ("predicted", fbytes),
                         "kv_budget_bytes": ("vLLM", fbytes), "kv_budget_rel_error": ("error", fpct),
                         "weights_bytes_predicted": ("weights (plan)", fbytes),
                         "predicted_reserve_bytes": ("reserve (plan)", fbytes),
                         "vllm_model_loading_bytes": ("weights (vLLM)", fbytes),
                         "vllm_peak_activation_bytes": ("activation peak (vLLM)", fbytes),
                         "vllm_non_torch_bytes": ("non-torch (vLLM)", fbytes),
                         "vllm_cuda_graph_bytes": ("CUDA graphs (vLLM)", fbytes),
                         **({"plan_note": ("not planned", lambda v: v if isinstance(v, str) else "—")}
                            if "plan_note" in a.capacity else {})}),
            note="Predicted as `kvprof plan` predicts the engine's settings: its weights as vLLM loads them with "
                 "any LoRA buffers and drafter its engine_args set, vLLM's accounting of the profile run for its "
                 "version, pipeline stages and offloading; 'not planned' names a setting the plan does not take.")
    if "ceiling_predicted" in a.capacity:
        t["ceiling"] = Table("Batch ceiling at a fixed length: predicted vs the saturation phase", format_columns(
            a.capacity, {"engine_id": ("engine", str), "saturation_length": ("sequence length", fnum),
                         "ceiling_predicted": ("predicted", fnum),
                         "ceiling_vllm_arithmetic": ("vLLM's arithmetic", fnum),
                         "ceiling_measured_at_least": ("ran together up to", fnum),
                         "ceiling_measured_below": ("preempted/queued from", fnum)}),
            note="Predicted = (num_blocks − 1) // blocks per sequence, capped by max_num_seqs: vLLM keeps one "
                 "null block out of the pool, which its own 'maximum concurrency' arithmetic counts.")
    t["rounding"] = Table("Block rounding: KV blocks held by sequences of known length", format_columns(a.rounding, {
        "engine_id": ("engine", str), "block_size": ("block", fnum), "length": ("length", fnum),
        "requests": ("sequences", fnum), "blocks_predicted": ("predicted", fnum),
        "used_blocks_measured": ("measured", lambda x: fnum(round(x, 6))),
        "waste_tokens_per_sequence": ("waste tokens/seq", lambda x: fnum(round(x, 6)))}),
        note="Predicted: n·ceil(L / block) in each attention KV-cache group (a group's own block where vLLM raised a "
             "smaller page's), plus a hybrid's recurrent groups' blocks; waste is shown for one attention group only.")
    if a.fit is not None:
        f = a.fit
        r = f.regime
        t["fit"] = Table("Decode fit" + (f", {r.kind}-dominated" if r else "")
                         + ": step time = overhead + bytes / BW_eff"
                         + (" + FLOPs / F_eff" if f.effective_flops else ""),
                         pd.DataFrame([{
                             "regime": f"{r.kind}-dominated" if r else "—",
                             "overhead share": fpct(r.overhead_share).lstrip("+") if r else "—",
                             "BW_eff": fbw(f.effective_bandwidth_Bps), "overhead": fms(f.step_overhead_s),
                             "F_eff": "—" if not f.effective_flops else f"{f.effective_flops / 1e12:,.2f} TFLOP/s",
                             "MBU vs spec": fpct(f.mbu_spec).lstrip("+") if f.mbu_spec else "—",
                             "MBU vs probe": fpct(f.mbu_probe).lstrip("+") if f.mbu_probe else "—",
                             "R²": f"{f.r2:.3f}", "points": fnum(f.n),
                             "LOO median |error|": fpct(f.loo_median_abs_rel_error).lstrip("+")}]),
                         note=r.sentence if r else "")
    t["decode"] = Table("Decode: measured step time vs roofline and fit", format_columns(a.decode, {
        "engine_id": ("engine", str), "concurrency": ("batch", fnum), "mean_context": ("context", fnum),
        "decode_step_s": ("step (measured)", fms), "roofline_spec_s": ("roofline (spec)", fms),
        "roofline_probe_s": ("roofline (probe)", fms), "fitted_s": ("fitted", fms),
        "fitted_rel_error": ("fit error", fpct), "tpot_s": ("TPOT", fms),
        "model_implied_Bps": ("model bytes/s", fbw), "gpm_implied_Bps": ("GPM bytes/s", fbw)}))
    t["crossover"] = Table("Crossover: context where the KV read overtakes the weight read",
                           format_columns(a.crossover, {
        "engine_id": ("engine", str), "concurrency": ("batch", fnum),
        "predicted_crossover": ("predicted t*", fnum), "measured_crossover": ("measured t*", fnum),
        "rel_error": ("error", fpct)}),
        note="Measured t* = (intercept − fitted overhead) / slope of step time vs context at that batch.")
    eff = tvm.kv_dtype_effect(a.decode)
    if not eff.empty:
        t["kv_dtype"] = Table("fp8 vs 16-bit KV cache: decode step time, predicted vs measured", format_columns(eff, {
            "max_model_len": ("max len", fnum), "concurrency": ("batch", fnum), "prompt_len": ("prompt", fnum),
            "bytes_ratio": ("bytes read fp8/16", lambda x: f"{x:.3f}"),
            "predicted_step_ratio": ("predicted step fp8/16", lambda x: f"{x:.3f}"),
            "measured_step_ratio": ("measured step fp8/16", lambda x: f"{x:.3f}"), "rel_error": ("error", fpct)}),
            note="Predicted with the fitted model (overhead + bytes/BW_eff), which counts fp8's smaller KV read; "
                 "capacity is on the claims page.")
    t["claims"] = Table("The seeds' claims against the data", format_columns(a.claims, {
        "claim": ("claim", str), "verdict": ("verdict", str), "error": ("error", fpct),
        "tolerance": ("tolerance", lambda x: fpct(x).lstrip("+")), "evidence": ("evidence", str)}))
    t["divergences"] = Table("Largest divergences between theory and measurement",
                             format_columns(a.divergences.head(25), {
        "quantity": ("quantity", str), "where": ("where", str), "predicted": ("predicted", fnum),
        "measured": ("measured", fnum), "rel_error": ("error", fpct)}))
    if a.serve is not None:
        t.update(serve_tables(a.serve))
    if a.energy_unavailable is None:
        t["energy"] = energy_table(a.energy)
    failed = a.res.points[a.res.points["status"] != "ok"] if not a.res.points.empty else a.res.points
    t["failed"] = Table("Failed points", format_columns(failed, {
        "point_id": ("point", str), "status": ("status", str),
        "message": ("message", lambda m: textwrap.shorten(str(m), 90) if m is not None else "—")}))
    return t


# --- serve mode ---------------------------------------------------------------------------------

def _level(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(level=[serve_analysis.level_text(r) for r in df.to_dict("records")]) if not df.empty else df


def _text(x: Any) -> str:
    """A text cell: '—' where there is nothing (None or NaN)."""
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)


def _share(x: Any) -> str:
    return fpct(x).lstrip("+")


def overhead_finding(s: serve_analysis.ServeAnalysis) -> str | None:
    """The served-vs-offline finding in one sentence (the page's title), or None without a matched point."""
    f = s.fit
    if f is None:
        return None
    ms = f"{1e3 * abs(f.median_overhead_s):.3g} ms ({fpct(f.median_ratio)})"
    if f.median_overhead_s >= 0:
        return f"Serving adds {ms} per output token over the offline decode step (median of {f.n} points)"
    return f"Served TPOT is {ms} below the offline decode step (median of {f.n} points)"


def ceiling_finding(s: serve_analysis.ServeAnalysis) -> str | None:
    """The served ceiling against the prediction in one sentence, or None where nothing was measured or predicted."""
    c = s.ceiling
    if c.empty:
        return None
    # Where queueing or preemption began says most: the first such row, else the first row.
    began = c[[isinstance(v, str) for v in c["queueing_from"]]] if "queueing_from" in c else c.iloc[:0]
    r = (began if not began.empty else c).iloc[0]
    pred = r.get("predicted_ceiling")
    parts = []
    if r.get("sampled") and pd.notna(r.get("running_clean_max")):
        parts.append(f"ran up to {fnum(r['running_clean_max'])} requests with none waiting or preempted")
    if isinstance(r.get("queueing_from"), str):
        parts.append(f"{r['queueing_cause']} from {r['queueing_from']}"
                     + (f" ({fnum(r['queueing_running'])} running there)"
                        if pd.notna(r.get("queueing_running")) else ""))
    elif r.get("sampled"):
        parts.append("no level queued or preempted")
    if pred is not None and pd.notna(pred):
        parts.append(f"predicted ceiling {fnum(pred)} at {fnum(r['prompt_len'] + r['output_len'])} tokens")
    if not parts:
        return None
    return f"Served ceiling ({r['engine_id']}): " + "; ".join(parts)


def _first_line(message: Any) -> str:
    lines = message.strip().splitlines() if isinstance(message, str) else []
    return lines[0] if lines else "see its log"


def serve_lines(a: Analysis) -> list[str]:
    """The setup lines of a run with serve points: what loaded the server and the tokenizer it served with."""
    srv = a.res.servers
    down = [f"Server of {r['engine_id']} did not serve: {r['status']} — {_first_line(r['message'])}"
            for r in srv.to_dict("records") if r["status"] != "ok"] if not srv.empty else []
    s = a.serve
    if s is None:
        return down
    n = len(s.serve)
    servers = len(a.res.servers)
    return [*down, f"Serve: {n} point(s) through vLLM's OpenAI server ({servers} server(s)); load generator "
            f"{', '.join(s.load_generators) or '—'}", s.tokenizer_sentence]


def serve_tables(s: serve_analysis.ServeAnalysis) -> dict[str, Table]:
    """The serve pages' tables (only those with rows, but the served-vs-offline table always)."""
    t: dict[str, Table] = {}
    fit = s.fit.sentence if s.fit else ("No serve point matches an offline decode point (closed loop, no shared "
                                        "prefix, range 0, same engine, batch, prompt_len and output_len)")
    t["serve_offline"] = Table("Served vs offline: TPOT and ITL over the offline decode step at the same batch and "
                               "context", format_columns(s.matched, {
        "engine_id": ("engine", str), "concurrency": ("batch", fnum), "prompt_len": ("prompt", fnum),
        "output_len": ("output", fnum), "mean_context": ("context", fnum), "offline_step_s": ("offline step", fms),
        "offline_tpot_s": ("offline TPOT", fms), "served_tpot_s": ("served TPOT", fms),
        "tpot_overhead_s": ("TPOT overhead", fms), "tpot_overhead_ratio": ("TPOT +%", fpct),
        "served_itl_s": ("served ITL", fms), "itl_overhead_s": ("ITL overhead", fms),
        "itl_overhead_ratio": ("ITL +%", fpct)}),
        note=f"{fit}. Served: vLLM's benchmark client against the OpenAI server (median over requests); offline: "
             "kvprof's stepped engine (median decode step).")
    load = _level(pd.concat([s.closed, s.open], ignore_index=True))
    t["serve_load"] = Table("Serve latency vs load: TTFT and TPOT percentiles per level", format_columns(load, {
        "engine_id": ("engine", str), "level": ("level", str), "prompt_len": ("prompt", fnum),
        "output_len": ("output", fnum), "prefix_len": ("prefix", fnum), "ttft_p50_s": ("TTFT p50", fms),
        "ttft_p90_s": ("TTFT p90", fms), "ttft_p99_s": ("TTFT p99", fms), "tpot_p50_s": ("TPOT p50", fms),
        "tpot_p90_s": ("TPOT p90", fms), "tpot_p99_s": ("TPOT p99", fms),
        "output_tokens_per_s": ("tokens/s", fnum), "request_throughput": ("req/s", fnum), "failed": ("failed", fnum)}),
        note="Level: cN = at most N requests in flight, all sent at once (closed loop); R req/s = Poisson arrivals "
             "(open loop). " + s.tokenizer_sentence)
    t["serve_frontier"] = Table("Throughput–latency frontier: output tokens/s vs TPOT p50", format_columns(
        _level(s.frontier), {
            "engine_id": ("engine", str), "level": ("level", str), "prompt_len": ("prompt", fnum),
            "output_len": ("output", fnum), "prefix_len": ("prefix", fnum), "output_tokens_per_s": ("tokens/s", fnum),
            "tpot_p50_s": ("TPOT p50", fms), "e2el_p50_s": ("E2EL p50", fms), "pareto": ("Pareto-efficient", fnum)}),
        note="Pareto-efficient: no other point of the same lengths and prefix has at least its tokens/s at no more "
             "TPOT p50.")
    if not s.ceiling.empty:
        t["serve_ceiling"] = Table("Served concurrency ceiling: measured under load vs predicted", format_columns(
            s.ceiling, {
                "engine_id": ("engine", str), "prompt_len": ("prompt", fnum), "output_len": ("output", fnum),
                "running_clean_max": ("ran clean up to", fnum), "clean_level": ("at level", _text),
                "queueing_from": ("queued/preempted from", _text), "queueing_running": ("running there", fnum),
                "queueing_cause": ("cause", _text), "predicted_ceiling": ("predicted", fnum),
                "limited_by": ("limited by", _text), "vllm_arithmetic": ("vLLM's arithmetic", fnum),
                "num_blocks": ("KV blocks", fnum), "blocks_source": ("blocks from", _text),
                "max_num_seqs": ("max_num_seqs", fnum), "max_num_seqs_source": ("max_num_seqs from", _text),
                "note": ("note", lambda x: x or "—")}),
            note="Measured from the server's /metrics during each point (peak running and waiting requests, "
                 "preemptions; '—' where it was not sampled). Predicted: (KV blocks − 1) // ceil((prompt + output − "
                 "1) / block_size), capped by max_num_seqs. Waiting also counts requests queued for their prefill "
                 "chunk (max_num_batched_tokens).")
    if not s.goodput.empty:
        t["serve_goodput"] = Table("Goodput under the SLOs", format_columns(s.goodput, {
            "engine_id": ("engine", str), "level": ("level", str), "prompt_len": ("prompt", fnum),
            "output_len": ("output", fnum), "slo_ttft_s": ("SLO TTFT", fms), "slo_tpot_s": ("SLO TPOT", fms),
            "slo_e2el_s": ("SLO E2EL", fms), "request_throughput": ("req/s", fnum),
            "request_goodput": ("goodput req/s", fnum), "goodput_share": ("share", _share),
            "recomputed_goodput": ("recomputed", fnum), "agrees": ("agrees", fnum)}),
            note="Goodput: requests per second that met every SLO (vLLM's client); recomputed from the per-request "
                 "lists with TPOT = (E2EL − TTFT) / (output tokens − 1).")
    if not s.prefix.empty:
        t["serve_prefix"] = Table("Prefix sharing: KV usage and prefix-cache hits, measured vs predicted",
                                  format_columns(s.prefix, {
            "engine_id": ("engine", str), "level": ("level", str), "prompt_len": ("prompt", fnum),
            "output_len": ("output", fnum), "prefix_len": ("prefix", fnum), "shared_blocks": ("shared blocks", fnum),
            "running": ("running", fnum), "peak_kv_usage": ("peak KV", _share), "mean_kv_usage": ("mean KV", _share),
            "hit_rate": ("hit rate", _share), "predicted_usage_unshared": ("predicted, unshared", _share),
            "predicted_usage_shared": ("predicted, shared", _share), "predicted_saving": ("predicted saving", _share),
            "measured_saving": ("measured saving", _share)}),
            note="KV usage as vLLM reports it (share of the pool less its null block). Predicted at the observed "
                 "running requests, each holding prompt + output − 1 positions; with sharing the prefix's full "
                 "blocks (prefix // block_size) are held once.")
    return t


# --- headline ----------------------------------------------------------------------------------

def headline(a: Analysis) -> list[str]:
    lines = []
    cap = a.capacity
    if not cap.empty and "blocks_error" in cap:
        exact = int((cap["blocks_error"].abs() <= cap["blocks_tolerance"]).sum())
        lines.append(f"KV capacity: the allocator model matches vLLM's block count on {exact}/{len(cap)} engines "
                     f"(largest error {fnum(cap['blocks_error'].abs().max())} blocks).")
    if "ceiling_predicted" in cap and cap["ceiling_predicted"].notna().any():
        r = cap.dropna(subset=["ceiling_predicted"]).iloc[0]
        lines.append(f"Batch ceiling at {fnum(r['saturation_length'])} tokens: "
                     f"predicted {fnum(r['ceiling_predicted'])}, "
                     f"ran together up to {fnum(r['ceiling_measured_at_least'])}, preempted/queued from "
                     f"{fnum(r['ceiling_measured_below'])}; vLLM's own arithmetic says "
                     f"{fnum(r['ceiling_vllm_arithmetic'])}.")
    if "kv_budget_rel_error" in cap and cap["kv_budget_rel_error"].notna().any():
        lines.append("KV budget on the GPU: vLLM's accounting as kvprof predicts it off by "
                     f"{fpct(cap['kv_budget_rel_error'].median())} "
                     f"(median over engines).")
    f = a.fit
    if f is not None:
        mbu = "; ".join(s for s in (f"MBU {100 * f.mbu_spec:.0f}% of spec" if f.mbu_spec else "",
                                    f"{100 * f.mbu_probe:.0f}% of the probed copy bandwidth" if f.mbu_probe else "")
                        if s)
        lines.append("Decode fit: " + (f"{f.regime.kind}-dominated sweep "
                                       f"({100 * f.regime.overhead_share:.0f}% of the step fixed overhead); "
                                       if f.regime else "")
                     + f"effective bandwidth {fbw(f.effective_bandwidth_Bps)}"
                     f"{' (' + mbu + ')' if mbu else ''}, fixed overhead {fms(f.step_overhead_s)} per step, "
                     f"R² {f.r2:.3f}, leave-one-out median error {fpct(f.loo_median_abs_rel_error).lstrip('+')}"
                     + (f" — {f.note}." if f.note else "."))
    elif ("flagged" in a.decode and a.decode["flagged"].notna().any()
          and (quiet := int(a.decode["flagged"].isna().sum())) < 3):
        # The fit needs one point more than its two terms (overhead, bandwidth); flagged points are left out.
        flagged = a.decode["flagged"].dropna()
        lines.append(f"Decode fit: none — {len(flagged)} of {len(a.decode)} decode points were noisy or contended "
                     f"({flagged.iloc[0]}) and are left out, leaving {quiet}, fewer than the 3 the fit needs; rerun "
                     "on a quiet machine, or `kvprof report --fit-flagged` to fit them anyway.")
    if not a.claims.empty:
        counts = a.claims["verdict"].value_counts()
        lines.append("Claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + ".")
    if a.serve is not None:
        lines += [x + "." for x in (overhead_finding(a.serve), ceiling_finding(a.serve)) if x]
    if not a.divergences.empty:
        # The largest divergence of each kind of quantity, not three noisy points of one kind.
        top = a.divergences.dropna(subset=["rel_error"])
        top = top[top["rel_error"].abs() > 1e-9].drop_duplicates("quantity").head(3)
        for r in top.itertuples(index=False):
            lines.append(f"Divergence: {r.quantity} at {r.where}: predicted {fnum(r.predicted)}, "
                         f"measured {fnum(r.measured)} ({fpct(r.rel_error)}).")
    return lines


def _untested(e: pd.DataFrame) -> str:
    """Names a vLLM release kvprof is not tested with (its driver and log parser may not fit it)."""
    from analysis.results.schema import TESTED_VLLM_VERSIONS

    if "tested_vllm_version" not in e or not (e["tested_vllm_version"] == False).any():  # noqa: E712
        return ""
    return f" (NOT a version kvprof is tested with: {', '.join(TESTED_VLLM_VERSIONS)})"


def setup_lines(a: Analysis) -> list[str]:
    m, e = a.res.manifest, a.res.engines
    # A serve-only sweep has no engine record: its server records say which model and vLLM ran.
    first = e.iloc[0] if not e.empty else a.res.servers.iloc[0] if not a.res.servers.empty else {}

    def get(k: str) -> Any:
        return first.get(k) if hasattr(first, "get") else None

    started = m.get("started_at")
    when = dt.datetime.fromtimestamp(started, dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if started else "—"
    probe = a.res.probe or {}
    pts = a.res.points
    ok = int((pts["status"] == "ok").sum()) if not pts.empty else 0
    return [
        f"Sweep: {m.get('name')} ({when}, status {m.get('status')})",
        f"Model: {get('model')}  ·  KV dtypes: {', '.join(sorted(map(str, e['kv_cache_dtype'].dropna().unique())))}"
        if not e.empty else f"Model: {get('model') or '—'}",
        f"Device: {get('gpu_name') or get('device')}  ·  driver {get('driver') or '—'}  ·  host {m.get('host')}",
        f"vLLM {get('vllm_version')}{_untested(e)}  ·  torch {get('torch_version')}  ·  "
        f"kvprof {m.get('kvprof_version')}",
        f"Engines: {len(e)}  ·  points: {ok} ok of {len(pts)}  ·  engine launches: {m.get('engine_launches')}",
        *_parallel_lines(m, pts),
        *serve_lines(a),
        *_skipped_lines(m),
        *(f"Warning: {w}" for w in a.res.warnings),  # what the load left out (analysis.results.load), and why
        f"Ceilings: spec {fbw(a.ceilings.spec_bandwidth_Bps)}, probe copy {fbw(a.ceilings.probe_bandwidth_Bps)}, "
        f"probe bf16 matmul {fnum((a.ceilings.probe_flops or float('nan')) / 1e12)} TFLOP/s"
        + (f" ({probe.get('device')})" if probe else ""),
    ]


def _parallel_lines(manifest: dict[str, Any], points: pd.DataFrame) -> list[str]:
    """A sweep whose engines ran side by side (`--devices`): where, and which points were measured while
    another engine ran (they shared the host's CPU, memory bandwidth and PCIe with it)."""
    pool = manifest.get("device_pool") or []
    ray = manifest.get("ray")
    if not pool and not ray:
        return []
    beside = points[points["beside"].astype(bool)] if "beside" in points else points.iloc[:0]
    shown = ", ".join(beside["point_id"].map(lambda i: i.split("--", 1)[-1]).head(5))
    where = (f"the Ray cluster at {ray['address']} ({len(ray['nodes'])} node(s): "
             + ", ".join(f"{n['ip']} with {n['devices']} {ray['resource']}" for n in ray["nodes"][:4])
             + (", …" if len(ray["nodes"]) > 4 else "") + ")") if ray else ", ".join(pool)
    return [f"Engines ran side by side on {where} (isolation {manifest.get('isolation')}, at most "
            f"{manifest.get('max_concurrent_engines')} at once): {len(beside)} of {len(points)} points were measured "
            "while another engine ran on the same machine (column beside in results.parquet)"
            + (f", e.g. {shown}" if shown else "")]


def _skipped_lines(manifest: dict[str, Any]) -> list[str]:
    """One line per reason whole engines were skipped before the sweep started (the manifest's dropped
    entries that carry an engine), e.g. fp8 KV on a CPU without AVX-512."""
    by_reason: dict[str, list[str]] = {}
    for d in manifest.get("dropped") or []:
        if d.get("engine"):
            by_reason.setdefault(d["reason"], []).append(d["engine"].get("kv_cache_dtype", "?"))
    return [f"Skipped engines: {len(kinds)} ({', '.join(sorted(set(kinds)))} KV) — {reason}"
            for reason, kinds in by_reason.items()]


# --- outputs beside the report ------------------------------------------------------------------

def calibration(a: Analysis) -> dict[str, Any]:
    """calibration.json for `kvprof plan --calibration`: the fitted decode model and the measured reserve."""
    e = a.res.engines.iloc[0]
    cap = a.capacity
    reserve = None
    if "predicted_kv_budget_bytes" in cap and cap["kv_budget_bytes"].notna().any():
        # Measured reserve: what the heuristic predicted plus how far the real budget fell short of it.
        r = cap.dropna(subset=["predicted_kv_budget_bytes"]).iloc[0]
        reserve = int(r["predicted_reserve_bytes"] + r["predicted_kv_budget_bytes"] - r["kv_budget_bytes"])
    probe = a.res.probe or {}
    out = calibration_dict(a.fit, device=e.get("gpu_name") or e.get("device"), vllm_version=e.get("vllm_version"),
                            model=e.get("model"), kv_cache_dtype=e.get("kv_cache_dtype"), reserve_bytes=reserve,
                            source=f"kvprof fit of {a.res.root.name} ({a.fit.n} decode points)",
                            model_dtype=e.get("model_dtype"),
                            model_dir=e.get("model_dir"), model_sha256=e.get("requested_model_sha256"),
                            weights=e.get("requested_weights"),
                            device_type=probe.get("device_type") or ("cuda" if a.ceilings.gpu else None),
                            device_memory_bytes=probe.get("memory_total_bytes") or e.get("device_memory_bytes"))
    if (power := energy_mod.measured_power(a.energy)) is not None:
        out["power"] = power
    # written through the model `kvprof plan --calibration` reads it with: a key it would refuse is never written
    return Calibration.model_validate(out).model_dump(mode="json")


def results_table(a: Analysis) -> pd.DataFrame:
    """One tidy row per point: the record's measurements joined with the theory columns."""
    pts = a.res.points.copy()
    if not a.decode.empty:
        theory = [c for c in a.decode.columns if c not in pts.columns or c == "point_id"]
        pts = pts.merge(a.decode[theory], on="point_id", how="left")
    if a.serve is not None:  # serve points: their statistics (the serve table's columns the points table lacks)
        served = [c for c in a.serve.serve.columns if c not in pts.columns or c == "point_id"]
        pts = pts.merge(a.serve.serve[served], on="point_id", how="left")
    for col in pts.columns:  # parquet needs one type per column
        if pts[col].dtype == object:
            pts[col] = pts[col].map(lambda v: v if v is None or isinstance(v, str) else str(v))
    return pts


# --- capacity at each swept length (the report's first page) ------------------------------------------------

def capacity_at_lengths(a: Analysis) -> pd.DataFrame:
    """Per engine and sequence length (its decode points' prompt + output, the saturation phase's length, and
    max_model_len): the sequences that fit together by the textbook arithmetic (KV budget ÷ contiguous bytes per
    sequence, rounded down), in the allocator model's pool and in vLLM's own pool (both through the allocator's
    blocks per sequence and its null block; max_num_seqs not applied), and the saturation phase's measured
    ceiling at its length. A sequence of prompt + output tokens holds prompt + output − 1 KV positions (the last
    token is never fed back); at max_model_len, max_model_len positions (vLLM's own arithmetic)."""
    import dataclasses

    from analysis.model.kv import ideal_capacity
    from analysis.vllm.allocator import NotModelled, kv_ceiling, paged_capacity

    cols = ["engine_id", "length", "positions", "kind", "ideal", "model", "vllm", "measured_at_least",
            "measured_below"]
    rows: list[dict[str, Any]] = []
    cap, dec, e = a.capacity, a.decode, a.res.engines
    if cap.empty or e.empty or "num_blocks_predicted" not in cap:
        return pd.DataFrame(columns=cols)
    engines = e.set_index("engine_id")
    for r in cap.to_dict("records"):
        eid = r["engine_id"]
        if pd.isna(r.get("num_blocks_predicted")) or pd.isna(r.get("kv_budget_bytes")) or eid not in engines.index:
            continue
        er = engines.loc[eid]
        arch = tvm.architecture(er["model_dir"], er["model"], tvm._model_dtype(er), tvm._config(er))
        if arch is None:
            continue
        try:
            tp = int(er["tensor_parallel_size"]) if pd.notna(er["tensor_parallel_size"]) else 1
            mml, dtype = int(r["max_model_len"]), r["kv_cache_dtype"]
            mnbt = int(er["max_num_batched_tokens"])
            run_async = bool(er["async_scheduling"]) if pd.notna(er["async_scheduling"]) else False
            model = paged_capacity(arch, int(r["kv_budget_bytes"]), block_size=int(r["block_size"]),
                                   max_model_len=mml, max_num_batched_tokens=mnbt, kv_cache_dtype=dtype, tp=tp,
                                   async_scheduling=run_async)
        except (NotModelled, ValueError, TypeError):  # a setting the allocator model cannot take: no row
            continue
        pools = {"model": model, "vllm": dataclasses.replace(model, num_blocks=int(r["num_blocks_vllm"]))}
        lengths: dict[int, tuple[int, str]] = {}
        mine = dec[dec["engine_id"] == eid] if not dec.empty else dec
        for length in sorted({int(p + o) for p, o in zip(mine.get("prompt_len", []), mine.get("output_len", []),
                                                         strict=True)}):
            lengths[length] = (length - 1, "decode")
        sat = r.get("saturation_length")
        if sat is not None and pd.notna(sat):
            lengths[int(sat)] = (int(sat) - 1, "saturation")
        lengths[mml] = (mml, "max_model_len")
        for length, (positions, kind) in sorted(lengths.items()):
            if positions > mml or positions <= 0:
                continue
            row = {"engine_id": eid, "length": length, "positions": positions, "kind": kind,
                   "ideal": math.floor(ideal_capacity(arch, int(r["kv_budget_bytes"]), positions, dtype, tp)
                                       .max_concurrency)}
            for name, pool in pools.items():
                row[name] = kv_ceiling(pool, positions, None, mnbt, run_async).kv_limit
            if kind == "saturation":
                row["measured_at_least"] = r.get("ceiling_measured_at_least")
                row["measured_below"] = r.get("ceiling_measured_below")
            rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def fjoules(x: Any) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{float(x):,.4g} J"


def energy_table(e: pd.DataFrame) -> Table:
    """The energy page's table: each measured point's energy over its window and per token."""
    measured = e[e["energy_j"].notna()]
    methods = sorted(set(measured["method"].dropna()))
    counted = sorted(set(measured["counted"].dropna()))
    return Table("Energy per token: each point's energy over its window ÷ the tokens in it", format_columns(measured, {
        "engine_id": ("engine", str), "phase": ("phase", str), "concurrency": ("batch", fnum),
        "prompt_len": ("prompt", fnum), "output_len": ("output", fnum), "window_s": ("window", lambda x: f"{x:.2f} s"),
        "energy_j": ("energy", fjoules), "energy_above_idle_j": ("above idle", fjoules),
        "mean_power_w": ("mean W", fnum), "peak_power_w": ("peak W (one GPU)", fnum),
        "j_per_output_token": ("J / output token", fnum), "j_per_prompt_token": ("J / prompt token", fnum),
        "output_tokens_per_j": ("output tokens / J", fnum)}),
        note=f"Counted: {'; '.join(counted) or '—'} (not the host's fans, DRAM or power supplies). Measured by: "
             f"{'; '.join(methods) or '—'}. A window holds the point's warm-up and prefill too, so J / output "
             "token is what a generated token cost, prefill included.")


def energy_headline(a: Analysis) -> str:
    """Page one's line on energy: the range of J per output token, or why there is none."""
    if a.energy_unavailable is not None:
        return f"Energy: not measured — {textwrap.shorten(a.energy_unavailable, 160)}"
    m = a.energy[a.energy["j_per_output_token"].notna()]
    if m.empty:
        return "Energy: measured, but no point's tokens are known"
    lo, hi = m["j_per_output_token"].min(), m["j_per_output_token"].max()
    counted = "; ".join(sorted(set(m["counted"].dropna())))
    return (f"Energy: {fnum(lo)}–{fnum(hi)} J per output token over {len(m)} point(s) ({counted}; "
            f"mean draw up to {fnum(m['mean_power_w'].max())} W)")
