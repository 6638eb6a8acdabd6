"""Llama-Nemotron NAS models (``nemotron-nas``, vLLM's DeciLM): block_configs remove attention or MLPs layer by layer
and give each MLP its own width (issue #47). Expected values are written out from the published config and vLLM
0.32's nemotron_nas.py; the engine side is tests/engines/test_vllm_capacity.py's tiny-nemotron-nas case."""

import copy
import json
import re
from pathlib import Path

import pytest
from helpers import ODD_CONFIG_VALUES, read_or_refuse

from analysis.catalog import resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.kv import kv_bytes_per_token
from analysis.model.params import count_params, weight_matrices
from analysis.vllm.lora import LoraNotModelled, lora_bytes

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "published_configs"
SUPER = CONFIGS / "nvidia--Llama-3_3-Nemotron-Super-49B-v1"


def _raw() -> dict:
    return json.loads((SUPER / "config.json").read_text())


def test_super_49b_keeps_a_cache_on_its_49_attention_layers_only():
    a = Architecture.from_config(SUPER)
    assert (a.num_layers, a.num_attention_layers, a.num_kv_heads, a.head_dim) == (80, 49, 8, 128)
    assert kv_bytes_per_token(a) == 49 * 2 * 8 * 128 * 2  # 200,704 B; all 80 layers would be 327,680


def test_super_49b_parameters_written_out():
    # vLLM's width for ffn_mult m: int(2 · m · 8192 / 3) rounded up to 256. The published blocks: 5.25 → 28,672 (49
    # layers), 2.625 → 14,336 (6), 1.3125 → 7,168 (10), 1.0 → 5,461 → 5,632 (8), 0.5 → 2,730 → 2,816 (6),
    # 3.28125 → 17,920 (1); attention (64 heads, 8 KV heads of 128) on 49 layers; an input norm where a layer has
    # attention, a post-attention norm where it has an MLP (all 80), the final norm; untied embeddings.
    h, vocab = 8192, 128256
    widths = {28672: 49, 14336: 6, 7168: 10, 5632: 8, 2816: 6, 17920: 1}
    total = 2 * vocab * h + 49 * (2 * h * h + 2 * h * 1024) + sum(3 * h * w * n for w, n in widths.items()) \
        + (49 + 80) * h + h
    assert total == 49_867_145_216
    p = count_params(Architecture.from_config(SUPER))
    assert p.total == total
    assert p.total / 1e9 == pytest.approx(49, rel=0.02)  # NVIDIA names it 49B


def test_each_layer_has_the_mlp_width_vllm_builds():
    a, _ = resolve_model("tiny-nemotron-nas")
    # ffn_mult 2.625, 1.3125, 5.25, 0.5, no-op, 1.0 over hidden 256: int(2 · m · 256 / 3) = 448, 224, 896, 85, –, 170,
    # each rounded up to 256
    assert a.mlp_sizes == (512, 256, 1024, 256, 0, 256)
    assert a.layer_types == ("full_attention", "mlp", "full_attention", "mlp", "mlp", "full_attention")
    ups = [m for m in weight_matrices(a) if m.name.endswith("up_proj")]
    assert [(m.name, m.out_features) for m in ups] == [
        ("model.layers.0.mlp.up_proj", 512), ("model.layers.1.mlp.up_proj", 256), ("model.layers.2.mlp.up_proj", 1024),
        ("model.layers.3.mlp.up_proj", 256), ("model.layers.5.mlp.up_proj", 256)]
    assert not any(m.name.startswith("model.layers.1.self_attn") for m in weight_matrices(a))
    with pytest.raises(LoraNotModelled, match="layers differ"):
        lora_bytes(a, max_loras=1)


def _with_block(i: int, part: str, **changes) -> dict:
    raw = _raw()
    raw["block_configs"] = copy.deepcopy(raw["block_configs"])
    raw["block_configs"][i][part].update(changes)
    return raw


@pytest.mark.parametrize("raw, message", [
    (_with_block(0, "attention", replace_with_linear=True), "block_configs[0].attention.replace_with_linear is True"),
    (_with_block(0, "attention", window_length=4096), "block_configs[0].attention.window_length is 4096"),
    (_with_block(3, "ffn", replace_with_linear=True), "block_configs[3].ffn.replace_with_linear is True"),
    (_with_block(0, "attention", n_heads_in_group=4), "different n_heads_in_group (4, 8)"),
    (_with_block(0, "ffn", hidden_act="relu"), "hidden_act 'relu'"),
    (_with_block(0, "ffn", moe={"num_local_experts": 8}), "block_configs[0].ffn key moe not read"),
    (_with_block(0, "attention", n_heads_in_group=7), "64 heads do not split into groups of 7"),
    ({**_raw(), "block_configs": _raw()["block_configs"][:79]}, "a list of num_hidden_layers (80) blocks"),
])
def test_a_block_vllm_would_build_otherwise_is_refused_by_name(raw, message):
    with pytest.raises(UnsupportedArchitecture, match=re.escape(message)):
        Architecture.from_config(raw, "nas")


@pytest.mark.parametrize("value", [*ODD_CONFIG_VALUES, 1e6])
def test_no_odd_block_value_gives_a_traceback(value):
    read_or_refuse(_with_block(0, part, **{key: value}) for part in ("attention", "ffn")
                   for key in _raw()["block_configs"][0][part])
    read_or_refuse({**_raw(), "block_configs": [*_raw()["block_configs"][:5], block, *_raw()["block_configs"][6:]]}
                   for block in (None, 1, [], {}, {"attention": {}}))
