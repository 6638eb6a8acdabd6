"""The sweep's pre-flight and `kvprof plan` price an engine alike (issue #48): for every engine of every spec in
sweeps/, and for engines whose defaults differ (a pipeline, an n-gram speculator), the token budget, the sequence
cap and async scheduling the pre-flight checks the workload against are the ones the plan (and so the dry run's
cost) assumes — on an H100 and on the CPU backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.catalog import gpu, resolve_model
from analysis.planning.plan import default_batching, make_plan
from analysis.planning.plan_inputs import PlanInputs, async_scheduling
from profiler import machine, preflight
from profiler.spec import expand, load_spec
from profiler.spec.jobs import EngineConfig

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "sweeps").glob("*.yaml"))
H100 = gpu("h100-sxm")


def _engines() -> list[tuple[str, EngineConfig]]:
    out = []
    for path in SPECS:
        plan = expand(load_spec(path))
        out += [(f"{path.stem}:{e.id}", e) for e in plan.engines]
    # Defaults that differ by world size and speculator, written out: tp 2 × pp 2, and n-gram (which vLLM 0.32
    # runs without async scheduling: config/vllm.py), on the sweep's own settings model.
    base = plan.engines[0]
    out.append(("pp2", base.model_copy(update={"tensor_parallel_size": 2, "pipeline_parallel_size": 2})))
    out.append(("ngram", base.model_copy(update={"engine_args": {"speculative_config": {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}}})))
    return out


ENGINES = _engines()


def test_every_spec_in_sweeps_is_read():
    assert len(SPECS) >= 8 and len(ENGINES) >= len(SPECS) + 2


@pytest.mark.parametrize("name, engine", ENGINES, ids=[n for n, _ in ENGINES])
def test_the_pre_flight_and_the_plan_agree_on_an_h100(name, engine, monkeypatch):
    monkeypatch.setattr(machine, "platform_device", lambda platform: (H100.cuda_total_bytes, "NVIDIA H100 80GB HBM3"))
    mnbt, seqs = preflight.scheduler_defaults(engine, "cuda")
    inputs = PlanInputs.for_engine(engine)
    a = resolve_model("llama-3.1-8b")[0]  # the defaults depend on the device and settings, not the model
    default_mnbt, default_seqs = default_batching(a, inputs, H100)
    planned_mnbt = inputs.max_num_batched_tokens or default_mnbt
    assert (planned_mnbt, inputs.max_num_seqs or min(default_seqs, planned_mnbt)) == (mnbt, seqs), name
    assert async_scheduling(inputs, on_gpu=True) == preflight.async_scheduling(engine, "cuda"), name
    # and what make_plan returns, end to end (a fixed budget: the spec's model and lengths do not matter here)
    plan = make_plan(a, inputs.model_copy(update={"kv_cache_memory_bytes": 2**30, "max_model_len": 2048,
                                                  "block_size": 16, "pipeline_parallel_size": 1}), H100)
    if inputs.pipeline_parallel_size == 1:
        assert (plan.max_num_batched_tokens, plan.max_num_seqs, plan.async_scheduling) == (
            mnbt, seqs, preflight.async_scheduling(engine, "cuda")), name


@pytest.mark.parametrize("name, engine", ENGINES, ids=[n for n, _ in ENGINES])
def test_the_pre_flight_and_the_plan_agree_on_the_cpu_backend(name, engine):
    mnbt, seqs = preflight.scheduler_defaults(engine, "cpu")
    inputs = PlanInputs.for_engine(engine)
    a = resolve_model("llama-3.1-8b")[0]
    default_mnbt, default_seqs = default_batching(a, inputs, None)
    assert (inputs.max_num_batched_tokens or default_mnbt,
            inputs.max_num_seqs or min(default_seqs, inputs.max_num_batched_tokens or default_mnbt)) == (mnbt, seqs)
    assert async_scheduling(inputs, on_gpu=False) is preflight.async_scheduling(engine, "cpu") is \
        (engine.async_scheduling or False)


def test_the_defaults_written_out():
    """vLLM 0.32's EngineArgs.get_batch_defaults for the LLM class: an H100 (≥ 70 GiB, not an A100) 16,384 tokens /
    1,024 sequences; the CPU backend 4,096 / 256 per device of the world (tp × pp); async scheduling on for CUDA,
    off under pipeline parallelism and with n-gram (config/vllm.py)."""
    by_name = dict(ENGINES)
    pp2, ngram = by_name["pp2"], by_name["ngram"]
    assert default_batching(resolve_model("llama-3.1-8b")[0], PlanInputs.for_engine(ngram), H100) == (16384, 1024)
    assert default_batching(resolve_model("llama-3.1-8b")[0], PlanInputs.for_engine(pp2), None) == (4 * 4096, 4 * 256)
    assert async_scheduling(PlanInputs.for_engine(pp2), on_gpu=True) is False
    assert async_scheduling(PlanInputs.for_engine(ngram), on_gpu=True) is False
