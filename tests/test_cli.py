"""`kvprof plan / models / gpus` as a user runs them."""

import json

import pytest
from typer.testing import CliRunner

from analysis.catalog import gpu, resolve_model
from analysis.kv import kv_bytes_per_token
from profiler.cli import app

runner = CliRunner()

REQUIRED_KEYS = {
    "kv_bytes_per_token", "kv_bytes_per_sequence", "weight_bytes", "kv_budget_bytes",
    "bytes_per_block", "num_blocks", "kv_cache_tokens", "max_concurrency",
}
LATENCY_KEYS = {"decode_step_s", "decode_bound", "tokens_per_s", "crossover_context"}


def plan_json(*args: str) -> dict:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_json_with_fixed_budget_has_the_capacity_keys():
    p = plan_json("--model", "tiny-mistral-swa", "--kv-cache-memory-bytes", "8MiB",
                  "--block-size", "32", "--max-model-len", "1024")
    assert p.keys() >= REQUIRED_KEYS
    assert (p["num_blocks"], p["kv_cache_tokens"], round(p["max_concurrency"], 2)) == (512, 15_887, 15.52)
    assert p["kv_budget_bytes"] == 8 * 2**20


def test_plan_on_a_gpu_adds_latency_and_is_consistent():
    p = plan_json("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "32", "--context", "4096",
                  "--max-model-len", "8192")
    assert p.keys() >= REQUIRED_KEYS | LATENCY_KEYS
    arch, _ = resolve_model("llama-3.1-8b")
    assert p["kv_bytes_per_token"] == kv_bytes_per_token(arch) == 131_072
    assert p["kv_bytes_per_sequence"] == 4096 * 131_072
    assert p["decode_bound"] == "memory"
    bw = gpu("h100-sxm").bandwidth_Bps
    assert p["decode_step_s"] == pytest.approx((p["decode_weight_bytes"] + 32 * 4096 * 131_072) / bw)
    assert p["tokens_per_s"] == pytest.approx(32 / p["decode_step_s"])
    # budget = 0.9 × memory − weights − reserve
    mem = gpu("h100-sxm").memory_bytes
    r = p["reserve"]
    assert p["kv_budget_bytes"] == int(mem * 0.9) - p["weight_bytes"] - (
        r["activation_bytes"] + r["non_torch_bytes"] + r["cuda_graph_bytes"])
    assert p["num_blocks"] == p["kv_budget_bytes"] // p["bytes_per_block"]


def test_fp8_doubles_the_blocks_that_fit():
    base = ("--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "40GiB", "--max-model-len", "8192")
    auto, fp8 = plan_json(*base), plan_json(*base, "--kv-dtype", "fp8")
    assert fp8["num_blocks"] == 2 * auto["num_blocks"]
    assert fp8["max_concurrency"] == 2 * auto["max_concurrency"]


def test_reserve_override_and_calibration(tmp_path):
    base = ("--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "8", "--context", "2048",
            "--max-model-len", "8192")
    p = plan_json(*base, "--reserve-bytes", "4GiB")
    assert p["reserve"]["activation_bytes"] == 4 * 2**30
    cal = tmp_path / "calibration.json"
    bw = gpu("h200").bandwidth_Bps
    cal.write_text(json.dumps({"effective_bandwidth_Bps": bw / 2, "source": "test sweep"}))
    c = plan_json(*base, "--calibration", str(cal))
    assert c["calibrated_decode_step_s"] == pytest.approx(2 * c["decode_step_s"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "no-such-model", "--gpu", "h100-sxm"], "unknown model"),
        (["--model", "llama-3.1-8b", "--gpu", "h1000"], "unknown gpu"),
        (["--model", "llama-3.1-8b"], "--gpu"),
        (["--model", "llama-3.1-70b", "--gpu", "l4"], "does not fit"),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--kv-dtype", "int3"], "kv_cache_dtype"),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "3"], "cannot be split"),
        (["--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "lots"], "not a byte count"),
        (["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--block-size", "0"], "block_size"),
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
