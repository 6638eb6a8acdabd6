"""Config readers of decoders with Llama's layer and a twist of their own: OLMo 3, SmolLM3, Seed-OSS, GLM-4 (v1),
CWM, Arcee (AFM), Jais 2, Hunyuan dense (``hunyuan_v1_dense``), VaultGemma, StarCoder2, OPT, Nemotron (v1), Apertus,
Phi, GPT-NeoX, OLMo (v1), StableLM, GPT-J, BLOOM, Falcon, MiniCPM3, HyperCLOVA X and Granite 3.x with its
sliding-window builds, and the MoE ones FlexOlmo, Mellum, Hunyuan MoE and Granite MoE.
"""

from __future__ import annotations

from typing import Any

from analysis.model.families.attention import _granite_moe_shared
from analysis.model.parts import (
    FamilyReader,
    LayerType,
    MoE,
    UnsupportedArchitecture,
    _positive_int,
)

# transformers 5's config-class defaults for the keys kvprof reads (a key config.json omits takes these in vLLM)
DEFAULTS: dict[str, dict[str, Any]] = {
    "olmo3": {"attention_bias": False, "tie_word_embeddings": False, "sliding_window": 4096,
              "max_position_embeddings": 2048},
    "smollm3": {"attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True, "sliding_window": None,
                "use_sliding_window": False, "no_rope_layer_interval": 4, "max_position_embeddings": 32768,
                "num_key_value_heads": 4},
    "seed_oss": {"head_dim": 128, "attention_bias": True, "attention_out_bias": False, "mlp_bias": False,
                 "tie_word_embeddings": False, "max_position_embeddings": 524288, "num_key_value_heads": 8},
    "glm": {"head_dim": 128, "attention_bias": True, "tie_word_embeddings": False, "max_position_embeddings": 131072,
            "num_key_value_heads": 2},
    "cwm": {"head_dim": 128, "mlp_bias": False, "tie_word_embeddings": False, "sliding_window": 8192,
            "max_position_embeddings": 131072, "num_key_value_heads": 8},
    "arcee": {"attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
              "max_position_embeddings": 4096},
    "jais2": {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False, "max_position_embeddings": 8192},
    "hunyuan_v1_dense": {"attention_bias": False, "tie_word_embeddings": False, "max_position_embeddings": 2048},
    "hunyuan_v1_moe": {"attention_bias": False, "tie_word_embeddings": False, "max_position_embeddings": 2048,
                       "num_experts": 1, "moe_topk": 1},
    "apertus": {"attention_bias": False, "tie_word_embeddings": False, "max_position_embeddings": 65536},
    "flex_olmo": {"attention_bias": False, "tie_word_embeddings": False, "max_position_embeddings": 4096,
                  "num_experts": 7, "num_experts_per_tok": 5},
    "granite_swa": {"tie_word_embeddings": True, "sliding_window": 128, "num_key_value_heads": 4,
                    "attention_bias": False, "mlp_bias": False, "max_position_embeddings": 8192},
    "granitemoe_swa": {"tie_word_embeddings": False, "sliding_window": 128, "attention_bias": False,
                       "max_position_embeddings": 2048, "shared_intermediate_size": 0, "num_local_experts": 8,
                       "num_experts_per_tok": 2},
    "nemotron": {"attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
                 "max_position_embeddings": 4096},
    "opt": {"max_position_embeddings": 2048, "do_layer_norm_before": True, "enable_bias": True,
            "layer_norm_elementwise_affine": True, "tie_word_embeddings": True, "ffn_dim": 3072},
    "starcoder2": {"num_key_value_heads": 2, "max_position_embeddings": 4096, "use_bias": True,
                   "tie_word_embeddings": True, "sliding_window": None},
    "vaultgemma": {"head_dim": 256, "num_key_value_heads": 4, "tie_word_embeddings": True, "attention_bias": False,
                   "sliding_window": 4096, "max_position_embeddings": 8192},
    "phi": {"tie_word_embeddings": False, "max_position_embeddings": 2048, "qk_layernorm": False},
    "gpt_neox": {"tie_word_embeddings": False, "max_position_embeddings": 2048, "attention_bias": True,
                 "use_parallel_residual": True},
    "olmo": {"tie_word_embeddings": False, "max_position_embeddings": 2048, "attention_bias": False},
    "stablelm": {"tie_word_embeddings": False, "max_position_embeddings": 4096, "use_qkv_bias": False,
                 "qk_layernorm": False, "use_parallel_residual": False, "num_key_value_heads": 32},
    "bloom": {"tie_word_embeddings": True},
    "hyperclovax": {"tie_word_embeddings": False, "max_position_embeddings": 2048, "attention_bias": False,
                    "mlp_bias": False, "use_post_norm": True},
    "minicpm3": {"tie_word_embeddings": True, "max_position_embeddings": 32768, "attention_bias": False,
                 "mlp_bias": False, "kv_lora_rank": 256, "q_lora_rank": 768, "qk_nope_head_dim": 64,
                 "qk_rope_head_dim": 32, "v_head_dim": None},
    "falcon": {"tie_word_embeddings": True, "max_position_embeddings": 2048, "num_kv_heads": None, "alibi": False,
               "new_decoder_architecture": False, "multi_query": True, "parallel_attn": True, "bias": False,
               "num_ln_in_parallel_attn": None, "ffn_hidden_size": None},
    "gptj": {"tie_word_embeddings": False, "n_positions": 2048, "rotary_dim": 64, "n_inner": None},
    "mellum": {"attention_bias": False, "tie_word_embeddings": False, "max_position_embeddings": 131072,
               "num_key_value_heads": 4, "head_dim": 128, "sliding_window": 1024, "num_experts": 64,
               "num_experts_per_tok": 8, "moe_intermediate_size": 896},
}

# Families whose activation is one vLLM and transformers' model both build, with the MLP it takes: relu2 (Arcee,
# Jais 2, Nemotron) and xIELU (Apertus) feed an up projection alone, with no gate
_UNGATED_ACTIVATIONS = {"arcee": ("relu2",), "jais2": ("relu2",), "nemotron": ("relu2",), "apertus": ("xielu",)}


# a default not filled where config.json writes the key under the other name transformers maps it to (Mellum's
# attribute_map: num_experts is num_local_experts)
_ALIASES = {"num_experts": "num_local_experts"}


def _with_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    defaults = {k: v for k, v in DEFAULTS[str(cfg.get("model_type"))].items() if _ALIASES.get(k) not in cfg}
    return {**defaults, **cfg}


def _layers(cfg: dict[str, Any], name: str) -> int:
    return _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)


def _derived_layer_types(cfg: dict[str, Any], name: str, full: Any) -> tuple[LayerType, ...] | None:
    """Where config.json lists no ``layer_types`` but has a window: the layer types transformers' config derives,
    ``full(i)`` true for a full-attention layer (None: ``layer_types`` is written, or there is no window)."""
    if cfg.get("layer_types") is not None or not cfg.get("sliding_window"):
        return None
    return tuple("full_attention" if full(i) else "sliding_attention" for i in range(_layers(cfg, name)))


def _ungated(cfg: dict[str, Any], name: str) -> None:
    allowed = _UNGATED_ACTIVATIONS[str(cfg.get("model_type"))]
    act = cfg.get("hidden_act", allowed[0])
    if act not in allowed:
        raise UnsupportedArchitecture(f"{name}: hidden_act {act!r}: {cfg.get('model_type')}'s MLP is an up "
                                      f"projection into {', '.join(allowed)} and a down projection; kvprof has not "
                                      "checked another activation's weights")


def _olmo3(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """OLMo 3 (transformers' Olmo3): OLMo 2's layer (q and k RMSNorms over every head's width together, norms after
    attention and after the MLP), three sliding layers of ``sliding_window`` to one full one where ``layer_types``
    is not written."""
    cfg = _with_defaults(cfg)
    fields: dict[str, Any] = dict(qk_norm=True, qk_norm_per_layer=True)
    if (kinds := _derived_layer_types(cfg, name, lambda i: (i + 1) % 4 == 0)) is not None:
        fields["layer_types"] = kinds
    return cfg, fields


def _cwm(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """CWM (transformers' Cwm): Llama's layer, every fourth layer from the first full attention and the others
    sliding over ``sliding_window`` where ``layer_types`` is not written."""
    cfg = _with_defaults(cfg)
    kinds = _derived_layer_types(cfg, name, lambda i: i % 4 == 0)
    return cfg, {} if kinds is None else {"layer_types": kinds}


def _vaultgemma(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """VaultGemma (transformers' VaultGemma): Gemma 2's attention (GQA of 256-wide heads, logit soft-capping) with
    two norms a layer, every other layer from the first sliding over ``sliding_window`` where ``layer_types`` is not
    written (VaultGemmaConfig)."""
    cfg = _with_defaults(cfg)
    kinds = _derived_layer_types(cfg, name, lambda i: (i + 1) % 2 == 0)
    return cfg, {} if kinds is None else {"layer_types": kinds}


def _starcoder2(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """StarCoder2 (transformers' Starcoder2): GQA attention and an ungated MLP (``c_fc``, ``c_proj``), biases on every
    projection where ``use_bias``, LayerNorms with a bias; a ``sliding_window`` covers every layer (the config has no
    layer_types, so vLLM's CacheConfig takes the window for all)."""
    cfg = _with_defaults(cfg)
    bias = bool(cfg.get("use_bias"))
    return cfg, dict(mlp_gated=False, qkv_bias=bias, o_bias=bias, mlp_bias=bias, norm_bias=True)


def _opt(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """OPT (vLLM's ``models/opt.py``): multi-head attention and an ungated MLP (``fc1``, ``fc2``), biases on every
    projection where ``enable_bias``, LayerNorms with a weight and a bias, learned positions of
    ``max_position_embeddings + 2`` rows (``OPTLearnedPositionalEmbedding``'s offset of 2), a final LayerNorm where
    ``do_layer_norm_before``. A ``word_embed_proj_dim`` other than the hidden size (OPT-350m's project_in and
    project_out), post-layer norms and norms without weights are refused by name."""
    cfg = _with_defaults(cfg)
    hidden = _positive_int(cfg.get("hidden_size"), "hidden_size", name)
    for key, want in (("word_embed_proj_dim", hidden), ("do_layer_norm_before", True),
                      ("layer_norm_elementwise_affine", True), ("_remove_final_layer_norm", False)):
        if cfg.get(key) is not None and cfg[key] != want:  # None: OPTConfig's default (the hidden size for the first)
            raise UnsupportedArchitecture(f"{name}: {key} {cfg[key]!r}: kvprof plans OPT with {key} {want!r} "
                                          "(OPT-125m's, 1.3b's and larger) and not this variant's weights")
    positions = _positive_int(cfg.get("max_position_embeddings"), "max_position_embeddings", name)
    bias = bool(cfg.get("enable_bias"))
    cfg = {**cfg, "intermediate_size": _positive_int(cfg.get("ffn_dim"), "ffn_dim", name)}  # OPT's MLP width
    return cfg, dict(mlp_gated=False, qkv_bias=bias, o_bias=bias, mlp_bias=bias, norm_bias=True,
                     learned_position_embeddings=positions + 2)


def _rotary_fraction(cfg: dict[str, Any], name: str, default: float) -> float:
    """``partial_rotary_factor`` (written at the top level or in ``rope_parameters``; else the config class's default),
    a share of each head in (0, 1]."""
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    value = cfg.get("partial_rotary_factor", rope.get("partial_rotary_factor", default))
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise UnsupportedArchitecture(f"{name}: partial_rotary_factor {value!r} is not a share of a head in (0, 1]")
    return float(value)


def _refuse(cfg: dict[str, Any], name: str, key: str, want: Any, why: str) -> None:
    if cfg.get(key) not in (None, want):
        raise UnsupportedArchitecture(f"{name}: {key} {cfg[key]!r}: {why}")


def _phi(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Phi (1, 1.5, 2; transformers' Phi, through vLLM's Transformers backend): multi-head (or GQA) attention with
    biased q, k, v and ``dense`` projections, an ungated MLP (``fc1``, ``fc2``) with biases beside it on the one
    LayerNorm of the layer (a parallel block), a final LayerNorm and an LM head with a bias. ``qk_layernorm`` (a
    LayerNorm over each head of q and k) is refused by name."""
    cfg = _with_defaults(cfg)
    _refuse(cfg, name, "qk_layernorm", False, "Phi's per-head q/k LayerNorms are not counted by kvprof")
    return cfg, dict(mlp_gated=False, qkv_bias=True, o_bias=True, mlp_bias=True, norms_per_layer=1, norm_bias=True,
                     lm_head_bias=True, rotary_fraction=_rotary_fraction(cfg, name, 0.5))


def _gpt_neox(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """GPT-NeoX and Pythia (transformers' GPTNeoX, through vLLM's Transformers backend): multi-head attention whose
    fused ``query_key_value`` and ``dense`` projections carry biases where ``attention_bias``, an ungated MLP
    (``dense_h_to_4h``, ``dense_4h_to_h``) with biases, two LayerNorms a layer however ``use_parallel_residual``
    joins them, and an untied ``embed_out``."""
    cfg = _with_defaults(cfg)
    bias = bool(cfg.get("attention_bias"))
    # GPT-NeoX has no KV-head key: every head keeps its K and V
    return {**cfg, "num_key_value_heads": None}, dict(mlp_gated=False, qkv_bias=bias, o_bias=bias, mlp_bias=True,
                                                      norm_bias=True)


def _olmo(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """OLMo (v1; transformers' Olmo, through vLLM's Transformers backend): Llama's layer with q, k, v and o biases
    where ``attention_bias``, and LayerNorms with neither weight nor bias (OlmoLayerNorm): no norm parameters."""
    cfg = _with_defaults(cfg)
    return cfg, dict(norms_per_layer=0)


def _stablelm(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """StableLM (vLLM's ``models/stablelm.py``): attention with q, k, v biases where ``use_qkv_bias`` and an o
    projection without, Llama's gated MLP without biases, two LayerNorms (with biases) a layer, and a RoPE over
    ``partial_rotary_factor`` of each head (its cos/sin cache that wide). vLLM's model builds neither ``qk_layernorm``
    nor ``use_parallel_residual``: both are refused by name."""
    cfg = _with_defaults(cfg)
    _refuse(cfg, name, "qk_layernorm", False, "vLLM 0.32's stablelm.py builds no per-head q/k LayerNorms")
    _refuse(cfg, name, "use_parallel_residual", False, "vLLM 0.32's stablelm.py builds the sequential block only")
    return cfg, dict(qkv_bias=bool(cfg.get("use_qkv_bias")), o_bias=False, norm_bias=True,
                     rotary_fraction=_rotary_fraction(cfg, name, 0.25))


def _gptj(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """GPT-J (vLLM's ``models/gpt_j.py``): multi-head attention without biases, an ungated MLP (``fc_in``,
    ``fc_out``) of ``n_inner`` (else 4 × ``n_embd``) with biases beside it on the layer's one LayerNorm, a final
    LayerNorm, an LM head with a bias, and a RoPE over ``rotary_dim`` of each head (its cos/sin cache that wide, over
    ``n_positions``)."""
    cfg = _with_defaults(cfg)
    # GPTJConfig's attribute_map: hidden_size is n_embd, num_attention_heads n_head
    hidden = _positive_int(cfg.get("n_embd", cfg.get("hidden_size")), "n_embd", name)
    heads = _positive_int(cfg.get("n_head", cfg.get("num_attention_heads")), "n_head", name)
    rotary = _positive_int(cfg.get("rotary_dim"), "rotary_dim", name)
    if hidden % heads or rotary > hidden // heads or rotary % 2:
        raise UnsupportedArchitecture(f"{name}: rotary_dim {rotary} must be even and at most the head width "
                                      f"({hidden} / {heads}), as vLLM's gpt_j.py asserts")
    inner = cfg.get("n_inner")
    cfg = {**cfg, "intermediate_size": 4 * hidden if inner is None else _positive_int(inner, "n_inner", name)}
    return cfg, dict(mlp_gated=False, qkv_bias=False, o_bias=False, mlp_bias=True, norms_per_layer=1, norm_bias=True,
                     lm_head_bias=True, rotary_fraction=rotary / (hidden // heads))


def _bloom(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """BLOOM (vLLM's ``models/bloom.py``): multi-head attention with ALiBi (no RoPE, no position embeddings), a fused
    ``query_key_value`` and a ``dense`` projection with biases, an ungated MLP of 4 × the hidden size with biases, two
    LayerNorms a layer, a LayerNorm right after the word embeddings and a final one, all with biases, and an LM
    head tied to the embeddings. Older configs name the width ``n_embed`` (BloomConfig reads it as hidden_size)."""
    cfg = _with_defaults(cfg)
    hidden = _positive_int(cfg.get("n_embed") if cfg.get("n_embed") is not None else cfg.get("hidden_size"),
                           "hidden_size", name)
    cfg = {**cfg, "hidden_size": hidden, "intermediate_size": 4 * hidden, "num_key_value_heads": None}
    return cfg, dict(qkv_bias=True, o_bias=True, mlp_bias=True, norm_bias=True, embedding_norm=True,
                     rotary_fraction=0.0)


def _falcon(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Falcon (vLLM's ``models/falcon.py``): a fused ``query_key_value`` whose KV heads are ``num_kv_heads`` under
    ``new_decoder_architecture`` (Falcon-40B, 180B), one under ``multi_query`` (Falcon-7B), else every head; biases
    where ``bias``; an ungated MLP of 4 × the hidden size; one LayerNorm a layer for a parallel block, two for a
    sequential one or where ``num_ln_in_parallel_attn`` is 2 (the new architecture's default); RoPE over whole heads
    or ALiBi; an LM head tied unless ``tie_word_embeddings`` is false (Falcon-11B). vLLM's MLP is 4 × hidden whatever
    ``ffn_hidden_size`` says: another width is refused by name."""
    cfg = _with_defaults(cfg)
    hidden = _positive_int(cfg.get("hidden_size"), "hidden_size", name)
    heads = _positive_int(cfg.get("num_attention_heads"), "num_attention_heads", name)
    _refuse(cfg, name, "ffn_hidden_size", 4 * hidden, f"vLLM 0.32's falcon.py builds an MLP of 4 × hidden_size "
                                                     f"({4 * hidden}) whatever ffn_hidden_size says")
    if cfg.get("new_decoder_architecture"):
        kv = _positive_int(cfg.get("num_kv_heads") if cfg.get("num_kv_heads") is not None else heads,
                           "num_kv_heads", name)
    else:
        kv = 1 if cfg.get("multi_query") else heads
    parallel = bool(cfg.get("parallel_attn"))
    lns = cfg.get("num_ln_in_parallel_attn")
    if lns is None and cfg.get("new_decoder_architecture"):
        lns = 2
    bias = bool(cfg.get("bias"))
    # the KV heads as read here (the decoder's reading takes multi_query for a single head)
    cfg = {**cfg, "intermediate_size": 4 * hidden, "num_key_value_heads": kv, "multi_query": False}
    return cfg, dict(mlp_gated=False, qkv_bias=bias, o_bias=bias, mlp_bias=bias, norm_bias=True,
                     norms_per_layer=2 if not parallel or lns == 2 else 1,
                     rotary_fraction=0.0 if cfg.get("alibi") else 1.0)


def _minicpm3(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """MiniCPM3 (vLLM's ``models/minicpm3.py``): Llama's layer with DeepSeek's latent projections (q_a, q_b,
    kv_a_proj_with_mqa, kv_b and their RMSNorms) and standard attention over them: vLLM caches each head's K and V of
    qk_nope + qk_rope (V padded to it), not the latent. Its embedding and residual scales (``scale_emb``,
    ``scale_depth``, ``dim_model_base``) weigh nothing."""
    cfg = _with_defaults(cfg)
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise UnsupportedArchitecture(f"{name}: attention_bias and mlp_bias must be false: vLLM 0.32's minicpm3.py "
                                      "builds its projections without biases")
    hidden = _positive_int(cfg.get("hidden_size"), "hidden_size", name)
    heads = _positive_int(cfg.get("num_attention_heads"), "num_attention_heads", name)
    if cfg.get("v_head_dim") is None:  # MiniCPM3Config: the hidden size over the heads
        cfg = {**cfg, "v_head_dim": hidden // heads}
    qk = _positive_int(cfg.get("qk_nope_head_dim"), "qk_nope_head_dim", name) \
        + _positive_int(cfg.get("qk_rope_head_dim"), "qk_rope_head_dim", name)
    if _positive_int(cfg["v_head_dim"], "v_head_dim", name) > qk:
        raise UnsupportedArchitecture(f"{name}: v_head_dim {cfg['v_head_dim']} is wider than K's {qk}: vLLM's "
                                      "minicpm3.py pads V to K's width, and would cut this one")
    return cfg, {"mla_expanded_cache": True}


def _hyperclovax(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """HyperCLOVA X (vLLM's ``models/hyperclovax.py``): Llama's layer, q, k, v and o biased where ``attention_bias``,
    the MLP where ``mlp_bias``, and two more RMSNorms a layer (after attention and after the MLP) where
    ``use_post_norm`` (its config's default). Its multipliers (embedding, residual, attention, logits) weigh
    nothing."""
    cfg = _with_defaults(cfg)
    return cfg, dict(norms_per_layer=4 if cfg.get("use_post_norm") else 2)


def _smollm3(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """SmolLM3 (transformers' SmolLM3): Llama's layer, RoPE left out on every ``no_rope_layer_interval``-th layer
    (``no_rope_layers`` 0); where ``use_sliding_window`` and a window are set and ``layer_types`` is not written,
    those NoPE layers are the sliding ones."""
    cfg = _with_defaults(cfg)
    if cfg.get("layer_types") is not None or not (cfg.get("use_sliding_window") and cfg.get("sliding_window")):
        if not cfg.get("use_sliding_window") and cfg.get("layer_types") is None:
            cfg = {**cfg, "sliding_window": None}  # transformers derives all-full layer_types: the window is unused
        return cfg, {}
    n = _layers(cfg, name)
    interval = _positive_int(cfg.get("no_rope_layer_interval"), "no_rope_layer_interval", name)
    rope = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
    if not isinstance(rope, list) or len(rope) < n or any(v not in (0, 1) for v in rope[:n]):
        raise UnsupportedArchitecture(f"{name}: no_rope_layers must list a 0 or 1 for each of the {n} layers")
    return cfg, {"layer_types": tuple("full_attention" if rope[i] else "sliding_attention" for i in range(n))}


def _seed_oss(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Seed-OSS (transformers' SeedOss): Llama's layer with q/k/v biases where ``attention_bias`` and an o_proj
    bias where ``attention_out_bias``."""
    cfg = _with_defaults(cfg)
    return cfg, dict(qkv_bias=bool(cfg.get("attention_bias")), o_bias=bool(cfg.get("attention_out_bias")))


def _glm(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """GLM-4 (v1, ``glm``; transformers' Glm): Llama's layer with q/k/v biases where ``attention_bias`` (o_proj
    has none), gate and up fused (the same weights), RoPE over ``partial_rotary_factor`` of a head."""
    cfg = _with_defaults(cfg)
    return cfg, dict(qkv_bias=bool(cfg.get("attention_bias")), o_bias=False)


def _ungated_family(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Arcee (AFM), Jais 2, Nemotron (v1: Nemotron-4, Minitron; vLLM's ``models/nemotron.py``) and Apertus: Llama's
    attention (q/k/v and o biases where ``attention_bias``) and an MLP of an up and a down projection (biases where
    ``mlp_bias``) around a ReLU² or an xIELU. Jais 2's and Nemotron's norms are LayerNorms with a bias; Apertus has
    q and k RMSNorms over a head's width and xIELU's two learned scalars
    (``alpha_p``, ``alpha_n``) in each MLP (vLLM's ``models/apertus.py``)."""
    cfg = _with_defaults(cfg)
    _ungated(cfg, name)
    bias = bool(cfg.get("attention_bias"))
    fields: dict[str, Any] = dict(mlp_gated=False, qkv_bias=bias, o_bias=bias, mlp_bias=bool(cfg.get("mlp_bias")))
    if cfg["model_type"] in ("jais2", "nemotron"):  # LayerNorms with a bias (Nemotron's LayerNorm1P too)
        fields["norm_bias"] = True
    if cfg["model_type"] == "apertus":
        fields.update(qk_norm=True, mlp_activation_params=2)
    return cfg, fields


def _hunyuan_dense(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Hunyuan dense (transformers' HunYuanDenseV1): Llama's layer with q and k RMSNorms over a head's width. Its
    attention reads ``head_dim`` and has no fallback, so a config.json without one does not build."""
    if cfg.get("head_dim") is None:
        raise UnsupportedArchitecture(f"{name}: no head_dim, which transformers' HunYuanDenseV1 attention (the model "
                                      "vLLM's Transformers backend builds) reads with no default: it would not start")
    return _with_defaults(cfg), dict(qk_norm=True)


def _hunyuan_moe(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Hunyuan MoE (transformers' HunYuanMoEV1, through vLLM's Transformers backend): Hunyuan dense's attention (q and
    k RMSNorms over a head's width; biases on q, k, v and o where ``attention_bias``) and on every layer
    ``num_experts`` gated experts of ``intermediate_size`` (``moe_topk`` a token) behind a float32 router, beside a
    shared MLP of ``intermediate_size``. transformers' experts take one count for every layer: per-layer lists are
    refused by name, as is a config without ``head_dim`` (transformers' attention reads it with no fallback)."""
    cfg, fields = _hunyuan_dense(cfg, name)  # a per-layer list of counts is refused by its type (config_keys)
    inter = _positive_int(cfg.get("intermediate_size"), "intermediate_size", name)
    moe = MoE(num_experts=_positive_int(cfg.get("num_experts"), "num_experts", name),
              experts_per_token=_positive_int(cfg.get("moe_topk"), "moe_topk", name),
              expert_intermediate_size=inter, shared_experts=1, shared_expert_intermediate_size=inter, router_fp32=True)
    if moe.experts_per_token > moe.num_experts:
        raise UnsupportedArchitecture(f"{name}: moe_topk {moe.experts_per_token} is more than num_experts "
                                      f"{moe.num_experts}")
    return cfg, {**fields, "o_bias": bool(cfg.get("attention_bias")), "moe": moe}


def _flex_olmo(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """FlexOlmo (transformers' FlexOlmo): OLMo 2's attention (q and k RMSNorms over every head's width together) and
    OLMoE's experts, ``num_experts`` of ``intermediate_size`` on every layer behind a bias-free router."""
    return _with_defaults(cfg), dict(qk_norm=True, qk_norm_per_layer=True)


def _mellum(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Mellum (transformers' Mellum): q and k RMSNorms over a head's width; ``layer_types`` (all full attention
    where not written, whatever ``sliding_window`` says) and ``mlp_layer_types`` (all ``sparse`` where not written):
    a sparse layer has ``num_experts`` experts of ``moe_intermediate_size`` behind a bias-free router, a dense one an
    MLP of ``intermediate_size``."""
    cfg = _with_defaults(cfg)
    n = _layers(cfg, name)
    kinds = cfg.get("layer_types") or ["full_attention"] * n
    mlp = cfg.get("mlp_layer_types") or ["sparse"] * n
    if not isinstance(mlp, list) or len(mlp) != n or any(t not in ("sparse", "dense") for t in mlp):
        raise UnsupportedArchitecture(f"{name}: mlp_layer_types must list \"sparse\" or \"dense\" for each of the "
                                      f"{n} layers")
    cfg = {**cfg, "layer_types": kinds, "mlp_only_layers": [i for i, t in enumerate(mlp) if t == "dense"]}
    return cfg, dict(qk_norm=True)


def _granite(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Granite 3.x, Granite MoE (shared) and their sliding-window builds (``granite_swa``, ``granitemoe_swa``; vLLM's
    ``models/granite.py``, ``granitemoe.py``, ``granitemoeshared.py``): where the config has ``layer_types`` (the
    SWA builds' config classes derive every fourth layer full from the first), its sliding layers attend over
    ``sliding_window`` and every attention layer has a learned sink a head, unless ``attention_sinks`` says otherwise
    (``granite_layer_attn_params``); ``layer_rope_theta`` gives each layer its RoPE base, 0 for none. Granite MoE
    shared's MLP beside its experts is read as :func:`analysis.model.families.attention._granite_moe_shared`
    reads it."""
    model_type = str(cfg.get("model_type"))
    if model_type in DEFAULTS:
        cfg = _with_defaults(cfg)
        if (kinds := _derived_layer_types(cfg, name, lambda i: i % 4 == 0)) is not None:
            cfg = {**cfg, "layer_types": list(kinds)}
    fields: dict[str, Any] = {}
    if model_type in ("granitemoeshared", "granitemoe_swa"):
        fields.update(_granite_moe_shared(cfg, name))
    if cfg.get("layer_types") is None:
        return cfg, fields
    if not cfg.get("sliding_window") and "sliding_attention" in cfg["layer_types"]:
        raise UnsupportedArchitecture(f"{name}: sliding_attention layers and no sliding_window, which vLLM's Granite "
                                      "reads for them: it would not start")
    sinks = cfg.get("attention_sinks", True)
    if not isinstance(sinks, bool):
        raise UnsupportedArchitecture(f"{name}: attention_sinks must be true or false, got {sinks!r}")
    thetas = cfg.get("layer_rope_theta")
    if thetas is not None:
        n = _layers(cfg, name)
        if not isinstance(thetas, list) or len(thetas) != n or not all(
                isinstance(t, int | float) and not isinstance(t, bool) and t >= 0 for t in thetas):
            raise UnsupportedArchitecture(f"{name}: layer_rope_theta must list a RoPE base (0: none) for each of the "
                                          f"{n} layers")
        bases = {t for t in thetas if t}
        if len(bases) > 1:
            raise UnsupportedArchitecture(f"{name}: layer_rope_theta has {len(bases)} RoPE bases; vLLM keeps a cos/sin "
                                          "cache for each and kvprof counts one")
        if not bases:
            fields["rotary_fraction"] = 0.0  # no layer rotates: no cache
    fields["attention_sinks"] = sinks
    return cfg, fields


READERS: dict[str, FamilyReader] = {
    "olmo3": _olmo3,
    "cwm": _cwm,
    "smollm3": _smollm3,
    "seed_oss": _seed_oss,
    "glm": _glm,
    **dict.fromkeys(("arcee", "jais2", "nemotron", "apertus"), _ungated_family),
    "hunyuan_v1_dense": _hunyuan_dense,
    "hunyuan_v1_moe": _hunyuan_moe,
    "flex_olmo": _flex_olmo,
    "mellum": _mellum,
    "vaultgemma": _vaultgemma,
    "starcoder2": _starcoder2,
    "opt": _opt,
    "phi": _phi,
    "gpt_neox": _gpt_neox,
    "olmo": _olmo,
    "stablelm": _stablelm,
    "gptj": _gptj,
    "bloom": _bloom,
    "falcon": _falcon,
    "minicpm3": _minicpm3,
    "hyperclovax": _hyperclovax,
    **dict.fromkeys(("granite", "granitemoe", "granitemoeshared", "granite_swa", "granitemoe_swa"), _granite),
}
