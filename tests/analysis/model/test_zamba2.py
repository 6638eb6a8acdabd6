"""Zamba2 (zamba2): a Mamba2 mixer on every layer, shared attention-and-MLP blocks on the hybrid layers, read as
vLLM's models/zamba2.py builds it (issue #47)."""

import json

import pytest
from helpers import transformers_build

from analysis.catalog import model_dir, resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params, weight_bytes, weight_matrices
from analysis.vllm.allocator import paged_capacity


def _tiny() -> dict:
    return json.loads((model_dir("tiny-zamba2") / "config.json").read_text())


def _transformers_count(cfg: dict) -> int:
    return transformers_build(cfg)[1]  # a shared block's weights once, however many layers run it


@pytest.mark.parametrize("change", [{}, {"num_mem_blocks": 1, "use_shared_attention_adapter": False},
                                    {"add_bias_linear": True, "use_mem_rope": True}])
def test_parameters_are_what_transformers_builds(change):
    cfg = _tiny() | change
    a = Architecture.from_config(cfg, "tiny-zamba2")
    assert count_params(a).total == _transformers_count(cfg)
    assert sum(m.out_features * m.in_features for m in weight_matrices(a)) < count_params(a).total


def test_the_tiny_model_written_out():
    """Embeddings 1,024 × 256 (tied); six Mamba2 mixers (in_proj (2 × 512 + 2 × 16 + 4) × 256, out_proj 256 × 512,
    a convolution of 544 channels × 4 taps and its bias, A, D and dt_bias, a gated norm of 512) and their norms;
    two shared blocks (q, k, v 512 × 512, o 256 × 512, gate_up 1,024 × 256, down 256 × 512, norms 512 + 256); two
    hybrid layers' linear (256 × 256), q, k, v adapters (8 × 512 + 512 × 8 each) and MLP adapter (8 × 256 +
    1,024 × 8); the final norm."""
    a, _ = resolve_model("tiny-zamba2")
    mixer = 1060 * 256 + 256 * 512 + 544 * 4 + 544 + 3 * 4 + 512
    block = 3 * 512 * 512 + 256 * 512 + 1024 * 256 + 256 * 512 + 512 + 256
    hybrid = 256 * 256 + 3 * (8 * 512 + 512 * 8) + 8 * 256 + 1024 * 8
    assert count_params(a).total == 1024 * 256 + 6 * (mixer + 256) + 2 * block + 2 * hybrid + 256 == 5_521_672
    assert weight_bytes(a) == 2 * 5_521_672


def test_each_hybrid_layer_keeps_a_kv_cache_beside_its_mixers_state():
    """Two hybrid layers hold MHA KV of 4 heads × 128 (2 × 4 × 128 × 2 B = 2,048 B a token); every layer a Mamba2
    state of 3 × 544 × 2 + 4 × 128 × 16 × 2 = 19,648 B. With a 16-token CUDA block the block rises to
    16 × cdiv(19,648, 16 × 2,048) = 16 tokens; six Mamba layers against two attention layers make groups of two
    (6 ≥ 1.5 × 2): one attention group and three Mamba groups, 2 × 32,768 B a block."""
    a, _ = resolve_model("tiny-zamba2")
    assert [(layer.kind, n) for layer, n in a.attention_kinds] == [("mamba2", 6), ("full", 2)]
    cap = paged_capacity(a, 2**30, block_size=16, max_model_len=4096, max_num_batched_tokens=4096,
                         prefix_caching=False)
    assert (cap.block_size, cap.page_bytes, cap.bytes_per_block) == (16, 32768, 65536)
    assert sorted((g.kind, len(g.layers), g.blocks_per_request) for g in cap.groups) == [
        ("full", 2, 256), ("mamba2", 2, 1), ("mamba2", 2, 1), ("mamba2", 2, 1)]


@pytest.mark.parametrize("change, message", [
    ({"hidden_act": "silu"}, "runs gelu only"),
    ({"layers_block_type": ["mamba"] * 6}, "without hybrid layers"),
    ({"hybrid_layer_ids": [1, 3]}, "disagrees with layers_block_type"),
    ({"attention_hidden_size": 256}, "attends over 2 × hidden_size"),
    ({"num_key_value_heads": 2}, "as many KV heads as heads"),
    ({"mamba_headdim": 64}, "differs from the mixer's width"),
    ({"layers_block_type": ["mamba", "attention"] * 3}, "layers_block_type must list 6 layers"),
])
def test_what_vllm_does_not_build_is_refused_by_name(change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_tiny() | change, "tiny-zamba2")
