"""Config readers of the families whose layers keep a recurrent state (Mamba, Mamba2, gated DeltaNet, short
convolutions): Nemotron-H, Falcon-H1, Jamba, LFM2, Granite-4.0-H, Qwen3-Next and Qwen3.5, Mamba and Mamba2 alone,
Zamba2, OLMo Hybrid. Each returns the config with the generic keys :func:`analysis.model.architecture._from_dict`
reads, and the architecture fields of its own (``analysis.model.families.FAMILY_READERS``).
"""

from __future__ import annotations

import math
from typing import Any

from analysis.model.parts import (
    QWEN3_5_TEXT,
    GatedDeltaNet,
    Mamba1,
    Mamba2,
    MoE,
    SharedBlocks,
    ShortConv,
    UnsupportedArchitecture,
    _fraction,
    _positive_int,
    _ssm_bytes,
    _validated,
    dtype_bytes,
)

# Nemotron-H's layer pattern (hybrid_override_pattern; transformers' NemotronHConfig._pattern_to_list names the
# same kinds in layers_block_type): a Mamba2 mixer, attention, an MLP, a MoE MLP; each layer is one of them.
_NEMOTRON_H_CHARS = {"M": "recurrent", "*": "full_attention", "-": "mlp", "E": "moe"}


_NEMOTRON_H_NAMES = {"mamba": "recurrent", "linear_attention": "recurrent", "attention": "full_attention",
                     "full_attention": "full_attention", "mlp": "mlp", "moe": "moe"}


def _nemotron_h(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Nemotron-H (vLLM's ``models/nemotron_h.py``): one norm and one block a layer, as its pattern says: a Mamba2
    mixer (M), attention without RoPE (*), a relu² MLP without a gate (-), or a MoE MLP (E, not read yet). The
    layer count is the pattern's length; head_dim defaults to 128 (transformers' NemotronHConfig), the SSM state's
    cache dtype to float32 (vLLM's NemotronHForCausalLMConfig). Returns the config with the generic keys the rest
    of the reading uses, and the architecture's hybrid fields."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern and set(pattern) <= _NEMOTRON_H_CHARS.keys():
        kinds = [_NEMOTRON_H_CHARS[c] for c in pattern]
    elif (isinstance(cfg.get("layers_block_type"), list) and cfg["layers_block_type"]
          and all(isinstance(t, str) and t in _NEMOTRON_H_NAMES for t in cfg["layers_block_type"])):
        kinds = [_NEMOTRON_H_NAMES[t] for t in cfg["layers_block_type"]]
    else:
        raise UnsupportedArchitecture(
            f"{name}: nemotron_h needs hybrid_override_pattern (a string of M, *, - and E) or layers_block_type "
            f"(a list of {', '.join(sorted(_NEMOTRON_H_NAMES))}); got {pattern!r}")
    moe = None
    if "moe" in kinds:
        moe = _nemotron_h_moe(cfg, kinds, name)
    if "full_attention" not in kinds or "recurrent" not in kinds:
        raise UnsupportedArchitecture(f"{name}: kvprof plans Nemotron-H patterns with both Mamba2 (M) and attention "
                                      "(*) layers; vLLM sizes the cache of the others differently")
    if cfg.get("sliding_window") is not None:
        raise UnsupportedArchitecture(f"{name}: a Nemotron-H sliding window is not modelled (sliding_window "
                                      f"{cfg['sliding_window']!r})")
    head_dim = cfg.get("head_dim", 128)
    if cfg.get("attention_head_dim") not in (None, head_dim):
        raise UnsupportedArchitecture(
            f"{name}: attention_head_dim {cfg['attention_head_dim']!r} differs from head_dim {head_dim!r}, the one "
            "transformers and vLLM read")
    if cfg.get("mlp_hidden_act", "relu2") != "relu2":
        raise UnsupportedArchitecture(f"{name}: mlp_hidden_act {cfg['mlp_hidden_act']!r}: kvprof reads Nemotron-H's "
                                      "relu2 MLP (two matrices, no gate)")
    n = len(kinds)
    mamba = _validated(
        Mamba2, name, num_heads=cfg.get("mamba_num_heads", 128), head_dim=cfg.get("mamba_head_dim", 64),
        n_groups=cfg.get("n_groups", 8), state_size=cfg.get("ssm_state_size", 128),
        conv_kernel=cfg.get("conv_kernel", 4), conv_bias=bool(cfg.get("use_conv_bias", True)),
        proj_bias=bool(cfg.get("use_bias", False)), ssm_cache_dtype=str(cfg.get("mamba_ssm_cache_dtype", "float32")))
    try:
        dtype_bytes(mamba.ssm_cache_dtype)
    except ValueError as exc:
        raise UnsupportedArchitecture(f"{name}: mamba_ssm_cache_dtype: {exc}") from None
    hybrid = dict(num_layers=n, layer_types=tuple("mlp" if k == "moe" else k for k in kinds), recurrent=mamba,
                  moe=moe,
                  mlp_layers=tuple(i for i, k in enumerate(kinds) if k in ("mlp", "moe")), mlp_gated=False,
                  qkv_bias=bool(cfg.get("attention_bias")), o_bias=bool(cfg.get("attention_bias")),
                  mlp_bias=bool(cfg.get("mlp_bias")), norms_per_layer=1, head_dim=head_dim,
                  rotary_fraction=0.0)  # NemotronHAttention builds no rotary embedding
    return {**cfg, "num_hidden_layers": n, "head_dim": head_dim}, hybrid


def _falcon_h1(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Falcon-H1 (vLLM's ``models/falcon_h1.py``): every layer runs attention (no bias, RoPE over
    ``attn_rotary_emb`` of a head) and a Mamba2 mixer of ``mamba_d_ssm`` inner width side by side, then a gated MLP
    without bias: each layer holds a KV cache and a Mamba2 state. transformers' defaults where a key is absent
    (``mamba_d_ssm`` 1024, 128 heads of ``auto`` width: the inner width over the heads); the SSM state in the model
    dtype. The muP multipliers scale activations only."""
    n = _positive_int(cfg.get("num_hidden_layers", 32), "num_hidden_layers", name)
    hidden = _positive_int(cfg.get("hidden_size", 4096), "hidden_size", name)
    inner = cfg.get("mamba_d_ssm", 1024)
    inner = _positive_int(inner if inner is not None else cfg.get("mamba_expand", 2) * hidden, "mamba_d_ssm", name)
    heads = _positive_int(cfg.get("mamba_n_heads", 128), "mamba_n_heads", name)
    head_dim = cfg.get("mamba_d_head", "auto")
    if head_dim == "auto":
        head_dim = inner // heads
    mamba = _validated(
        Mamba2, name, num_heads=heads, head_dim=head_dim, n_groups=cfg.get("mamba_n_groups", 1),
        state_size=cfg.get("mamba_d_state", 256), conv_kernel=cfg.get("mamba_d_conv", 4),
        conv_bias=bool(cfg.get("mamba_conv_bias", True)), proj_bias=bool(cfg.get("mamba_proj_bias", False)),
        gated_norm=bool(cfg.get("mamba_rms_norm", False)), ssm_cache_dtype="auto")
    if mamba.inner != inner:
        raise UnsupportedArchitecture(f"{name}: mamba_n_heads × mamba_d_head ({mamba.inner}) differs from the mixer's "
                                      f"inner width mamba_d_ssm ({inner}); transformers and vLLM refuse it")
    if cfg.get("attn_layer_indices") is not None:
        raise UnsupportedArchitecture(f"{name}: attn_layer_indices {cfg['attn_layer_indices']!r}: vLLM's Falcon-H1 "
                                      "builds attention on every layer")
    for key in ("attention_bias", "mlp_bias", "projectors_bias"):
        if cfg.get(key):
            raise UnsupportedArchitecture(f"{name}: {key} true: vLLM's Falcon-H1 builds no such bias")
    attn_heads = _positive_int(cfg.get("num_attention_heads", 32), "num_attention_heads", name)
    attn_dim = cfg.get("head_dim") or hidden // attn_heads
    rotary = cfg.get("attn_rotary_emb", attn_dim)
    if not isinstance(rotary, int) or isinstance(rotary, bool) or not 0 < rotary <= attn_dim:
        raise UnsupportedArchitecture(f"{name}: attn_rotary_emb must be a width up to head_dim {attn_dim}, got "
                                      f"{rotary!r}")
    hybrid = dict(num_layers=n, layer_types=("parallel_hybrid",) * n, recurrent=mamba, mlp_gated=True,
                  qkv_bias=False, o_bias=False, mlp_bias=False, norms_per_layer=2, qk_norm=False,
                  rotary_fraction=rotary / attn_dim)
    return {**cfg, "num_hidden_layers": n, "hidden_size": hidden, "num_attention_heads": attn_heads,
            "intermediate_size": cfg.get("intermediate_size", 14336)}, hybrid


def _jamba(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Jamba (vLLM's ``models/jamba.py``): layer ``i`` is attention where ``i % attn_layer_period ==
    attn_layer_offset``, else a Mamba (v1) mixer with RMSNorms over Δ, B and C; its MLP is a MoE of ``num_experts``
    gated experts where ``i % expert_layer_period == expert_layer_offset``, else dense (transformers' JambaConfig
    ``layers_block_type`` and ``layers_num_experts``; its defaults where a key is absent). Attention has no
    positional encoding; the SSM state is cached in the model dtype."""
    n = _positive_int(cfg.get("num_hidden_layers", 32), "num_hidden_layers", name)
    hidden = _positive_int(cfg.get("hidden_size", 4096), "hidden_size", name)
    period = _positive_int(cfg.get("attn_layer_period", 8), "attn_layer_period", name)
    offset = cfg.get("attn_layer_offset", 4)
    e_period = _positive_int(cfg.get("expert_layer_period", 2), "expert_layer_period", name)
    e_offset = cfg.get("expert_layer_offset", 1)
    for key, v, p in (("attn_layer_offset", offset, period), ("expert_layer_offset", e_offset, e_period)):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < p:
            raise UnsupportedArchitecture(f"{name}: {key} must be an integer in [0, its period {p}), got {v!r}")
    kinds = tuple("full_attention" if i % period == offset else "recurrent" for i in range(n))
    if "full_attention" not in kinds or "recurrent" not in kinds:
        raise UnsupportedArchitecture(f"{name}: kvprof plans Jamba with both mamba and attention layers")
    if cfg.get("sliding_window") is not None:
        raise UnsupportedArchitecture(f"{name}: a Jamba sliding window (sliding_window {cfg['sliding_window']!r}) is "
                                      "not modelled")
    expand = _positive_int(cfg.get("mamba_expand", 2), "mamba_expand", name)
    dt_rank = cfg.get("mamba_dt_rank", "auto")
    if dt_rank == "auto":
        dt_rank = math.ceil(hidden / 16)
    mamba = _validated(Mamba1, name, inner=expand * hidden, state_size=cfg.get("mamba_d_state", 16),
                       conv_kernel=cfg.get("mamba_d_conv", 4), dt_rank=dt_rank,
                       conv_bias=bool(cfg.get("mamba_conv_bias", True)), proj_bias=bool(cfg.get("mamba_proj_bias")))
    experts = int(cfg.get("num_experts", 16) or 1)
    hybrid: dict[str, Any] = dict(num_layers=n, layer_types=kinds, recurrent=mamba, mlp_gated=True, qkv_bias=False,
                                  o_bias=False, mlp_bias=False, norms_per_layer=2, qk_norm=False, rotary_fraction=0.0)
    if experts > 1:
        hybrid["moe"] = _validated(
            MoE, name, num_experts=experts, experts_per_token=cfg.get("num_experts_per_tok", 2),
            expert_intermediate_size=cfg.get("intermediate_size", 14336),
            dense_layers=tuple(i for i in range(n) if i % e_period != e_offset))
    return {**cfg, "num_hidden_layers": n, "hidden_size": hidden,
            "intermediate_size": cfg.get("intermediate_size", 14336),
            "num_attention_heads": cfg.get("num_attention_heads", 32),
            "num_key_value_heads": cfg.get("num_key_value_heads", 8), "vocab_size": cfg.get("vocab_size", 65536),
            "max_position_embeddings": cfg.get("max_position_embeddings", 262144)}, hybrid


def _lfm2(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """LFM2 (vLLM's ``models/lfm2.py``): each layer is a gated short convolution (``conv``) or GQA attention with
    q/k RMSNorms and RoPE (``full_attention``; from ``layer_types``, else ``full_attn_idxs``), then a SwiGLU MLP
    whose width vLLM adjusts as ``Lfm2MLP`` does (two thirds of ``intermediate_size``, times
    ``block_ffn_dim_multiplier``, rounded up to ``block_multiple_of``). transformers' defaults where a key is absent
    (``block_ff_dim`` and ``tie_embedding`` are its older names)."""
    n = _positive_int(cfg.get("num_hidden_layers", 32), "num_hidden_layers", name)
    hidden = _positive_int(cfg.get("hidden_size", 2560), "hidden_size", name)
    for key in ("block_dim", "conv_dim", "conv_dim_out"):
        if cfg.get(key) not in (None, hidden):
            raise UnsupportedArchitecture(f"{name}: {key} {cfg[key]!r} differs from hidden_size {hidden}; vLLM's LFM2 "
                                          "sizes its blocks by both, which kvprof does not model")
    types = cfg.get("layer_types")
    if types is None:
        idxs = cfg.get("full_attn_idxs")
        idxs = list(range(n)) if idxs is None else idxs
        if not isinstance(idxs, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in idxs):
            raise UnsupportedArchitecture(f"{name}: full_attn_idxs must be a list of layer indices, got {idxs!r}")
        types = ["full_attention" if i in idxs else "conv" for i in range(n)]
    if not isinstance(types, list) or len(types) != n or not set(types) <= {"conv", "full_attention"}:
        raise UnsupportedArchitecture(f"{name}: lfm2 needs layer_types, {n} of conv and full_attention; got {types!r}")
    kinds = tuple("recurrent" if t == "conv" else "full_attention" for t in types)
    if "recurrent" not in kinds or "full_attention" not in kinds:
        raise UnsupportedArchitecture(f"{name}: kvprof plans LFM2 with both conv and attention layers")
    inter = _positive_int(cfg.get("intermediate_size", cfg.get("block_ff_dim", 12288)), "intermediate_size", name)
    if cfg.get("block_auto_adjust_ff_dim", True):
        inter = int(2 * inter / 3)
        multiplier = cfg.get("block_ffn_dim_multiplier", 1.0)
        if multiplier is not None:
            if isinstance(multiplier, bool) or not isinstance(multiplier, int | float) or not 0 < multiplier <= 64:
                raise UnsupportedArchitecture(f"{name}: block_ffn_dim_multiplier must be a positive number, got "
                                              f"{multiplier!r}")
            inter = int(multiplier * inter)
        multiple = _positive_int(cfg.get("block_multiple_of", 256), "block_multiple_of", name)
        inter = multiple * -(-inter // multiple)
    conv = _validated(ShortConv, name, dim=hidden, conv_kernel=cfg.get("conv_L_cache", 3),
                      bias=bool(cfg.get("conv_bias", False)))
    tie = cfg.get("tie_word_embeddings", cfg.get("tie_embedding", True))
    hybrid = dict(num_layers=n, layer_types=kinds, recurrent=conv, mlp_gated=True, qkv_bias=False, o_bias=False,
                  mlp_bias=False, norms_per_layer=2, qk_norm=True)
    return {**cfg, "num_hidden_layers": n, "hidden_size": hidden, "intermediate_size": inter,
            "num_attention_heads": cfg.get("num_attention_heads", 32),
            "num_key_value_heads": cfg.get("num_key_value_heads", 8), "vocab_size": cfg.get("vocab_size", 65536),
            "max_position_embeddings": cfg.get("max_position_embeddings", 128000), "tie_word_embeddings": tie}, hybrid


def _lfm2_moe(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """LFM2-MoE (vLLM's ``models/lfm2_moe.py``): LFM2's gated short convolutions and GQA attention (``layer_types``),
    then a SwiGLU MLP of ``intermediate_size`` as it stands on the first ``num_dense_layers`` layers and
    ``num_experts`` experts of ``moe_intermediate_size`` on the rest (with ``use_expert_bias``, a float32 score bias
    a router). transformers' ``Lfm2MoeConfig`` defaults where a key is absent."""
    n = _positive_int(cfg.get("num_hidden_layers", 32), "num_hidden_layers", name)
    hidden = _positive_int(cfg.get("hidden_size", 2048), "hidden_size", name)
    types = cfg.get("layer_types")
    if not isinstance(types, list) or len(types) != n or not set(types) <= {"conv", "full_attention"}:
        raise UnsupportedArchitecture(f"{name}: lfm2_moe needs layer_types, {n} of conv and full_attention; got "
                                      f"{types!r}")
    kinds = tuple("recurrent" if t == "conv" else "full_attention" for t in types)
    if "recurrent" not in kinds or "full_attention" not in kinds:
        raise UnsupportedArchitecture(f"{name}: kvprof plans LFM2-MoE with both conv and attention layers")
    dense = cfg.get("num_dense_layers", 2)
    if not isinstance(dense, int) or isinstance(dense, bool) or not 0 <= dense <= n:
        raise UnsupportedArchitecture(f"{name}: num_dense_layers must be 0 to {n}, got {dense!r}")
    conv = _validated(ShortConv, name, dim=hidden, conv_kernel=cfg.get("conv_L_cache", 3),
                      bias=bool(cfg.get("conv_bias", False)))
    moe = None
    if dense < n:
        moe = _validated(MoE, name, num_experts=cfg.get("num_experts", 32),
                         experts_per_token=cfg.get("num_experts_per_tok", 4),
                         expert_intermediate_size=cfg.get("moe_intermediate_size", 1792),
                         dense_layers=tuple(range(dense)), router_bias=bool(cfg.get("use_expert_bias", True)))
    hybrid = dict(num_layers=n, layer_types=kinds, recurrent=conv, mlp_gated=True, qkv_bias=False, o_bias=False,
                  mlp_bias=False, norms_per_layer=2, qk_norm=True, moe=moe)
    return {**cfg, "num_hidden_layers": n, "hidden_size": hidden,
            "intermediate_size": cfg.get("intermediate_size", 7168),
            "num_attention_heads": cfg.get("num_attention_heads", 32),
            "num_key_value_heads": cfg.get("num_key_value_heads", 8), "vocab_size": cfg.get("vocab_size", 65536),
            "max_position_embeddings": cfg.get("max_position_embeddings", 128000),
            "tie_word_embeddings": cfg.get("tie_word_embeddings", True)}, hybrid


# transformers 5 writes a Mamba layer as "linear_attention" (GraniteMoeHybridConfig), published configs "mamba"
_GRANITE_LAYERS = {"mamba": "recurrent", "linear_attention": "recurrent", "attention": "full_attention"}


def _granite_hybrid(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Granite-4.0-H (vLLM's ``models/granitemoehybrid.py``): each layer's mixer is Mamba2 (``mamba``) or attention
    (``attention``: head_dim hidden / heads, RoPE only where ``position_embedding_type`` is ``rope``), then on every
    layer ``num_local_experts`` gated experts of ``intermediate_size`` (a router without bias) beside a gated shared
    MLP of ``shared_intermediate_size``; without experts the shared MLP alone, a dense MLP. The SSM state is cached
    in the model dtype (no override of vLLM's ``mamba_ssm_cache_dtype`` auto for this family). Returns the config
    with the generic keys the rest of the reading uses, and the architecture's hybrid fields."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    types = cfg.get("layer_types")
    if not isinstance(types, list) or len(types) != n or not all(t in _GRANITE_LAYERS for t in types):
        raise UnsupportedArchitecture(f"{name}: granitemoehybrid needs layer_types, {n} of "
                                      f"{' and '.join(_GRANITE_LAYERS)}; got {types!r}")
    kinds = tuple(_GRANITE_LAYERS[t] for t in types)
    if "full_attention" not in kinds or "recurrent" not in kinds:
        raise UnsupportedArchitecture(f"{name}: kvprof plans Granite-4.0-H with both mamba and attention layers; "
                                      "vLLM sizes the cache of the others differently")
    hidden = _positive_int(cfg.get("hidden_size"), "hidden_size", name)
    expand = _positive_int(cfg.get("mamba_expand", 2), "mamba_expand", name)
    heads = _positive_int(cfg.get("mamba_n_heads", 128), "mamba_n_heads", name)
    head_dim = cfg.get("mamba_d_head", "auto")  # transformers' default: "auto", the inner width over the heads
    if head_dim == "auto":
        head_dim = expand * hidden // heads
    mamba = _validated(
        Mamba2, name, num_heads=heads, head_dim=head_dim,
        n_groups=cfg.get("mamba_n_groups", 1), state_size=cfg.get("mamba_d_state", 256),
        conv_kernel=cfg.get("mamba_d_conv", 4), conv_bias=bool(cfg.get("mamba_conv_bias", True)),
        proj_bias=bool(cfg.get("mamba_proj_bias", False)), ssm_cache_dtype="auto")
    if expand * hidden != mamba.inner:
        raise UnsupportedArchitecture(f"{name}: mamba_expand × hidden_size ({expand} × {hidden}) differs from "
                                      f"mamba_n_heads × mamba_d_head ({mamba.inner}); vLLM sizes the mixer by the "
                                      "first and its heads by the second, which kvprof does not model")
    position = cfg.get("position_embedding_type") or "nope"  # vLLM applies RoPE only for "rope"
    if position not in ("nope", "rope"):
        raise UnsupportedArchitecture(f"{name}: position_embedding_type {position!r}: vLLM's Granite-4.0-H reads "
                                      "rope or nope")
    # transformers' defaults where a key is absent: 8 experts, a shared MLP of 1024
    experts = int(cfg.get("num_local_experts", 8) or 0)
    shared = int(cfg.get("shared_intermediate_size", 1024) or 0)
    hybrid: dict[str, Any] = dict(num_layers=n, layer_types=kinds, recurrent=mamba, mlp_gated=True,
                                  qkv_bias=bool(cfg.get("attention_bias")), o_bias=bool(cfg.get("attention_bias")),
                                  mlp_bias=False, norms_per_layer=2, qk_norm=False,
                                  rotary_fraction=1.0 if position == "rope" else 0.0)
    if experts:
        hybrid["moe"] = _validated(
            MoE, name, num_experts=experts, experts_per_token=cfg.get("num_experts_per_tok"),
            expert_intermediate_size=cfg.get("intermediate_size"), shared_experts=1 if shared else 0,
            shared_expert_intermediate_size=shared)
        return cfg, hybrid
    if not shared:
        hybrid["mlp_layers"] = ()  # neither experts nor a shared MLP: vLLM builds no MLP at all
    return {**cfg, "intermediate_size": shared or cfg.get("intermediate_size")}, hybrid


_QWEN3_NEXT_LAYERS = {"linear_attention": "recurrent", "full_attention": "full_attention"}


def _qwen3_next(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Qwen3-Next (vLLM's ``models/qwen3_next.py``): each layer is gated DeltaNet (``linear_attention``) or gated
    attention (``full_attention``; q_proj also gives the output gate, q/k norms, RoPE over ``partial_rotary_factor``
    of a head), then a Qwen MoE block (a gated shared expert) or, in ``mlp_only_layers``, a dense MLP. The layer kinds
    come from ``layer_types`` or every ``full_attention_interval``-th layer (transformers' Qwen3NextConfig: default 4).
    The SSM state is cached in the model dtype (vLLM's mamba_ssm_cache_dtype auto). Returns the hybrid fields."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    explicit = cfg.get("layer_types")
    if explicit is not None:
        if len(explicit) != n or not set(explicit) <= _QWEN3_NEXT_LAYERS.keys():
            raise UnsupportedArchitecture(f"{name}: layer_types must be {n} of linear_attention and full_attention")
        kinds = [_QWEN3_NEXT_LAYERS[t] for t in explicit]
    else:
        interval = _positive_int(cfg.get("full_attention_interval", 4), "full_attention_interval", name)
        kinds = ["full_attention" if (i + 1) % interval == 0 else "recurrent" for i in range(n)]
    if "full_attention" not in kinds or "recurrent" not in kinds:
        raise UnsupportedArchitecture(f"{name}: kvprof plans Qwen3-Next with both gated DeltaNet and attention layers")
    if cfg.get("use_sliding_window"):
        raise UnsupportedArchitecture(f"{name}: a Qwen3-Next sliding window (use_sliding_window) is not modelled")
    ssm_dtype = "auto"
    if cfg.get("model_type") in QWEN3_5_TEXT:
        # vLLM's Qwen3.5 makes every layer of the MoE model MoE, whatever mlp_only_layers or decoder_sparse_step say
        if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step") not in (None, 1):
            raise UnsupportedArchitecture(f"{name}: mlp_only_layers / decoder_sparse_step: vLLM's Qwen3.5 ignores "
                                          "them (every layer MoE), so kvprof refuses a config that sets them")
        # its SSM state in mamba_ssm_dtype (vLLM's Qwen3_5ForConditionalGenerationConfig)
        ssm_dtype = str(cfg.get("mamba_ssm_dtype") or "auto")
    rope = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    fraction = _fraction(cfg.get("partial_rotary_factor", rope.get("partial_rotary_factor", 0.25)),
                         "partial_rotary_factor", name)
    gdn = _validated(GatedDeltaNet, name, num_k_heads=cfg.get("linear_num_key_heads", 16),
                     num_v_heads=cfg.get("linear_num_value_heads", 32), head_k_dim=cfg.get("linear_key_head_dim", 128),
                     head_v_dim=cfg.get("linear_value_head_dim", 128), conv_kernel=cfg.get("linear_conv_kernel_dim", 4),
                     ssm_cache_dtype=ssm_dtype)
    try:
        _ssm_bytes(ssm_dtype, 2)
    except ValueError as exc:
        raise UnsupportedArchitecture(f"{name}: mamba_ssm_dtype: {exc}") from None
    return dict(layer_types=tuple(kinds), recurrent=gdn, attention_output_gate=bool(cfg.get("attn_output_gate", True)),
                rotary_fraction=fraction)


def _nemotron_h_moe(cfg: dict[str, Any], kinds: list[str], name: str) -> MoE:
    """Nemotron-H's MoE layers (E; vLLM's ``NemotronHMoE``): a router of ``n_routed_experts`` with its fp32
    score-correction bias, ``n_routed_experts`` relu² experts of ``moe_intermediate_size`` (two matrices, no gate) of
    which ``num_experts_per_tok`` run a token, and ``n_shared_experts`` shared experts fused into one relu² MLP of
    ``n_shared_experts × moe_shared_expert_intermediate_size``. A latent MoE (``moe_latent_size``, Nemotron-3 Super
    and Ultra): the routed experts run on a ``moe_latent_size`` projection of the hidden state (``fc1_latent_proj``
    and ``fc2_latent_proj``, biased with ``mlp_bias``), the shared experts on the hidden state."""
    if not cfg.get("n_routed_experts"):
        raise UnsupportedArchitecture(f"{name}: MoE layers (E in hybrid_override_pattern) but no n_routed_experts")
    shared = int(cfg.get("n_shared_experts") or 0)
    shared_size = _positive_int(cfg.get("moe_shared_expert_intermediate_size", 7688),
                                "moe_shared_expert_intermediate_size", name) if shared else 0
    return _validated(
        MoE, name, num_experts=cfg["n_routed_experts"], experts_per_token=cfg.get("num_experts_per_tok", 2),
        expert_intermediate_size=cfg.get("moe_intermediate_size", 7688), shared_experts=shared,
        shared_expert_intermediate_size=shared * shared_size,
        dense_layers=tuple(i for i, k in enumerate(kinds) if k == "mlp"), router_bias=True,
        latent_size=cfg.get("moe_latent_size"))


def _attention_free(cfg: dict[str, Any], name: str, mixer: Mamba1 | Mamba2, hidden: int, n: int,
                    tie_default: bool, vocab_default: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields every attention-free model shares: each layer one RMSNorm and one mixer, no MLP, no attention,
    a final norm. The attention fields are placeholders no layer uses (one head of ``hidden``); vLLM reads no
    ``num_attention_heads`` for these models either (its head check then passes). ``intermediate_size`` is the
    mixer's inner width, which no MLP uses: the profile run's activations are the mixer's projections'."""
    hybrid = dict(num_layers=n, layer_types=("recurrent",) * n, recurrent=mixer, mlp_layers=(), mlp_gated=False,
                  qkv_bias=False, o_bias=False, mlp_bias=False, norms_per_layer=1, qk_norm=False,
                  rotary_fraction=0.0)
    return {**cfg, "num_hidden_layers": n, "hidden_size": hidden, "num_attention_heads": 1,
            "num_key_value_heads": 1, "head_dim": hidden, "intermediate_size": mixer.inner,
            "vocab_size": cfg.get("vocab_size", vocab_default),
            "tie_word_embeddings": cfg.get("tie_word_embeddings", tie_default)}, hybrid


def _mamba(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Mamba (v1) and Falcon-Mamba (vLLM's ``models/mamba.py``, ``MambaForCausalLM`` and ``FalconMambaForCausalLM``):
    attention-free, every layer an RMSNorm and a ``MambaMixer`` of ``intermediate_size`` channels (vLLM reads it;
    transformers' MambaConfig sets it to ``expand × hidden_size`` where config.json does not say it: Falcon-Mamba-7B
    says 8,192 beside an ``expand`` of 16), Δ through ``time_step_rank`` ("auto": ⌈hidden/16⌉). Falcon-Mamba's
    RMSNorms over Δ, B and C have no weight. transformers' defaults where a key is absent; embeddings tied unless
    the config says otherwise."""
    n = _positive_int(cfg.get("num_hidden_layers", 32), "num_hidden_layers", name)
    hidden = _positive_int(cfg.get("hidden_size", 768), "hidden_size", name)
    inner = cfg.get("intermediate_size")
    if inner is None:
        inner = _positive_int(cfg.get("expand", 2), "expand", name) * hidden
    inner = _positive_int(inner, "intermediate_size", name)
    dt_rank = cfg.get("time_step_rank", "auto")
    if dt_rank == "auto":
        dt_rank = math.ceil(hidden / 16)
    mixer = _validated(Mamba1, name, inner=inner,
                       state_size=_positive_int(cfg.get("state_size", 16), "state_size", name),
                       conv_kernel=_positive_int(cfg.get("conv_kernel", 4), "conv_kernel", name),
                       dt_rank=_positive_int(dt_rank, "time_step_rank", name),
                       conv_bias=bool(cfg.get("use_conv_bias", True)), proj_bias=bool(cfg.get("use_bias", False)),
                       dt_bc_norms=False)
    return _attention_free(cfg, name, mixer, hidden, n, tie_default=True, vocab_default=50280)


def _mamba2(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Mamba2 (vLLM's ``models/mamba2.py``, ``Mamba2ForCausalLM``: Mamba-Codestral): attention-free, every layer an
    RMSNorm and a ``MambaMixer2`` of ``num_heads × head_dim`` channels with its gated RMSNorm, ``n_groups`` groups
    of B and C. transformers refuses a config whose ``expand × hidden_size`` is not that width, and vLLM sizes the
    state from the one and the mixer from the other, so kvprof refuses it too. transformers' defaults where a key
    is absent; embeddings untied unless the config ties them."""
    n = _positive_int(cfg.get("num_hidden_layers", 64), "num_hidden_layers", name)
    hidden = _positive_int(cfg.get("hidden_size", 4096), "hidden_size", name)
    inner = _positive_int(cfg.get("expand", 2), "expand", name) * hidden
    mixer = _validated(Mamba2, name, num_heads=_positive_int(cfg.get("num_heads", 128), "num_heads", name),
                       head_dim=_positive_int(cfg.get("head_dim", 64), "head_dim", name),
                       n_groups=_positive_int(cfg.get("n_groups", 8), "n_groups", name),
                       state_size=_positive_int(cfg.get("state_size", 128), "state_size", name),
                       conv_kernel=_positive_int(cfg.get("conv_kernel", 4), "conv_kernel", name),
                       conv_bias=bool(cfg.get("use_conv_bias", True)), proj_bias=bool(cfg.get("use_bias", False)),
                       ssm_cache_dtype="auto")
    for key, width in (("expand × hidden_size", inner), ("intermediate_size", cfg.get("intermediate_size", inner))):
        if width != mixer.inner:
            raise UnsupportedArchitecture(f"{name}: {key} ({width!r}) differs from num_heads × head_dim "
                                          f"({mixer.inner}), the mixer's width; transformers refuses such a config")
    if mixer.num_heads % mixer.n_groups:
        raise UnsupportedArchitecture(f"{name}: {mixer.num_heads} Mamba2 heads cannot be split into n_groups "
                                      f"{mixer.n_groups} groups")
    return _attention_free(cfg, name, mixer, hidden, n, tie_default=False, vocab_default=32768)


def _olmo_hybrid(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """OLMo Hybrid (vLLM's ``models/olmo_hybrid.py``): gated DeltaNet (``linear_attention``) or attention
    (``full_attention``: heads of ``hidden_size / num_attention_heads``, q and k RMSNorms over every head together,
    RoPE where ``rope_parameters`` has a theta) on each layer, then a gated MLP; two norms a layer. Without
    ``layer_types`` every fourth layer attends (transformers' OlmoHybridConfig, at least one); the DeltaNet's heads
    default to the attention heads, its key width to ¾ of the hidden size over them and its value width to twice
    that. The SSM state is cached in the model dtype."""
    n = _positive_int(cfg.get("num_hidden_layers", 32), "num_hidden_layers", name)
    explicit = cfg.get("layer_types")
    if explicit is not None:
        if not isinstance(explicit, list) or len(explicit) != n or not set(explicit) <= _QWEN3_NEXT_LAYERS.keys():
            raise UnsupportedArchitecture(f"{name}: layer_types must be {n} of linear_attention and full_attention")
        kinds = [_QWEN3_NEXT_LAYERS[t] for t in explicit]
    else:
        kinds = ["full_attention" if i % 4 == 3 else "recurrent" for i in range(n)]
        if "full_attention" not in kinds:
            kinds[-1] = "full_attention"
    if "full_attention" not in kinds or "recurrent" not in kinds:
        raise UnsupportedArchitecture(f"{name}: OLMo Hybrid needs both linear_attention and full_attention layers "
                                      "(transformers refuses either alone)")
    if cfg.get("attention_bias"):
        raise UnsupportedArchitecture(f"{name}: attention_bias true: vLLM's OLMo Hybrid builds no attention bias")
    hidden = _positive_int(cfg.get("hidden_size", 3840), "hidden_size", name)
    heads = _positive_int(cfg.get("num_attention_heads", 30), "num_attention_heads", name)
    k_heads = _positive_int(cfg.get("linear_num_key_heads") or heads, "linear_num_key_heads", name)
    v_heads = _positive_int(cfg.get("linear_num_value_heads") or heads, "linear_num_value_heads", name)
    k_dim = _positive_int(cfg.get("linear_key_head_dim") or int(0.75 * hidden / k_heads), "linear_key_head_dim", name)
    v_dim = _positive_int(cfg.get("linear_value_head_dim") or 2 * k_dim, "linear_value_head_dim", name)
    gdn = _validated(GatedDeltaNet, name, num_k_heads=k_heads, num_v_heads=v_heads, head_k_dim=k_dim,
                     head_v_dim=v_dim, conv_kernel=cfg.get("linear_conv_kernel_dim", 4), ssm_cache_dtype="auto")
    if hidden % heads:
        raise UnsupportedArchitecture(f"{name}: hidden_size {hidden} is not a whole number of {heads} heads")
    rope = cfg.get("rope_parameters")
    with_rope = isinstance(rope, dict) and rope.get("rope_theta") is not None
    return dict(layer_types=tuple(kinds), recurrent=gdn, qk_norm=True, qk_norm_per_layer=True, head_dim=hidden // heads,
                rotary_fraction=1.0 if with_rope else 0.0)


_ZAMBA2_LAYERS = {"mamba": "recurrent", "linear_attention": "recurrent", "hybrid": "parallel_hybrid"}


def _zamba2(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Zamba2 (vLLM's ``models/zamba2.py``): a Mamba2 mixer on every layer; on the ``hybrid`` layers of
    ``layers_block_type`` one of ``num_mem_blocks`` shared transformer blocks runs first (multi-head attention of
    ``attention_head_dim`` over ``2 × hidden_size``, a GELU-gated MLP), each hybrid layer with its own KV cache,
    ``linear`` projection and adapters (:class:`SharedBlocks`). The mixer's heads are ``mamba_expand × hidden /
    n_mamba_heads`` wide, which ``mamba_headdim`` (vLLM's state shape) must equal; RoPE only with
    ``use_mem_rope``; the SSM state in the model dtype."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    hidden = _positive_int(cfg.get("hidden_size"), "hidden_size", name)
    types = cfg.get("layers_block_type")
    if not isinstance(types, list) or len(types) != n or not all(isinstance(t, str) and t in _ZAMBA2_LAYERS
                                                                  for t in types):
        raise UnsupportedArchitecture(f"{name}: layers_block_type must list {n} layers of mamba (or "
                                      f"linear_attention) and hybrid; got {types!r}")
    kinds = tuple(_ZAMBA2_LAYERS[t] for t in types)
    hybrid_ids = [i for i, k in enumerate(kinds) if k == "parallel_hybrid"]
    if not hybrid_ids:
        raise UnsupportedArchitecture(f"{name}: a Zamba2 without hybrid layers (none attends)")
    if cfg.get("hybrid_layer_ids") is not None and cfg["hybrid_layer_ids"] != hybrid_ids:
        raise UnsupportedArchitecture(f"{name}: hybrid_layer_ids {cfg['hybrid_layer_ids']!r} disagrees with "
                                      f"layers_block_type's hybrid layers {hybrid_ids}")
    if cfg.get("hidden_act", "gelu") != "gelu":
        raise UnsupportedArchitecture(f"{name}: hidden_act {cfg['hidden_act']!r}: vLLM's Zamba2 MLP runs gelu only")
    heads = _positive_int(cfg.get("num_attention_heads", 32), "num_attention_heads", name)
    width = _positive_int(cfg.get("attention_hidden_size", 2 * hidden), "attention_hidden_size", name)
    head_dim = _positive_int(cfg.get("attention_head_dim", width // heads), "attention_head_dim", name)
    if width != 2 * hidden or head_dim * heads != width:
        raise UnsupportedArchitecture(f"{name}: attention_hidden_size {width!r} and attention_head_dim {head_dim!r}: "
                                      f"vLLM's Zamba2 attends over 2 × hidden_size ({2 * hidden}) in heads that "
                                      "fill it")
    if cfg.get("num_key_value_heads") not in (None, heads):
        raise UnsupportedArchitecture(f"{name}: num_key_value_heads {cfg['num_key_value_heads']!r}: vLLM's Zamba2 "
                                      f"attention has as many KV heads as heads ({heads})")
    inner = _positive_int(cfg.get("mamba_expand", 2), "mamba_expand", name) * hidden
    m_heads = _positive_int(cfg.get("n_mamba_heads", 8), "n_mamba_heads", name)
    m_dim = _positive_int(cfg.get("mamba_headdim", inner // m_heads), "mamba_headdim", name)
    if m_dim * m_heads != inner:
        raise UnsupportedArchitecture(f"{name}: mamba_headdim {m_dim!r} × n_mamba_heads {m_heads} differs from the "
                                      f"mixer's width mamba_expand × hidden_size ({inner})")
    mamba = _validated(Mamba2, name, num_heads=m_heads, head_dim=m_dim, n_groups=cfg.get("mamba_ngroups", 1),
                       state_size=cfg.get("mamba_d_state", 64), conv_kernel=cfg.get("mamba_d_conv", 4),
                       conv_bias=bool(cfg.get("use_conv_bias", True)), proj_bias=bool(cfg.get("add_bias_linear")),
                       ssm_cache_dtype="auto")
    shared = _validated(SharedBlocks, name, blocks=cfg.get("num_mem_blocks", 1),
                        adapter_rank=cfg.get("adapter_rank", 128),
                        attention_adapters=bool(cfg.get("use_shared_attention_adapter")),
                        mlp_bias=bool(cfg.get("add_bias_linear")))
    hybrid = dict(num_layers=n, layer_types=kinds, recurrent=mamba, shared_blocks=shared, mlp_layers=(),
                  mlp_gated=True, qkv_bias=False, o_bias=False, mlp_bias=shared.mlp_bias, norms_per_layer=1,
                  qk_norm=False, head_dim=head_dim, rotary_fraction=1.0 if cfg.get("use_mem_rope") else 0.0)
    return {**cfg, "num_hidden_layers": n, "hidden_size": hidden, "num_attention_heads": heads,
            "num_key_value_heads": heads, "head_dim": head_dim,
            "intermediate_size": cfg.get("intermediate_size", 4 * hidden),
            "tie_word_embeddings": cfg.get("tie_word_embeddings", True)}, hybrid


def _qwen3_next_text(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    hybrid = _qwen3_next(cfg, name)
    if cfg.get("model_type") == "qwen3_5_moe_text" and cfg.get("intermediate_size") is None:
        cfg = {**cfg, "intermediate_size": cfg.get("moe_intermediate_size")}  # no dense MLP: every layer MoE
    return cfg, hybrid
