"""`kvprof log FILE`: every published fixture, kvprof's prediction beside vLLM's numbers,
a log as `kvprof plan --calibration`, and the bad inputs (one line, exit 2).

Expected numbers are the logs' own (tests/vllm_logs.py EXPECTED, copied from the
text) and arithmetic written out here, never the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from vllm_logs import EXPECTED, FIXTURES, G

from analysis.planning.startup_log_check import KEYS, catalog_match
from profiler.cli import app

runner = CliRunner()

# `kvprof log --json` key ← StartupLog field (the weights: "model weights take" where the log has it,
# else "Model loading took")
JSON_FROM_FIELD = {
    "vllm_version": "vllm_version", "model": "model", "tensor_parallel_size": "tensor_parallel_size",
    "gpu_memory_utilization": "gpu_memory_utilization", "max_model_len": "max_model_len",
    "max_num_batched_tokens": "max_num_batched_tokens", "block_size": "block_size",
    "activation_peak_bytes": "peak_activation_bytes", "non_torch_bytes": "non_torch_bytes",
    "cuda_graph_bytes": "cuda_graph_bytes", "available_kv_cache_bytes": "available_kv_bytes",
    "num_gpu_blocks": "log_num_gpu_blocks", "kv_cache_tokens": "log_kv_cache_tokens",
    "max_concurrency": "log_max_concurrency",
}


def _log_json(path: Path, *extra: str) -> dict:
    result = runner.invoke(app, ["log", str(path), "--json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture(name):
    out = _log_json(FIXTURES / name)
    assert set(KEYS) <= set(out)
    want = EXPECTED[name]
    for key, field in JSON_FROM_FIELD.items():
        assert out[key] == want.get(field), (name, key)
    weights = want.get("weights_bytes_logged", want.get("model_loading_bytes"))
    assert out["weights_bytes"] == weights, name
    human = runner.invoke(app, ["log", str(FIXTURES / name)])
    assert human.exit_code == 0 and "logged" in human.output


def test_reserve_is_requested_minus_weights_minus_kv():
    out = _log_json(FIXTURES / "llama2_7b_k8s_boxed.log")
    # "= 71.27GiB" − "model weights take 12.55GiB" − "reserved for KV Cache is 56.18GiB"
    assert out["reserve_bytes"] == int(71.27 * G) - int(12.55 * G) - int(56.18 * G)
    # ≈ "non_torch_memory takes 0.16GiB" + "activation peak memory takes 2.38GiB", to the log's rounding
    assert abs(out["reserve_bytes"] - (int(0.16 * G) + int(2.38 * G))) <= 0.02 * G


# --- predictions where the catalog holds the model -------------------------------------------

def test_prediction_llama2_7b_blocks_match_the_log():
    """Llama-2-7B on an 80 GB H100 (gateway-api-inference-extension PR #550).

    KV per token = 32 layers × 2 (K and V) × 32 KV heads × 128 dims × 2 B (fp16) = 524,288 B;
    a block of 16 tokens = 8,388,608 B. The logged 56.18 GiB = int(56.18 × 2**30) B holds
    int(56.18 × 2**30) // 8,388,608 = 7,191 blocks — vLLM logged "# cuda blocks: 7191".
    Weights: 6,738,415,616 parameters × 2 B = 13,476,831,232 B, plus the RoPE cos/sin cache "Model loading took"
    also counts (4,096 positions × 128 dims × 2 B = 1 MiB) = 13,477,879,808 B = 12.552 GiB; logged 12.55 GiB.
    """
    out = _log_json(FIXTURES / "llama2_7b_k8s_boxed.log", "--model", "llama-2-7b")
    pred = out["predicted"]
    assert pred["num_gpu_blocks"] == int(56.18 * G) // (32 * 2 * 32 * 128 * 2 * 16) == 7191 == out["num_gpu_blocks"]
    assert pred["weights_bytes"] == 6_738_415_616 * 2 + 4096 * 128 * 2
    assert abs(pred["weights_bytes"] - out["weights_bytes"]) < 0.01 * G  # the log rounds to 0.01 GiB
    assert set(pred["assumed"]) == {"block_size", "tensor_parallel_size", "max_model_len"}
    table = runner.invoke(app, ["log", str(FIXTURES / "llama2_7b_k8s_boxed.log"), "--model", "llama-2-7b"])
    assert "kvprof (llama-2-7b)" in table.output and "7,191" in table.output


def test_prediction_qwen25_7b_that_did_not_fit():
    """Qwen2.5-7B on an 8 GB RTX 4060 Laptop GPU (vllm#13882): the log's KV budget is −1.05 GiB.

    No budget, no block: kvprof predicts 0 blocks and 0.00x concurrency, as vLLM logged
    ("# cuda blocks: 0", "Maximum concurrency for 4096 tokens per request: 0.00x").
    Weights: the bf16 checkpoint would be 7,615,616,512 parameters × 2 B = 14.19 GiB (and a 32 MiB RoPE cache: the
    catalog config's max_position_embeddings 131,072 × 128 × 2 B); the log's
    5.20 GiB says the user ran a quantized checkpoint — the difference column shows it.
    """
    out = _log_json(FIXTURES / "qwen25_7b_rtx4060_negative_kv.log", "--model", "qwen2.5-7b")
    pred = out["predicted"]
    assert out["num_gpu_blocks"] == 0 == pred["num_gpu_blocks"]
    assert out["max_concurrency"] == 0.0 == pred["max_concurrency"]
    assert pred["weights_bytes"] == 7_615_616_512 * 2 + 131072 * 128 * 2
    assert pred["weights_bytes"] - out["weights_bytes"] > 8 * G


def test_prediction_llama3_8b_profile_table():
    """Meta-Llama-3-8B (vllm PR #10511), the same layers as Llama 3.1 8B (32 × 8 KV heads × 128).

    The log prints no block count; kvprof's: int(53.29 × 2**30) // (32 × 2 × 8 × 128 × 2 B × 16) = 27,284.
    Weights 8,030,261,248 × 2 B + its RoPE cache (8,192 positions × 128 × 2 B = 2 MiB) = 14.960 GiB against the
    logged 14.96 GiB.
    """
    out = _log_json(FIXTURES / "meta_llama3_8b_profiling_table.log", "--model", "llama-3-8b")
    pred = out["predicted"]
    assert pred["num_gpu_blocks"] == int(53.29 * G) // (32 * 2 * 8 * 128 * 2 * 16) == 27284
    assert pred["weights_bytes"] == 8_030_261_248 * 2 + 8192 * 128 * 2
    assert abs(pred["weights_bytes"] - int(14.96 * G)) < 0.005 * G  # the log rounds to 0.01 GiB


def test_prediction_llama31_8b_weights_on_l40s():
    """Llama-3.1-8B-Instruct on an L40S (vllm PR #17122): 8,030,261,248 parameters × 2 B = 14.958 GiB;
    vLLM's "Model loading took 14.9889 GiB" counts 32 MiB more than the parameters: the RoPE cos/sin cache built
    with the model (131,072 positions × 128 dims × 2 B = 32 MiB), which kvprof counts too.
    The log states no KV budget, so no block prediction."""
    out = _log_json(FIXTURES / "v1_llama31_8b_l40s_kv_size.log", "--model", "llama-3.1-8b")
    pred = out["predicted"]
    assert pred["weights_bytes"] == 8_030_261_248 * 2 + 131072 * 128 * 2
    assert abs(out["weights_bytes"] - pred["weights_bytes"]) < 0.0002 * G  # 0.13 MB apart
    assert pred["num_gpu_blocks"] is None and pred["max_model_len"] == 32768


def test_no_prediction_for_a_model_not_in_the_catalog():
    out = _log_json(FIXTURES / "v0.24.0_qwen36_35b_rtx5090.log")
    assert "predicted" not in out
    assert "no prediction" in runner.invoke(app, ["log", str(FIXTURES / "v0.24.0_qwen36_35b_rtx5090.log")]).output


@pytest.mark.parametrize(("logged", "catalog"), [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("/models/models--meta-llama--Meta-Llama-3.1-8B-Instruct/snapshots/0e9e39f249a16976918f6564b8830bc894c89659",
     "llama-3.1-8b"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("mistralai/Mistral-7B-Instruct-v0.1", "mistral-7b-v0.1"),
    ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
    ("google/gemma-2-9b-it", "gemma-2-9b"),
    ("meta-llama/Meta-Llama-3-8B", "llama-3-8b"),  # Llama 3 has its own catalog entry (PR 10511 corpus records)
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", None),  # other weights
    ("./models/Qwen-7B-Chat", None),
    ("microsoft/Phi-3.5-vision-instruct", None),
    (None, None),
])
def test_catalog_match(logged, catalog):
    assert catalog_match(logged) == catalog


def test_the_model_named_in_the_log_is_predicted(tmp_path):
    from vllm_logs import V032_LINES

    log = tmp_path / "serve.log"
    log.write_text(V032_LINES)
    out = _log_json(log)
    assert out["vllm_version"] == "0.32.0" and out["predicted"]["catalog_model"] == "llama-3.1-8b"
    # 436,384 tokens logged; kvprof: 53.27 GiB // 2 MiB blocks = 27,274 blocks;
    # 27,274 blocks / (8,192 / 16 = 512 blocks a request) = 53.27x; × 8,192 = 436,384 tokens
    assert out["predicted"]["num_gpu_blocks"] == int(53.27 * G) // (32 * 2 * 8 * 128 * 2 * 16) == 27274
    assert out["predicted"]["kv_cache_tokens"] == int(27274 / 512 * 8192) == out["kv_cache_tokens"]


# --- a log as `kvprof plan --calibration` --------------------------------------------------------

def test_log_as_plan_calibration_reproduces_the_logged_kv_budget(tmp_path):
    """Plan Llama-2-7B on the log's GPU (an 80 GB H100: total_gpu_memory 79.19 GiB) with the log's reserve, at the
    log's gpu_memory_utilization (0.9; vLLM 0.32's default is 0.92).

    kvprof's budget = catalog CUDA total 81,091 MiB × 0.9 − predicted weights 13,477,879,808 B (13,476,831,232 B of
    parameters and the 1 MiB RoPE cache, 4,096 positions × 128 × 2) − reserve, where
    reserve = (71.27 − 12.55 − 56.18) GiB as logged + (81,091 MiB − 79.19 GiB) × 0.9 (the catalog's total
    and the one vLLM printed differ by the log's rounding). It lands on the logged 56.18 GiB within 0.01 GiB.
    """
    saved = tmp_path / "log.json"
    result = runner.invoke(app, ["log", str(FIXTURES / "llama2_7b_k8s_boxed.log"), "--json"])
    saved.write_text(result.stdout)
    plan = runner.invoke(app, ["plan", "--model", "llama-2-7b", "--gpu", "h100", "--calibration", str(saved),
                               "--max-model-len", "4096", "--gpu-memory-utilization", "0.9", "--json"])
    assert plan.exit_code == 0, plan.output
    p = json.loads(plan.stdout)
    assert abs(p["kv_budget_bytes"] - int(56.18 * G)) <= 0.01 * G
    # vLLM logged 7,191 blocks; the log's GiB figures are rounded to 0.01 GiB (10 MiB), more than a block (8 MiB)
    assert abs(p["num_blocks"] - 7191) <= 1
    reserve = (int(71.27 * G) - int(12.55 * G) - int(56.18 * G)) + int((81091 * 2**20 - int(79.19 * G)) * 0.9)
    assert p["reserve"]["activation_bytes"] == reserve
    # The plan names where its reserve came from: this saved log.
    assert p["reserve"]["source"].startswith(f"calibration: vLLM start-up log {saved}")


def test_a_log_without_a_reserve_cannot_calibrate(tmp_path):
    saved = tmp_path / "log.json"
    saved.write_text(runner.invoke(app, ["log", str(FIXTURES / "llama405b_fp8_8xh100_ranks.log"), "--json"]).stdout)
    plan = runner.invoke(app, ["plan", "--model", "llama-2-7b", "--gpu", "h100", "--calibration", str(saved)])
    assert plan.exit_code == 2 and "nothing to calibrate" in plan.output and "Traceback" not in plan.output


# --- bad input ----------------------------------------------------------------------------------

def _bad(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    empty = tmp_path / "empty.log"
    empty.write_text("")
    blank = tmp_path / "blank.log"
    blank.write_text("\n \n")
    other = tmp_path / "nginx.log"
    other.write_text('127.0.0.1 - - [30/Nov/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 612\n')
    return {
        "missing": (tmp_path / "nope.log", "no such file"),
        "directory": (tmp_path, "is a directory"),
        "binary": (binary, "binary file"),
        "empty": (empty, "empty file"),
        "blank": (blank, "empty file"),
        "not vllm": (other, "no vLLM start-up lines"),
    }


@pytest.mark.parametrize("case", ["missing", "directory", "binary", "empty", "blank", "not vllm"])
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, json_flag):
    path, message = _bad(tmp_path)[case]
    result = runner.invoke(app, ["log", str(path), *json_flag])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_unknown_model_is_one_line(tmp_path):
    result = runner.invoke(app, ["log", str(FIXTURES / "llama2_7b_k8s_boxed.log"), "--model", "llama-9"])
    assert result.exit_code == 2 and "unknown model" in result.output and "Traceback" not in result.output


def test_kvprof_log_reads_the_lora_slots_and_counts_their_buffers_with_the_weights(tmp_path):
    # Unsloth's Qwen3-8B-FP8 notebook on an L4 (tests/fixtures/gpu_corpus/unsloth_qwen3_8b_fp8_lora_r32_l4.yaml):
    # "non-default args: {... 'enable_lora': True, 'max_lora_rank': 32, ...}" (max_loras unstated: vLLM's 1).
    import yaml

    from analysis.catalog import resolve_model
    from analysis.model.params import model_loading_bytes
    from analysis.vllm.lora import lora_bytes

    record = yaml.safe_load((Path(__file__).parents[2] / "fixtures" / "gpu_corpus" /
                             "unsloth_qwen3_8b_fp8_lora_r32_l4.yaml").read_text())
    log = tmp_path / "lora.log"
    log.write_text(record["excerpt"])
    out = _log_json(log, "--model", "qwen3-8b")
    assert (out["max_loras"], out["max_lora_rank"]) == (1, 32)
    pred = out["predicted"]
    assert (pred["max_loras"], pred["max_lora_rank"]) == (1, 32)
    a = resolve_model("qwen3-8b")[0]
    assert pred["weights_bytes"] == model_loading_bytes(a) + lora_bytes(a, max_loras=1, max_lora_rank=32) \
        > model_loading_bytes(a)
