"""Hybrid attention + Mamba2 models (Nemotron-H) read, counted and allocated as vLLM 0.32 does (issue #47).

Expected values: arithmetic written out from vLLM 0.32's Mamba2 mixer and state shapes
(model_executor/layers/mamba/mamba_mixer2.py, mamba_utils.py), the model card's parameter count, and vLLM's own
allocator functions (``_align_hybrid_block_size``, ``_get_kv_cache_groups_uniform_page_size``,
``get_max_concurrency_for_kv_cache_config``) run on the same layer specs.
"""


import json
from pathlib import Path

import pytest

from analysis.catalog import resolve_model
from analysis.latency.step import step_work
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.kv import kv_bytes_per_sequence
from analysis.model.layers import Mamba2State
from analysis.model.params import count_params, weight_bytes
from analysis.vllm.allocator import paged_capacity

MiB = 2**20

# Nemotron-H-8B's shapes (its model card's architecture: hidden 4096, 32 heads of 128 over 8 KV heads, Mamba2 of 128
# heads × 64, 8 groups, state 128, conv 4, relu² MLP of 21,504), 8 layers of them.
NEMOTRON_8B_LIKE = {
    "model_type": "nemotron_h", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128,
    "conv_kernel": 4, "use_conv_bias": True, "use_bias": False, "intermediate_size": 21504,
    "mlp_hidden_act": "relu2", "vocab_size": 131072, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
    "hybrid_override_pattern": "MMM*MMM*",
}


def test_a_nemotron_h_layer_counts_its_mixer_or_its_mlp():
    a = Architecture.from_config(NEMOTRON_8B_LIKE | {"hybrid_override_pattern": "M*-"})
    assert a.layer_types == ("recurrent", "full_attention", "mlp")
    p = count_params(a)
    # Mamba2 mixer: in_proj 4096 × (2·8192 + 2·8·128 + 128), conv 10,240 channels × 4 taps + bias, dt_bias, A, D,
    # the gated norm over 8192, out_proj 8192 × 4096
    assert p.recurrent == 4096 * 18_560 + 10_240 * 4 + 10_240 + 3 * 128 + 8192 + 8192 * 4096 == 109_635_968
    # attention without biases or RoPE: q, k, v, o
    assert p.attention == 4096 * (4096 + 2 * 1024) + 4096 * 4096 == 41_943_040
    # relu² MLP: up and down, no gate
    assert p.dense_mlp == 2 * 4096 * 21_504
    # one norm a layer, the final norm
    assert p.norms == 3 * 4096 + 4096


def test_nemotron_h_56b_is_its_published_size():
    a, _ = resolve_model("nemotron-h-56b")
    assert (a.num_layers, a.num_attention_layers, a.num_recurrent_layers) == (118, 10, 54)
    # the model card: "This model has 56B model parameters"
    assert count_params(a).total / 56e9 == pytest.approx(1, abs=0.01)
    assert weight_bytes(a, tp=8) == pytest.approx(count_params(a).total * 2 / 8, rel=1e-9)


def test_a_mamba2_state_is_bytes_a_request_split_over_the_ranks():
    s = Mamba2State(num_heads=128, head_dim=64, n_groups=8, state_size=128, conv_kernel=4, conv_bytes=2, ssm_bytes=4)
    # conv: 3 × (8192 + 2·8·128) × 2 B; SSM: 128 × 64 × 128 × 4 B
    assert s.state_bytes() == 3 * 10_240 * 2 + 128 * 64 * 128 * 4 == 4_255_744
    assert s.state_bytes(tp=8) == 3 * 10_240 // 8 * 2 + 16 * 64 * 128 * 4
    # 8 groups over 16 ranks cannot be split: vLLM adds tp − n_groups groups (extra_groups_for_head_shards)
    assert s.state_bytes(tp=16) == 3 * (8192 + 2 * 16 * 128) // 16 * 2 + 8 * 64 * 128 * 4
    a = Architecture.from_config(NEMOTRON_8B_LIKE)
    # a sequence holds its attention layers' tokens and its Mamba layers' state, whatever its length
    assert kv_bytes_per_sequence(a, 1000) == 2 * 1000 * 2 * 8 * 128 * 2 + 6 * 4_255_744


@pytest.mark.parametrize("prefix_caching, alignment, block_size, block, blocks, per_request, concurrency, tokens", [
    # vLLM 0.32's own functions on these specs (six Mamba2 layers, two attention layers, 256 MiB, 2,048 tokens):
    # on CPU (its default block 128, backend kernel blocks of 32) and on CUDA (16), prefix cache on (align) and off
    (True, 32, 128, 1152, 28, 11, 2.55, 5213),
    (False, 32, 128, 1152, 28, 5, 5.60, 11468),
    (True, 16, 16, 1040, 31, 11, 2.82, 5771),
    (False, 16, 16, 1040, 31, 5, 6.20, 12697),
])
def test_the_attention_block_is_raised_to_hold_a_mamba_state(prefix_caching, alignment, block_size, block, blocks,
                                                              per_request, concurrency, tokens):
    a = Architecture.from_config(NEMOTRON_8B_LIKE)
    cap = paged_capacity(a, 256 * MiB, block_size=block_size, max_model_len=2048, max_num_batched_tokens=2048,
                         prefix_caching=prefix_caching, kernel_block_alignment=alignment)
    assert (cap.block_size, cap.num_blocks, cap.blocks_per_request) == (block, blocks, per_request)
    assert round(cap.max_concurrency, 2) == concurrency and cap.kv_cache_tokens == tokens
    # the Mamba page is padded to the attention page: 2 KV-cache layers of block × 4,096 B a block
    assert cap.bytes_per_block == 2 * block * 2 * 8 * 128 * 2


def test_a_decode_step_reads_and_writes_each_sequences_state():
    from analysis.catalog import resolve_gpu

    a = Architecture.from_config(NEMOTRON_8B_LIKE)
    h100, _ = resolve_gpu("h100-sxm")
    one = step_work(a, h100, decode_seqs=1, decode_context=1000)
    ten = step_work(a, h100, decode_seqs=10, decode_context=1000)
    per_seq = 2 * 1000 * 2 * 8 * 128 * 2 + 2 * 6 * 4_255_744  # KV read, the state read and written back
    assert ten.kv_bytes - one.kv_bytes == pytest.approx(9 * per_seq)


@pytest.mark.parametrize("change, message", [
    ({"hybrid_override_pattern": "ME*-"}, "no n_routed_experts"),
    ({"hybrid_override_pattern": "MMMX"}, "needs hybrid_override_pattern"),
    ({"hybrid_override_pattern": "MM--"}, "both Mamba2"),
    ({"mlp_hidden_act": "silu"}, "relu2"),
    ({"sliding_window": 4096}, "sliding window"),
    ({"attention_head_dim": 96}, "attention_head_dim"),
    ({"mamba_ssm_cache_dtype": "float64"}, "mamba_ssm_cache_dtype"),
    ({"mamba_num_heads": [128]}, "mamba_num_heads is a list"),
])
def test_what_the_nemotron_h_reader_does_not_model_is_refused_by_name(change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(NEMOTRON_8B_LIKE | change)


def test_nemotron_3_nano_counts_its_relu2_experts():
    a, _ = resolve_model("nemotron-3-nano-30b-a3b")
    assert (a.num_layers, a.num_attention_layers, a.num_recurrent_layers) == (52, 6, 23)
    assert sum(a.is_moe_layer(i) for i in range(a.num_layers)) == 23
    p = count_params(a)
    # 23 MoE layers: 128 experts of up and down (2688 × 1856 each, no gate), the router and its score-correction
    # bias, one shared relu² expert of 3712
    assert p.experts_total == 23 * 128 * 2 * 2688 * 1856
    assert p.router_and_shared == 23 * (2688 * 128 + 128 + 2 * 2688 * 3712)
    # the model's listing: 31.6B parameters; its card: 3.5B active (6 of 128 experts and the shared one)
    assert p.total / 31.6e9 == pytest.approx(1, abs=0.01)
    assert p.active / 3.5e9 == pytest.approx(1, abs=0.03)


def test_a_mixed_pattern_has_dense_and_moe_mlps_where_its_letters_say():
    a = Architecture.from_config(NEMOTRON_8B_LIKE | {"hybrid_override_pattern": "M-*E", "n_routed_experts": 8,
                                                     "num_experts_per_tok": 2, "moe_intermediate_size": 1024})
    assert [a.has_mlp(i) for i in range(4)] == [False, True, False, True]
    assert [a.is_moe_layer(i) for i in range(4)] == [False, False, False, True]


@pytest.mark.parametrize("prefix_caching, per_request", [(None, 4 + 4 * 3), (True, 4 + 4 * 3), (False, 4 + 4)])
def test_the_plan_takes_the_prefix_cache_a_hybrid_model_runs_with(prefix_caching, per_request):
    from analysis.catalog import resolve_gpu
    from analysis.planning.plan import PlanInputs, make_plan

    a, _ = resolve_model("nemotron-3-nano-30b-a3b")
    h100, _ = resolve_gpu("h100-sxm")
    p = make_plan(a, PlanInputs(max_model_len=8192, enable_prefix_caching=prefix_caching), h100)
    # 2 KV heads × 128 × 2 × 2 B = 1,024 B a token; a Mamba2 state: 3 × (64·64 + 2·8·128) × 2 B + 64·64·128 × 4 B
    # = 2,134,016 B; CUDA's 16-token unit: 16 × cdiv(2,134,016, 16 × 1,024) = 2,096 tokens
    assert p.kv_block_size == 2096 and p.block_size == 16
    # six attention layers make the group width: 23 Mamba layers in four groups; cdiv(8,192, 2,096) = 4 attention
    # blocks a request, and one (three with the prefix cache) a Mamba group
    assert p.bytes_per_block == 6 * 2096 * 1024
    assert p.blocks_per_request == per_request


def test_qwen3_next_counts_its_gated_deltanet_and_gated_attention():
    a, _ = resolve_model("qwen3-next-80b-a3b-thinking")
    # every fourth layer attention (full_attention_interval 4), the rest gated DeltaNet
    assert (a.num_layers, a.num_attention_layers, a.num_recurrent_layers) == (48, 12, 36)
    h = 2048
    p = count_params(a)
    # gated DeltaNet (vLLM's QwenGatedDeltaNetAttention): in_proj_qkvz to q, k (16 × 128 each), v and z (32 × 128
    # each), in_proj_ba (32 each), the bias-free conv over q, k, v (8,192 channels × 4), dt_bias and A_log (32 each),
    # the gated norm over 128, out_proj 4,096 → 2,048
    assert p.recurrent == 36 * (h * (2 * 2048 + 2 * 4096) + h * 64 + 8192 * 4 + 64 + 128 + 4096 * h)
    # gated attention: q_proj gives the queries and the output gate (2 × 16 × 256), k and v 2 × 256 each, o_proj,
    # the q and k norms over 256
    assert p.attention == 12 * (h * 2 * 4096 + 2 * h * 512 + 4096 * h + 2 * 256)
    # its name: 80B parameters
    assert p.total / 80e9 == pytest.approx(1, abs=0.01)
    # RoPE turns a quarter of each head: vLLM's cos/sin cache is 262,144 positions × 64 in bf16
    from analysis.model.params import rotary_cache_bytes

    assert rotary_cache_bytes(a) == 262_144 * 64 * 2


def test_a_gated_deltanet_state_is_bytes_a_request():
    a, _ = resolve_model("qwen3-next-80b-a3b-thinking")
    (state, n), _ = a.attention_kinds
    assert (state.kind, n) == ("gated_deltanet", 36)
    # conv: 3 × (2 × 16 × 128 + 32 × 128) channels; SSM: 32 value heads × 128 × 128; both in the model dtype (bf16)
    assert state.state_bytes() == 3 * 8192 * 2 + 32 * 128 * 128 * 2 == 1_097_728
    assert state.state_bytes(tp=2) == 3 * 4096 * 2 + 16 * 128 * 128 * 2
    # with the prefix cache a DeltaNet group holds two blocks a request (no prefill checkpoint, unlike Mamba2)
    assert state.in_cache_mode("align").blocks_per_request(16, 2048, 2048) == 2


@pytest.mark.parametrize("change, message", [
    ({"layer_types": ["linear_attention"] * 47 + ["sliding_attention"]}, "layer_types must be"),
    ({"full_attention_interval": 100}, "both gated DeltaNet and attention"),
    ({"use_sliding_window": True}, "sliding window"),
    ({"layer_scale": True}, "key layer_scale is not read"),
    ({"linear_num_value_heads": "32"}, "linear_num_value_heads is a string"),
])
def test_what_the_qwen3_next_reader_does_not_model_is_refused_by_name(change, message):
    cfg = json.loads((resolve_model("qwen3-next-80b-a3b-thinking")[1] / "config.json").read_text())
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(cfg | change)


def test_the_plan_names_the_recurrent_state_a_decode_step_moves():
    from analysis.catalog import resolve_gpu
    from analysis.planning.plan import PlanInputs, make_plan

    a, _ = resolve_model("nemotron-3-nano-30b-a3b")
    h100, _ = resolve_gpu("h100-sxm")
    p = make_plan(a, PlanInputs(batch=32, context=8192, max_model_len=8192), h100)
    # 32 sequences, 23 Mamba2 states of 2,134,016 B each, read and written back
    assert p.decode_recurrent_state_bytes == 2 * 32 * 23 * 2_134_016
    # beside the six attention layers' 8,192 tokens of 1,024 B a sequence, read once
    assert p.decode_kv_bytes == pytest.approx(32 * (6 * 8192 * 1024 + 2 * 23 * 2_134_016), rel=1e-3)
    assert "recurrent layers" in p.latency_note


@pytest.mark.parametrize("name, total_b, active_b", [
    # the model names' sizes: 35B total, 3B active; 122B, 10B; 397B, 17B
    ("Qwen--Qwen3.5-35B-A3B", 35, 3),
    ("Qwen--Qwen3.5-122B-A10B", 122, 10),
    ("Qwen--Qwen3.5-397B-A17B", 397, 17),
])
def test_qwen3_5_is_qwen3_next_layers_with_the_qwen3_vl_tower(name, total_b, active_b):
    from published_configs import CONFIGS

    a = Architecture.from_config(CONFIGS / name)
    assert (a.recurrent.kind, a.recurrent.ssm_cache_dtype) == ("gated_deltanet", "float32")  # mamba_ssm_dtype
    assert a.num_recurrent_layers == 3 * a.num_attention_layers  # full_attention_interval 4
    assert a.vision is not None and a.encoder_params > 0  # vLLM's Qwen3.5 builds Qwen3-VL's tower
    assert a.rotary_fraction == 0.25 and a.rope_cache_positions == (262_144 * 4,)  # MRoPE, a quarter of a head
    p = count_params(a)
    assert (p.total + a.encoder_params) / (total_b * 1e9) == pytest.approx(1, abs=0.01)
    # active: the name rounds, and kvprof's count holds the embedding and LM head (2 × 248,320 × hidden) too
    assert p.active / (active_b * 1e9) == pytest.approx(1, abs=0.2)
    assert all(a.is_moe_layer(i) for i in range(a.num_layers))  # every layer MoE (qwen3_5.py)


def test_qwen3_5_refuses_what_vllm_ignores():
    from published_configs import CONFIGS

    cfg = json.loads((CONFIGS / "Qwen--Qwen3.5-35B-A3B" / "config.json").read_text())
    cfg["text_config"] |= {"mlp_only_layers": [0]}
    with pytest.raises(UnsupportedArchitecture, match=r"vLLM's Qwen3\.5 ignores them"):
        Architecture.from_config(cfg)


@pytest.mark.parametrize("checkpoint, total_b, experts", [
    # NVIDIA's names: 120B and 550B parameters. The NVFP4 build's config.json is the BF16 one's architecture
    ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", 120, 512),
    ("nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16", 550, 512),
])
def test_a_latent_moe_counts_its_experts_at_the_latent_width(checkpoint, total_b, experts):
    """Nemotron-3 Super and Ultra run their routed experts on a moe_latent_size projection of the hidden state
    (vLLM's NemotronHMoE: fc1_latent_proj in, fc2_latent_proj out); the MTP layers past the decoder are not loaded.
    The count is transformers' own NemotronHForCausalLM's on the same config, plus the router's float32
    score-correction bias (a buffer there, a parameter in vLLM)."""
    import torch
    import transformers

    path = Path(__file__).resolve().parents[2] / "fixtures" / "published_configs" / checkpoint / "config.json"
    cfg = json.loads(path.read_text())
    a = Architecture.from_config(cfg, checkpoint)
    p = count_params(a)
    plain = {k: v for k, v in cfg.items() if k not in ("quantization_config", "auto_map", "model_type")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.NemotronHConfig(**plain))
    moe_layers = sum(a.is_moe_layer(i) for i in range(a.num_layers))
    assert a.moe.latent_size == cfg["moe_latent_size"]
    assert p.total == sum(t.numel() for t in model.parameters()) + moe_layers * experts
    assert p.total / 1e9 == pytest.approx(total_b, rel=0.01)
