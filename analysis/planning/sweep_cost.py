"""What a sweep will cost on a target GPU: per point, per engine and in total (``kvprof sweep --dry-run``).

Every phase is costed as the engine child (``profiler/engine.py``) runs it:

* **start-up** per engine: process start, weight load (real weights at a disk-to-GPU load
  rate, dummy weights filled in place on the GPU), torch.compile, the profile run and KV
  allocation, and CUDA-graph capture (compile and capture are skipped with ``enforce_eager``).
  The constants below come from published vLLM start-up logs, each named beside its number.
* **capacity** phase: the block-rounding probe — three lengths (block + 1, 2 · block,
  3 · block − 1), four requests each asking for two tokens: a prefill and one decode step.
* **decode** points: ``warmup + repeats`` batches of ``concurrency`` requests; each batch
  prefills every prompt (chunks of ``max_num_batched_tokens``) then decodes ``output_len − 1``
  steps at the mean context ``prompt_len + output_len / 2`` (the first token comes from the
  prefill). A batch larger than the predicted ceiling — the sequences of
  ``prompt_len + output_len − 1`` positions the KV pool holds together, or ``max_num_seqs`` —
  runs in ``ceil(concurrency / ceiling)`` waves, each decoding ``output_len − 1`` steps: the point
  is flagged, since its steps measure queueing and preemption, not decode of that batch.
* **saturation** points: one batch of ``factor × predicted ceiling`` requests, plus the one
  warm-up batch of ``ceil(max_num_batched_tokens / prompt_len) + 1`` short requests before the first.
* **serve** points (``profiler/serve.py``): a second start-up (the OpenAI server), then per point
  ``warmup + num_requests`` requests in waves of the requests in flight (the level, or the batch
  ceiling when uncapped), each wave a prefill and ``output_len − 1`` decode steps; at a request rate
  at least ``requests / rate`` seconds.

Step times are the spec-sheet roofline (:mod:`analysis.model.roofline`): a floor, since vLLM's
measured steps add per-step overhead, and preempted requests' recomputed prefills are not
counted. Start-up terms are typical published values, not bounds.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from analysis.catalog import GPU
from analysis.model.architecture import Architecture
from analysis.model.kv import kv_bytes_per_sequence
from analysis.model.params import weight_bytes
from analysis.model.roofline import decode_step, prefill
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.results.schema import EngineSettings, PointSettings
from analysis.vllm.allocator import BatchCeiling, batch_ceiling, paged_capacity, saturation_levels

GiB = 2**30

# --- Engine start-up constants, from published vLLM start-up logs ---------------------------------
# Python start, imports and engine construction up to "Starting to load model": 19 s in
# vLLM 0.7.3's log of granite-3.0-2b (18:56:29 "Automatically detected platform cuda" →
# 18:56:48 "Starting to load model"; tests/fixtures/vllm_logs/v0.7.3_granite_k8s_namespace_args.log,
# https://github.com/dumb0002/production-stack/blob/main/perf-test/server-startup/README.md).
PROCESS_START_S = 19.0
# Real weights from disk to GPU: the median of three logged "Model loading took X GiB and Y seconds":
# 14.9889 GiB in 3.652 s = 4.10 GiB/s (Llama-3.1-8B, L40S, https://github.com/vllm-project/vllm/pull/17122),
# 11.4384 GiB in 5.338 s = 2.14 GiB/s (https://github.com/snakemake/snakemake-executor-plugin-slurm/issues/316),
# 12.66 GiB in 31.66 s = 0.40 GiB/s (https://github.com/vllm-project/vllm/issues/38820; a cold disk).
LOAD_BYTES_PER_S = 11.4384 * GiB / 5.338305
# torch.compile of a cold cache, the median of three logged "torch.compile takes N s in total":
# 28.77 s (Llama-2-7B, https://github.com/kubernetes-sigs/gateway-api-inference-extension/pull/550),
# 39.34 s (granite-3.0-2b, vLLM 0.7.3, the log above), 54.73 s (Llama-70B w8a8,
# https://github.com/vllm-project/vllm/pull/12569). Cold for every engine of a sweep: vLLM's compile
# cache key hashes max_model_len (ModelConfig.compute_hash) and block size and KV dtype
# (CacheConfig.compute_hash), so each engine configuration compiles its own graph on a first run.
COMPILE_S = 39.34
# CUDA-graph capture, the median of three logged "Graph capturing finished in N secs":
# 10 s (phi-3.5-vision, vLLM 0.6.3.post1, tests/fixtures/vllm_logs/v0.6.3.post1_phi35_vision_hard_wrapped.log),
# 23 s (granite, vLLM 0.7.3, the log above), 79 s (data-parallel engine, https://github.com/vllm-project/vllm/pull/25683).
GRAPH_CAPTURE_S = 23.0
# Profile run and KV-cache allocation: the rest of granite's "init engine (profile, create kv cache,
# warmup model) took 66.74 seconds" once its compile (39.34 s) and graph capture (23 s) are taken out.
PROFILE_AND_KV_S = 66.74 - 39.34 - 23.0

BLOCK_ROUNDING_REQUESTS = 4  # profiler.engine.measure_block_rounding's n_requests


class EngineStartup(BaseModel):
    """One engine's predicted start-up, by part (seconds)."""

    model_config = ConfigDict(frozen=True)

    weight_bytes: int = Field(description="weights per GPU")
    process_s: float
    load_s: float
    load_how: str
    compile_s: float
    profile_and_kv_s: float
    graph_capture_s: float

    @property
    def total_s(self) -> float:
        return self.process_s + self.load_s + self.compile_s + self.profile_and_kv_s + self.graph_capture_s


class PointCost(BaseModel):
    """One point's predicted duration and its parts (seconds; per-batch figures are for one batch)."""

    id: str
    phase: str
    concurrency: int = Field(description="requests per batch (saturation: factor × predicted ceiling)")
    prompt_len: int
    output_len: int
    batches: int = Field(description="warm-up + measured batches")
    ceiling: int = Field(description="sequences of prompt + output − 1 positions that run together")
    kv_limit: int = Field(description="such sequences the KV pool holds (null block excluded)")
    limited_by: str
    waves: int = Field(description="ceil(concurrency / ceiling): rounds the batch runs in")
    prefill_tokens: int
    prefill_flops: float
    prefill_s: float
    decode_steps: int = Field(description="decode steps per batch, all waves")
    decode_step_s: float = Field(description="roofline step of a full wave at the mean context")
    decode_bound: str
    decode_s: float
    kv_bytes_needed: int = Field(description="KV of the whole batch at prompt + output − 1 positions")
    seconds: float = Field(description="batches × (prefill + decode)")
    flags: list[str] = []
    reasons: list[str] = []

    @property
    def batch_exceeds_kv(self) -> bool:
        return "batch_exceeds_kv" in self.flags


class EngineCost(BaseModel):
    """One engine: start-up, capacity phase, its points, and their sum (seconds of wall time)."""

    id: str
    tensor_parallel_size: int
    pipeline_parallel_size: int = 1
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_budget_bytes: int | None
    num_blocks: int | None
    max_concurrency: float | None = Field(None, description="vLLM's 'maximum concurrency' at max_model_len")
    startup: EngineStartup
    capacity_s: float
    saturation_warmup_s: float
    server_startup_s: float = Field(0.0, description="the OpenAI server start-up (0 without serve points)")
    points: list[PointCost]
    error: str | None = Field(None, description="why the engine cannot start on this GPU (then only start-up counts)")

    @property
    def seconds(self) -> float:
        return (self.startup.total_s + self.capacity_s + self.saturation_warmup_s + self.server_startup_s
                + sum(p.seconds for p in self.points))


class SweepCost(BaseModel):
    """A sweep's predicted cost on one GPU."""

    gpu: str
    bandwidth_Bps: float
    peak_flops: float
    engines: list[EngineCost]

    @property
    def seconds(self) -> float:
        """Wall time, engines one after another."""
        return sum(e.seconds for e in self.engines)

    @property
    def gpu_seconds(self) -> float:
        """GPU time: each engine's wall time × its GPUs (tensor × pipeline parallel)."""
        return sum(e.seconds * e.tensor_parallel_size * e.pipeline_parallel_size for e in self.engines)

    @property
    def flagged(self) -> list[PointCost]:
        return [p for e in self.engines for p in e.points if p.flags]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: every field plus the derived totals."""
        engines = []
        for e in self.engines:
            d = e.model_dump()
            d["startup"]["total_s"] = e.startup.total_s
            d["seconds"] = e.seconds
            for p, dp in zip(e.points, d["points"], strict=True):
                dp["batch_exceeds_kv"] = p.batch_exceeds_kv
            engines.append(d)
        return {"gpu": self.gpu, "bandwidth_Bps": self.bandwidth_Bps, "peak_flops": self.peak_flops,
                "engines": engines, "total_s": self.seconds, "gpu_hours": self.gpu_seconds / 3600,
                "flagged_points": [p.id for p in self.flagged],
                "step_times": "spec-sheet roofline (a floor: vLLM's per-step overhead and recomputed "
                              "prefills of preempted requests are not counted)"}


def engine_startup(a: Architecture, engine: EngineSettings, gpu: GPU) -> EngineStartup:
    """Start-up by model size: weights per GPU ÷ a load rate, plus the fixed terms of published logs."""
    w = weight_bytes(a, engine.tensor_parallel_size)
    eager = bool(engine.engine_args.get("enforce_eager"))
    if engine.weights == "real":
        load_s, how = w / LOAD_BYTES_PER_S, f"real: {w / GiB:.1f} GiB at {LOAD_BYTES_PER_S / GiB:.2f} GiB/s"
    else:
        # vLLM's DummyModelLoader fills every parameter in place on the device: one write of the weights.
        load_s, how = w / gpu.bandwidth_Bps, f"dummy: {w / GiB:.1f} GiB filled on the GPU"
    return EngineStartup(weight_bytes=w, process_s=PROCESS_START_S, load_s=load_s, load_how=how,
                         compile_s=0.0 if eager else COMPILE_S, profile_and_kv_s=PROFILE_AND_KV_S,
                         graph_capture_s=0.0 if eager else GRAPH_CAPTURE_S)


def _prefill(a: Architecture, gpu: GPU, n: int, prompt_len: int, mnbt: int, kv: str, tp: int) -> tuple[float, float]:
    """(FLOPs, seconds) of `n` prompts of `prompt_len` tokens in chunks of `mnbt` tokens: every chunk
    reads the weights once; the matmuls and causal attention run at the peak."""
    one = prefill(a, prompt_len=prompt_len, bandwidth_Bps=gpu.bandwidth_Bps, peak_flops=gpu.peak_flops(),
                  kv_cache_dtype=kv, tp=tp)
    chunks = math.ceil(n * prompt_len / mnbt)
    memory_s = (chunks * one.weight_bytes + n * one.kv_bytes) / gpu.bandwidth_Bps
    flops = n * one.flops
    return flops, max(flops / gpu.peak_flops(), memory_s)


def _step(a: Architecture, gpu: GPU, batch: int, context: int, kv: str, tp: int) -> Any:
    return decode_step(a, batch=batch, context=context, bandwidth_Bps=gpu.bandwidth_Bps,
                       peak_flops=gpu.peak_flops(), kv_cache_dtype=kv, tp=tp)


def point_cost(a: Architecture, gpu: GPU, engine: EngineSettings, point: PointSettings, cap: Any,
               mnbt: int, max_num_seqs: int, async_sched: bool, budget: int) -> PointCost:
    """One point's duration on `gpu` from the roofline, with its waves and flags."""
    kv, tp = engine.kv_cache_dtype, engine.tensor_parallel_size
    p, o = point.prompt_len, point.output_len
    ceil_: BatchCeiling = batch_ceiling(cap, p, o, max_num_seqs, mnbt, async_sched)
    if point.phase == "serve":
        return _serve_point_cost(a, gpu, point, ceil_, mnbt, kv, tp)
    c = point.concurrency or saturation_levels(ceil_.ceiling, [point.factor or 1.0])[0]
    ceiling = max(1, ceil_.ceiling)
    waves = math.ceil(c / ceiling)
    flops, prefill_s = _prefill(a, gpu, c, p, mnbt, kv, tp)
    context = round(p + o / 2)
    steps_per_wave = o - 1
    full = _step(a, gpu, min(c, ceiling), context, kv, tp)
    last_batch = c - (waves - 1) * ceiling
    decode_s = steps_per_wave * ((waves - 1) * full.time_s + _step(a, gpu, last_batch, context, kv, tp).time_s)
    need = c * kv_bytes_per_sequence(a, p + o - 1, kv, tp)
    flags: list[str] = []
    reasons: list[str] = []
    if point.phase == "decode":
        tokens = f"{c} × {p + o - 1:,} tok"
        if ceil_.kv_limit == 0:
            flags.append("batch_exceeds_kv")
            reasons.append(f"one sequence of {p + o - 1:,} tok does not fit the predicted pool "
                           f"({budget / GiB:.1f} GiB KV): vLLM would refuse or stall it")
        elif c > ceil_.kv_limit:
            flags.append("batch_exceeds_kv")
            reasons.append(f"batch {tokens} needs {_fmt_bytes(need)} KV; the pool ({budget / GiB:.1f} GiB) holds "
                           f"~{ceil_.kv_limit} such sequences → runs in {waves} waves; measures queueing, not decode")
        if c > max_num_seqs:
            flags.append("batch_exceeds_max_num_seqs")
            reasons.append(f"batch {c} > max_num_seqs {max_num_seqs}: the rest queue → {waves} waves")
    return PointCost(
        id=point.id, phase=point.phase, concurrency=c, prompt_len=p, output_len=o,
        batches=point.warmup + point.repeats, ceiling=ceil_.ceiling, kv_limit=ceil_.kv_limit,
        limited_by=ceil_.limited_by, waves=waves, prefill_tokens=c * p, prefill_flops=flops, prefill_s=prefill_s,
        decode_steps=waves * steps_per_wave, decode_step_s=full.time_s, decode_bound=full.bound, decode_s=decode_s,
        kv_bytes_needed=need, seconds=(point.warmup + point.repeats) * (prefill_s + decode_s),
        flags=flags, reasons=reasons)


def _serve_point_cost(a: Architecture, gpu: GPU, point: PointSettings, ceil_: BatchCeiling, mnbt: int, kv: str,
                      tp: int) -> PointCost:
    """A serve point: its requests in waves of those in flight, at least requests ÷ rate seconds."""
    p, o = point.prompt_len, point.output_len
    in_flight = max(1, min(point.concurrency or ceil_.ceiling, ceil_.ceiling))
    n = (point.num_requests or 1) + point.warmup
    waves = math.ceil(n / in_flight)
    flops, prefill_s = _prefill(a, gpu, in_flight, p, mnbt, kv, tp)
    step = _step(a, gpu, in_flight, round(p + o / 2), kv, tp)
    decode_s = (o - 1) * step.time_s
    seconds = waves * (prefill_s + decode_s)
    if point.request_rate:
        seconds = max(seconds, n / point.request_rate)
    return PointCost(
        id=point.id, phase=point.phase, concurrency=in_flight, prompt_len=p, output_len=o, batches=1,
        ceiling=ceil_.ceiling, kv_limit=ceil_.kv_limit, limited_by=ceil_.limited_by, waves=waves,
        prefill_tokens=n * p, prefill_flops=flops * waves, prefill_s=prefill_s, decode_steps=waves * (o - 1),
        decode_step_s=step.time_s, decode_bound=step.bound, decode_s=decode_s,
        kv_bytes_needed=in_flight * kv_bytes_per_sequence(a, p + o - 1, kv, tp), seconds=seconds)


def _fmt_bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:,.0f} B"


def _short_batch_s(a: Architecture, gpu: GPU, n: int, prompt_len: int, mnbt: int, kv: str, tp: int) -> float:
    """`n` requests of `prompt_len` asking for two tokens: the prefill and one decode step."""
    _, s = _prefill(a, gpu, n, prompt_len, mnbt, kv, tp)
    return s + _step(a, gpu, n, prompt_len + 1, kv, tp).time_s


def engine_cost(a: Architecture, gpu: GPU, engine: EngineSettings, points: list[PointSettings],
                phases: list[str]) -> EngineCost:
    """One engine on `gpu`: its KV pool as make_plan predicts it (vLLM's offline-LLM defaults for
    that GPU where the spec leaves them unset), start-up, the capacity phase and every point."""
    tp, kv = engine.tensor_parallel_size, engine.kv_cache_dtype
    pp = engine.world_size // tp
    startup = engine_startup(a, engine, gpu)
    try:
        plan = make_plan(a, PlanInputs.for_engine(engine), gpu)
    except PlanError as exc:
        defaults = (engine.max_num_batched_tokens or 0, engine.max_num_seqs or 0)
        return EngineCost(id=engine.id, tensor_parallel_size=tp, pipeline_parallel_size=pp,
                          max_num_batched_tokens=defaults[0],
                          max_num_seqs=defaults[1], kv_budget_bytes=None, num_blocks=None, startup=startup,
                          capacity_s=0.0, saturation_warmup_s=0.0, points=[], error=str(exc))
    mnbt, seqs, async_sched = plan.max_num_batched_tokens, plan.max_num_seqs, plan.async_scheduling
    budget = plan.kv_budget_bytes
    cap = paged_capacity(a, budget, block_size=engine.block_size, max_model_len=engine.max_model_len,
                         max_num_batched_tokens=mnbt, kv_cache_dtype=kv, tp=tp, async_scheduling=async_sched,
                         prefix_caching=engine.enable_prefix_caching)
    capacity_s = 0.0
    if "capacity" in phases:
        bs, mml = engine.block_size, engine.max_model_len
        for length in sorted({min(L, mml - 2) for L in (bs + 1, 2 * bs, 3 * bs - 1)}):
            capacity_s += _short_batch_s(a, gpu, BLOCK_ROUNDING_REQUESTS, length, mnbt, kv, tp)
    sat_warmup_s = 0.0
    sat = [p for p in points if p.phase == "saturation"]
    if sat:
        n = min(math.ceil(mnbt / sat[0].prompt_len) + 1, seqs)
        sat_warmup_s = _short_batch_s(a, gpu, n, sat[0].prompt_len, mnbt, kv, tp)
    costs = [point_cost(a, gpu, engine, p, cap, mnbt, seqs, async_sched, budget) for p in points]
    return EngineCost(id=engine.id, tensor_parallel_size=tp, pipeline_parallel_size=pp, max_num_batched_tokens=mnbt,
                      max_num_seqs=seqs,
                      kv_budget_bytes=budget, num_blocks=cap.num_blocks, max_concurrency=cap.max_concurrency,
                      startup=startup, capacity_s=capacity_s, saturation_warmup_s=sat_warmup_s,
                      server_startup_s=startup.total_s if any(p.phase == "serve" for p in points) else 0.0,
                      points=costs)


def sweep_cost(a: Architecture, gpu: GPU, engines: list[EngineSettings], points: dict[str, list[PointSettings]],
               phases: list[str]) -> SweepCost:
    """Every engine of a sweep, one after another, on `gpu`."""
    return SweepCost(gpu=gpu.name, bandwidth_Bps=gpu.bandwidth_Bps, peak_flops=gpu.peak_flops(),
                     engines=[engine_cost(a, gpu, e, points[e.id], phases) for e in engines])
