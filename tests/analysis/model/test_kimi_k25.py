"""Kimi-K2.5 (and NVIDIA's K2.5/K2.6/K2.7 NVFP4 builds): Kimi-K2's decoder beside the MoonViT-3D tower (issue #47).

The tower's parameters are held against transformers' own Kimi-K2.5 vision model built from the same vision_config;
the decoder's totals against NVIDIA's published active count; which modalities build the tower against vLLM 0.32's
model files; what turning them off leaves on the GPU against the arithmetic written out here.
"""

import json
import re
from pathlib import Path

import pytest
from helpers import ODD_CONFIG_VALUES, read_or_refuse

from analysis.catalog import resolve_gpu, resolve_model
from analysis.model.architecture import ENCODER_MODALITIES, Architecture, UnsupportedArchitecture
from analysis.model.params import count_params, model_loading_bytes
from analysis.planning.plan import PlanInputs, make_plan

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "published_configs"
KIMI = CONFIGS / "moonshotai--Kimi-K2.5"
# transformers' Kimi_K25VisionModel (416,866,032) and Kimi_K25MultimodalProjection (54,277,888), built on the meta
# device from moonshotai/Kimi-K2.5's vision_config (transformers 5.19): the count test below rebuilds them.
MOONVIT_PARAMS = 416_866_032 + 54_277_888


# Whole on every rank at tp 8 (kimi_k25_vit.py): the patch embedding (3 × 14 × 14 × 1,152 + 1,152) and position
# grid (64 × 64 × 1,152), each block's two LayerNorms and row-parallel biases (27 × 6 × 1,152), the final LayerNorm
# and the ReplicatedLinear projector (54,277,888): 59,863,936; the rest split eight ways; bf16.
REPLICATED = 677_376 + 1_152 + 4_718_592 + 27 * 6 * 1_152 + 2 * 1_152 + 54_277_888
TOWER_AT_TP8 = round(((MOONVIT_PARAMS - REPLICATED) / 8 + REPLICATED) * 2)


def _raw() -> dict:
    return json.loads((KIMI / "config.json").read_text())


def test_moonvit_parameters_are_transformers_own_count():
    torch = pytest.importorskip("torch")
    modeling = pytest.importorskip("transformers.models.kimi_k25.modeling_kimi_k25")
    from transformers.models.kimi_k25.configuration_kimi_k25 import Kimi_K25Config

    raw = _raw()
    raw.pop("model_type")
    cfg = Kimi_K25Config(**raw)
    with torch.device("meta"):
        tower = modeling.Kimi_K25VisionModel(cfg.vision_config)
        projector = modeling.Kimi_K25MultimodalProjection(cfg)
    counted = sum(p.numel() for m in (tower, projector) for p in m.parameters())
    assert counted == MOONVIT_PARAMS
    assert Architecture.from_config(KIMI).encoder_params == counted


def test_moonvit_count_written_out():
    # width 1,152, MLP 4,304, 27 blocks, 14-pixel patches, a 64 × 64 position grid, 2 × 2 merge, decoder 7,168
    h, i, n, merged, text = 1152, 4304, 27, 4 * 1152, 7168
    embed = 3 * 14 * 14 * h + h + 64 * 64 * h
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h)
    projector = 2 * h + (merged * merged + merged) + (merged * text + text)
    assert embed + n * block + 2 * h + projector == MOONVIT_PARAMS


@pytest.mark.parametrize("checkpoint", ["moonshotai--Kimi-K2.5", "nvidia--Kimi-K2.5-NVFP4", "nvidia--Kimi-K2.6-NVFP4",
                                        "nvidia--Kimi-K2.7-Code-NVFP4"])
def test_every_kimi_k25_build_reads_as_kimi_k2_with_its_tower(checkpoint):
    a = Architecture.from_config(CONFIGS / checkpoint)
    assert (a.num_layers, a.moe.num_experts, a.moe.experts_per_token, a.mla.kv_lora_rank) == (61, 384, 8, 512)
    assert a.encoder_params == MOONVIT_PARAMS
    assert a.encoder_modalities == ("vision_chunk",)


def test_catalog_entry_matches_the_published_counts():
    # NVIDIA's model page for Kimi K2.5 (build.nvidia.com blog, "Build with Kimi K2.5"): 1T total parameters, 32.86B
    # active; Moonshot's card: 1T total, 32B activated.
    arch, _ = resolve_model("kimi-k2.5")
    p = count_params(arch)
    assert p.active / 1e9 == pytest.approx(32.86, rel=0.01)
    assert round(p.total / 1e12) == 1


def test_modalities_are_the_ones_vllms_model_files_build_the_tower_for():
    """Each wrapper's modalities are those its vLLM 0.32 model file passes to ``_mark_tower_model``."""
    vllm = pytest.importorskip("vllm")
    models = Path(vllm.__file__).parent / "model_executor" / "models"
    files = {"gemma3": "gemma3_mm.py", "gemma4": "gemma4_mm.py", "llava": "llava.py", "llama4": "mllama4.py",
             "qwen2_vl": "qwen2_vl.py",
             "qwen2_5_vl": "qwen2_5_vl.py", "qwen3_vl": "qwen3_vl.py", "qwen3_vl_moe": "qwen3_vl_moe.py",
             "qwen3_5": "qwen3_5.py", "qwen3_5_moe": "qwen3_5.py", "kimi_k25": "kimi_k25.py"}
    assert set(files) == set(ENCODER_MODALITIES)
    for model_type, file in files.items():
        calls = re.findall(r"_mark_tower_model\(\s*vllm_config,\s*(\{[^}]*\}|\"[a-z_]+\")", (models / file).read_text())
        assert calls, file
        built = {m for c in calls for m in re.findall(r'"([a-z_]+)"', c)}  # every tower the file builds
        assert built == set(ENCODER_MODALITIES[model_type]), (model_type, built)


def test_a_text_only_engine_loads_no_tower_and_drops_the_note():
    a = Architecture.from_config(KIMI)
    assert "profile run" in a.encoder_note and '{"vision_chunk": 0}' in a.encoder_note
    on, off = model_loading_bytes(a, 8), model_loading_bytes(a, 8, mm_limits={"vision_chunk": 0})
    assert on - off == TOWER_AT_TP8
    # an image or video limit does not turn off a tower that serves vision chunks
    assert model_loading_bytes(a, 8, mm_limits={"image": 0, "video": 0}) == on
    h200 = resolve_gpu("h200")[0]
    served = make_plan(a, PlanInputs(tensor_parallel_size=8), h200)
    text = make_plan(a, PlanInputs(tensor_parallel_size=8, limit_mm_per_prompt={"vision_chunk": 0}), h200)
    assert served.weights_note is not None and text.weights_note is None
    assert served.weight_bytes - text.weight_bytes == TOWER_AT_TP8
    assert text.kv_cache_tokens > served.kv_cache_tokens


def test_qwen3_vl_without_images_and_videos_has_no_tower_and_no_deepstack_buffers():
    # Qwen3-VL-30B-A3B: a 0.54B tower at bf16 (tests/analysis/model/test_vision.py) and three DeepStack buffers of
    # max_num_batched_tokens × 2,048 bf16 the model allocates only with the tower (qwen3_vl.py use_deepstack)
    arch, _ = resolve_model("qwen3-vl-30b-a3b")
    with_tower = model_loading_bytes(arch, 1, max_num_batched_tokens=8192)
    without = model_loading_bytes(arch, 1, max_num_batched_tokens=8192, mm_limits={"image": 0, "video": 0})
    assert with_tower - without == arch.encoder_params * 2 + 3 * 8192 * 2048 * 2
    assert model_loading_bytes(arch, 1, max_num_batched_tokens=8192, mm_limits={"image": 0}) == with_tower


@pytest.mark.parametrize("key, value, message", [
    ("vt_hidden_size", 1280, "vt_hidden_size is 1280 but vLLM 0.32 builds the tower from hidden_size"),
    ("norm_type", "rmsnorm", "norm_type 'rmsnorm' is not read"),
    ("mm_projector_type", "patchmergerv2", "mm_projector_type 'patchmergerv2' is not read"),
    ("qkv_hidden_size_v2", 1536, "key qkv_hidden_size_v2 not read by kvprof's MoonViT reader"),
    ("attn_bias", "no", "are true or false"),
    ("merge_kernel_size", [2], "must be positive integers"),
    ("text_hidden_size", 4096, "is not the decoder's hidden_size 7168"),
])
def test_a_tower_kvprof_would_count_as_something_else_is_refused_by_name(key, value, message):
    raw = _raw()
    raw["vision_config"] = {**raw["vision_config"], key: value}
    with pytest.raises(UnsupportedArchitecture, match=re.escape(message)):
        Architecture.from_config(raw, "kimi")


@pytest.mark.parametrize("value", ODD_CONFIG_VALUES)
def test_no_odd_vision_value_gives_a_traceback(value):
    base = _raw()
    read_or_refuse({**base, "vision_config": {**base["vision_config"], key: value}} for key in base["vision_config"])
