"""A GPU-shaped results directory with known injected parameters — SYNTHETIC, not measured.

The manifest says ``"synthetic": true`` and the report prints a banner on its first
page. What the synthetic "vLLM" measured is worked out here from config.json with vLLM's
rules written out (:class:`Truth`), not with kvprof's model, so a report that agrees with
it agrees with something independent: the blocks a budget buys (vLLM's
``available_memory // bytes_per_block``), the weight and KV bytes a decode step reads
(parameter counts that a test holds against the published ones), the batch ceiling,
vLLM's default batching. Decode step times are ``overhead + bytes / bandwidth`` times a
small deterministic wobble, so a fit must recover the injected bandwidth and overhead;
divergences are injected on purpose (fp8 capacity, KV reserve, throughput past the
ceiling) so the claims page must report them.

One input is kvprof's own: the reserve the synthetic engine leaves beside the KV cache is
kvprof's heuristic (``default_reserve``) plus the injected extra, so the report's budget
miss tests the reporting of that extra, not the heuristic (published start-up logs test
the heuristic: tests/analysis/vllm/).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.catalog import gpu, resolve_model
from analysis.results.schema import (
    SCHEMA_VERSION,
    DecodePoint,
    EngineRecord,
    EngineSettings,
    Manifest,
    PointSettings,
    SaturationPoint,
    ServeMeasurements,
    ServePoint,
    ServerRecord,
    ServerTokenizer,
)
from analysis.vllm.budget import default_reserve
from profiler.tokenizer import SYNTHETIC_NOTE

GiB = 2**30


@dataclass
class Injected:
    model: str = "llama-3.1-8b"
    model_dir: str | None = None  # a model directory of one's own instead of the catalog's `model`
    store_config: bool = True  # engine records keep the model's config.json (False: as before kvprof did)
    gpu: str = "h100-sxm"
    bandwidth_Bps: float = 2.61e12  # effective decode bandwidth (MBU 78 % of 3.35 TB/s)
    overhead_s: float = 0.0042  # fixed per-step overhead
    wobble: float = 0.005  # ± deterministic relative wobble on every step time
    extra_reserve_bytes: int = int(1.5 * GiB)  # vLLM reserved this much more than the heuristic
    fp8_capacity_factor: float = 0.8  # fp8 engines get 80 % of the blocks their bytes predict
    fp8_step_factor: float = 1.0  # fp8 decode steps take this times what their bytes predict
    throughput_gain_past_ceiling: float = 0.25  # throughput keeps rising past the full pool
    max_model_lens: tuple[int, ...] = (8192, 32768)
    kv_dtypes: tuple[str, ...] = ("auto", "fp8")
    block_size: int = 16
    utilization: float = 0.9
    concurrency: tuple[int, ...] = (1, 4, 16, 64)
    prompt_lens: tuple[int, ...] = (512, 2048, 6144, 8192, 12288, 16384, 20480, 30000)
    output_len: int = 128
    telemetry_samples_per_engine: int = 2000
    # each decode point's GPU drew this much over its 1 s window (its NVML counter's rise), idle this much
    point_power_w: float | None = 500.0
    idle_power_w: float = 90.0
    vllm_version: str = "0.32.0"
    # serve mode (off by default: the directories of the other tests keep their records)
    serve: bool = False  # the first engine also served by vLLM's OpenAI server, loaded by vLLM's client
    serve_slope: float = 1.1  # served TPOT = slope × offline decode step + serve_overhead_s
    serve_overhead_s: float = 0.0013
    serve_levels: tuple[int, ...] = (1, 4, 16)  # closed loop: each a concurrency the decode phase ran
    serve_rates: tuple[float, ...] = (2.0, 8.0)  # open loop, requests per second
    serve_prompt_len: int = 512
    serve_prefix_len: int = 256  # one extra closed-loop point at the highest level with this shared prefix
    serve_queue_from: int = 16  # the server's /metrics show requests waiting from this level on


# vLLM's offline defaults on a ≥ 70 GiB GPU that is not an A100 and under 160 GiB (H100, H200):
# max_num_batched_tokens 16,384, max_num_seqs 1,024 (vllm/engine/arg_utils.py get_batch_defaults, LLM_CLASS).
OFFLINE_BATCHED_TOKENS, OFFLINE_MAX_SEQS = 16384, 1024
NULL_BLOCKS = 1  # vLLM's block pool keeps block 0 as the null block (v1/core/block_pool.py)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class Truth:
    """A Llama- or Qwen2-style dense decoder's sizes, written out from its config.json."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool
    dtype_bytes: int
    positions: int  # max_position_embeddings: the rows of vLLM's RoPE cos/sin cache

    @classmethod
    def from_config(cls, c: dict) -> Truth:
        if c["model_type"] not in ("llama", "qwen2") or c.get("num_experts") or c.get("use_sliding_window"):
            raise ValueError(f"synthetic results write out dense llama/qwen2 decoders only, not {c['model_type']}")
        if (c.get("rope_scaling") or {}).get("rope_type", (c.get("rope_scaling") or {}).get("type")) not in (
                None, "llama3", "default"):
            raise ValueError("synthetic results write out a RoPE cache of max_position_embeddings rows only")
        return cls(layers=c["num_hidden_layers"], hidden=c["hidden_size"], heads=c["num_attention_heads"],
                   kv_heads=c.get("num_key_value_heads", c["num_attention_heads"]),
                   head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
                   intermediate=c["intermediate_size"], vocab=c["vocab_size"],
                   tied=bool(c.get("tie_word_embeddings", False)),
                   qkv_bias=c["model_type"] == "qwen2",  # Qwen2Attention: q/k/v projections with bias=True
                   dtype_bytes=DTYPE_BYTES[c.get("torch_dtype", "bfloat16")],
                   positions=c["max_position_embeddings"])

    @property
    def parameters(self) -> int:
        """Every weight: embedding, per layer q/k/v/o and the gated MLP's three matrices and two norms,
        the final norm, and an LM head unless tied to the embedding."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = self.hidden * (q + 2 * kv) + q * self.hidden + (q + 2 * kv if self.qkv_bias else 0)
        layer = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden
        embedding = self.vocab * self.hidden
        return embedding + self.layers * layer + self.hidden + (0 if self.tied else embedding)

    @property
    def weight_bytes(self) -> int:
        return self.parameters * self.dtype_bytes

    @property
    def loading_bytes(self) -> int:
        """What vLLM's "Model loading took" counts: the weights and the RoPE cos/sin cache, a buffer of
        max_position_embeddings × head_dim in the model dtype (rotary_embedding's cos_sin_cache)."""
        return self.weight_bytes + self.positions * self.head_dim * self.dtype_bytes

    @property
    def decode_weight_bytes(self) -> int:
        """A decode step reads every weight but the input embedding (a row lookup) unless it is the LM head."""
        return self.weight_bytes - (0 if self.tied else self.vocab * self.hidden * self.dtype_bytes)

    def kv_bytes_per_token(self, kv_cache_dtype: str) -> int:
        """K and V, every layer, every KV head: fp8 stores one byte an element."""
        return 2 * self.layers * self.kv_heads * self.head_dim * (1 if kv_cache_dtype.startswith("fp8") else
                                                                 self.dtype_bytes)

    def num_blocks(self, budget: int, block_size: int, kv_cache_dtype: str) -> int:
        """vLLM's ``available_memory // bytes_per_block`` (v1/core/kv_cache_utils.py): one group of every layer."""
        return budget // (block_size * self.kv_bytes_per_token(kv_cache_dtype))

    def decode_bytes(self, batch: int, context: int, kv_cache_dtype: str) -> int:
        return self.decode_weight_bytes + batch * context * self.kv_bytes_per_token(kv_cache_dtype)


def _write(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, default=float))


def _save(root: Path, kind: str, record: EngineRecord | DecodePoint | SaturationPoint) -> None:
    """Through the results contract, as the profiler writes them."""
    record.save_file(root / kind / f"{record.id}.json")


def make_results(root: Path, inj: Injected | None = None) -> Injected:
    inj = inj or Injected()
    root = Path(root)
    arch, where = resolve_model(inj.model_dir or inj.model)
    config = json.loads((Path(where) / "config.json").read_text())
    truth = Truth.from_config(config)
    g = gpu(inj.gpu)
    mnbt, max_seqs = OFFLINE_BATCHED_TOKENS, OFFLINE_MAX_SEQS
    weights = truth.loading_bytes
    reserve = default_reserve(arch, max_num_batched_tokens=mnbt, max_num_seqs=max_seqs)
    # vLLM's budget: ceil(total × utilization) − weights − reserve (v1/worker/gpu_worker.py), less the injected extra.
    true_budget = math.ceil(g.memory_bytes * inj.utilization) - weights - reserve.total - inj.extra_reserve_bytes
    rng = np.random.default_rng(7)
    engines = []
    for mml in inj.max_model_lens:
        for dtype in inj.kv_dtypes:
            settings = EngineSettings(model_dir=str(where), model_sha256="synthetic", max_model_len=mml,
                                      block_size=inj.block_size, kv_cache_dtype=dtype,
                                      gpu_memory_utilization=inj.utilization)
            eid = settings.id
            full = truth.num_blocks(true_budget, inj.block_size, dtype)
            blocks = full if dtype == "auto" else int(full * inj.fp8_capacity_factor)
            conc = blocks / -(-mml // inj.block_size)  # vLLM: blocks ÷ cdiv(max_model_len, block_size)
            logged_budget = round(true_budget / GiB, 2) * GiB  # vLLM logs GiB with two decimals
            rounding = [{"length": L, "requests": 4, "kv_cache_usage_perc": 4 * -(-L // inj.block_size) / (blocks - 1),
                         "used_blocks_measured": float(4 * -(-L // inj.block_size)),
                         "used_blocks_full_attention": 4 * -(-L // inj.block_size)}
                        for L in (inj.block_size + 1, 2 * inj.block_size, 3 * inj.block_size - 1)]
            rec = EngineRecord.model_validate({
                "id": eid, "status": "ok", "device": g.display, "vllm_version": inj.vllm_version,
                "engine_mode": {"vllm_version": inj.vllm_version, "tested_vllm_version": inj.vllm_version == "0.32.0",
                                "async_scheduling": True, "model_runner": "v2", "cudagraph_mode": "FULL_AND_PIECEWISE",
                                "compilation_mode": "VLLM_COMPILE", "enforce_eager": False, "multiprocessing": True,
                                "platform": "cuda"},
                "torch_version": "2.13.0+cu130", "startup_s": 95.0, "device_memory_bytes": g.memory_bytes,
                "engine": settings, "config_json": config if inj.store_config else None,
                "capacity": {"num_gpu_blocks": blocks, "block_size": inj.block_size,
                             "kv_cache_size_tokens": blocks * inj.block_size, "kv_cache_max_concurrency": conc,
                             "max_model_len": mml, "max_num_batched_tokens": mnbt, "max_num_seqs": max_seqs,
                             "async_scheduling": True, "cache_dtype": dtype, "model_dtype": "bfloat16"},
                "startup_log": {"available_kv_bytes": int(logged_budget), "model_loading_bytes": weights,
                                "peak_activation_bytes": reserve.activation_bytes,
                                "non_torch_bytes": reserve.non_torch_bytes + inj.extra_reserve_bytes,
                                "cuda_graph_bytes": reserve.cuda_graph_bytes},
                "block_rounding": rounding,
                "telemetry": {"unavailable": {}, "launches": [{"sources": [{
                    "backend": "nvml", "driver": "580.65.06 (synthetic)",
                    "devices": [{"label": "gpu0", "name": g.display, "spec_bandwidth_Bps": g.bandwidth_Bps}]}]}],
                    "file": f"telemetry/{eid}.parquet"},
            })
            engines.append(eid)
            _save(root, "engines", rec)
            points = _decode_points(root, inj, truth, settings, mml, dtype, blocks, rng, g.bandwidth_Bps)
            if inj.serve and len(engines) == 1:
                _serve(root, inj, settings, points)
            points += _saturation_points(root, inj, settings, blocks, max_seqs, truth, dtype)
            _telemetry(root, eid, inj, points, weights, g.memory_bytes)
    Manifest(schema_version=SCHEMA_VERSION, name="synthetic-h100", synthetic=True, status="complete",
             started_at=1.8e9, finished_at=1.8e9 + 3600, host="synthetic", kvprof_version="test",
             engines=engines, engine_launches=len(engines), injected=asdict(inj), probe="ok",
             ).save_file(root / "manifest.json")
    _write(root / "probe.json", {"probe_version": 1, "device": g.display, "device_type": "cuda",
                                 "copy": {"bandwidth_Bps": {"median": 2.95e12, "p25": 2.94e12, "p75": 2.96e12}},
                                 "matmul_bf16": {"flops_per_s": {"median": 7.1e14}}, "decode_attention": []})
    (root / "spec.yaml").write_text("# synthetic results: no spec was run\nname: synthetic-h100\n")
    return inj


def _energy(inj: Injected) -> dict[str, Any]:
    """A point's energy over its window (started_at 0, finished_at 1: one second) at the injected power."""
    if inj.point_power_w is None:
        return {}
    w = inj.point_power_w
    return {"energy_j": w * 1.0, "energy_method": "counter: NVML total-energy counter", "window_s": 1.0,
            "idle_power_w": inj.idle_power_w, "energy_above_idle_j": (w - inj.idle_power_w) * 1.0,
            "mean_power_w": w, "peak_power_w": w}


def _decode_points(root, inj, truth, settings, mml, dtype, blocks, rng, spec_bw):
    eid = settings.id
    out = []
    kv_tokens = blocks * inj.block_size
    for c in inj.concurrency:
        for p in inj.prompt_lens:
            if p + inj.output_len > mml or c * (p + inj.output_len) > kv_tokens:
                continue
            ctx = p + inj.output_len / 2
            step_bytes = truth.decode_bytes(c, round(ctx), dtype)
            t = (inj.overhead_s + step_bytes / inj.bandwidth_Bps) * (1 + inj.wobble * rng.uniform(-1, 1))
            t *= inj.fp8_step_factor if dtype.startswith("fp8") else 1.0
            point = PointSettings(engine_id=eid, phase="decode", concurrency=c, prompt_len=p,
                                  output_len=inj.output_len, repeats=3, warmup=1)
            rec = DecodePoint.model_validate({
                "id": point.id, "engine_id": eid, "engine": settings, "point": point, "status": "ok",
                "started_at": 0.0, "finished_at": 1.0,
                "measurements": {"ttft_s": 0.05 + p * 2e-5, "tpot_s": t * 1.01, "tpot_spread_s": t * 0.01,
                                 "decode_step_s": t, "decode_step_spread_s": t * 0.004,
                                 "output_tokens_per_s": c / t, "mean_context": ctx, "requests_measured": 3 * c,
                                 "model_bytes_per_decode_step": step_bytes,
                                 "model_implied_bandwidth_Bps": step_bytes / t},
                "telemetry": {"gpu0": {"mean_gpm_dram_bw_pct": 100 * step_bytes / t / spec_bw,
                                       "gpm_implied_dram_Bps": step_bytes / t, "samples": 20, **_energy(inj)}}})
            _save(root, "points", rec)
            out.append(rec)
    return out


def _serve(root, inj, settings, decode):
    """The engine served: closed-loop levels whose TPOT is serve_slope × the offline step at the same batch and
    lengths + serve_overhead_s, open-loop rates, a shared-prefix point, SLOs with per-request lists."""
    import analysis.results.schema as schema

    eid, p, o = settings.id, inj.serve_prompt_len, inj.output_len
    ServerRecord(id=eid, status="ok", engine=settings, server_kwargs={"model": settings.model_dir}, port=8000,
                 ready_at=1.8e9 + 100, startup_s=60.0, vllm_version=inj.vllm_version,
                 command=["vllm", "serve", settings.model_dir],
                 tokenizer=ServerTokenizer(path="tokenizers/synthetic", vocab_size=128256, note=SYNTHETIC_NOTE,
                                           generator="kvprof word-level v1"),
                 ).save_file(root / "servers" / f"{eid}.json")
    steps = {r.point.concurrency: r.measurements.decode_step_s for r in decode
             if (r.point.prompt_len, r.point.output_len) == (p, o)}
    levels = [(c, None, None) for c in inj.serve_levels] + [(None, r, None) for r in inj.serve_rates]
    levels.append((inj.serve_levels[-1], None, inj.serve_prefix_len))
    for c, rate, prefix in levels:
        batch = c if c is not None else max(1, round(rate))
        step = steps.get(batch) or min(steps.values())
        tpot = inj.serve_slope * step + inj.serve_overhead_s
        ttft = 0.02 + 0.002 * batch
        n = 32
        e2el = ttft + tpot * (o - 1)
        duration = n * e2el / batch
        lat = {k: {"mean_s": v, "median_s": v, "std_s": 0.0, "p50_s": v, "p90_s": 1.2 * v, "p99_s": 1.5 * v}
               for k, v in (("ttft", ttft), ("tpot", tpot), ("itl", 0.98 * tpot), ("e2el", e2el))}
        slo = {"ttft_s": 0.05, "tpot_s": 0.012}
        ttfts = [ttft * (1 + 0.05 * (i % 5)) for i in range(n)]
        good = sum(1 for t in ttfts if t <= slo["ttft_s"] and tpot <= slo["tpot_s"])
        point = PointSettings(engine_id=eid, phase="serve", concurrency=c, request_rate=rate, num_requests=n,
                              prefix_len=prefix, prompt_len=p, output_len=o, repeats=1, warmup=2)
        running = min(batch, inj.serve_queue_from - 4) if batch >= inj.serve_queue_from else batch
        waiting = batch - running
        m = ServeMeasurements(
            load_generator=f"vllm.benchmarks.serve {inj.vllm_version}", duration_s=duration, completed=n, failed=0,
            total_input_tokens=n * p, total_output_tokens=n * o, request_throughput=n / duration,
            output_tokens_per_s=n * o / duration, total_tokens_per_s=n * (p + o) / duration,
            request_goodput=good / duration, slo=slo, mean_context=p + o / 2, **lat,
            requests={"ttft_s": ttfts, "e2el_s": [t + tpot * (o - 1) for t in ttfts], "output_len": [o] * n,
                      "input_len": [p] * n, "start_s": [i / batch for i in range(n)]},
            client_cpu_s=0.2 * duration, client_wall_s=duration, client_cpu_share=0.2,
            server_counters={"preemptions": 0.0, "prefix_cache_hits": float(n * (prefix or 0)),
                             "prefix_cache_queries": float(n * p)})
        rec = {"id": point.id, "engine_id": eid, "engine": settings, "point": point, "status": "ok",
               "started_at": 0.0, "finished_at": duration, "measurements": m}
        if hasattr(schema, "ServerPointTelemetry"):
            usage = running * -(-(p + o - 1) // inj.block_size) / 10_000
            rec["telemetry"] = {"server": {
                "samples": 50, "peak_requests_running": running, "peak_requests_waiting": waiting,
                "peak_kv_cache_usage": usage * (0.6 if prefix else 1.0), "mean_kv_cache_usage": usage / 2,
                "preemptions": 0, "prefix_cache_hits": n * (prefix or 0), "prefix_cache_queries": n * p,
                "prefix_cache_hit_rate": (prefix or 0) / p}}
        ServePoint.model_validate(rec).save_file(root / "points" / f"{point.id}.json")


def _saturation_points(root, inj, settings, blocks, max_seqs, truth, dtype):
    eid = settings.id
    p, o = 3968, 129
    # The last generated token is never fed back: a sequence holds p + o − 1 positions, in whole blocks.
    per_seq = -(-(p + o - 1) // inj.block_size)
    kv_limit = (blocks - NULL_BLOCKS) // per_seq
    ceiling = min(kv_limit, max_seqs)
    predicted = {"tokens": p + o - 1, "blocks_per_sequence": per_seq, "usable_blocks": blocks - NULL_BLOCKS,
                 "kv_limit": kv_limit, "max_num_seqs": max_seqs, "vllm_reported": blocks / per_seq,
                 "ceiling": ceiling, "limited_by": "kv_cache" if kv_limit <= max_seqs else "max_num_seqs"}
    base = None
    out = []
    for f in (0.5, 1.0, 1.5, 2.0):
        c = max(1, int(f * ceiling)) if f <= 1 else max(ceiling + 1, int(np.ceil(f * ceiling)))
        running = min(c, ceiling)
        step_bytes = truth.decode_bytes(running, p + o // 2, dtype)
        tput = running / (inj.overhead_s + step_bytes / inj.bandwidth_Bps)
        if f <= 1:
            base = tput
        else:  # injected: throughput keeps rising past the full pool
            tput = base * (1 + inj.throughput_gain_past_ceiling * (f - 1))
        point = PointSettings(engine_id=eid, phase="saturation", concurrency=None, factor=f, prompt_len=p,
                              output_len=o, repeats=1, warmup=0)
        rec = {"id": point.id, "engine_id": eid, "engine": settings, "status": "ok", "started_at": 0.0,
               "finished_at": 1.0, "point": point,
               "measurements": {"concurrency": c, "factor": f,
                                "predicted": predicted,
                                "peak_running": running + (1 if c > ceiling else 0),
                                "preemptions": 0 if c <= ceiling else c - ceiling,
                                "preempted_requests": 0 if c <= ceiling else c - ceiling,
                                "peak_kv_cache_usage_perc": min(1.0, c / max(ceiling, 1) * 0.97),
                                "ran_together": c <= ceiling, "output_tokens": c * o,
                                "output_tokens_per_s": tput}}
        rec = SaturationPoint.model_validate(rec)
        _save(root, "points", rec)
        out.append(rec)
    return out


def _telemetry(root: Path, eid: str, inj: Injected, points, weights: int, total: int) -> None:
    n = inj.telemetry_samples_per_engine
    t = np.arange(n) * 0.1
    used = np.minimum(total * inj.utilization, weights + np.linspace(0, 1, n) * total * 0.7)
    df = pd.DataFrame({"t": t, "launch": 0, "source": "nvml", "device": "gpu0", "phase": "decode",
                       "point_id": [points[i % len(points)].id for i in range(n)] if points else None,
                       "mem_used_bytes": used, "mem_total_bytes": float(total), "gpm_dram_bw_pct": 70.0,
                       "power_w": 600.0, "clock_sm_mhz": 1980.0, "throttled": False})
    path = root / "telemetry" / f"{eid}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(path, index=False)
