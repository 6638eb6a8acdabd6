"""What a sweep costs on a target GPU (analysis/planning/sweep_cost.py, `kvprof sweep --dry-run --gpu`).

Expected values are written out from Llama-3.1-8B's config (hidden 4096, 32 layers, 32 heads,
8 KV heads, head_dim 128, intermediate 14336, vocabulary 128256, bf16) and the H100 SXM's
spec sheet (3.35 TB/s, 989 TFLOP/s dense bf16):

    embedding          128256 · 4096                                   =   525,336,576
    attention / layer  4096·4096 (q) + 2 · 4096·1024 (k, v) + 4096·4096 (o) = 41,943,040
    MLP / layer        3 · 4096 · 14336                                = 176,160,768
    norms              32 · 2 · 4096 + 4096                            =       266,240
    total              2 · 525,336,576 + 32 · (41,943,040 + 176,160,768) + 266,240 = 8,030,261,248
    multiplied / token total − the embedding lookup                    = 7,504,924,672
    weights read / decode step  7,504,924,672 · 2 B                    = 15,009,849,344 B
    KV / token         32 layers · 8 heads · 128 · 2 (K, V) · 2 B       = 131,072 B
    attention FLOPs of one query over c tokens: 32 layers · c · 4 · 32 heads · 128 = 524,288 · c
"""

import json
import math
import re

import pytest
import yaml
from helpers import ROOT
from typer.testing import CliRunner

from analysis.catalog import gpu, model_dir, resolve_model
from analysis.planning import sweep_cost as sc
from analysis.results.schema import EngineSettings, PointSettings
from profiler.cli import app

GiB = 2**30
runner = CliRunner()

MATMUL_PARAMS = 7_504_924_672
TOTAL_PARAMS = 8_030_261_248
WEIGHTS_READ = 15_009_849_344
KV_PER_TOKEN = 131_072
ATTN_PER_CONTEXT = 524_288
BW, PEAK = 3.35e12, 989e12


@pytest.fixture(scope="module")
def llama8b():
    return resolve_model("llama-3.1-8b")[0]


def _engine(**kw):
    base = {"model_dir": str(model_dir("llama-3.1-8b")), "dtype": "bfloat16", "max_model_len": 131072,
            "block_size": 16, "max_num_seqs": 256, "max_num_batched_tokens": 16384}
    return EngineSettings(**(base | kw))


def _point(engine, c, p, o=128, phase="decode", repeats=3, warmup=1):
    return PointSettings(engine_id=engine.id, phase=phase, concurrency=c, prompt_len=p, output_len=o,
                         repeats=repeats, warmup=warmup)


def test_a_batch_inside_the_pool_costs_prefill_flops_and_roofline_decode_steps(llama8b):
    e = _engine(kv_cache_memory_bytes=40 * GiB)
    cost = sc.engine_cost(llama8b, gpu("h100-sxm"), e, [_point(e, 8, 64)], ["decode"])
    (p,) = cost.points
    # Prefill: 8 prompts of 64 tokens, 2 FLOPs per multiplied parameter per token plus causal
    # attention Σ_{c=1..64} 524,288 · c = 524,288 · 64 · 65 / 2.
    flops = 8 * (2 * MATMUL_PARAMS * 64 + ATTN_PER_CONTEXT * 64 * 65 // 2)
    assert p.prefill_tokens == 512
    assert p.prefill_flops == pytest.approx(flops, rel=1e-12)
    # One chunk (512 ≤ 16,384 tokens) reads the weights once: 4.5 ms < the 7.78 ms of compute.
    assert flops / PEAK > (WEIGHTS_READ + 512 * KV_PER_TOKEN) / BW
    assert p.prefill_s == pytest.approx(flops / PEAK, rel=1e-9)
    # Decode: 127 steps of batch 8 at the mean context 64 + 128 / 2 = 128, memory-bound.
    step = (WEIGHTS_READ + 8 * 128 * KV_PER_TOKEN) / BW
    assert p.decode_bound == "memory" and p.waves == 1 and p.flags == []
    assert p.decode_step_s == pytest.approx(step, rel=1e-9)
    assert p.decode_steps == 127
    assert p.decode_s == pytest.approx(127 * step, rel=1e-9)
    # warm-up 1 + repeats 3 batches.
    assert p.seconds == pytest.approx(4 * (flops / PEAK + 127 * step), rel=1e-9)


def test_a_batch_past_the_kv_ceiling_runs_in_waves_and_is_flagged(llama8b):
    # 40 GiB / (16 tokens · 131,072 B) = 20,480 blocks, 20,479 usable (the null block);
    # a sequence of 32,768 + 128 − 1 = 32,895 positions holds ceil(32,895 / 16) = 2,056 blocks:
    # 9 fit (18,504), 10 do not (20,560) → 256 requests run in ceil(256 / 9) = 29 waves.
    e = _engine(kv_cache_memory_bytes=40 * GiB)
    cost = sc.engine_cost(llama8b, gpu("h100-sxm"), e, [_point(e, 256, 32768)], ["decode"])
    (p,) = cost.points
    assert cost.num_blocks == 20480
    assert p.kv_limit == 9 and p.ceiling == 9 and p.waves == 29
    assert p.batch_exceeds_kv and p.flags == ["batch_exceeds_kv"]
    # 256 × 32,895 × 131,072 B = 1,103,791,882,240 B = 1.0 TiB of KV for the whole batch.
    assert p.kv_bytes_needed == 256 * 32895 * KV_PER_TOKEN
    assert "batch 256 × 32,895 tok needs 1.0 TiB KV" in p.reasons[0]
    assert "holds ~9 such sequences → runs in 29 waves; measures queueing, not decode" in p.reasons[0]
    # 28 waves of 9 and a last one of 256 − 28 · 9 = 4, each 127 steps at context 32,768 + 64.
    full = (WEIGHTS_READ + 9 * 32832 * KV_PER_TOKEN) / BW
    last = (WEIGHTS_READ + 4 * 32832 * KV_PER_TOKEN) / BW
    assert p.decode_steps == 29 * 127
    assert p.decode_s == pytest.approx(127 * (28 * full + last), rel=1e-9)
    # Prefill: 8,388,608 tokens; causal attention Σ_{c ≤ 32,768} 524,288 · c (the roofline samples
    # 64 evenly spaced contexts, exact to < 0.1 %); 512 chunks of weight reads (2.3 s) < compute (200 s).
    assert p.prefill_tokens == 8_388_608
    flops = 256 * (2 * MATMUL_PARAMS * 32768 + ATTN_PER_CONTEXT * 32768 * 32769 / 2)
    assert p.prefill_flops == pytest.approx(flops, rel=1e-3)
    assert flops / PEAK > 512 * WEIGHTS_READ / BW
    assert p.prefill_s == pytest.approx(flops / PEAK, rel=1e-3)


def test_the_old_llama8b_point_256_x_32k_is_flagged_on_an_h100(llama8b):
    """At gpu_memory_utilization 0.9 the pool is at most 0.9 × 81,559 MiB − 14.96 GiB of weights
    ≈ 56.7 GiB: at most 14 sequences of 32,895 × 128 KiB = 4.02 GiB; a reserve under 10 GiB leaves ≥ 11."""
    e = _engine(gpu_memory_utilization=0.9, max_num_batched_tokens=None)
    cost = sc.engine_cost(llama8b, gpu("h100-sxm"), e, [_point(e, 256, 32768)], ["decode"])
    (p,) = cost.points
    assert 11 <= p.kv_limit <= 14
    assert p.waves == math.ceil(256 / p.kv_limit)
    assert p.batch_exceeds_kv and "needs 1.0 TiB KV" in p.reasons[0]
    assert cost.max_num_batched_tokens == 16384  # vLLM 0.32's offline default on an H100 (≥ 70 GiB, not A100)


def test_small_chunks_make_prefill_memory_bound(llama8b):
    # max_num_batched_tokens 64: 4 prompts of 64 tokens take 4 chunks, each reading the weights
    # (4 × 4.48 ms) — more than the 3.9 ms of compute.
    # (max_num_seqs 64 too: vLLM refuses max_num_batched_tokens below max_num_seqs)
    e = _engine(kv_cache_memory_bytes=40 * GiB, max_num_batched_tokens=64, max_num_seqs=64)
    (p,) = sc.engine_cost(llama8b, gpu("h100-sxm"), e, [_point(e, 4, 64)], ["decode"]).points
    memory = (4 * WEIGHTS_READ + 256 * KV_PER_TOKEN) / BW
    assert p.prefill_flops / PEAK < memory
    assert p.prefill_s == pytest.approx(memory, rel=1e-9)


def test_the_capacity_phase_is_three_short_batches(llama8b):
    # Block 16: lengths 17, 32, 47; four requests each asking for two tokens: one prefill (one chunk,
    # memory-bound) and one decode step of batch 4 at length + 1.
    e = _engine(kv_cache_memory_bytes=40 * GiB)
    cost = sc.engine_cost(llama8b, gpu("h100-sxm"), e, [], ["capacity", "decode"])
    expected = sum((WEIGHTS_READ + 4 * L * KV_PER_TOKEN) / BW + (WEIGHTS_READ + 4 * (L + 1) * KV_PER_TOKEN) / BW
                   for L in (17, 32, 47))
    assert cost.capacity_s == pytest.approx(expected, rel=1e-9)
    assert sc.engine_cost(llama8b, gpu("h100-sxm"), e, [], ["decode"]).capacity_s == 0


def test_saturation_goes_past_the_ceiling_on_purpose(llama8b):
    # 3,968 + 129 − 1 = 4,096 positions = 256 blocks of 16; 20,479 // 256 = 79 fit. Factor 1.5 →
    # ceil(1.5 × 79) = 119 requests in ceil(119 / 79) = 2 waves, not flagged: that is the phase's point.
    e = _engine(kv_cache_memory_bytes=40 * GiB)
    pt = PointSettings(engine_id=e.id, phase="saturation", concurrency=None, factor=1.5, prompt_len=3968,
                       output_len=129, repeats=1, warmup=0)
    cost = sc.engine_cost(llama8b, gpu("h100-sxm"), e, [pt], ["saturation"])
    (p,) = cost.points
    assert (p.ceiling, p.concurrency, p.waves, p.batches, p.flags) == (79, 119, 2, 1, [])
    # Before the first saturation point: ceil(16,384 / 3,968) + 1 = 6 requests of 3,968 tokens
    # (one chunk pair, compute-bound) and one decode step of batch 6.
    flops = 6 * (2 * MATMUL_PARAMS * 3968 + ATTN_PER_CONTEXT * 3968 * 3969 / 2)
    step = (WEIGHTS_READ + 6 * 3969 * KV_PER_TOKEN) / BW
    assert cost.saturation_warmup_s == pytest.approx(flops / PEAK + step, rel=1e-3)


def test_max_num_seqs_also_makes_waves(llama8b):
    e = _engine(kv_cache_memory_bytes=40 * GiB, max_num_seqs=None)
    # No max_num_seqs in the spec: vLLM's offline default on an H100 is 1,024 (EngineArgs.get_batch_defaults).
    cost = sc.engine_cost(llama8b, gpu("h100-sxm"), e, [_point(e, 1100, 16)], ["decode"])
    (p,) = cost.points
    # 16 + 127 = 143 positions → 9 blocks; 20,479 // 9 = 2,275 fit: the KV pool is not the limit.
    assert p.kv_limit == 2275 and p.ceiling == 1024 and p.limited_by == "max_num_seqs"
    assert p.waves == 2 and p.flags == ["batch_exceeds_max_num_seqs"]
    assert "batch 1100 > max_num_seqs 1024" in p.reasons[0]


def test_start_up_by_model_size_from_published_logs(llama8b):
    h100 = gpu("h100-sxm")
    weights = 2 * TOTAL_PARAMS  # bf16, embedding and lm_head both held
    s = sc.engine_startup(llama8b, _engine(), h100)
    assert s.weight_bytes == weights
    # Dummy weights: filled in place on the GPU, one write of 16.06 GB at 3.35 TB/s.
    assert s.load_s == pytest.approx(weights / BW)
    # 19 s process start, 39.34 s torch.compile, 66.74 − 39.34 − 23 s profile + KV, 23 s CUDA graphs.
    assert s.total_s == pytest.approx(19 + weights / BW + 39.34 + (66.74 - 39.34 - 23) + 23)
    real = sc.engine_startup(llama8b, _engine(weights="real"), h100)
    # Real weights at the median logged rate: 11.4384 GiB in 5.338305 s.
    assert real.load_s == pytest.approx(weights / (11.4384 * GiB / 5.338305))
    assert 6.5 < real.load_s < 7.5
    eager = sc.engine_startup(llama8b, _engine(engine_args={"enforce_eager": True}), h100)
    assert eager.compile_s == 0 and eager.graph_capture_s == 0  # vLLM: CompilationMode.NONE, CUDAGraphMode.NONE
    tp2 = sc.engine_startup(llama8b, _engine(tensor_parallel_size=2, weights="real"), h100)
    assert tp2.weight_bytes == weights // 2


def test_an_engine_that_does_not_fit_costs_its_start_up_and_says_why():
    a = resolve_model("llama-3.1-70b")[0]
    e = EngineSettings(model_dir=str(model_dir("llama-3.1-70b")), max_model_len=8192, block_size=16)
    cost = sc.engine_cost(a, gpu("h100-sxm"), e, [_point(e, 1, 512)], ["decode"])
    assert cost.error and "does not fit" in cost.error and cost.points == []
    assert cost.seconds == pytest.approx(cost.startup.total_s)


def _load_plan(path):
    from profiler.spec import expand, load_spec

    return expand(load_spec(path))


def test_the_shipped_llama8b_decode_batches_run_together_on_80_gb():
    """Every decode batch of sweeps/llama8b.yaml fits an H100's pool even with the largest
    reserve vLLM logged on an H100 (7.4 GiB, issue #14): 0.9 × 81,559 MiB − 14.96 GiB − 7.4 GiB."""
    plan = _load_plan(ROOT / "sweeps" / "llama8b.yaml")
    pool = 0.9 * 81559 * 2**20 - 2 * TOTAL_PARAMS - 7.4 * GiB
    for pts in plan.points.values():
        for p in pts:
            if p.phase == "decode":
                assert p.concurrency * (p.prompt_len + p.output_len - 1) * KV_PER_TOKEN < pool, p.id
    a = resolve_model("llama-3.1-8b")[0]
    cost = sc.sweep_cost(a, gpu("h100-sxm"), plan.engines, plan.points, plan.spec.phases)
    assert cost.flagged == []
    # Saturation's top factor stays under max_num_seqs: it meets the KV pool, not the scheduler's cap.
    assert all(p.concurrency <= e.max_num_seqs for e in cost.engines for p in e.points if p.phase == "saturation")


def _spec(tmp_path, **workload):
    raw = {"name": "cost", "model": "llama-3.1-8b", "dtype": "bfloat16",
           "engine": {"max_model_len": 131072, "block_size": 16, "max_num_seqs": 256,
                      "gpu_memory_utilization": 0.9},
           "workload": {"concurrency": [1, 256], "prompt_len": [512, 32768], "output_len": 128} | workload,
           "phases": ["capacity", "decode"]}
    path = tmp_path / "cost.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_dry_run_on_a_gpu_prints_flags_and_the_total(tmp_path):
    res = runner.invoke(app, ["sweep", str(_spec(tmp_path)), "--dry-run", "--gpu", "h100-sxm"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "target GPU: h100-sxm" in out
    assert "batch_exceeds_kv: " in out
    assert re.search(r"--decode-c256-p32768-o128-[0-9a-f]{8}: batch 256 × 32,895 tok needs 1.0 TiB KV", out)
    assert "--decode-c256-p512-o128" not in out  # 256 × 639 positions fit: not flagged
    assert "GPU time to budget on h100-sxm: " in out and "1 flagged points" in out
    assert "torch.compile 39 s" in out and "CUDA graphs 23 s" in out


def test_dry_run_json_carries_the_cost(tmp_path):
    res = runner.invoke(app, ["sweep", str(_spec(tmp_path)), "--dry-run", "--gpu", "h100", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    cost = d["cost"]
    assert set(cost) >= {"gpu", "bandwidth_Bps", "peak_flops", "engines", "total_s", "gpu_hours", "flagged_points"}
    assert cost["gpu"] == "h100-sxm" and d["estimated_seconds"] == cost["total_s"]
    (engine,) = cost["engines"]
    assert engine["seconds"] == pytest.approx(cost["total_s"]) and cost["gpu_hours"] == pytest.approx(
        cost["total_s"] / 3600)
    assert set(engine["startup"]) >= {"process_s", "load_s", "compile_s", "graph_capture_s", "total_s"}
    points = {p["id"].split("--")[1].rsplit("-", 1)[0]: p for p in engine["points"]}  # by label: the id less its digest
    assert points["decode-c256-p32768-o128"]["batch_exceeds_kv"] is True
    assert points["decode-c1-p512-o128"]["batch_exceeds_kv"] is False
    assert set(points["decode-c1-p512-o128"]) >= {"prefill_s", "decode_s", "decode_steps", "waves", "ceiling",
                                                 "seconds", "flags", "reasons"}
    assert cost["flagged_points"] == [points["decode-c256-p32768-o128"]["id"]]


def test_without_a_gpu_the_dry_run_says_the_estimate_needs_one(tmp_path, monkeypatch):
    from profiler import machine

    monkeypatch.setattr(machine, "platform_device", lambda platform: (0, ""))
    res = runner.invoke(app, ["sweep", str(_spec(tmp_path)), "--dry-run", "--platform", "cuda"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "the GPU-time estimate needs --gpu NAME" in out and "NVML sees no GPU here" in out
    assert "estimated duration:" in out and "GPU time to budget" not in out
    d = json.loads(runner.invoke(app, ["sweep", str(_spec(tmp_path)), "--dry-run", "--platform", "cuda",
                                       "--json"]).output)
    assert d["cost"] is None and "needs --gpu" in d["estimate"]


def test_the_gpu_nvml_sees_is_the_default_target(tmp_path, monkeypatch):
    from profiler import machine

    monkeypatch.setattr(machine, "platform_device", lambda platform: (81559 * 2**20, "NVIDIA H100 80GB HBM3"))
    res = runner.invoke(app, ["sweep", str(_spec(tmp_path)), "--dry-run", "--platform", "cuda"])
    assert res.exit_code == 0, res.output
    assert "target GPU: h100-sxm (GPU 0 as NVML sees it: NVIDIA H100 80GB HBM3)" in " ".join(res.output.split())
    monkeypatch.setattr(machine, "platform_device", lambda platform: (8 * GiB, "NVIDIA Quadro P4000"))
    res = runner.invoke(app, ["sweep", str(_spec(tmp_path)), "--dry-run", "--platform", "cuda"])
    assert "NVML sees 'NVIDIA Quadro P4000', which is not in the GPU catalog" in " ".join(res.output.split())


@pytest.mark.parametrize("args,message", [
    (["--gpu", "h900"], "--gpu: unknown gpu 'h900'"),
    (["--gpu", "h100-sxm", "--platform", "cpu"], "costs a GPU sweep, with --dry-run and without --platform cpu"),
])
def test_bad_gpu_options_are_one_clear_error(tmp_path, args, message):
    res = runner.invoke(app, ["sweep", str(_spec(tmp_path)), "--dry-run", *args])
    assert res.exit_code == 2 and message in res.output, res.output
    res = runner.invoke(app, ["sweep", str(_spec(tmp_path)), "--gpu", "h100-sxm"])
    assert res.exit_code == 2 and "with --dry-run" in res.output
