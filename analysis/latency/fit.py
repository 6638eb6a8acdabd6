"""The latency model's constants, fitted on the corpus of published measurements (issue #25).

    python -m analysis.latency.fit            # the fit and its leave-one-source-out errors, per record
    python -m analysis.latency.fit --write    # ... and write analysis/catalog/latency.yaml

Every record is turned into the schedule of steps its figure measures (``analysis.latency.step``): a
``vllm bench latency`` run is its prefill plus ``output_len − 1`` decode steps, a served TPOT is the
steady-state step with arriving prompts mixed in, a served TTFT is the wait, the prompt's chunks and
the API server. The constants are fitted in log space (each residual is log measured/predicted, so
every record counts by its relative error), by robust least squares (soft L1: one odd source cannot
drag the constants), each source's records together weighing as much as ~one record of weight
√n, and drawn towards physically plausible priors (``analysis.latency.step.PRIORS``) so that a constant
the corpus says little about stays plausible rather than free. Per-generation efficiencies are drawn
towards their pooled value (a generation without records gets it).

The error quoted for every figure is the leave-one-source-out error: each source's records are
predicted by the constants fitted on every other source, so no record is predicted by a fit that saw it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from analysis import catalog
from analysis.latency.corpus import LatencyRecord, load_latency_corpus, vllm_version
from analysis.latency.intervals import held_out_interval
from analysis.latency.step import (
    FEATURES,
    GENERATION_SIGMA,
    Engine,
    Interval,
    LatencyConstants,
    Schedule,
    burst_tpot_schedule,
    burst_ttft_schedule,
    decode_schedule,
    latency_schedule,
    parameter_names,
    prefill_schedule,
    prior,
    queued_ttft_schedule,
    regime,
    served_step_schedule,
    step_constants,
    step_seconds,
    ttft_schedule,
)
from analysis.model.architecture import Architecture
from analysis.model.kv import kv_bytes_per_sequence
from analysis.model.roofline import decode_step as roofline_decode_step
from analysis.vllm.budget import vllm_default_batching
from analysis.vllm.memory import predict as predict_memory
from analysis.vllm.memory import rules_for
from analysis.vllm.release import prefix_caching_default

# Quantization configs for records whose checkpoint is a quantized copy of a catalogued base model
# (`plan_quantization`): the layout those checkpoints ship (AutoAWQ GEMM / AutoGPTQ 4-bit, group 128).
_INJECTED = {
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
}
_INJECTED["awq_marlin"], _INJECTED["gptq_marlin"], _INJECTED["marlin"] = (
    _INJECTED["awq"], _INJECTED["gptq"], _INJECTED["gptq"])


def record_architecture(rec: LatencyRecord) -> Architecture:
    """The record's model as vLLM ran it (its dtype and quantization)."""
    s = rec.settings
    config = json.loads((catalog.model_dir(s.catalog_model) / "config.json").read_text(encoding="utf-8"))
    q = (s.plan_quantization or "").lower()
    if q in _INJECTED and "quantization_config" not in config:
        bits = re.search(r"int(\d+)", (s.quantization or "").lower())  # "GPTQ-Int8": 8 bits; else the usual 4
        config["quantization_config"] = {**_INJECTED[q], "bits": int(bits.group(1)) if bits else 4}
        q = ""
    a = Architecture.from_config(config, s.catalog_model)
    if s.dtype:
        a = a.with_dtype(s.dtype)
    return a.with_quantization(q or None, generation=catalog.resolve_gpu(s.gpu)[0].generation,
                              vllm_version=vllm_version(s))


def args_of(s: Any) -> dict[str, str]:
    """A record's other_args by their vLLM option names (``gpu_memory_utilization`` and ``--max-model-len`` alike)."""
    return {k.replace("_", "-").lstrip("-").lower(): v for k, v in s.other_args.items()}


def record_engine(rec: LatencyRecord) -> Engine:
    s, wl = rec.settings, rec.workload
    a = record_architecture(rec)
    gpu = catalog.resolve_gpu(s.gpu)[0]
    version = vllm_version(s)
    entry = "serve" if wl.benchmark == "serve" else "offline"
    mnbt = s.max_num_batched_tokens
    chunked = s.enable_chunked_prefill
    if mnbt is None:
        # vLLM's default token budget of a step: with chunked prefill the chunk, without it (V0) the most prompt
        # tokens one step takes, max(max_model_len, 2,048), where max_model_len is the model's own unless stated.
        mml = int(args_of(s).get("max-model-len", 0)) or a.max_len_limit
        mnbt, _ = vllm_default_batching(gpu.cuda_total_bytes, gpu.name, entry, world_size=s.tensor_parallel_size,
                                        vllm_version=version, max_model_len=mml)
    return Engine(a, gpu, tp=s.tensor_parallel_size, kv_cache_dtype=s.kv_cache_dtype, enforce_eager=s.enforce_eager,
                  vllm_version=version, max_num_batched_tokens=mnbt, chunked_prefill=chunked,
                  async_scheduling=stated_flag(rec, "async-scheduling"))  # None: vLLM's default for the version


def stated_flag(rec: LatencyRecord, name: str) -> bool | None:
    """A boolean vLLM flag as the record states it (``--name``, ``--name true/false`` or ``--no-name``), else None."""
    flags = args_of(rec.settings)
    if f"no-{name}" in flags:
        return False
    if name in flags:
        return str(flags[name]).strip().lower() not in ("false", "0", "no")
    return None


def prefix_cached(rec: LatencyRecord) -> bool:
    """Whether the record's engine cached prompt prefixes: as stated, else vLLM's default for the version."""
    stated = stated_flag(rec, "enable-prefix-caching")
    return prefix_caching_default(vllm_version(rec.settings)) if stated is None else stated


def running_cap(rec: LatencyRecord, e: Engine) -> int:
    """How many sequences the engine runs at once at the record's lengths: ``max_num_seqs`` (stated, or vLLM's
    default for the entry point, device and version) and what the KV cache holds (vLLM's budget from the spec
    sheet at the stated ``gpu-memory-utilization``, else 0.9). A benchmark that sends more requests than that
    runs them in waves (bursts) or queues them (closed loops)."""
    s, wl = rec.settings, rec.workload
    version = vllm_version(s)
    length = wl.input_len + wl.output_len
    entry = "serve" if wl.benchmark == "serve" else "offline"
    mnbt = e.max_num_batched_tokens or length  # record_engine: the stated token budget, or vLLM's default
    _, seqs = vllm_default_batching(e.gpu.cuda_total_bytes, e.gpu.name, entry, world_size=e.tp,
                                    vllm_version=version, max_model_len=length)
    seqs = s.max_num_seqs or min(seqs, mnbt)  # vLLM lowers a default max_num_seqs to the token budget
    stated = args_of(s).get("gpu-memory-utilization")
    util = float(stated) if stated is not None else None  # None: the version's default (0.92 from 0.20)
    per_seq = kv_bytes_per_sequence(e.a, length, e.kv_cache_dtype, e.tp)
    budget = 0
    for flashinfer in (False, True):
        # The engine started, so its pool held a sequence of its max_model_len (vLLM refuses to start otherwise:
        # gpu_worker's check_enough_kv_cache_memory). Where the sort-based sampler's warm-up would have left less,
        # the version's FlashInfer sampler ran it (installed in vLLM's images; 0.9 to 0.11.0 use it when present).
        budget = predict_memory(e.a, total_bytes=e.gpu.cuda_total_bytes, gpu_memory_utilization=util,
                                max_num_batched_tokens=mnbt, max_num_seqs=seqs, tp=e.tp,
                                enforce_eager=e.enforce_eager, rules=rules_for(version),
                                flashinfer=flashinfer).kv_budget_bytes
        mml = int(args_of(s).get("max-model-len", 0)) or length
        if budget >= kv_bytes_per_sequence(e.a, mml, e.kv_cache_dtype, e.tp):
            break
    fits = budget // per_seq
    return int(max(1, min(seqs, fits)))


# How hard the priors pull against the data (a multiplier on every prior residual). Held out, 0.5 gives the
# lowest median decode error of 1, 0.5 and 0.3 on the 132-record corpus (12.3 % against 12.9 % and 12.9 %).
PRIOR_WEIGHT = 0.5


QUEUED = "queued"
CUDA_DEFAULT_BLOCK = 16  # vLLM's block size on CUDA where none is given (CacheConfig.DEFAULT_BLOCK_SIZE)


@dataclass
class Target:
    """One measured figure of a record and the schedule that predicts it."""

    record: str
    source: str
    kind: str  # "decode" (the record's per-step figure) or "ttft"
    regime: str
    measured_s: float
    schedule: Schedule
    output_len: int = 1  # latency/throughput records: the figure is per request, its step per output token
    per: str = "step"  # how the measured figure relates to the schedule: step, latency, per_token

    @property
    def fitted(self) -> bool:
        """Whether the fit uses it: figures of requests queued beyond what the engine runs at once (``queued``)
        measure vLLM's admission order as much as its steps; they are predicted and reported, never fitted."""
        return self.regime != QUEUED


def record_targets(name: str, rec: LatencyRecord) -> list[Target]:
    """The figures of one record a fit can use."""
    e = record_engine(rec)
    wl, r = rec.workload, rec.reported
    inp, outp = wl.mean_input_len, wl.mean_output_len  # the average request where lengths vary
    reg = regime(e.a, e.tp)
    n = wl.sequences
    out: list[Target] = []
    # A served benchmark runs at most what the engine holds at once; requests sent together beyond it (a burst)
    # or kept in flight beyond it (a closed loop) queue, and their figures are reported apart (QUEUED).
    running = min(n, running_cap(rec, e)) if wl.benchmark == "serve" else n
    burst = wl.num_prompts is not None and wl.num_prompts <= n
    queued = running < n and (burst or wl.request_rate is None)
    if rec.derive == "prefill":
        # `--output-len 1`: the batch's prompts prefilled (chunked as the engine chunks them), one token sampled each.
        assert r.latency_s is not None
        return [Target(name, rec.source_key, "ttft", "ttft", r.latency_s, prefill_schedule(e, n, inp))]
    if rec.derive == "latency":
        assert r.latency_s is not None
        out.append(Target(name, rec.source_key, "decode", reg, r.latency_s,
                          latency_schedule(e, n, inp, outp), outp, "latency"))
    elif rec.derive == "throughput":
        assert r.output_throughput_tok_s is not None
        s = latency_schedule(e, n, inp, outp)
        s.steps = [(x / outp, w) for x, w in s.steps]
        out.append(Target(name, rec.source_key, "decode", reg, n / r.output_throughput_tok_s, s, outp,
                          "per_token"))
    else:
        median_itl = rec.derive == "itl" and r.median_itl_ms is not None
        tpot = (r.median_tpot_ms or r.mean_tpot_ms) if rec.derive == "tpot" else (r.median_itl_ms or r.mean_itl_ms)
        assert tpot is not None
        statistic = "median" if (r.median_tpot_ms if rec.derive == "tpot" else r.median_itl_ms) else "mean"
        if median_itl and (burst or running / outp < 0.5):
            # The median inter-token latency is a plain decode step where fewer than half the steps carry a prompt.
            s = decode_schedule(e, running, inp + outp / 2)
        elif burst:
            s = burst_tpot_schedule(e, n, inp, outp, statistic, running=running)
        else:
            s = served_step_schedule(e, running, inp, outp)
        out.append(Target(name, rec.source_key, "decode", QUEUED if queued else reg, tpot / 1e3, s))
    if wl.benchmark == "serve" and rec.ttft_ms:
        median = r.median_ttft_ms is not None
        prompts = wl.num_prompts
        if burst:
            # Every request sent at once: waves of what the engine runs at once.
            s = burst_ttft_schedule(e, n, inp, "median" if median else "mean", running=running,
                                    output_len=outp)
        elif wl.request_rate is None and running < n:
            # A closed loop at a concurrency the engine cannot run at once: the rest queue.
            s = queued_ttft_schedule(e, n, running, inp, outp)
        elif wl.request_rate is None:
            # A closed loop of fixed-length requests at a fixed concurrency (request rate inf): they finish
            # together and the next ones arrive together, in waves of n prompts.
            s = burst_ttft_schedule(e, n, inp, "median" if median else "mean")
            if n == 1 and prompts and (not median or prompts <= 2) and prefix_cached(rec):
                # `vllm bench serve` first sends input_requests[0] alone (its ready check, benchmarks/serve.py),
                # then the run, which starts with that same prompt: with prefix caching on, its full blocks are
                # cached and only the tail is prefilled. Over a handful of requests that one shows in the mean.
                block = int(args_of(rec.settings).get("block-size", CUDA_DEFAULT_BLOCK))
                tail = wl.mean_input_len - (wl.mean_input_len - 1) // block * block
                s = Schedule().extend(s, 1 - 1 / prompts).extend(burst_ttft_schedule(e, 1, tail, "mean"),
                                                                 1 / prompts)
        else:
            s = ttft_schedule(e, inp, decoding=n - 1, context=inp + outp / 2)
            if not median and prompts:
                # The mean counts the first `n` requests, which arrive together, beside the steady state.
                share = n / prompts
                s = Schedule().extend(s, 1 - share).extend(burst_ttft_schedule(e, n, inp, "mean"),
                                                                 share)
        out.append(Target(name, rec.source_key, "ttft", QUEUED if queued else "ttft", rec.ttft_ms / 1e3, s))
    return out


class Problem:
    """The corpus as arrays: every step of every target, and which constant each coefficient is."""

    def __init__(self, targets: list[Target]):
        self.targets = targets
        self.names = parameter_names()
        index = {n: i for i, n in enumerate(self.names)}
        steps = [(t_i, x, w) for t_i, t in enumerate(targets) for x, w in t.schedule.steps]
        if any(w.drafter or w.decode_query != 1 or w.speculative_host_s for _, _, w in steps):
            # the vectorised formula prices one forward pass of one token a sequence, as every corpus record runs
            raise ValueError("the fit does not take speculative steps (their drafter passes are priced apart)")
        self.features = {k: np.array([float(getattr(w, k)) for _, _, w in steps]) for k in FEATURES}
        fixed: list[float] = []
        self.coef_index: dict[str, np.ndarray] = {}
        slots = [step_constants(w) for _, _, w in steps]
        for key in slots[0] if slots else ():
            idx = []
            for sc in slots:
                v = sc[key]
                if isinstance(v, str):
                    idx.append(index[v])
                else:
                    fixed.append(float(v))
                    idx.append(len(self.names) + len(fixed) - 1)
            self.coef_index[key] = np.array(idx, dtype=int)
        self.fixed = np.array(fixed)
        self.weights = np.zeros((len(targets), len(steps)))
        for j, (t_i, x, _) in enumerate(steps):
            self.weights[t_i, j] += x
        self.api = np.array([t.schedule.api for t in targets])
        self.api_index = index["api_s"]
        self.measured = np.array([t.measured_s for t in targets])
        per_source: dict[str, int] = defaultdict(int)
        for t in targets:
            per_source[t.source] += t.fitted  # a source weighs by the figures it gives the fit
        self.sigma = np.array([math.sqrt(max(per_source[t.source], 1)) for t in targets])
        self.prior_mu = np.log([prior(n)[0] for n in self.names])
        self.prior_sigma = np.array([prior(n)[1] for n in self.names])
        self.pool = np.array([index.get(n.split(".")[0], -1) if n.startswith("eta_") and "." in n else -1
                              for n in self.names])

    def predict(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        ext = np.concatenate([theta, self.fixed])
        terms = step_seconds(**self.features, **{k: ext[i] for k, i in self.coef_index.items()})
        step = sum(terms[k] for k in ("weights_s", "kv_s", "attention_s", "communication_s", "floor_s"))
        t = self.weights @ step + self.api * theta[self.api_index]
        return t if rows is None else t[rows]

    def residuals(self, z: np.ndarray, rows: np.ndarray) -> np.ndarray:
        theta = np.exp(z)
        data = (np.log(self.measured[rows]) - np.log(self.predict(theta, rows))) / self.sigma[rows]
        pooled = self.pool >= 0
        anchor = np.where(pooled, z[np.maximum(self.pool, 0)], self.prior_mu)
        spread = np.where(pooled, GENERATION_SIGMA, self.prior_sigma)
        return np.concatenate([data, PRIOR_WEIGHT * (z - anchor) / spread])

    def fit(self, rows: np.ndarray | None = None, start: np.ndarray | None = None) -> np.ndarray:
        """The constants fitted on ``rows`` (default: every target), queued figures left out, searched from the
        priors or from ``start`` (constants: the full fit, for a leave-one-source-out fit that differs by one
        source; it lands on the same optimum, to 0.03 % in every prediction, in half the evaluations)."""
        rows = np.arange(len(self.targets)) if rows is None else rows
        rows = rows[[self.targets[i].fitted for i in rows]]
        x0 = self.prior_mu.copy() if start is None else np.log(start)
        res = least_squares(self.residuals, x0, args=(rows,), loss="soft_l1", f_scale=0.25,
                            method="trf", x_scale=1.0, max_nfev=400)
        return np.exp(res.x)


def corpus_targets(records: dict[str, LatencyRecord] | None = None) -> list[Target]:
    records = load_latency_corpus() if records is None else records
    return [t for name, rec in records.items() for t in record_targets(name, rec)]


@dataclass
class Row:
    """One target's measured figure beside its predictions: by the full fit, by the fit without its source,
    and (decode targets) by the bare roofline; ratios are measured ÷ predicted of the per-step figure."""

    record: str
    source: str
    kind: str
    regime: str
    measured_s: float
    predicted_s: float
    loso_predicted_s: float
    measured_step_s: float | None
    loso_step_s: float | None
    roofline_step_s: float | None

    @property
    def loso_ratio(self) -> float:
        if self.kind == "decode" and self.measured_step_s is not None and self.loso_step_s:
            return self.measured_step_s / self.loso_step_s
        return self.measured_s / self.loso_predicted_s

    @property
    def roofline_ratio(self) -> float | None:
        if self.roofline_step_s and self.measured_step_s:
            return self.measured_step_s / self.roofline_step_s
        return None


def _steps(t: Target, rec: LatencyRecord, c: LatencyConstants, measured: float) -> tuple[float | None, float]:
    """(measured per-step decode time, predicted per-step decode time) of a decode target: the latency less
    the predicted prefill over output_len − 1 steps; a throughput figure's time per token; a TPOT as it is."""
    wl = rec.workload
    e = record_engine(rec)
    if t.per == "latency":
        prefill = prefill_schedule(e, wl.sequences, wl.mean_input_len).time(c)
        step = decode_schedule(e, wl.sequences, wl.mean_input_len + wl.mean_output_len / 2).time(c)
        m = (measured - prefill) / (wl.mean_output_len - 1)
        return (m if m > 0 else None), step
    return measured, t.schedule.time(c)


def evaluate(records: dict[str, LatencyRecord] | None = None) -> tuple[LatencyConstants, list[Row]]:
    """The full fit (the shipped constants) and every target under leave-one-source-out."""
    records = load_latency_corpus() if records is None else records
    targets = corpus_targets(records)
    problem = Problem(targets)
    full = problem.fit()
    names = problem.names
    sources = sorted({t.source for t in targets})
    loso = np.zeros(len(targets))
    loso_constants: dict[str, LatencyConstants] = {}
    for src in sources:
        held = np.array([t.source == src for t in targets])
        theta = problem.fit(np.flatnonzero(~held), start=full)
        loso[held] = problem.predict(theta)[held]
        loso_constants[src] = LatencyConstants(params=dict(zip(names, theta.tolist(), strict=True)))
    full_c = LatencyConstants(params=dict(zip(names, full.tolist(), strict=True)))
    predicted = problem.predict(full)
    rows = []
    for i, t in enumerate(targets):
        rec = records[t.record]
        m_step = l_step = roof = None
        if t.kind == "decode":
            m_step, l_step = _steps(t, rec, loso_constants[t.source], t.measured_s)
            e, wl = record_engine(rec), rec.workload
            ctx = round(wl.mean_input_len + wl.mean_output_len / 2)
            roof = roofline_decode_step(e.a, batch=wl.sequences, context=ctx,
                                        bandwidth_Bps=e.gpu.bandwidth_Bps, peak_flops=e.gpu.peak_flops(),
                                        kv_cache_dtype=e.kv_cache_dtype, tp=e.tp).time_s
        rows.append(Row(t.record, t.source, t.kind, t.regime, t.measured_s, float(predicted[i]), float(loso[i]),
                        m_step, l_step, roof))
    full_c.intervals = intervals(rows)
    full_c.fitted_on = (f"{len(records)} records, {len(sources)} sources (analysis/catalog/latency/); "
                        f"{sum(r.kind == 'decode' and r.regime != QUEUED for r in rows)} decode figures, "
                        f"{sum(r.kind == 'ttft' and r.regime != QUEUED for r in rows)} TTFT figures fitted, "
                        f"{sum(r.regime == QUEUED for r in rows)} queued figures predicted, not fitted")
    return full_c, rows


def intervals(rows: list[Row]) -> dict[str, Interval]:
    """Per regime (and pooled over decode), the leave-one-source-out ratios' 10th–90th percentiles, widened until
    they hold 80 % of the figures of campaigns they are not built on (``intervals.held_out_interval``)."""
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.regime == QUEUED:  # reported apart: a queue's figure, not a step's
            groups[f"{QUEUED}_{r.kind}"].append(r)
            continue
        groups[r.regime].append(r)
        if r.kind == "decode":
            groups["decode"].append(r)
    return {key: held_out_interval([r.loso_ratio for r in rs], [r.source for r in rs])
            for key, rs in sorted(groups.items())}


def calibration_check(rows: list[Row], records: dict[str, LatencyRecord]) -> dict[str, Any]:
    """A calibration checked on the corpus, per GPU, on the (held-out) predictions scaled by measured ÷ predicted:

    * ``same_source`` — one record of a source scales that source's other records on the GPU (a one-point sweep);
    * ``same_source_sweep`` — the median of a source's other records on the GPU (at least two) scales each one in
      turn: a calibration from several points, as a sweep's decode fit gives it;
    * ``other_source`` — one record scales the GPU's records from other sources (another machine and stack).

    Each with the median |error| with and without the scale."""
    by_gpu: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.kind == "decode" and r.regime != QUEUED:
            by_gpu[records[r.record].settings.gpu].append(r)
    out: dict[str, Any] = {}
    for key in ("same_source", "same_source_sweep", "other_source"):
        calibrated, plain = [], []
        for rs in by_gpu.values():
            for r in rs:
                if key == "same_source_sweep":
                    others = [x.loso_ratio for x in rs if x is not r and x.source == r.source]
                    scales = [float(np.median(others))] if len(others) >= 2 else []
                else:
                    scales = [x.loso_ratio for x in rs
                              if x is not r and (x.source == r.source) == (key == "same_source")]
                for scale in scales:
                    calibrated.append(abs(r.loso_ratio / scale - 1))
                    plain.append(abs(r.loso_ratio - 1))
        out[key] = {"pairs": len(calibrated),
                    "calibrated_median_abs_error": float(np.median(calibrated)) if calibrated else None,
                    "uncalibrated_median_abs_error": float(np.median(plain)) if plain else None}
    return out


def summary(rows: list[Row]) -> dict[str, Any]:
    """The figures the issue asks for: median |error| of the decode step and TTFT under leave-one-source-out,
    the bare roofline's on the same records, per-source medians and the records beyond 25 %."""
    dec = [r for r in rows if r.kind == "decode" and r.regime != QUEUED]
    ttft = [r for r in rows if r.kind == "ttft" and r.regime != QUEUED]
    queued = [r for r in rows if r.regime == QUEUED]
    by_source: dict[str, list[float]] = defaultdict(list)
    for r in dec:
        by_source[r.source].append(r.loso_ratio)
    roof = [r.roofline_ratio for r in dec if r.roofline_ratio]
    return {
        "decode_records": len(dec),
        "decode_median_abs_error": float(np.median([abs(r.loso_ratio - 1) for r in dec])) if dec else None,
        # Each source counted once (a thread of seven records weighs what a single record does): the median over
        # sources of each source's median |error|.
        "decode_source_median_abs_error": float(np.median([np.median([abs(x - 1) for x in v])
                                                           for v in by_source.values()])) if dec else None,
        "roofline_median_abs_error": float(np.median([abs(x - 1) for x in roof])) if roof else None,
        "roofline_median_ratio": float(np.median(roof)) if roof else None,
        "ttft_records": len(ttft),
        "ttft_median_abs_error": float(np.median([abs(r.loso_ratio - 1) for r in ttft])) if ttft else None,
        "per_source_median_ratio": {s: float(np.median(v)) for s, v in sorted(by_source.items())},
        "per_source_ttft_median_ratio": {s: float(np.median([r.loso_ratio for r in ttft if r.source == s]))
                                         for s in sorted({r.source for r in ttft})},
        "beyond_25pct": sorted(r.record for r in dec + ttft if abs(r.loso_ratio - 1) > 0.25),
        "queued_records": len(queued),
        "queued_median_ratio": {k: float(np.median([r.loso_ratio for r in queued if r.kind == k]))
                                for k in ("decode", "ttft") if any(r.kind == k for r in queued)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write analysis/catalog/latency.yaml")
    ap.add_argument("--json", action="store_true", help="the summary as JSON")
    args = ap.parse_args(argv)
    constants, rows = evaluate()
    s = summary(rows)
    s["calibration_check"] = calibration_check(rows, load_latency_corpus())
    if args.json:
        print(json.dumps({"summary": s, "params": constants.params,
                          "intervals": {k: v.model_dump() for k, v in constants.intervals.items()}}, indent=2))
    else:
        print(f"{'record':58} {'kind':6} {'regime':15} {'measured':>10} {'LOSO pred':>10} {'ratio':>6} {'roofline':>8}")
        for r in rows:
            m = r.measured_step_s if r.kind == "decode" and r.measured_step_s else r.measured_s
            p = r.loso_step_s if r.kind == "decode" and r.loso_step_s else r.loso_predicted_s
            roof = f"{r.roofline_ratio:8.2f}" if r.roofline_ratio else " " * 8
            print(f"{r.record[:58]:58} {r.kind:6} {r.regime:15} {1e3 * m:9.2f}ms {1e3 * p:9.2f}ms "
                  f"{r.loso_ratio:6.2f} {roof}")
        print()
        print(f"decode step, leave-one-source-out: median |measured/predicted - 1| = "
              f"{100 * (s['decode_median_abs_error'] or 0):.1f}% over {s['decode_records']} records; "
              f"bare roofline: {100 * (s['roofline_median_abs_error'] or 0):.1f}% "
              f"(median measured/roofline {s['roofline_median_ratio'] or 0:.2f}); "
              f"each source counted once: {100 * (s['decode_source_median_abs_error'] or 0):.1f}% over "
              f"{len(s['per_source_median_ratio'])} sources")
        print(f"TTFT, leave-one-source-out: median |error| = {100 * (s['ttft_median_abs_error'] or 0):.1f}% over "
              f"{s['ttft_records']} records")
        print(f"queued (more requests than the engine runs at once; predicted, not fitted): {s['queued_records']} "
              "figures, median measured/predicted " + ", ".join(f"{k} {v:.2f}"
                                                               for k, v in s["queued_median_ratio"].items()))
        print("per-source median measured/predicted (decode):")
        for src, v in s["per_source_median_ratio"].items():
            print(f"  {v:5.2f}  {src}")
        print("per-source median measured/predicted (TTFT):")
        for src, v in s["per_source_ttft_median_ratio"].items():
            print(f"  {v:5.2f}  {src}")
        print(f"beyond 25 %: {', '.join(s['beyond_25pct']) or 'none'}")
        for key, what in (("same_source", "one record of a GPU, predicting that GPU's records from the same source"),
                          ("same_source_sweep", "the median of a source's other records on a GPU (a sweep), "
                                                "predicting each"),
                          ("other_source", "one record of a GPU, predicting that GPU's records from other sources")):
            cc = s["calibration_check"][key]
            if cc["pairs"]:
                print(f"calibrated on {what} ({cc['pairs']} pairs): median |error| "
                      f"{100 * cc['calibrated_median_abs_error']:.1f}% (uncalibrated "
                      f"{100 * cc['uncalibrated_median_abs_error']:.1f}%)")
        print("intervals (measured/predicted: 10th-90th pct, widened until, built without a source, they held 80 % "
              "of its figures):")
        for k, iv in constants.intervals.items():
            held = "-" if iv.held_out_coverage is None else f"{100 * iv.held_out_coverage:.0f}%"
            print(f"  {k:16} n={iv.n:3} sources={iv.sources:2} median {iv.median_ratio:.2f} "
                  f"[{iv.low_ratio:.2f}, {iv.high_ratio:.2f}] (pct {iv.p10_ratio:.2f}-{iv.p90_ratio:.2f} "
                  f"x{iv.widening:g}, held {held}) median |err| {100 * iv.median_abs_error:.0f}%")
    if args.write:
        constants.save()
        print(f"wrote {constants.fitted_on}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
