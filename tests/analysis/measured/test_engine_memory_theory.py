"""The report's theory of an engine's memory is the plan's: an engine a sweep started with LoRA slots, a speculator,
pipeline stages or an eager graph-free run is predicted with them, as `kvprof plan` predicts the same settings."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
from typer.testing import CliRunner

from analysis.catalog import gpu, resolve_model
from analysis.measured.theory_vs_measured import _predicted_budget, engine_plan_inputs
from profiler.cli import app

runner = CliRunner()
H100 = gpu("h100-sxm")


def _engine(**engine_args):
    """One row of the engine table as analysis.results.load builds it (the fields the theory reads)."""
    row = dict(kv_cache_dtype="auto", block_size=16, max_model_len=8192, tensor_parallel_size=1,
               gpu_memory_utilization=0.9, max_num_batched_tokens=8192, max_num_seqs=256, async_scheduling=False,
               vllm_version="0.10.1", device_memory_bytes=H100.cuda_total_bytes)
    row.update({f"engine_arg_{k}": v for k, v in engine_args.items()})
    return SimpleNamespace(**row)


def _plan(*options: str) -> dict:
    result = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
                                 "--block-size", "16", "--max-num-batched-tokens", "8192", "--max-num-seqs", "256",
                                 "--no-async-scheduling", "--entry", "offline", "--vllm-version", "0.10.1",
                                 *options, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_an_engine_with_lora_slots_is_predicted_with_their_buffers():
    a = resolve_model("llama-3.1-8b")[0]
    plain = _predicted_budget(a, _engine(), H100)
    lora = _predicted_budget(a, _engine(enable_lora=True, max_loras=4, max_lora_rank=64), H100)
    p = _plan("--max-loras", "4", "--max-lora-rank", "64")
    assert "plan_note" not in lora
    assert lora["weights_bytes_predicted"] == p["weight_bytes"]
    assert lora["weights_bytes_predicted"] - plain["weights_bytes_predicted"] == p["lora_bytes"] > 0
    # the budget: vLLM's ceil(total × 0.9) − weights − reserve, with the device total the engine record states
    assert lora["predicted_kv_budget_bytes"] == p["kv_budget_bytes"]
    assert plain["predicted_kv_budget_bytes"] - lora["predicted_kv_budget_bytes"] == p["lora_bytes"]


def test_an_engine_with_a_speculator_or_eager_mode_is_predicted_as_the_plan_predicts_them():
    a = resolve_model("llama-3.1-8b")[0]
    spec = {"method": "eagle3", "model": "eagle3-llama-3.1-8b", "num_speculative_tokens": 3,
            "draft_tensor_parallel_size": 1, "prompt_lookup_max": None}  # fields vLLM has and memory does not need
    got = _predicted_budget(a, _engine(speculative_config=json.dumps(spec)), H100)
    p = _plan("--speculative-config", json.dumps({k: v for k, v in spec.items() if k != "prompt_lookup_max"}))
    assert "plan_note" not in got
    assert (got["weights_bytes_predicted"], got["predicted_kv_budget_bytes"]) == (p["weight_bytes"],
                                                                                  p["kv_budget_bytes"])



def test_engine_args_of_a_plan_inputs_name_reach_the_plan_from_the_engine_table():
    # Rows as the report reads them (DataFrame.itertuples of the engine table): an engine_args entry that is a plan
    # input of vLLM's name is taken by that name; another engine's missing entries (NaN) are vLLM's defaults.
    table = pd.DataFrame([vars(_engine(enforce_eager=True, pipeline_parallel_size=2, kv_offloading_size=8.0,
                                       seed=3)), vars(_engine())])
    first, second = (engine_plan_inputs(r) for r in table.itertuples(index=False))
    assert (first.enforce_eager, first.pipeline_parallel_size, first.kv_offloading_size) == (True, 2, 8.0)
    assert (second.enforce_eager, second.pipeline_parallel_size, second.kv_offloading_size) == (False, 1, None)


def test_settings_the_plan_does_not_take_fall_back_to_the_plain_accounting_and_say_why():
    a = resolve_model("llama-3.1-8b")[0]
    got = _predicted_budget(a, _engine(speculative_config=json.dumps({"method": "medusa"})), H100)
    assert "medusa" in got["plan_note"]
    plain = _predicted_budget(a, _engine(), H100)
    assert (got["weights_bytes_predicted"], got["predicted_kv_budget_bytes"]) == (
        plain["weights_bytes_predicted"], plain["predicted_kv_budget_bytes"])
