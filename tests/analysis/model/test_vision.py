"""The vision tower's part of vLLM's profile run (analysis.model.vision), against vLLM's source and two start-up logs.

Evidence:
* vLLM 0.23.0 on an A100-SXM4-80GB, Qwen2.5-VL-7B-Instruct at its default max_model_len 128000 and
  --gpu-memory-utilization 0.22 (a log pasted in a public GitHub markdown file; the code index that holds it,
  file id 55021192520, does not expose the repository): "Model loading took 15.67 GiB", "Encoder cache will be
  initialized with a budget of 114688 tokens, and profiled with 1 video items of the maximum feature size.",
  "Estimated CUDA graph memory: 0.53 GiB total", "Available KV cache memory: -14.28 GiB".
* vLLM 0.9.0.1 on an L4, the same model at max_model_len 2048 (tsailiming/openshift-ai-bootstrap, in the GPU
  start-up corpus as openshiftai_qwen25_vl_7b_l4): "Encoder cache will be initialized with a budget of 16384
  tokens, and profiled with 1 image items".
"""

from __future__ import annotations

import json

import pytest

from analysis.catalog import MODELS_DIR, gpu
from analysis.model.architecture import Architecture
from analysis.model.vision import Qwen2VisionTower, Qwen25VisionTower, encoder_profile
from analysis.vllm.memory import default_batching, predict, rules_for

GiB = 2**30


@pytest.fixture(scope="module")
def qwen25vl():
    return Architecture.from_config(MODELS_DIR / "qwen2.5-vl-7b")


def test_the_tower_is_read_from_vision_config(qwen25vl):
    v = qwen25vl.vision
    assert isinstance(v, Qwen25VisionTower)
    # Qwen2.5-VL-7B-Instruct's vision_config: hidden_size 1280, intermediate_size 3420, out_hidden_size 3584.
    assert (v.width, v.intermediate, v.out_width, v.patch_size, v.spatial_merge_size) == (1280, 3420, 3584, 14, 2)
    # 3 channels × 2 frames × 14 × 14 pixel values a patch
    assert v.pixel_values_per_patch == 1176


def test_item_tokens_match_the_logged_encoder_budgets(qwen25vl):
    v = qwen25vl.vision
    # max_pixels 12,845,056 over a merged 28 × 28 patch: 16,384 tokens an image (the L4 log's budget).
    assert v.max_item_tokens("image", 2048) == 12845056 // (28 * 28) == 16384
    # At max_model_len 2048 a video holds one frame pair: 16,384 tokens too.
    assert v.max_item_tokens("video", 2048) == 16384
    # At 128000, 14 frames (vLLM's _MAX_FRAMES_PER_VIDEO) = 7 temporal patches × 16,384 = the A100 log's 114,688.
    assert v.max_item_tokens("video", 128000) == 7 * 16384 == 114688
    # 32,768 fits two frame pairs (three or four frames), not three (49,152).
    assert v.max_item_tokens("video", 40000) == 32768


def test_the_profile_picks_the_largest_modality_and_respects_limits(qwen25vl):
    v = qwen25vl.vision
    kw = dict(max_num_batched_tokens=2048, max_num_seqs=256, dtype_bytes=2)
    p = encoder_profile(v, max_model_len=128000, **kw)
    assert (p.modality, p.items, p.item_tokens, p.patches) == ("video", 1, 114688, 4 * 114688)
    # --limit-mm-per-prompt '{"video": 0}': images only, one of 16,384 tokens.
    p = encoder_profile(v, max_model_len=128000, limits={"video": 0}, **kw)
    assert (p.modality, p.items, p.item_tokens) == ("image", 1, 16384)
    # A token budget of 40,000 holds two such images (encoder budget // item tokens).
    p = encoder_profile(v, max_model_len=128000, limits={"video": 0}, max_num_batched_tokens=40000,
                        max_num_seqs=256, dtype_bytes=2)
    assert p.items == 40000 // 16384 == 2
    # Nothing multimodal allowed: no encoder profile.
    assert encoder_profile(v, max_model_len=128000, limits={"image": 0, "video": 0}, **kw) is None


def test_the_peak_per_patch_is_the_source_count_and_holds_on_the_0_23_log(qwen25vl):
    v = qwen25vl.vision
    # qwen2_5_vl.py at down_proj: 5 tensors of the width and 3 of the MLP's width, plus the pixel values, in bf16.
    assert v.peak_bytes_per_patch(2) == 2 * (5 * 1280 + 3 * 3420 + 1176) == 35672
    # The A100 log: 0.22 × the A100's CUDA total − weights − CUDA-graph estimate − KV = what the profile kept.
    total = gpu("a100-80gb-sxm").cuda_total_bytes
    kept = 0.22 * total - 15.67 * GiB - 0.53 * GiB + 14.28 * GiB
    rules = rules_for("0.23.0")
    patches = 458752
    per_patch = (kept - rules.non_torch_bytes_tp1) / patches
    assert per_patch == pytest.approx(v.peak_bytes_per_patch(2), rel=0.01)
    # And the whole prediction, given the logged weights and graph estimate, lands on the logged -14.28 GiB.
    mnbt, seqs = default_batching(rules, total, "NVIDIA A100-SXM4-80GB", "serve", max_model_len=128000)
    p = predict(qwen25vl, total_bytes=total, gpu_memory_utilization=0.22, max_num_batched_tokens=mnbt,
                max_num_seqs=seqs, rules=rules, weights=round(15.67 * GiB), max_model_len=128000)
    logged_graphs = 0.53 * GiB
    budget = p.kv_budget_bytes + p.cuda_graph_bytes - logged_graphs
    assert budget / GiB == pytest.approx(-14.28, abs=0.05)


def test_v0_and_text_models_have_no_encoder_profile(qwen25vl):
    total = gpu("l4").cuda_total_bytes
    kw = dict(total_bytes=total, max_num_batched_tokens=2048, max_num_seqs=256, max_model_len=2048)
    v1 = predict(qwen25vl, rules=rules_for("0.9.0"), **kw)
    v0 = predict(qwen25vl, rules=rules_for("0.7.3"), **kw)
    # V0 fed multimodal dummies through the decoder's own budget: its peak is the decoder's, the V1 one the tower's.
    assert v1.activation_bytes == 65536 * 35672
    assert v0.activation_bytes < v1.activation_bytes
    text = Architecture.from_config(MODELS_DIR / "qwen2.5-7b")
    assert text.vision is None


def test_qwen2_vl_counts_its_plain_mlp():
    raw = {"model_type": "qwen2_vl", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "torch_dtype": "bfloat16",
           "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                             "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
                             "temporal_patch_size": 2}}
    v = Architecture.from_config(raw, "qwen2-vl-7b").vision
    assert isinstance(v, Qwen2VisionTower)
    # qwen2_vl.py: block input, residual sum and norm2 [P, 1280], fc1's and QuickGELU's [P, 5120].
    assert v.block_elements_per_patch() == 3 * 1280 + 2 * 5120
    assert v.block_elements_per_patch(tp=2) == 3 * 1280 + 5120


def test_a_checkpoint_preprocessor_config_sets_the_largest_image(tmp_path):
    (tmp_path / "config.json").write_text((MODELS_DIR / "qwen2.5-vl-7b" / "config.json").read_text())
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"max_pixels": 28 * 28 * 1280}))
    assert Architecture.from_config(tmp_path).vision.max_item_tokens("image", 4096) == 1280
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"size": {"longest_edge": 28 * 28 * 256}}))
    assert Architecture.from_config(tmp_path).vision.max_item_tokens("image", 4096) == 256
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"max_pixels": -1}))
    with pytest.raises(ValueError, match="max_pixels must be a positive integer"):
        Architecture.from_config(tmp_path)
    (tmp_path / "preprocessor_config.json").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match=r"preprocessor_config\.json is not UTF-8 text"):
        Architecture.from_config(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text("{max_pixels: 1}")
    with pytest.raises(ValueError, match=r"is not valid JSON \(a preprocessor config\)"):
        Architecture.from_config(tmp_path)
    (tmp_path / "preprocessor_config.json").write_bytes(b" " * (16 * 2**20 + 1))
    with pytest.raises(ValueError, match="a preprocessor config is at most 16,777,216 bytes"):
        Architecture.from_config(tmp_path)


def test_the_plan_charges_the_profile_and_limit_mm_per_prompt_sizes_it(qwen25vl):
    from analysis.planning.plan import PlanInputs, make_plan

    h100 = gpu("h100-sxm")

    def plan(**kw):
        p = make_plan(qwen25vl, PlanInputs(**kw), h100)
        return p.kv_budget_bytes, p.reserve

    default, r_default = plan()
    images, r_images = plan(limit_mm_per_prompt={"video": 0})
    text, r_text = plan(limit_mm_per_prompt={"image": 0, "video": 0})
    assert "1 video item of 114,688 tokens" in r_default.source
    assert "1 image item of 16,384 tokens" in r_images.source
    assert "vision encoder" not in r_text.source
    # The tower's peak replaces the decoder's: 458,752 patches (default) or 65,536 (images) × 35,672 B; with neither
    # modality vLLM builds no tower (StageMissingLayer), so its bf16 weights leave the GPU too.
    tower = qwen25vl.encoder_params * 2
    assert text - default == 458752 * 35672 - r_text.activation_bytes + tower
    assert text - images == 65536 * 35672 - r_text.activation_bytes + tower


def test_limit_mm_per_prompt_is_refused_by_name_when_malformed():
    from typer.testing import CliRunner

    from profiler.cli import app

    for bad, said in (('{"vid": 0}', "'vid' is not a modality"), ("[1]", "must be a JSON object"),
                      ('{"image": -1}', "whole number of items >= 0"), ("{", "is not JSON")):
        r = CliRunner().invoke(app, ["plan", "--model", "qwen2.5-vl-7b", "--gpu", "h100-sxm",
                                     "--limit-mm-per-prompt", bad])
        assert r.exit_code != 0 and said in r.output and "Traceback" not in r.output, (bad, r.output)


def test_a_profile_that_does_not_fit_names_the_item_and_the_flags(qwen25vl):
    from analysis.planning.plan import PlanError, PlanInputs, make_plan

    # An L4 (22.16 GiB) cannot hold 15.6 GiB of weights beside a 15.2 GiB video profile at max_model_len 128000.
    with pytest.raises(PlanError, match=r"1 video item of 114,688 tokens .*--limit-mm-per-prompt"):
        make_plan(qwen25vl, PlanInputs(), gpu("l4"))
    # Images only, it starts (and then holds too few 128k-token sequences: a shorter max_model_len is the answer).
    p = make_plan(qwen25vl, PlanInputs(limit_mm_per_prompt={"video": 0}, max_model_len=8192), gpu("l4"))
    assert p.kv_budget_bytes > 0


def test_gemma3_siglip_tower_profiles_fixed_size_images():
    a = Architecture.from_config(MODELS_DIR / "gemma-3-12b")
    v = a.vision
    # vision_config: hidden 1152, intermediate 4304, 896-pixel images of 14-pixel patches; mm_tokens_per_image 256.
    assert (v.kind, v.width, v.intermediate, v.tokens_per_image, v.out_width) == ("siglip", 1152, 4304, 256, 3840)
    assert v.patches(256) == (896 // 14) ** 2 == 4096
    # siglip.py at the MLP's activation: input, residual, norm [P, 1152] and fc1, activation [P, 4304], + 588 pixels.
    assert v.peak_bytes_per_patch(2) == 2 * (3 * 1152 + 2 * 4304 + 3 * 14 * 14) == 25304
    # An 8,192-token encoder budget holds 8192 // 256 = 32 images (vLLM 0.11 logged 31 for Gemma 3 27B: it counted
    # the image's placeholder with its boundary tokens); images only, so a video limit changes nothing.
    p = encoder_profile(v, max_model_len=4096, max_num_batched_tokens=8192, max_num_seqs=1024, dtype_bytes=2)
    assert (p.modality, p.items, p.patches) == ("image", 32, 32 * 4096)
    assert p.output_bytes == 32 * 256 * 3840 * 2
    # At most max_num_seqs × the images a prompt may carry (max_model_len // 256 = 4 at 1,024 tokens).
    p = encoder_profile(v, max_model_len=1024, max_num_batched_tokens=8192, max_num_seqs=2, dtype_bytes=2)
    assert p.items == 2 * (1024 // 256) == 8
    assert encoder_profile(v, max_model_len=4096, max_num_batched_tokens=8192, max_num_seqs=1, dtype_bytes=2,
                           limits={"image": 0}) is None


def test_mm_encoder_tp_mode_data_keeps_the_whole_tower_on_every_rank(qwen25vl):
    from analysis.planning.plan import PlanError, PlanInputs, make_plan

    def plan(mode):
        return make_plan(qwen25vl, PlanInputs(tensor_parallel_size=2, limit_mm_per_prompt={"video": 0},
                                              mm_encoder_tp_mode=mode), gpu("h100-sxm"))

    split, whole = plan("weights"), plan("data")
    # The tower's 676,550,144 parameters (bf16) split over 2 ranks, or all on each.
    assert whole.weight_bytes - split.weight_bytes == 676550144 * 2 - 676550144 * 2 // 2
    # The 65,536-patch image's peak: 2 × (5·1280 + 3·3420/2 + 1176) B a patch split, 2 × (5·1280 + 3·3420 + 1176) whole.
    assert split.reserve.activation_bytes == 65536 * 2 * (5 * 1280 + 3 * 3420 // 2 + 1176)
    assert whole.reserve.activation_bytes == 65536 * 35672
    assert split.kv_budget_bytes - whole.kv_budget_bytes == \
        (whole.weight_bytes - split.weight_bytes) + 65536 * (35672 - 2 * (5 * 1280 + 3 * 3420 // 2 + 1176))
    with pytest.raises(PlanError, match="--mm-encoder-tp-mode data with pipeline parallelism is not planned"):
        make_plan(qwen25vl, PlanInputs(pipeline_parallel_size=2, mm_encoder_tp_mode="data"), gpu("h100-sxm"))


# Qwen/Qwen3-VL-4B-Instruct's config.json (transformers 4.57): the decoder is Qwen3-4B's; the tower 24 blocks of
# width 1024, MLP 4096, 16-pixel patches, DeepStack after blocks 5, 11 and 17, outputs of the decoder's 2560.
QWEN3_VL_4B = {
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "tie_word_embeddings": True,
    "image_token_id": 151655, "video_token_id": 151656,
    "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 2560, "intermediate_size": 9728,
                    "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                    "vocab_size": 151936, "max_position_embeddings": 262144, "rope_theta": 5000000,
                    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
                    "tie_word_embeddings": True, "dtype": "bfloat16"},
    "vision_config": {"model_type": "qwen3_vl", "depth": 24, "hidden_size": 1024, "intermediate_size": 4096,
                      "num_heads": 16, "in_channels": 3, "patch_size": 16, "temporal_patch_size": 2,
                      "spatial_merge_size": 2, "num_position_embeddings": 2304, "out_hidden_size": 2560,
                      "deepstack_visual_indexes": [5, 11, 17], "hidden_act": "gelu_pytorch_tanh"},
}


def test_qwen3_vl_tower_parameters_are_transformers_own_count():
    # transformers' Qwen3VLVisionModel built from the same vision_config on the meta device (patch embedding,
    # position embeddings, 24 blocks, the merger and three DeepStack mergers): an implementation kvprof does not
    # share, counted parameter by parameter.
    a = Architecture.from_config(QWEN3_VL_4B, "qwen3-vl-4b")
    assert a.encoder_note is None
    torch = pytest.importorskip("torch")
    qwen3_vl = pytest.importorskip("transformers.models.qwen3_vl.modeling_qwen3_vl")
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig

    with torch.device("meta"):
        tower = qwen3_vl.Qwen3VLVisionModel._from_config(Qwen3VLVisionConfig(**QWEN3_VL_4B["vision_config"]))
    assert a.encoder_params == sum(p.numel() for p in tower.parameters()) == 415_347_712


def test_qwen3_vl_profiles_its_largest_image_with_deepstack():
    a = Architecture.from_config(QWEN3_VL_4B, "qwen3-vl-4b")
    v = a.vision
    assert (v.width, v.intermediate, v.out_width, v.patch_size, v.deepstack_levels) == (1024, 4096, 2560, 16, 3)
    # Images: the published longest_edge 16,777,216 pixels over a merged 32 × 32 patch: 16,384 tokens.
    assert v.max_item_tokens("image", 32768) == 16777216 // (32 * 32) == 16384
    # Videos (qwen3_vl.py get_max_video_tokens): two frames of 25,165,824 / 2 pixels, one temporal patch: 12,288.
    assert v.max_item_tokens("video", 32768) == 25165824 // 2 // (32 * 32) == 12288
    p = encoder_profile(v, max_model_len=32768, max_num_batched_tokens=8192, max_num_seqs=256, dtype_bytes=2)
    assert (p.modality, p.items, p.item_tokens, p.patches) == ("image", 1, 16384, 65536)
    # A late block's MLP activation (block input, post-attention sum, norm2 [P, 1024]; fc1 and GELU [P, 4096]),
    # the position embeddings the forward keeps [P, 1024], three DeepStack outputs of 2,560 a merged token (1,920
    # a patch), the pixel values 3 × 2 × 16 × 16: in bf16 a patch costs 2 × 15,744 bytes.
    per_patch = 3 * 1024 + 2 * 4096 + 1024 + 3 * 2560 // 4 + 3 * 2 * 16 * 16
    assert v.peak_bytes_per_patch(2) == 2 * per_patch == 31_488
    assert p.peak_bytes == 65536 * 31_488
    # The encoder cache holds the main and the three DeepStack outputs: 16,384 × 2,560 × 4 × 2 bytes.
    assert p.output_bytes == 16384 * 2560 * 4 * 2


def test_qwen3_vl_model_loading_counts_the_tower_and_the_deepstack_buffers():
    from analysis.model.params import model_loading_bytes, rotary_cache_bytes, weight_bytes

    a = Architecture.from_config(QWEN3_VL_4B, "qwen3-vl-4b")
    base = weight_bytes(a) + 415_347_712 * 2 + rotary_cache_bytes(a)
    assert model_loading_bytes(a) == base
    # Qwen3VLForConditionalGeneration.__init__ allocates one [max_num_batched_tokens, 2560] buffer a DeepStack
    # level in the model dtype: 3 × 8,192 × 2,560 × 2 bytes.
    assert model_loading_bytes(a, max_num_batched_tokens=8192) == base + 3 * 8192 * 2560 * 2


def test_a_checkpoint_video_preprocessor_config_sets_the_largest_video(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_VL_4B))
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps({"size": {"longest_edge": 2 * 1024 * 20000}}))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"size": {"longest_edge": 1024 * 4096}}))
    v = Architecture.from_config(tmp_path).vision
    assert (v.max_item_tokens("image", 4096), v.max_item_tokens("video", 4096)) == (4096, 20000)
    # the video now has the most tokens an item, so it is the profiled one
    p = encoder_profile(v, max_model_len=32768, max_num_batched_tokens=8192, max_num_seqs=256, dtype_bytes=2)
    assert (p.modality, p.item_tokens) == ("video", 20000)


def test_qwen3_vl_30b_a3b_loads_as_vllm_0_11_logged_it_at_tp_4():
    """The catalog's Qwen3-VL-30B-A3B-Instruct (an MoE decoder with the Qwen3-VL tower) against the Sipeed wiki's
    vLLM 0.11.0 start-up on four RTX 3090s (tests/fixtures/gpu_corpus/sipeed_qwen3_vl_30b_a3b_tp4_rtx3090.yaml):
    "Model loading took 14.7708 GiB" on every rank, max_num_batched_tokens 2048."""
    from analysis.catalog import resolve_model
    from analysis.model.params import count_params, model_loading_bytes, rotary_cache_bytes

    a, _ = resolve_model("qwen3-vl-30b-a3b")
    # The decoder from its text_config, by hand: 151,936 × 2,048 embedding and untied LM head; 48 layers of
    # attention (q 2,048 → 32 × 128, k and v → 4 × 128, o back, two 128-wide norms, two 2,048-wide norms) and 128
    # experts of gate, up and down (2,048 × 768 each) with a 2,048 × 128 router.
    attention = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128 + 2 * 2048
    moe = 128 * 3 * 2048 * 768 + 2048 * 128
    decoder = 2 * 151936 * 2048 + 48 * (attention + moe) + 2048
    assert count_params(a).total == decoder == 30_532_122_624
    # vLLM 0.11-0.13 build the multimodal RoPE's cos/sin cache for 4 × max_position_embeddings positions
    # (MRotaryEmbedding's positions_factor): 4 × 262,144 × 128 × 2 bytes on every rank.
    assert rotary_cache_bytes(a) == 4 * 262144 * 128 * 2
    # Split four ways with the tower (its 27 blocks and four mergers), beside that cache and three [2048, 2048]
    # DeepStack buffers: within 0.3 % of what vLLM 0.11 logged.
    logged = 14.7708 * GiB
    planned = model_loading_bytes(a, 4, max_num_batched_tokens=2048)
    assert planned == pytest.approx(logged, rel=0.003)
