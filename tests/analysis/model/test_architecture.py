"""config.json parsing and parameter counts against published totals."""

import json

import pytest

from analysis.catalog import gpu, gpus, model_names, resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.kv import kv_bytes_per_sequence, kv_bytes_per_token, layer_kv_bytes_per_token
from analysis.model.params import count_params, decode_weight_bytes, expected_experts_touched


@pytest.mark.parametrize(
    "name, total_b, active_b",
    [
        ("llama-3.1-8b", 8.03, None),
        ("llama-3.1-70b", 70.6, None),
        ("mixtral-8x7b", 46.7, 12.9),
        ("mixtral-8x22b", 141.0, 39.0),  # Mistral AI's announcement: 141B parameters, 39B active
        ("dbrx", 132.0, 36.0),  # Databricks' announcement: 132B total parameters, 36B active on any input
        ("qwen2.5-7b", 7.62, None),
        ("llama-3.1-405b", 405.9, None),
        ("deepseek-v3", 671.0, 37.0),
        ("qwen3-30b-a3b", 30.5, 3.3),
        ("gpt-oss-120b", 116.8, None),
        ("deepseek-v3.2", 671.0, None),  # DeepSeek: 671B in the main model (685B with its MTP module)
        ("glm-5", 744.0, None),  # Z.ai: 744B parameters
        ("minimax-m2.5", 230.0, None),  # MiniMax: 230B total parameters
        ("llama-4-maverick", 400.0, None),  # Meta: 400B total, 17B active
        ("gemma-4-26b-a4b", 25.2, None),  # 25.2B total, 3.8B active, as Gemma 4 pages quote it (tower aside)
        ("deepseek-v4-flash", 284.0, None),  # deepseek-ai: 284B parameters, 13B activated (embedding lookup aside)
        ("qwen3.5-27b", 26.9, None),  # transformers' count of the decoder, its name 27B (the tower is 0.46B more)
        ("falcon-mamba-7b", 7.27, None),  # TII's card: 7.27B parameters (attention-free, 64 Mamba layers)
    ],
)
def test_published_parameter_totals_within_1_percent(name, total_b, active_b):
    arch, _ = resolve_model(name)
    p = count_params(arch)
    assert p.total / 1e9 == pytest.approx(total_b, rel=0.01)
    if active_b is not None:
        assert p.active / 1e9 == pytest.approx(active_b, rel=0.02)


def test_gpt_oss_active_excludes_input_embedding_as_published():
    # OpenAI quotes 3.6B / 5.1B active: everything but the input embedding table.
    for name, published in (("gpt-oss-20b", 3.61), ("gpt-oss-120b", 5.13)):
        arch, _ = resolve_model(name)
        p = count_params(arch)
        assert (p.active - p.embedding) / 1e9 == pytest.approx(published, rel=0.01)


def test_catalog_has_at_least_12_real_architectures_and_all_parse():
    real = [n for n in model_names() if not n.startswith("tiny-")]
    assert len(real) >= 12
    for name in model_names():
        arch, directory = resolve_model(name)
        assert (directory / "config.json").is_file()
        # an attention-free model caches no token, only a state a request
        assert kv_bytes_per_token(arch) > 0 or (arch.attention_free and kv_bytes_per_sequence(arch, 1) > 0)


def test_llama_3_1_8b_facts():
    a, _ = resolve_model("llama-3.1-8b")
    assert (a.num_layers, a.num_kv_heads, a.head_dim, a.attention_kind) == (32, 8, 128, "GQA")
    assert kv_bytes_per_token(a) == 131_072  # 128 KiB: 32 layers × 2 × 8 × 128 × 2 B
    assert kv_bytes_per_token(a, "fp8") == 65_536


def test_gemma3_nested_text_config_and_5_to_1_pattern():
    a, _ = resolve_model("gemma-3-27b")
    assert a.num_layers == 62 and a.head_dim == 128 and a.torch_dtype == "bfloat16"
    assert a.layer_types[:6] == ("sliding_attention",) * 5 + ("full_attention",)
    assert (a.num_sliding_layers, a.num_full_layers) == (52, 10)
    assert a.tie_word_embeddings  # gemma default
    # Past the 1,024-token window only the 10 global layers grow.
    per_layer = layer_kv_bytes_per_token(a)
    assert kv_bytes_per_sequence(a, 32_768) == per_layer * (10 * 32_768 + 52 * 1024)


def test_gemma2_alternates_starting_with_sliding():
    a, _ = resolve_model("gemma-2-9b")
    assert a.layer_types[:4] == ("sliding_attention", "full_attention") * 2
    assert a.norms_per_layer == 4


def test_gpt_oss_explicit_layer_types_and_mxfp4_experts():
    a, _ = resolve_model("gpt-oss-20b")
    assert a.sliding_window == 128 and a.num_sliding_layers == 12
    # MXFP4 experts, bf16 elsewhere: the checkpoint's quantization_config
    # (bytes: tests/analysis/model/test_quantization.py).
    assert a.quantization is not None and a.quantization.method == "mxfp4"


def test_qwen2_sliding_window_convention(tmp_path):
    cfg = json.loads(resolve_model("qwen2.5-7b")[1].joinpath("config.json").read_text())
    assert Architecture.from_config(cfg).num_sliding_layers == 0  # use_sliding_window false
    cfg.update(use_sliding_window=True, max_window_layers=20, sliding_window=4096)
    a = Architecture.from_config(cfg)
    assert a.layer_types[19] == "full_attention" and a.layer_types[20] == "sliding_attention"
    assert a.num_sliding_layers == 8


def test_mla_latent_bytes():
    a, _ = resolve_model("deepseek-v3")
    assert a.attention_kind == "MLA"
    assert layer_kv_bytes_per_token(a) == (512 + 64) * 2
    assert kv_bytes_per_token(a) == 61 * 1152
    assert layer_kv_bytes_per_token(a, tp=8) == 1152  # the latent is replicated per rank


def test_tensor_parallel_splits_and_replicates_kv_heads():
    a, _ = resolve_model("llama-3.1-70b")  # 8 KV heads
    assert layer_kv_bytes_per_token(a, tp=4) == 2 * 2 * 128 * 2
    assert layer_kv_bytes_per_token(a, tp=16) == 2 * 1 * 128 * 2  # replicated
    with pytest.raises(ValueError, match="cannot be split"):
        layer_kv_bytes_per_token(a, tp=3)


def test_moe_decode_reads_only_touched_experts():
    a, _ = resolve_model("mixtral-8x7b")
    assert expected_experts_touched(8, 2, 1) == pytest.approx(2)
    one, many = decode_weight_bytes(a, 1), decode_weight_bytes(a, 256)
    assert one < many
    assert many == pytest.approx(decode_weight_bytes(a, 10_000))  # all experts touched


@pytest.mark.parametrize(
    "mutation, message",
    [
        (lambda c: c.pop("num_hidden_layers"), "layer count"),
        (lambda c: c.update(layer_types=["full_attention", "mamba"] * 2), "recurrent state"),
        (lambda c: c.update(num_hidden_layers=0), "positive integer"),
        (lambda c: c.update(model_type="t5"), "encoder-decoder"),
        (lambda c: c.update(num_key_value_heads=3), "not divisible"),
        (lambda c: c.update(torch_dtype="complex64"), "unknown dtype"),
    ],
)
def test_unsupported_configs_name_the_problem(mutation, message):
    cfg = json.loads(resolve_model("tiny-llama-gqa")[1].joinpath("config.json").read_text())
    mutation(cfg)
    with pytest.raises(UnsupportedArchitecture, match=message):
        Architecture.from_config(cfg)


def test_missing_config_is_a_clear_error(tmp_path):
    with pytest.raises(UnsupportedArchitecture, match=r"no config\.json"):
        Architecture.from_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UnsupportedArchitecture, match="not valid JSON"):
        Architecture.from_config(tmp_path)


def test_gpu_catalog_and_nvml_names():
    assert {"a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie", "h100-sxm", "h100-pcie", "h100-nvl",
            "h200", "b200", "l40s", "l4"} <= set(gpus())
    assert gpu("NVIDIA H200").name == "h200"
    assert gpu("NVIDIA L4").name == "l4"
    assert gpu("NVIDIA L40S").name == "l40s"  # longest match wins
    assert gpu("NVIDIA H100 80GB HBM3").name == "h100-sxm"
    assert gpu("a100-80gb-sxm").bandwidth_tbs == 2.039
    assert round(gpu("a100-40gb-sxm").ridge_point) == 201


def test_vllm_downcasts_a_float32_checkpoint_under_auto_dtype():
    """vLLM's _resolve_auto_dtype (vllm/config/model.py): a float32 config runs in the platform's first
    supported dtype (bfloat16 on Ampere+ and x86 CPUs); --dtype float32 keeps 4 bytes; other configs keep theirs.
    gemma-2-9b's config.json says float32, and vLLM 0.19 logged 17.22 GiB of weights for it on an H100
    (llmdplanner_gemma2_9b_h100 in tests/fixtures/gpu_corpus): 2 bytes a parameter, not 4."""
    from analysis.catalog import resolve_model

    a, _ = resolve_model("gemma-2-9b")
    assert a.torch_dtype == "float32"
    assert a.with_dtype("auto").torch_dtype == "bfloat16"
    assert a.with_dtype("float32").torch_dtype == "float32"
    assert a.with_dtype("half").torch_dtype == "float16"
    b, _ = resolve_model("llama-3.1-8b")
    assert b.with_dtype("auto") is b and b.with_dtype("float32").weight_dtype_bytes == 4
    with pytest.raises(ValueError, match="--dtype 'int8'"):
        b.with_dtype("int8")


@pytest.mark.parametrize("key, value, bound", [
    ("num_hidden_layers", 10**9, "4,096"),
    ("hidden_size", 10**7, "262,144"),
    ("num_attention_heads", 10**6, "8,192"),
    ("num_key_value_heads", 10**6, "8,192"),
    ("intermediate_size", 10**8, "1,048,576"),
    ("vocab_size", 10**9, "16,777,216"),
    ("max_position_embeddings", 10**12, "268,435,456"),
    ("num_local_experts", 10**6, "16,384"),
])
def test_implausible_sizes_are_refused_naming_the_key_value_and_bound(key, value, bound):
    # Each bound is far past any published model (126 layers, hidden 16,384, 128 heads, 384 experts, 10M positions)
    cfg = json.loads(resolve_model("tiny-llama-gqa")[1].joinpath("config.json").read_text()) | {key: value}
    if key == "num_local_experts":
        cfg["num_experts_per_tok"] = 2
    with pytest.raises(UnsupportedArchitecture, match=f"config.json {key} {value:,} is past kvprof's bound of {bound}"):
        Architecture.from_config(cfg)


def test_an_oversized_config_file_is_refused_unread(tmp_path):
    (tmp_path / "config.json").write_text('{"pad": "' + "x" * (16 << 20) + '"}')
    with pytest.raises(UnsupportedArchitecture, match=r"a model's config\.json is at most 16,777,216 bytes"):
        Architecture.from_config(tmp_path)


def _tiny(**changes):
    cfg = json.loads(resolve_model("tiny-llama-gqa")[1].joinpath("config.json").read_text())
    cfg.pop("rope_scaling", None)
    return Architecture.from_config(cfg | changes)


@pytest.mark.parametrize("changes, limit", [
    ({"max_position_embeddings": 4096}, 4096),
    # vLLM 0.32 _get_and_verify_max_len: a linear or dynamic RoPE factor scales the length: 4096 · 4 = 16,384
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4.0}}, 16_384),
    ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, 8_192),
    # llama3, yarn, longrope: max_position_embeddings is already the scaled length
    ({"max_position_embeddings": 131_072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 131_072),
    ({"max_position_embeddings": 163_840, "rope_scaling": {"type": "yarn", "factor": 40}}, 163_840),
    # Gemma 3's 128K already includes its linear factor 8 (vLLM skips "gemma3" model types)
    ({"max_position_embeddings": 131_072, "model_type": "gemma3_text",
      "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, 131_072),
    # the smallest length key counts, and model_max_length wins (Command-R)
    ({"max_position_embeddings": 8192, "seq_length": 4096}, 4096),
    ({"max_position_embeddings": 8192, "model_max_length": 16_384}, 16_384),
])
def test_the_longest_max_model_len_is_vllms(changes, limit):
    assert _tiny(**changes).max_len_limit == limit


def test_catalog_limits_are_their_max_position_embeddings():
    # every catalog model's RoPE type is prescaled (llama3, yarn) or none, or the model is a Gemma 3
    for name in ("llama-3.1-8b", "deepseek-v3", "gemma-3-27b", "gpt-oss-120b", "qwen2.5-0.5b"):
        a, _ = resolve_model(name)
        assert a.max_len_limit == a.max_position_embeddings and a.derived_max_len is None


# -- what vLLM's "Model loading took" counts beside the decoder's weights --------------------------------------

LLAMA_LIKE = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
              "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096,
              "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("rope, positions", [
    (None, (4096,)),  # one cache of max_position_embeddings
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 512}, (4096,)),  # Llama3RotaryEmbedding: max_position as given
    ({"rope_type": "linear", "factor": 2.0}, (8192,)),  # LinearScalingRotaryEmbedding: max_position × factor
    ({"type": "dynamic", "factor": 3.0}, (12288,)),  # DynamicNTKScalingRotaryEmbedding: the same
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, (4096,)),  # original × factor
    ({"rope_type": "default", "mrope_section": [16, 24, 24]}, (16384,)),  # MRotaryEmbedding: positions_factor 4
])
def test_each_rope_cache_spans_the_positions_vllm_builds(rope, positions):
    from analysis.model.params import rotary_cache_bytes

    a = Architecture.from_config(LLAMA_LIKE | ({"rope_scaling": rope} if rope else {}))
    assert a.rope_cache_positions == positions
    assert rotary_cache_bytes(a) == sum(positions) * 64 * 2  # head_dim 512 / 8, bfloat16


def test_gemma3_holds_a_rope_cache_per_layer_type_and_its_vision_tower():
    """Gemma 3 12B: "Model loading took 23.31 GiB" on an H100 under vLLM 0.19 (tests/fixtures/gpu_corpus/
    llmdplanner_gemma3_12b_h100.yaml), where the text decoder alone is 21.92 GiB."""
    from analysis.model.params import encoder_bytes, model_loading_bytes, rotary_cache_bytes, weight_bytes

    a, _ = resolve_model("gemma-3-12b")
    # The global RoPE (linear, factor 8) spans 131,072 × 8 positions; the sliding layers' own (local base) 131,072;
    # head_dim 256, bfloat16: 0.5625 GiB.
    assert a.rope_cache_positions == (1_048_576, 131_072)
    assert rotary_cache_bytes(a) == (1_048_576 + 131_072) * 256 * 2 == 603_979_776
    # SigLIP (hidden 1152, MLP 4304, 27 layers, 14-pixel patches of a 896-pixel image): patch embedding with its bias
    # 3·14·14·1152 + 1152, 64² position embeddings · 1152; a layer's q, k, v, o with biases 4(1152² + 1152), MLP
    # 1152·4304 + 4304 and 4304·1152 + 1152, two layer norms 4·1152; the final norm 2·1152; Gemma 3's projector
    # 1152·3840 and its norm 1152.
    embeddings = 3 * 14 * 14 * 1152 + 1152 + 64 ** 2 * 1152
    layer = 4 * (1152 ** 2 + 1152) + (1152 * 4304 + 4304) + (4304 * 1152 + 1152) + 4 * 1152
    assert a.encoder_params == embeddings + 27 * layer + 2 * 1152 + 1152 * 3840 + 1152 == 421_290_864
    assert encoder_bytes(a) == 2 * 421_290_864
    loading = model_loading_bytes(a)
    assert loading == weight_bytes(a) + 2 * 421_290_864 + 603_979_776
    assert abs(loading / (23.31 * 2**30) - 1) < 0.003  # the logged load, to its 0.01 GiB rounding and 0.2 %
    # The decode step streams the decoder alone (every weight of it: Gemma ties its embeddings), not the encoder.
    from analysis.model.params import decode_weight_bytes

    assert decode_weight_bytes(a) == weight_bytes(a) < loading


def test_a_text_only_model_has_no_encoder():
    a, _ = resolve_model("llama-3.1-8b")
    assert a.encoder_params == 0 and a.encoder_note is None


def test_qwen2_5_vl_counts_its_vision_tower_and_merger():
    # vLLM's qwen2_5_vl.py: width 1280, 32 blocks, gated MLP 3420, 14-pixel patches over 2 frames, 2×2 merge to 3584.
    # Patch embedding (Conv3d, no bias) 3·2·14·14·1280; a block's two RMSNorms 2·1280, QKV 3·1280² + 3·1280, output
    # 1280² + 1280, gate+up 1280·6840 + 6840, down 3420·1280 + 1280; the merger's RMSNorm 1280 and its two linears
    # over 4·1280 = 5120: 5120² + 5120 and 5120·3584 + 3584.
    a, _ = resolve_model("qwen2.5-vl-7b")
    block = 2 * 1280 + (3 * 1280 ** 2 + 3 * 1280) + (1280 ** 2 + 1280) + (1280 * 6840 + 6840) + (3420 * 1280 + 1280)
    merger = 1280 + (5120 ** 2 + 5120) + (5120 * 3584 + 3584)
    assert a.encoder_params == 3 * 2 * 14 * 14 * 1280 + 32 * block + merger == 676_550_144
    # with the Qwen2.5-7B decoder, the 8.29B the model card gives Qwen2.5-VL-7B-Instruct (to its rounding)
    assert (count_params(a).total + a.encoder_params) / 1e9 == pytest.approx(8.29, abs=0.005)
    assert a.encoder_note is None
    assert a.rope_cache_positions == (128_000 * 4,)  # MRoPE: vLLM's cache is 4× the positions


def test_qwen2_vl_counts_its_layernorm_tower_and_says_what_it_cannot_count():
    cfg = json.loads((resolve_model("qwen2.5-vl-7b")[1] / "config.json").read_text())
    # Qwen2-VL-7B's vision_config: width 1280 (embed_dim), MLP ratio 4 (QuickGELU), LayerNorms with biases, the
    # merger's output width in hidden_size: the paper's "675M" ViT.
    cfg["model_type"] = "qwen2_vl"
    cfg["vision_config"] = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                            "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}
    block = 4 * 1280 + (3 * 1280 ** 2 + 3 * 1280) + (1280 ** 2 + 1280) + (1280 * 5120 + 5120) + (5120 * 1280 + 1280)
    merger = 2 * 1280 + (5120 ** 2 + 5120) + (5120 * 3584 + 3584)
    a = Architecture.from_config(cfg, "qwen2-vl-7b")
    assert a.encoder_params == 3 * 2 * 14 * 14 * 1280 + 32 * block + merger == 675_759_104
    # A CLIP tower (LLaVA) is not counted, and the architecture says so rather than planning short in silence
    llama = json.loads((resolve_model("llama-3-8b")[1] / "config.json").read_text())
    llava = {"model_type": "llava", "text_config": llama, "image_token_index": 128_256,
             "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024}}
    clip = Architecture.from_config(llava, "llava")
    assert clip.encoder_params == 0
    assert clip.encoder_note.startswith("vision_config (clip_vision_model) is not counted")
    # and the plan carries the note beside its weights
    from analysis.planning.plan import PlanInputs, make_plan

    p = make_plan(clip, PlanInputs(max_model_len=4096), gpu("h100-sxm"))
    assert p.weights_note == clip.encoder_note
    assert "weights_note" not in make_plan(a, PlanInputs(max_model_len=4096), gpu("h100-sxm"))


@pytest.mark.parametrize("rope, positions", [
    # the original length is no number: the model's own 4,096 stands in, × YaRN's factor 4
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": "abc"}, (16384,)),
    ({"rope_type": "longrope", "original_max_position_embeddings": [1]}, (8192,)),  # short + long caches
    ({"rope_type": "linear", "factor": True}, (4096,)),  # a bool is no factor
    # not every layer type a mapping: not read as per-layer RoPE, so the plain length
    ({"full_attention": {"rope_type": "linear", "factor": 2.0}, "sliding_attention": "x"}, (4096,)),
])
def test_a_malformed_rope_entry_is_read_as_absent_not_a_traceback(rope, positions):
    assert Architecture.from_config(LLAMA_LIKE | {"rope_scaling": rope}).rope_cache_positions == positions
