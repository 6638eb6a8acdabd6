"""Serve mode analysed: the served engine (vLLM's OpenAI server under vLLM's own benchmark client) beside the
offline decode step, its latency under load, the throughput–latency frontier, the served concurrency ceiling
against the allocator's prediction, goodput under the SLOs and prefix sharing's effect on KV usage.

Reads the loaded results' ``serve`` table (analysis.results.load: one row per serve point, statistics in seconds) and
the records it came from; nothing here imports vLLM. Every function returns an empty frame where the run has
nothing to say (no serve points, no matching offline point, no /metrics samples).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from analysis.results.load import Results
from analysis.vllm.allocator import (
    NotModelled,
    batch_ceiling,
    blocks_for_sequence,
    paged_capacity,
    usage_fraction,
)

# Which latency the overhead and the frontier read: vLLM's median over requests (TPOT) or over gaps (ITL).
SERVED_TPOT, SERVED_ITL = "tpot_median_s", "itl_median_s"
# Tolerance on goodput recomputed from the per-request lists vs the client's own figure (float noise only).
GOODPUT_REL_TOL = 1e-6


def _num(v: Any) -> float | None:
    """A finite float, or None for a missing value (None, NaN, absent)."""
    if v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    """A column as floats, NaN where the table lacks it (telemetry off, an older directory)."""
    return pd.to_numeric(df[name], errors="coerce").astype(float) if name in df else pd.Series(np.nan, index=df.index)


def level_text(row: Any) -> str:
    """A serve point's load level in words: 'c16' (closed loop), '4 req/s' (open loop, '≤c8' with a cap)."""
    get = row.get if hasattr(row, "get") else lambda k, d=None: getattr(row, k, d)
    rate, c = _num(get("request_rate")), _num(get("concurrency"))
    if rate is None:
        return f"c{int(c)}" if c is not None else "—"
    return f"{rate:g} req/s" + (f" ≤c{int(c)}" if c is not None else "")


# --- (a) served vs offline -------------------------------------------------------------------------

def served_vs_offline(serve: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Per closed-loop serve point without a shared prefix or length spread: the offline decode point of the same
    engine, batch (concurrency), prompt_len and output_len, and what serving adds over its decode step
    (served TPOT and ITL medians − the offline median step; the ratio as served / offline − 1)."""
    if serve.empty or points.empty or "phase" not in points or "decode_step_s" not in points:
        return pd.DataFrame()
    s = serve[(serve["loop"] == "closed") & (serve["prefix_len"] == 0) & (serve["range_ratio"] == 0)]
    d = points[(points["phase"] == "decode") & (points["status"] == "ok")]
    if s.empty or d.empty:
        return pd.DataFrame()
    keys = ["engine_id", "concurrency", "prompt_len", "output_len"]
    d = d.assign(concurrency=d["concurrency"].astype(float))[[*keys, "point_id", "decode_step_s", "tpot_s",
                                                              "mean_context"]]
    d = d.drop_duplicates(keys).rename(columns={"point_id": "offline_point_id", "decode_step_s": "offline_step_s",
                                                "tpot_s": "offline_tpot_s"})
    s = s.assign(concurrency=s["concurrency"].astype(float))
    cols = [*keys, "point_id", SERVED_TPOT, SERVED_ITL, "tpot_p90_s", "tpot_p99_s", "ttft_median_s"]
    m = s[[c for c in cols if c in s]].merge(d, on=keys, how="inner")
    m = m[_col(m, "offline_step_s") > 0]
    if m.empty:
        return pd.DataFrame()
    m = m.rename(columns={SERVED_TPOT: "served_tpot_s", SERVED_ITL: "served_itl_s"})
    m["concurrency"] = m["concurrency"].astype(int)
    for q in ("tpot", "itl"):
        served = _col(m, f"served_{q}_s")
        m[f"{q}_overhead_s"] = served - m["offline_step_s"]
        m[f"{q}_overhead_ratio"] = served / m["offline_step_s"] - 1
    return m.sort_values(["engine_id", "prompt_len", "concurrency"]).reset_index(drop=True)


@dataclass
class OverheadFit:
    """served TPOT ≈ slope · offline step + intercept over the matched points (the serving stack's overhead as a
    line); with one point (or one step time) no line is fitted and only the ratio is given."""

    n: int
    median_overhead_s: float
    median_ratio: float  # served / offline − 1, median over points
    slope: float | None = None
    intercept_s: float | None = None
    r2: float | None = None
    note: str = ""

    @property
    def sentence(self) -> str:
        med = f"{1e3 * self.median_overhead_s:+.3f} ms ({100 * self.median_ratio:+.1f} %)"
        if self.slope is None:
            return (f"Served TPOT − offline decode step: {med} over {self.n} matched point(s); {self.note}")
        b = 1e3 * (self.intercept_s or 0.0)
        return (f"served TPOT ≈ {self.slope:.3f} × offline step {'+' if b >= 0 else '−'} {abs(b):.3f} ms "
                f"(R² {self.r2:.3f}, {self.n} points); median overhead {med}" + (f"; {self.note}" if self.note else ""))


def overhead_fit(matched: pd.DataFrame) -> OverheadFit | None:
    """The line through (offline step, served TPOT) by least squares (scipy.stats.linregress), or the ratio alone
    where the points cannot fix a line (one point, or every point at the same step time)."""
    if matched.empty:
        return None
    m = matched.dropna(subset=["offline_step_s", "served_tpot_s"])
    if m.empty:
        return None
    x, y = m["offline_step_s"].to_numpy(float), m["served_tpot_s"].to_numpy(float)
    fit = OverheadFit(n=len(m), median_overhead_s=float(np.median(y - x)), median_ratio=float(np.median(y / x - 1)))
    if len(m) < 2 or np.ptp(x) == 0:
        fit.note = ("one matched point: the ratio only, no line" if len(m) < 2
                    else "every matched point has the same offline step: the ratio only, no line")
        return fit
    r = stats.linregress(x, y)
    fit.slope, fit.intercept_s, fit.r2 = float(r.slope), float(r.intercept), float(r.rvalue ** 2)
    if len(m) == 2:
        fit.note = "two points: the line passes through both (R² says nothing)"
    return fit


# --- (b) latency vs load, (c) frontier -------------------------------------------------------------

LOAD_COLUMNS = ["engine_id", "point_id", "loop", "concurrency", "request_rate", "burstiness", "prompt_len",
                "output_len", "prefix_len", "range_ratio", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s",
                "tpot_p90_s", "tpot_p99_s", "itl_p50_s", "e2el_p50_s", "output_tokens_per_s", "request_throughput",
                "completed", "failed"]


def load_curves(serve: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """TTFT and TPOT percentiles per serve point: closed loop (by concurrency) and open loop (by request rate)."""
    if serve.empty:
        return pd.DataFrame(), pd.DataFrame()
    s = serve[[c for c in LOAD_COLUMNS if c in serve]]
    closed = s[s["loop"] == "closed"].sort_values(["engine_id", "prompt_len", "output_len", "prefix_len",
                                                  "concurrency"])
    opened = s[s["loop"] == "open"].sort_values(["engine_id", "prompt_len", "output_len", "prefix_len",
                                                "request_rate"])
    return closed.reset_index(drop=True), opened.reset_index(drop=True)


def frontier(serve: pd.DataFrame, latency: str = "tpot_p50_s") -> pd.DataFrame:
    """Output tokens/s against a latency per serve point, with ``pareto`` set where no other point of the same
    workload (prompt_len, output_len, prefix_len) has at least its throughput at no more latency, one strictly."""
    if serve.empty:
        return pd.DataFrame()
    cols = ["engine_id", "point_id", "loop", "concurrency", "request_rate", "prompt_len", "output_len", "prefix_len",
            "output_tokens_per_s", "tpot_p50_s", "e2el_p50_s", "ttft_p50_s"]
    f = serve[[c for c in cols if c in serve]].copy()
    f["latency_s"] = _col(f, latency)
    if latency != "e2el_p50_s":  # a run without TPOT (one output token): fall back to end-to-end latency
        f["latency_s"] = f["latency_s"].fillna(_col(f, "e2el_p50_s"))
    f["pareto"] = False
    for _, g in f.dropna(subset=["latency_s", "output_tokens_per_s"]).groupby(["prompt_len", "output_len",
                                                                             "prefix_len"]):
        tput, lat = g["output_tokens_per_s"].to_numpy(float), g["latency_s"].to_numpy(float)
        for idx, t, lt in zip(g.index, tput, lat, strict=True):
            dominated = ((tput >= t) & (lat <= lt) & ((tput > t) | (lat < lt))).any()
            f.loc[idx, "pareto"] = not dominated
    return f.sort_values(["prompt_len", "output_len", "prefix_len", "latency_s"]).reset_index(drop=True)


# --- (d) the served concurrency ceiling ------------------------------------------------------------

@dataclass
class ServedPool:
    """The KV pool and batching limits the server ran with, and where each came from."""

    num_blocks: int | None
    blocks_source: str
    max_num_seqs: int | None
    seqs_source: str
    max_num_batched_tokens: int
    async_scheduling: bool
    capacity: Any = None  # analysis.vllm.allocator.PagedCapacity with num_blocks set, or None
    note: str = ""


def _engine_row(res: Results, eid: str) -> dict[str, Any] | None:
    e = res.engines
    if e.empty or "engine_id" not in e or eid not in set(e["engine_id"]):
        return None
    return e[e["engine_id"] == eid].iloc[0].to_dict()


def _blocks_from_tokens(tokens: int, blocks_per_request: int, max_model_len: int) -> int | None:
    """The block count whose logged 'GPU KV cache size' is ``tokens``: vLLM logs
    int(num_blocks / blocks_per_request × max_model_len)."""
    guess = math.ceil(tokens * blocks_per_request / max_model_len)
    for n in (guess - 1, guess, guess + 1):
        if n > 0 and int(n / blocks_per_request * max_model_len) == tokens:
            return n
    return None


def served_pool(res: Results, eid: str) -> ServedPool:
    """The served engine's pool: the server's own start-up log where it states the KV cache (the server profiles
    its memory itself), the offline engine record's capacity facts where they agree with it or the log is
    silent; max_num_seqs as the server logged or was given it, else the engine's request, else vLLM's default
    for the OpenAI server (analysis.vllm.budget.vllm_default_batching, entry 'serve')."""
    from analysis.measured import theory_vs_measured as tvm
    from analysis.vllm.budget import vllm_default_batching

    srv = res.server_records.get(eid)
    eng = res.engine_records.get(eid)
    row = _engine_row(res, eid) or {}
    settings = srv.engine if srv else (eng.engine if eng else None)
    log = srv.startup_log if srv else None
    kwargs = srv.server_kwargs if srv else {}
    facts = eng.capacity if eng and eng.status == "ok" else None
    tp = settings.tensor_parallel_size if settings else 1
    mml = settings.max_model_len if settings else None
    gpu = tvm.device_gpu(row.get("gpu_name") or row.get("device"))
    try:
        default_mnbt, default_seqs = vllm_default_batching(
            int(row["device_memory_bytes"]) if gpu is not None and _num(row.get("device_memory_bytes")) else None,
            gpu.name if gpu else "", "serve", world_size=tp, max_model_len=mml)
    except (ValueError, KeyError, TypeError):
        default_mnbt, default_seqs = (facts.max_num_batched_tokens, facts.max_num_seqs) if facts else (8192, None)
    seqs, seqs_source = None, "not known"
    for value, source in ((log.max_num_seqs if log else None, "server log"),
                          (kwargs.get("max_num_seqs"), "server arguments"),
                          (settings.max_num_seqs if settings else None, "engine setting"),
                          (default_seqs, "vLLM's serve default")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            seqs, seqs_source = value, source
            break
    mnbt = next((v for v in (log.max_num_batched_tokens if log else None, kwargs.get("max_num_batched_tokens"),
                             settings.max_num_batched_tokens if settings else None, default_mnbt)
                 if isinstance(v, int) and v > 0), 8192)
    asynchronous = kwargs.get("async_scheduling")
    if not isinstance(asynchronous, bool):
        asynchronous = facts.async_scheduling if facts else False
    pool = ServedPool(None, "not known", seqs, seqs_source, mnbt, asynchronous)
    if settings is None:
        pool.note = "no engine or server record"
        return pool
    arch = tvm.architecture(row.get("model_dir") or settings.model_dir,
                            row.get("model") or (settings.model_dir.rstrip("/").split("/")[-1]),
                            row.get("model_dtype") if isinstance(row.get("model_dtype"), str) else None,
                            row.get("model_config_json") if isinstance(row.get("model_config_json"), str) else None)
    if arch is None:
        pool.note = "the model's architecture is not known here"
        return pool
    try:
        cap = paged_capacity(arch, 0, block_size=settings.block_size, max_model_len=settings.max_model_len,
                             max_num_batched_tokens=mnbt, kv_cache_dtype=settings.kv_cache_dtype, tp=tp,
                             async_scheduling=asynchronous)
    except NotModelled as exc:
        pool.note = str(exc)
        return pool
    tokens = log.log_kv_cache_tokens if log else None
    blocks, source = None, "not known"
    if log and log.log_num_gpu_blocks:
        blocks, source = log.log_num_gpu_blocks, "server log"
    elif facts and (tokens is None or facts.kv_cache_size_tokens in (None, tokens)):
        blocks, source = facts.num_gpu_blocks, "offline engine record"
    elif tokens is not None:
        blocks = _blocks_from_tokens(tokens, cap.blocks_per_request, settings.max_model_len)
        source = "server log (KV cache tokens)" if blocks else "not known"
        if blocks and facts:
            pool.note = (f"the server's pool ({blocks:,} blocks) differs from the offline engine's "
                         f"({facts.num_gpu_blocks:,})")
    pool.num_blocks, pool.blocks_source = blocks, source
    if blocks:
        pool.capacity = dataclasses.replace(cap, num_blocks=blocks)
    return pool


def _preemptions(df: pd.DataFrame) -> pd.Series:
    """Preemptions during each point: the server's /metrics aggregate, else the counters' rise."""
    return _col(df, "tel_server_preemptions").fillna(_col(df, "counter_preemptions"))


def served_ceiling(res: Results) -> pd.DataFrame:
    """Per engine and length (serve points without a shared prefix): the most requests the server ran with
    none waiting and no preemption, the first load level where requests waited or were preempted, and the
    allocator's predicted ceiling at prompt_len + output_len for the served pool."""
    s = res.serve
    if s.empty:
        return pd.DataFrame()
    s = s[s["prefix_len"] == 0].copy()
    s["running"] = _col(s, "tel_server_peak_requests_running")
    s["waiting"] = _col(s, "tel_server_peak_requests_waiting")
    s["preempted"] = _preemptions(s)
    s["_order"] = list(zip(s["loop"] != "closed", _col(s, "concurrency").fillna(np.inf),
                           _col(s, "request_rate").fillna(0), strict=True))
    rows = []
    for (eid, p, o), g in s.groupby(["engine_id", "prompt_len", "output_len"]):
        g = g.sort_values("_order")
        seen = g.dropna(subset=["running", "waiting"])
        clean = seen[(seen["waiting"] == 0) & (seen["preempted"].fillna(0) == 0)]
        queued = seen[(seen["waiting"] > 0) | (seen["preempted"].fillna(0) > 0)]
        row: dict[str, Any] = {"engine_id": eid, "prompt_len": int(p), "output_len": int(o), "levels": len(g),
                               "sampled": not seen.empty,
                               "running_clean_max": float(clean["running"].max()) if not clean.empty else None,
                               "clean_level": level_text(clean.loc[clean["running"].idxmax()])
                               if not clean.empty else None}
        if not queued.empty:
            q = queued.iloc[0]
            row.update(queueing_from=level_text(q), queueing_running=q["running"], queueing_waiting=q["waiting"],
                       queueing_preemptions=q["preempted"],
                       queueing_cause=" and ".join(w for w, hit in (("waiting", q["waiting"] > 0),
                                                                      ("preemption", (q["preempted"] or 0) > 0))
                                                   if hit))
        pool = served_pool(res, eid)
        row.update(num_blocks=pool.num_blocks, blocks_source=pool.blocks_source, max_num_seqs=pool.max_num_seqs,
                   max_num_seqs_source=pool.seqs_source, note=pool.note)
        if pool.capacity is not None:
            ceil = batch_ceiling(pool.capacity, int(p), int(o), pool.max_num_seqs, pool.max_num_batched_tokens,
                                 pool.async_scheduling)
            row.update(predicted_ceiling=ceil.ceiling, limited_by=ceil.limited_by,
                       vllm_arithmetic=ceil.vllm_reported)
            if row["running_clean_max"] is not None:
                row["clean_vs_predicted"] = row["running_clean_max"] - ceil.ceiling
        rows.append(row)
    return pd.DataFrame(rows)


# --- (e) goodput -----------------------------------------------------------------------------------

def good_requests(ttft_s: list[float], e2el_s: list[float], output_len: list[int], slo: dict[str, float]) -> int:
    """Requests meeting every SLO as vLLM's client counts them (vllm/benchmarks/serve.py calculate_metrics):
    TPOT per request = (e2el − ttft) / (output_len − 1), 0 for a single output token; a request is good when
    each bound ≥ its value."""
    good = 0
    for t, e, n in zip(ttft_s, e2el_s, output_len, strict=True):
        tpot = (e - t) / (n - 1) if n > 1 else 0.0
        value = {"ttft_s": t, "tpot_s": tpot, "e2el_s": e}
        if all(bound >= value[k] for k, bound in slo.items() if k in value):
            good += 1
    return good


def goodput_table(res: Results) -> pd.DataFrame:
    """Per serve point with SLOs: the client's goodput and its share of the request throughput, and the same
    goodput recomputed from the per-request lists (``agrees``: within float noise)."""
    s = res.serve
    if s.empty:
        return pd.DataFrame()
    rows = []
    for r in s.to_dict("records"):
        rec = res.serve_records.get(r["point_id"])
        if rec is None or not rec.measurements.slo:
            continue
        m = rec.measurements
        row = {"engine_id": r["engine_id"], "point_id": r["point_id"], "level": level_text(r),
               "prompt_len": r["prompt_len"], "output_len": r["output_len"], "prefix_len": r["prefix_len"],
               **{f"slo_{k}": m.slo.get(k) for k in ("ttft_s", "tpot_s", "e2el_s")},
               "request_throughput": m.request_throughput, "request_goodput": m.request_goodput,
               "goodput_share": (m.request_goodput / m.request_throughput
                                 if m.request_goodput is not None and m.request_throughput > 0 else None)}
        req = m.requests
        lengths = {len(req.ttft_s), len(req.e2el_s), len(req.output_len)}
        if req.ttft_s and len(lengths) == 1:
            good = good_requests(req.ttft_s, req.e2el_s, req.output_len, m.slo)
            row.update(good_requests=good, requests=len(req.ttft_s), recomputed_goodput=good / m.duration_s)
            if m.request_goodput is not None:
                row["agrees"] = bool(abs(row["recomputed_goodput"] - m.request_goodput)
                                     <= GOODPUT_REL_TOL * max(m.request_goodput, 1e-12))
        rows.append(row)
    return pd.DataFrame(rows)


# --- (f) prefix sharing ----------------------------------------------------------------------------

PREFIX_KEYS = ["engine_id", "loop", "concurrency", "request_rate", "burstiness", "num_requests", "prompt_len",
               "output_len", "range_ratio"]


def shared_prefix_usage(running: float, prompt_len: int, output_len: int, prefix_len: int, block_size: int,
                        num_blocks: int, sharing: bool = True) -> float:
    """KV usage (vLLM's kv_cache_usage_perc, 0..1 of the pool less its null block) the allocator predicts for
    ``running`` requests each holding prompt_len + output_len − 1 positions, the prefix's full blocks
    (prefix_len // block_size) held once for all of them when ``sharing`` (prefix caching), else per request."""
    per_request = blocks_for_sequence(prompt_len + output_len - 1, block_size)
    shared = prefix_len // block_size if sharing else 0
    used = running * per_request - (running - 1) * shared if running >= 1 else 0
    return usage_fraction(used, num_blocks)


def prefix_sharing(res: Results) -> pd.DataFrame:
    """Serve points that differ only in prefix_len, side by side: peak and mean KV usage and the prefix-cache hit
    rate measured, and the usage the allocator predicts with and without sharing at the observed running
    requests (``predicted_saving``: the difference), beside the measured saving against the unshared point."""
    s = res.serve
    if s.empty or s["prefix_len"].nunique() < 2:
        return pd.DataFrame()
    s = s.copy()
    keys = [k for k in PREFIX_KEYS if k in s]
    s[keys] = s[keys].astype(object).where(s[keys].notna(), None)  # None groups with None
    s["running"] = _col(s, "tel_server_peak_requests_running")
    s["peak_kv_usage"] = _col(s, "tel_server_peak_kv_cache_usage")
    s["mean_kv_usage"] = _col(s, "tel_server_mean_kv_cache_usage")
    hits, queries = _col(s, "counter_prefix_cache_hits"), _col(s, "counter_prefix_cache_queries")
    s["hit_rate"] = _col(s, "tel_server_prefix_cache_hit_rate").fillna(hits / queries.where(queries > 0))
    rows = []
    for _, g in s.groupby(keys, dropna=False):
        if g["prefix_len"].nunique() < 2:
            continue
        pool = served_pool(res, g["engine_id"].iloc[0])
        base = g[g["prefix_len"] == 0]
        base_peak = float(base["peak_kv_usage"].iloc[0]) if not base.empty else None
        caching = g["enable_prefix_caching"].iloc[0] if "enable_prefix_caching" in g else None
        for r in g.sort_values("prefix_len").to_dict("records"):
            bs = int(r["block_size"])
            row = {k: r[k] for k in keys} | {
                "level": level_text(r), "prefix_len": int(r["prefix_len"]), "shared_blocks": int(r["prefix_len"]) // bs,
                "running": _num(r["running"]), "peak_kv_usage": _num(r["peak_kv_usage"]),
                "mean_kv_usage": _num(r["mean_kv_usage"]), "hit_rate": _num(r["hit_rate"]),
                "prefix_caching": caching is not False}
            if pool.num_blocks and row["running"]:
                n = row["running"]
                args = (n, int(r["prompt_len"]), int(r["output_len"]), int(r["prefix_len"]), bs, pool.num_blocks)
                row["predicted_usage_unshared"] = shared_prefix_usage(*args, sharing=False)
                row["predicted_usage_shared"] = shared_prefix_usage(*args, sharing=caching is not False)
                row["predicted_saving"] = row["predicted_usage_unshared"] - row["predicted_usage_shared"]
            if base_peak is not None and row["peak_kv_usage"] is not None:
                row["measured_saving"] = base_peak - row["peak_kv_usage"]
            rows.append(row)
    return pd.DataFrame(rows)


# --- the bundle ------------------------------------------------------------------------------------

@dataclass
class ServeAnalysis:
    """A run's serve points analysed (None from ``analyse_serve`` when the run has none)."""

    serve: pd.DataFrame
    matched: pd.DataFrame
    fit: OverheadFit | None
    closed: pd.DataFrame
    open: pd.DataFrame
    frontier: pd.DataFrame
    ceiling: pd.DataFrame
    goodput: pd.DataFrame
    prefix: pd.DataFrame
    tokenizer_notes: list[str] = field(default_factory=list)
    load_generators: list[str] = field(default_factory=list)

    @property
    def tokenizer_sentence(self) -> str:
        """What the report says about the tokenizer the servers loaded (the server records' own note)."""
        if not self.tokenizer_notes:
            return "Tokenizer: not recorded in the server records."
        notes = "; ".join(self.tokenizer_notes)
        return "Tokenizer: " + (notes if "synthetic" in notes.lower() else "synthetic, not the model's own — " + notes)


def analyse_serve(res: Results) -> ServeAnalysis | None:
    """Every serve analysis of a loaded run, or None when it has no serve point that ran."""
    if res.serve.empty:
        return None
    closed, opened = load_curves(res.serve)
    matched = served_vs_offline(res.serve, res.points)
    notes = sorted({r.tokenizer.note + (f" ({r.tokenizer.generator})" if r.tokenizer.generator else "")
                    for r in res.server_records.values() if r.tokenizer and r.tokenizer.synthetic})
    gens = sorted({rec.measurements.load_generator for rec in res.serve_records.values()})
    return ServeAnalysis(serve=res.serve, matched=matched, fit=overhead_fit(matched), closed=closed, open=opened,
                         frontier=frontier(res.serve), ceiling=served_ceiling(res), goodput=goodput_table(res),
                         prefix=prefix_sharing(res), tokenizer_notes=notes, load_generators=gens)


__all__ = ["OverheadFit", "ServeAnalysis", "ServedPool", "analyse_serve", "frontier", "good_requests",
           "goodput_table", "level_text", "load_curves", "overhead_fit", "prefix_sharing", "served_ceiling",
           "served_pool", "served_vs_offline", "shared_prefix_usage"]
