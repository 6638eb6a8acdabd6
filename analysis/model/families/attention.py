"""Config readers of the attention-only families whose layers differ from a plain decoder's: sparse and
compressed attention (DeepSeek-V3.2, GLM-5, DeepSeek-V4), sliding patterns (MiMo-V2, Gemma-4, EXAONE 4, Command
R7B), chunked attention (Llama 4), NAS blocks, and the families whose biases, norms or experts vLLM builds its own
way (MiniMax-M2, GLM-4/4.5/4.7-Flash, Granite MoE, OLMo 2 and OLMoE, ERNIE 4.5, Qwen2-MoE, DBRX).
"""

from __future__ import annotations

from typing import Any

from analysis.model.parts import (
    MAX_INTERMEDIATE_SIZE,
    MAX_POSITIONS,
    CompressedAttention,
    LayerType,
    MoE,
    SparseIndexer,
    UnsupportedArchitecture,
    _flags,
    _fraction,
    _moe,
    _positive_int,
    _positive_number,
    _validated,
    dtype_bytes,
)
from analysis.model.quantization import (
    AnyScheme,
    DeepseekV4Fp8,
    Fp8,
)


def _dbrx_keys(cfg: dict[str, Any]) -> dict[str, Any]:
    """DBRX's config.json nests its attention and FFN facts (``DbrxConfig``: d_model, n_heads, n_layers, max_seq_len,
    attn_config.kv_n_heads, ffn_config.ffn_hidden_size / moe_num_experts / moe_top_k), read by vLLM's
    ``models/dbrx.py`` as these: the standard names here, so the rest reads it as any Mixtral-style MoE (a fused Wqkv
    and out_proj without biases, a bias-free router, w1/v1/w2 gated experts, two norms a layer)."""
    attn, ffn = cfg.get("attn_config") or {}, cfg.get("ffn_config") or {}
    flat = {"num_hidden_layers": cfg.get("n_layers"), "hidden_size": cfg.get("d_model"),
            "num_attention_heads": cfg.get("n_heads"), "num_key_value_heads": attn.get("kv_n_heads"),
            "max_position_embeddings": cfg.get("max_seq_len"), "rope_theta": attn.get("rope_theta"),
            "intermediate_size": ffn.get("ffn_hidden_size"), "num_local_experts": ffn.get("moe_num_experts"),
            "num_experts_per_tok": ffn.get("moe_top_k")}
    return {**cfg, **{k: v for k, v in flat.items() if v is not None}}


def _sparse_indexer(cfg: dict[str, Any], n: int, name: str) -> SparseIndexer:
    """DeepSeek Sparse Attention (``deepseek_v32``, ``glm_moe_dsa``; vLLM's ``DeepseekV2Attention`` with
    ``index_topk``): which layers have an indexer (GLM-5.2's IndexCache: a layer skips it where
    ``max(i − index_skip_topk_offset + 1, 0) % index_topk_freq != 0``, or where ``index_topk_pattern[i]`` is "S"),
    its heads and its top-k. GLM's ``indexer_types`` and ``mlp_layer_types``, which vLLM does not read, must say
    what vLLM builds, or the config is refused."""
    if cfg.get("q_lora_rank") is None:
        raise UnsupportedArchitecture(f"{name}: a sparse-attention indexer without q_lora_rank (vLLM's indexer "
                                      "projects the query's latent)")
    freq = _positive_int(cfg.get("index_topk_freq", 1), "index_topk_freq", name)
    offset = cfg.get("index_skip_topk_offset", 2)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise UnsupportedArchitecture(f"{name}: index_skip_topk_offset must be an integer >= 0, got {offset!r}")
    pattern = cfg.get("index_topk_pattern")
    if pattern is None:
        layers = tuple(i for i in range(n) if max(i - offset + 1, 0) % freq == 0)
    elif isinstance(pattern, (str, list)) and all(p in ("S", "F") for p in pattern):
        layers = tuple(i for i in range(n) if i >= len(pattern) or pattern[i] != "S")
    else:
        raise UnsupportedArchitecture(f"{name}: index_topk_pattern must be S and F per layer, got {pattern!r}")
    types = cfg.get("indexer_types")
    if types is not None and types != ["full" if i in layers else "shared" for i in range(n)]:
        raise UnsupportedArchitecture(f"{name}: indexer_types disagrees with the indexer layers vLLM builds from "
                                      f"index_topk_freq and index_skip_topk_offset ({len(layers)} of {n})")
    mlp_types = cfg.get("mlp_layer_types")
    if mlp_types is not None:
        first, moe_freq = int(cfg.get("first_k_dense_replace") or 0), int(cfg.get("moe_layer_freq") or 1)
        if mlp_types != ["sparse" if i >= first and i % moe_freq == 0 else "dense" for i in range(n)]:
            raise UnsupportedArchitecture(f"{name}: mlp_layer_types disagrees with the MoE layers vLLM builds from "
                                          "first_k_dense_replace and moe_layer_freq")
    return _validated(SparseIndexer, name, n_heads=cfg.get("index_n_heads"), head_dim=cfg.get("index_head_dim"),
                      topk=cfg.get("index_topk"), layers=layers)


# DeepSeek Sparse Attention's families (vLLM 0.32's models/deepseek_v32 package)
_SPARSE_ATTENTION = ("deepseek_v32", "glm_moe_dsa")


def _sparse_attention_keys(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """The keys transformers 5 writes into GLM-5's configs that vLLM does not read: ``layer_types`` (every layer
    ``deepseek_sparse_attention``, or 5.19's ``indexed_attention``), ``num_experts`` (``n_routed_experts`` again)
    and ``mlp_bias`` (no bias: vLLM's MLPs have none). Read only where they say what vLLM builds anyway; refused by
    name otherwise."""
    n = cfg.get("num_hidden_layers")
    types = cfg.get("layer_types")
    if types is not None and not (isinstance(types, list) and len(types) == (n or 0)
                                  and all(t in ("deepseek_sparse_attention", "indexed_attention") for t in types)):
        raise UnsupportedArchitecture(f"{name}: layer_types other than sparse attention (deepseek_sparse_attention, "
                                      "transformers 5.19's indexed_attention) on every layer (vLLM's DeepSeek-V3.2 "
                                      "model builds that on every layer)")
    if cfg.get("num_experts") not in (None, cfg.get("n_routed_experts")):
        raise UnsupportedArchitecture(f"{name}: num_experts {cfg['num_experts']!r} differs from n_routed_experts "
                                      f"{cfg.get('n_routed_experts')!r}, the count vLLM reads")
    if cfg.get("mlp_bias"):
        raise UnsupportedArchitecture(f"{name}: mlp_bias true: vLLM's DeepSeek-V3.2 MLPs have no bias")
    return {k: v for k, v in cfg.items() if k not in ("layer_types", "num_experts", "mlp_bias")}


def _minimax_m2(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """MiniMax-M2 (vLLM's ``models/minimax_m2.py``): full GQA attention on every layer with RMSNorms over all the
    query heads and all the key heads (``qk_norm_type`` per_layer; vLLM builds them whatever ``use_qk_norm``
    says), RoPE over ``rotary_dim`` of a head, and a MoE of ``num_local_experts`` gated experts of
    ``intermediate_size`` on every layer (a float32 router and, with ``use_routing_bias``, a float32 score bias).
    The MTP modules past the decoder are not loaded. What vLLM's model does not build is refused by name: a shared
    expert, a sliding window, an attention type other than full (``attn_type_list`` 1)."""
    heads = _positive_int(cfg.get("num_attention_heads"), "num_attention_heads", name)
    head_dim = _positive_int(cfg.get("head_dim") or _positive_int(cfg.get("hidden_size"), "hidden_size", name) // heads,
                             "head_dim", name)
    if cfg.get("qk_norm_type", "per_layer") != "per_layer":
        raise UnsupportedArchitecture(f"{name}: qk_norm_type {cfg['qk_norm_type']!r}: vLLM's MiniMax-M2 builds "
                                      "per_layer q/k norms")
    if cfg.get("shared_intermediate_size"):
        raise UnsupportedArchitecture(f"{name}: shared_intermediate_size {cfg['shared_intermediate_size']!r}: "
                                      "vLLM's MiniMax-M2 builds no shared expert")
    if cfg.get("sliding_window") is not None:
        raise UnsupportedArchitecture(f"{name}: sliding_window {cfg['sliding_window']!r}: vLLM's MiniMax-M2 builds "
                                      "full attention on every layer")
    kinds = cfg.get("attn_type_list")
    if kinds is not None and (not isinstance(kinds, list) or any(k != 1 for k in kinds)):
        raise UnsupportedArchitecture(f"{name}: attn_type_list other than 1 (full attention) on every layer")
    rotary = _positive_int(cfg.get("rotary_dim", head_dim), "rotary_dim", name)
    if rotary > head_dim:
        raise UnsupportedArchitecture(f"{name}: rotary_dim {rotary} exceeds head_dim {head_dim}")
    moe = _validated(MoE, name, num_experts=cfg.get("num_local_experts"),
                     experts_per_token=cfg.get("num_experts_per_tok"),
                     expert_intermediate_size=cfg.get("intermediate_size"),
                     router_bias=bool(cfg.get("use_routing_bias")), dense_layers=(), router_fp32=True)
    return dict(qk_norm=True, qk_norm_per_layer=True, rotary_fraction=rotary / head_dim, moe=moe)


def _mimo_v2(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """MiMo-V2-Flash (vLLM's ``models/mimo_v2.py``): layer ``i`` is sliding-window attention where
    ``hybrid_layer_pattern[i]`` is 1 (``swa_num_key_value_heads`` of ``swa_head_dim``, a window of
    ``sliding_window_size``, an attention sink a head with ``add_swa_attention_sink_bias``), full attention
    elsewhere (``num_key_value_heads`` of ``head_dim``); both cache V of ``v_head_dim`` beside the wider K (vLLM's
    ``head_size_v``). A layer is MoE where ``moe_layer_freq[i]`` is 1 (``n_routed_experts`` of
    ``moe_intermediate_size``, a float32 router and score bias, no shared expert), a dense MLP otherwise. RoPE over
    ``partial_rotary_factor`` of a head, one cache a layer kind's theta."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    pattern = _flags(cfg.get("hybrid_layer_pattern"), n, "hybrid_layer_pattern", name)
    freq = cfg.get("moe_layer_freq", 1)
    moe_layers = [0] * n if isinstance(freq, int) and not isinstance(freq, bool) else _flags(freq, n,
                                                                                             "moe_layer_freq", name)
    heads = _positive_int(cfg.get("num_attention_heads"), "num_attention_heads", name)
    if _positive_int(cfg.get("swa_num_attention_heads", heads), "swa_num_attention_heads", name) != heads:
        raise UnsupportedArchitecture(f"{name}: swa_num_attention_heads differs from num_attention_heads: query heads "
                                      "of two widths a layer kind are not modelled")
    full = (_positive_int(cfg.get("num_key_value_heads"), "num_key_value_heads", name),
            _positive_int(cfg.get("head_dim"), "head_dim", name))
    swa = (_positive_int(cfg.get("swa_num_key_value_heads"), "swa_num_key_value_heads", name),
           _positive_int(cfg.get("swa_head_dim"), "swa_head_dim", name))
    v_dim = _positive_int(cfg.get("v_head_dim") or full[1], "v_head_dim", name)
    if _positive_int(cfg.get("swa_v_head_dim") or swa[1], "swa_v_head_dim", name) != v_dim:
        raise UnsupportedArchitecture(f"{name}: swa_v_head_dim differs from v_head_dim: V of two widths is not "
                                      "modelled")
    window = cfg.get("sliding_window_size", -1)
    if 1 in pattern and (not isinstance(window, int) or isinstance(window, bool) or window <= 0):
        raise UnsupportedArchitecture(f"{name}: sliding_window_size {window!r}: sliding layers need a window")
    if cfg.get("add_full_attention_sink_bias"):
        raise UnsupportedArchitecture(f"{name}: add_full_attention_sink_bias true: vLLM 0.32's MiMo-V2 builds sinks "
                                      "on the sliding layers only")
    if cfg.get("hidden_act", "silu") != "silu" or cfg.get("n_shared_experts"):
        raise UnsupportedArchitecture(f"{name}: vLLM 0.32's MiMo-V2 runs silu experts without a shared expert")
    if cfg.get("moe_router_dtype", "float32") not in ("float32", "bfloat16", "float16"):
        raise UnsupportedArchitecture(f"{name}: moe_router_dtype {cfg['moe_router_dtype']!r} is not read")
    factor = _fraction(cfg.get("partial_rotary_factor", 1.0), "partial_rotary_factor", name)
    types = tuple("sliding_attention" if p else "full_attention" for p in pattern)
    # transformers 5 also writes what vLLM reads from the two patterns: they must agree
    for key, written, built in (("layer_types", cfg.get("layer_types"), list(types)),
                                ("mlp_layer_types", cfg.get("mlp_layer_types"),
                                 ["sparse" if f else "dense" for f in moe_layers])):
        if written is not None and written != built:
            raise UnsupportedArchitecture(f"{name}: {key} disagrees with the layers vLLM builds from "
                                          "hybrid_layer_pattern and moe_layer_freq")
    moe = None
    if any(moe_layers):
        moe = _validated(MoE, name, num_experts=cfg.get("n_routed_experts"),
                         experts_per_token=cfg.get("num_experts_per_tok"),
                         expert_intermediate_size=cfg.get("moe_intermediate_size"),
                         dense_layers=tuple(i for i, f in enumerate(moe_layers) if not f), router_bias=True,
                         router_fp32=cfg.get("moe_router_dtype", "float32") == "float32")
    max_pos = _positive_int(cfg.get("max_position_embeddings", 32768), "max_position_embeddings", name)
    for key in ("rope_theta", "swa_rope_theta"):
        if key in cfg and _positive_number(cfg[key]) is None:
            raise UnsupportedArchitecture(f"{name}: {key} must be a positive number, got {cfg[key]!r}")
    caches = {(theta, int(dim * factor)) for kind, theta, dim in
              (("full_attention", cfg.get("rope_theta", 1000000), full[1]),
               ("sliding_attention", cfg.get("swa_rope_theta", cfg.get("rope_theta", 1000000)), swa[1]))
              if kind in types}  # get_rope keeps one cache a distinct configuration
    hybrid = dict(layer_types=types, full_attention_kv=full, v_head_dim=v_dim,
                  sliding_attention_sinks=bool(cfg.get("add_swa_attention_sink_bias")) and 1 in pattern,
                  rotary_fraction=factor, moe=moe, rope_cache_positions=(max_pos,) * len(caches),
                  rope_cache_widths=tuple(sorted(w for _, w in caches)))
    return {**cfg, "num_key_value_heads": swa[0], "head_dim": swa[1], "sliding_window": window,
            "layer_types": list(types)}, hybrid


def _glm4_moe(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """GLM-4.5 / 4.6 / 4.7 (``glm4_moe``; vLLM's ``models/glm4_moe.py``): GQA attention with a q/k/v bias where
    ``attention_bias`` (none on o_proj), q/k norms where ``use_qk_norm``, RoPE over ``partial_rotary_factor`` of a head
    (vLLM's default 0.5); a dense MLP on the first ``first_k_dense_replace`` layers, then ``n_routed_experts`` experts
    of ``moe_intermediate_size`` beside ``n_shared_experts`` of them fused into one shared MLP, behind a float32 router
    with a float32 score bias. The MTP layers past the decoder load only for speculative decoding."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    factor = _fraction((rope.get("partial_rotary_factor") if isinstance(rope, dict) else None)
                       or cfg.get("partial_rotary_factor", 0.5), "partial_rotary_factor", name)
    if cfg.get("hidden_act", "silu") != "silu":
        raise UnsupportedArchitecture(f"{name}: hidden_act {cfg['hidden_act']!r}: vLLM's GLM-4 MoE runs silu")
    out = dict(qk_norm=bool(cfg.get("use_qk_norm")), o_bias=False, rotary_fraction=factor)
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    moe = _moe(cfg, "glm4_moe", n, 0, name)
    if moe is not None:
        out["moe"] = moe.model_copy(update={"router_bias": True, "router_fp32": True})
    return out


_GEMMA4_LAYERS = ("sliding_attention", "full_attention")


def _gemma4(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Gemma-4's decoder (``gemma4_text``; vLLM's ``models/gemma4.py``, its per-layer shapes from transformers'
    ``Gemma4TextConfig``): sliding layers of ``num_key_value_heads`` × ``head_dim`` and global layers of
    ``global_head_dim`` (default 512) with ``num_global_key_value_heads`` where ``attention_k_eq_v`` (vLLM still
    allocates the V slot of their QKV projection and caches V); the last layer forced global; q and k norms; a dense
    gated MLP on every layer and, where ``num_experts`` is set, experts beside it (here a shared expert of the
    dense MLP's width) behind a router with learned input and expert scales, with seven norms a layer instead of four.
    The sliding RoPE cache spans head_dim, the global ``proportional`` one the whole global head. Per-layer input
    embeddings (E2B, E4B), KV-shared layers and bidirectional attention are refused by name."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    if cfg.get("hidden_size_per_layer_input"):
        raise UnsupportedArchitecture(f"{name}: hidden_size_per_layer_input {cfg['hidden_size_per_layer_input']!r}: "
                                      "Gemma-4's per-layer input embeddings (E2B, E4B) are not modelled")
    if cfg.get("num_kv_shared_layers"):
        raise UnsupportedArchitecture(f"{name}: num_kv_shared_layers {cfg['num_kv_shared_layers']!r}: layers that "
                                      "reuse an earlier layer's KV cache are not modelled")
    if cfg.get("use_bidirectional_attention") not in (None, "vision"):
        raise UnsupportedArchitecture(f"{name}: use_bidirectional_attention {cfg['use_bidirectional_attention']!r}: "
                                      "only causal text attention (None or \"vision\") is modelled")
    types = cfg.get("layer_types")
    if types is None:  # transformers' default: five sliding layers, then a global one
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    if not isinstance(types, list) or len(types) != n or any(t not in _GEMMA4_LAYERS for t in types):
        raise UnsupportedArchitecture(f"{name}: layer_types must list num_hidden_layers ({n}) of "
                                      f"{' and '.join(_GEMMA4_LAYERS)}")
    types = [*types[:-1], "full_attention"]  # Gemma4TextConfig forces the last layer global
    kv = _positive_int(cfg.get("num_key_value_heads", 4), "num_key_value_heads", name)
    head_dim = _positive_int(cfg.get("head_dim", 256), "head_dim", name)
    global_dim = _positive_int(cfg.get("global_head_dim", 512), "global_head_dim", name)
    global_kv = cfg.get("num_global_key_value_heads") if cfg.get("attention_k_eq_v") else None
    global_kv = kv if global_kv is None else _positive_int(global_kv, "num_global_key_value_heads", name)
    moe = None
    if cfg.get("num_experts") is not None:
        if cfg.get("moe_intermediate_size") is None:  # vLLM's getattr_iter stops at the field transformers sets
            raise UnsupportedArchitecture(f"{name}: num_experts without moe_intermediate_size: vLLM 0.32's Gemma-4 "
                                          "stops at \"Gemma4 MoE requires an expert intermediate size\"")
        moe = _validated(MoE, name, num_experts=cfg["num_experts"], experts_per_token=cfg.get("top_k_experts"),
                         expert_intermediate_size=cfg["moe_intermediate_size"], shared_experts=1,
                         shared_expert_intermediate_size=cfg.get("intermediate_size", 9216), router_scale=True)
    positions, widths = [], []
    max_pos = cfg.get("max_position_embeddings", 131072)
    rope = cfg.get("rope_parameters") or {}
    for kind, dim in (("full_attention", global_dim), ("sliding_attention", head_dim)):
        if kind not in types:
            continue
        rp = rope.get(kind) if isinstance(rope, dict) else None
        rope_type = rp.get("rope_type", "default") if isinstance(rp, dict) else None
        if rope_type not in ("default", "proportional"):
            raise UnsupportedArchitecture(f"{name}: rope_parameters.{kind} {rp!r}: kvprof reads Gemma-4's default and "
                                          "proportional RoPE per layer type")
        factor = _fraction(rp.get("partial_rotary_factor", 1.0), f"rope_parameters.{kind}.partial_rotary_factor", name)
        positions.append(_positive_int(max_pos, "max_position_embeddings", name))
        widths.append(dim if rope_type == "proportional" else int(dim * factor))  # Gemma4RotaryEmbedding: the head
    hybrid = dict(layer_types=tuple(types), full_attention_kv=(global_kv, global_dim), qk_norm=True,
                  norms_per_layer=7 if moe else 4, moe=moe, rope_cache_positions=tuple(positions),
                  rope_cache_widths=tuple(widths))
    return {**cfg, "num_key_value_heads": kv, "head_dim": head_dim, "layer_types": types}, hybrid


# Keys of a NAS model's block_configs entries (the remote DeciLMConfig's AttentionConfig and FFNConfig) and the value
# each must have where vLLM's nemotron_nas.py ignores it (a linear replacement, sparsity, sinks or a window it would
# not build: the checkpoint's weights or cache would differ from what vLLM builds).
_NAS_ATTENTION = {"n_heads_in_group": None, "no_op": None, "replace_with_linear": False, "sparsify": None,
                  "num_sink_tokens": None, "unshifted_sink": False, "use_prefill_window_in_sink_attention": False,
                  "window_length": None}


_NAS_FFN = {"ffn_mult": None, "intermediate_size": None, "no_op": None, "replace_with_linear": False,
            "sparsify": None, "hidden_act": None}


def _nas_block(block: Any, i: int, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(block, dict) or not isinstance(block.get("attention"), dict) or not isinstance(
            block.get("ffn"), dict):
        raise UnsupportedArchitecture(f"{name}: block_configs[{i}] must hold an \"attention\" and an \"ffn\" object")
    unread = sorted(set(block) - {"attention", "ffn"})
    if unread:
        raise UnsupportedArchitecture(f"{name}: block_configs[{i}] keys {', '.join(unread)} are not read by kvprof's "
                                      "nemotron-nas reader")
    for part, known in (("attention", _NAS_ATTENTION), ("ffn", _NAS_FFN)):
        sub = block[part]
        unread = sorted(set(sub) - set(known))
        if unread:
            raise UnsupportedArchitecture(f"{name}: block_configs[{i}].{part} "
                                          f"{'key' if len(unread) == 1 else 'keys'} {', '.join(unread)} not read by "
                                          "kvprof's nemotron-nas reader")
        for key, required in known.items():
            if key in ("n_heads_in_group", "no_op", "ffn_mult", "intermediate_size", "hidden_act"):
                continue
            if sub.get(key, required) != required:
                raise UnsupportedArchitecture(
                    f"{name}: block_configs[{i}].{part}.{key} is {sub[key]!r}; vLLM 0.32's DeciLM builds a plain "
                    f"{part} there, so the checkpoint's weights or cache are not what it builds")
        if not isinstance(sub.get("no_op", False), bool):
            raise UnsupportedArchitecture(f"{name}: block_configs[{i}].{part}.no_op must be true or false")
    return block["attention"], block["ffn"]


def _nemotron_nas(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Llama-Nemotron's NAS models (``nemotron-nas``, vLLM's ``models/nemotron_nas.py`` DeciLM): Llama layers whose
    ``block_configs[i]`` removes the attention (``no_op``: no KV cache, no input norm) or the MLP (no post-attention
    norm), gives the attention ``num_attention_heads / n_heads_in_group`` KV heads and the MLP a width of
    ``int(2 · ffn_mult · hidden / 3)`` rounded up to a multiple of 256 (``_ffn_mult_to_intermediate_size``), or its
    own ``intermediate_size``. Attention layers with different KV heads are refused (their pages would differ)."""
    blocks = cfg.get("block_configs")
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    if not isinstance(blocks, list) or len(blocks) != n:
        raise UnsupportedArchitecture(f"{name}: block_configs must be a list of num_hidden_layers ({n}) blocks")
    hidden = _positive_int(cfg.get("hidden_size"), "hidden_size", name)
    heads = _positive_int(cfg.get("num_attention_heads"), "num_attention_heads", name)
    kinds, sizes, norms, groups = [], [], [], set()
    for i, block in enumerate(blocks):
        attention, ffn = _nas_block(block, i, name)
        if attention.get("no_op", False):
            kinds.append("mlp")
        else:
            group = _positive_int(attention.get("n_heads_in_group"), f"block_configs[{i}].attention.n_heads_in_group",
                                  name)
            if heads % group:
                raise UnsupportedArchitecture(f"{name}: block_configs[{i}]: {heads} heads do not split into groups of "
                                              f"{group}")
            groups.add(group)
            kinds.append("full_attention")
        if ffn.get("no_op", False):
            sizes.append(0)
        else:
            act = ffn.get("hidden_act", cfg.get("hidden_act", "silu"))
            if act != "silu":
                raise UnsupportedArchitecture(f"{name}: block_configs[{i}].ffn hidden_act {act!r}: vLLM's LlamaMLP "
                                              "runs silu only")
            mult = ffn.get("ffn_mult")
            if isinstance(mult, int | float) and not isinstance(mult, bool) and 0 < mult <= MAX_INTERMEDIATE_SIZE:
                width = int(2 * mult * hidden / 3)
                sizes.append(width if width % 256 == 0 else width + 256 - width % 256)
            else:
                sizes.append(_positive_int(ffn.get("intermediate_size"), f"block_configs[{i}].ffn ffn_mult or "
                                           "intermediate_size", name))
        norms.append((kinds[-1] != "mlp") + (sizes[-1] > 0))
    if len(groups) > 1:
        raise UnsupportedArchitecture(f"{name}: block_configs give attention layers different n_heads_in_group "
                                      f"({', '.join(map(str, sorted(groups)))}): their KV pages differ, a mix kvprof "
                                      "does not plan")
    kv_heads = heads // groups.pop() if groups else heads
    hybrid = dict(num_layers=n, layer_types=tuple(kinds), mlp_sizes=tuple(sizes), layer_norms=tuple(norms),
                  mlp_layers=None if all(sizes) else tuple(i for i, w in enumerate(sizes) if w))
    return {**cfg, "num_key_value_heads": kv_heads, "intermediate_size": max(sizes)}, hybrid


def _llama4(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Llama 4's decoder (vLLM's ``models/llama4.py``): a layer's attention is chunked local attention where
    ``no_rope_layers[i]`` is 1 (its RoPE layers; transformers' default: all but every ``no_rope_layer_interval``-th),
    full attention without RoPE elsewhere; q/k are L2-normalised (no weights). A layer is MoE where
    ``(i + 1) % interleave_moe_layer_step == 0``: a sigmoid router, one shared expert and ``num_local_experts`` gated
    experts of ``intermediate_size``, one a token; the other layers a dense MLP of ``intermediate_size_mlp``."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    interval = _positive_int(cfg.get("no_rope_layer_interval", 4), "no_rope_layer_interval", name)
    no_rope = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
    if len(no_rope) != n or not set(no_rope) <= {0, 1}:
        raise UnsupportedArchitecture(f"{name}: no_rope_layers must be {n} of 0 and 1, got {no_rope!r}")
    chunk = cfg.get("attention_chunk_size", 8192)
    if chunk is not None:
        chunk = _positive_int(chunk, "attention_chunk_size", name)
    kinds = tuple("chunked_attention" if r and chunk else "full_attention" for r in no_rope)
    if cfg.get("layer_types") is not None and cfg["layer_types"] != list(kinds):
        raise UnsupportedArchitecture(f"{name}: layer_types disagrees with the chunked and full layers vLLM builds "
                                      "from no_rope_layers and attention_chunk_size (transformers 5 writes both)")
    step = _positive_int(cfg.get("interleave_moe_layer_step", 1), "interleave_moe_layer_step", name)
    moe_at = [i for i in range(n) if (i + 1) % step == 0]
    if cfg.get("moe_layers") is not None and sorted(cfg["moe_layers"]) != moe_at:
        raise UnsupportedArchitecture(f"{name}: moe_layers {cfg['moe_layers']!r}: vLLM's Llama 4 places its MoE layers "
                                      f"by interleave_moe_layer_step ({step}) alone, so kvprof refuses a config where "
                                      "they differ")
    inter = _positive_int(cfg.get("intermediate_size"), "intermediate_size", name)
    _positive_int(cfg.get("intermediate_size_mlp"), "intermediate_size_mlp", name)
    moe = _validated(MoE, name, num_experts=cfg.get("num_local_experts"),
                     experts_per_token=cfg.get("num_experts_per_tok"), expert_intermediate_size=inter, shared_experts=1,
                     shared_expert_intermediate_size=inter, dense_layers=tuple(i for i in range(n) if i not in moe_at))
    return dict(layer_types=kinds, attention_chunk_size=chunk if "chunked_attention" in kinds else None, moe=moe,
                qk_norm=False)


_DSV4_RATIOS = {0: 1, 1: 1, 4: 4, 128: 128}


def _deepseek_v4(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """DeepSeek-V4 (``deepseek_v4``; vLLM 0.32's ``DeepseekV4ForCausalLM``, models/deepseek_v4/): every layer's
    attention keeps one ``head_dim`` latent row a token (a single KV head) over a sliding window, and where
    ``compress_ratios[i]`` is 4 or 128 a compressed cache beside it (analysis.model.layers.CompressedSparseAttention);
    ``hc_mult`` hyper-connection streams around each block; every layer's MLP is ``n_routed_experts`` experts of
    ``moe_intermediate_size`` beside ``n_shared_experts`` shared ones, the first ``num_hash_layers`` routed by token id.
    ``compress_ratios`` runs past the decoder over the MTP layers (vLLM reads the decoder's entries). A vision tower
    (``vision_n_layers``) is refused by name."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    if cfg.get("hidden_act", "silu") != "silu":
        raise UnsupportedArchitecture(f"{name}: hidden_act {cfg['hidden_act']!r}: vLLM's DeepSeek-V4 runs silu")
    if cfg.get("vision_n_layers"):
        raise UnsupportedArchitecture(f"{name}: vision_n_layers {cfg['vision_n_layers']!r}: DeepSeek-V4's vision "
                                      "tower is not modelled")
    if cfg.get("num_key_value_heads", 1) != 1:
        raise UnsupportedArchitecture(f"{name}: num_key_value_heads {cfg['num_key_value_heads']!r}: DeepSeek-V4's "
                                      "attention caches one latent row a token (vLLM builds one KV head)")
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < n or any(
            type(r) is not int or r not in _DSV4_RATIOS for r in ratios):
        raise UnsupportedArchitecture(f"{name}: compress_ratios must list 0, 4 or 128 for each of the {n} layers "
                                      f"(vLLM's compressor takes ratios 4 and 128), got {ratios!r}")
    heads = _positive_int(cfg.get("num_attention_heads"), "num_attention_heads", name)
    groups = _positive_int(cfg.get("o_groups"), "o_groups", name)
    if heads % groups:
        raise UnsupportedArchitecture(f"{name}: {heads} attention heads cannot be split into o_groups {groups}")
    head_dim = _positive_int(cfg.get("head_dim"), "head_dim", name)
    attention = _validated(
        CompressedAttention, name, compress_ratios=tuple(_DSV4_RATIOS[r] for r in ratios[:n]), head_dim=head_dim,
        rope_head_dim=cfg.get("qk_rope_head_dim"), window=cfg.get("sliding_window"),
        q_lora_rank=cfg.get("q_lora_rank"), o_lora_rank=cfg.get("o_lora_rank"), o_groups=groups,
        index_n_heads=cfg.get("index_n_heads"), index_head_dim=cfg.get("index_head_dim"),
        index_topk=cfg.get("index_topk"), hc_mult=cfg.get("hc_mult", 1), hash_layers=cfg.get("num_hash_layers", 0))
    if attention.rope_head_dim >= head_dim:
        raise UnsupportedArchitecture(f"{name}: qk_rope_head_dim {attention.rope_head_dim} must be below head_dim "
                                      f"{head_dim}")
    if cfg.get("first_k_dense_replace") or (cfg.get("moe_layer_freq") or 1) != 1:
        raise UnsupportedArchitecture(f"{name}: DeepSeek-V4 builds experts on every layer; first_k_dense_replace and "
                                      "moe_layer_freq are not read by vLLM's model")
    moe = _moe(cfg, "deepseek_v4", n, 0, name)
    if moe is None:
        raise UnsupportedArchitecture(f"{name}: no n_routed_experts: DeepSeek-V4's MLP is its experts")
    # Two float32 RoPE caches (models/deepseek_v4/common/rope.py, DeepseekScalingRotaryEmbedding): the window's
    # over max_position_embeddings, the compressed layers' over original_max_position_embeddings × the YaRN factor;
    # rope_cache_widths count model-dtype elements, so a float32 row of qk_rope_head_dim is that × 4 / its bytes
    mpe = _positive_int(cfg.get("max_position_embeddings"), "max_position_embeddings", name)
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    compressed = mpe
    if isinstance(rope, dict) and rope.get("original_max_position_embeddings") and rope.get("factor"):
        compressed = int(_positive_number(rope["original_max_position_embeddings"]) or mpe) * int(
            _positive_number(rope["factor"]) or 1)
    try:
        width = attention.rope_head_dim * 4 // dtype_bytes(str(cfg.get("torch_dtype") or cfg.get("dtype") or
                                                               "bfloat16"))
    except ValueError as exc:
        raise UnsupportedArchitecture(f"{name}: {exc}") from None
    hybrid = dict(layer_types=("compressed_attention",) * n, compressed_attention=attention, num_kv_heads=1,
                  head_dim=head_dim, moe=moe.model_copy(update={"router_bias": True}), qkv_bias=False, o_bias=False,
                  rope_cache_positions=(mpe, min(compressed, MAX_POSITIONS)), rope_cache_widths=(width, width))
    return {**cfg, "intermediate_size": cfg.get("moe_intermediate_size")}, hybrid


_DSV4_FP8_KEYS = {"quant_method", "activation_scheme", "fmt", "scale_fmt", "weight_block_size"}


def _deepseek_v4_scheme(scheme: AnyScheme | None, cfg: dict[str, Any], name: str) -> AnyScheme | None:
    """DeepSeek-V4's ``quant_method: fp8``, which vLLM 0.32 reads as ``deepseek_v4_fp8`` with ``expert_dtype``
    (analysis.model.quantization.DeepseekV4Fp8), its experts NVFP4 where ``moe_quant_algo`` says so (NVIDIA's builds,
    :func:`_nvidia_dsv4_recipe`); any other quantization of it is refused by name."""
    expert = cfg.get("expert_dtype")
    if expert not in (None, "fp4", "fp8"):
        raise UnsupportedArchitecture(f"{name}: expert_dtype {expert!r}: vLLM 0.32 reads fp4 or fp8")
    if scheme is None:
        if expert is not None:
            raise UnsupportedArchitecture(f"{name}: expert_dtype {expert!r} without an fp8 quantization_config: "
                                          "vLLM 0.32 would load the experts unquantized")
        return None
    raw = cfg.get("quantization_config") or {}
    nvfp4 = str(raw.get("moe_quant_algo") or "").upper() == "NVFP4"
    if nvfp4:
        _nvidia_dsv4_recipe(raw, expert, name)
    extra = sorted(set(raw) - _DSV4_FP8_KEYS - (_DSV4_NVFP4_KEYS if nvfp4 else set()))
    if not isinstance(scheme, Fp8) or scheme.weight_block_size != (128, 128) or extra:
        raise UnsupportedArchitecture(
            f"{name}: DeepSeek-V4's quantization_config is planned as its published fp8 128 × 128 blocks with fp4 or "
            f"fp8 experts alone" + (f"; this one also sets {', '.join(extra)} (NVIDIA's NVFP4 experts are "
                                    "not planned yet)" if extra else f", not {scheme.describe()}"))
    return DeepseekV4Fp8(expert_dtype=expert or "fp8", ignore=scheme.ignore,
                         expert_format="nvfp4" if nvfp4 else "mxfp4")


# NVIDIA's DeepSeek-V4 NVFP4 builds: ModelOpt's record of the experts' requantization beside the fp8 keys. vLLM's
# DeepseekV4FP8Config reads moe_quant_algo alone of them (its Fp8Config reads ignored_layers, not ignore, whose
# attention and shared experts stay the original fp8 blocks)
_DSV4_NVFP4_KEYS = {"moe_quant_algo", "quant_algo", "producer", "config_groups", "group_size", "ignore",
                    "kv_cache_quant_algo", "quantized_layers"}


def _nvidia_dsv4_recipe(raw: dict[str, Any], expert: Any, name: str) -> None:
    """Refuse a DeepSeek-V4 ``moe_quant_algo: NVFP4`` config that is not NVIDIA's recipe: fp4 experts (vLLM takes
    the NVFP4 path only for them), NVFP4 in groups of 16 on every listed layer, all of them experts, no KV-cache
    quantization."""
    if expert not in (None, "fp4"):
        raise UnsupportedArchitecture(f"{name}: moe_quant_algo NVFP4 with expert_dtype {expert!r}: vLLM 0.32 runs "
                                      "NVFP4 experts only where expert_dtype is fp4")
    layers = raw.get("quantized_layers") or {}
    if not isinstance(layers, dict) or not all(
            isinstance(k, str) and k.endswith(".ffn.experts") and isinstance(v, dict)
            and v.get("quant_algo") == "NVFP4" and v.get("group_size", 16) == 16 for k, v in layers.items()):
        raise UnsupportedArchitecture(f"{name}: quantized_layers other than NVFP4 experts in groups of 16; vLLM 0.32's "
                                      "DeepSeek-V4 makes every routed expert NVFP4 and nothing else")
    if raw.get("group_size", 16) != 16 or raw.get("kv_cache_quant_algo") is not None:
        raise UnsupportedArchitecture(f"{name}: group_size {raw.get('group_size')!r} / kv_cache_quant_algo "
                                      f"{raw.get('kv_cache_quant_algo')!r}: NVIDIA's DeepSeek-V4 recipe has NVFP4 "
                                      "groups of 16 and no quantized KV cache")


def _pattern_layers(cfg: dict[str, Any], name: str, default_pattern: int) -> tuple[LayerType, ...] | None:
    """The layer types transformers' Exaone4Config and Cohere2Config derive where config.json lists none: every
    ``sliding_window_pattern``-th layer global, the others sliding (None: ``layer_types`` is written, or there is no
    window). vLLM then reads ``layer_types``."""
    if cfg.get("layer_types") is not None or cfg.get("sliding_window") is None:
        return None
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    pattern = _positive_int(cfg.get("sliding_window_pattern", default_pattern), "sliding_window_pattern", name)
    return tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n))


def _exaone4(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """EXAONE 4.0 (vLLM's ``models/exaone4.py``): GQA attention with per-head q/k norms, ``layer_types`` sliding
    layers of ``sliding_window`` (RoPE on those alone), post-attention and post-MLP norms only."""
    hybrid: dict[str, Any] = {}
    if (kinds := _pattern_layers(cfg, name, 4)) is not None:
        hybrid["layer_types"] = kinds
    return cfg, hybrid


def _cohere(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Command R and R7B / A (``cohere``, ``cohere2``; vLLM's ``models/commandr.py``): attention and the MLP side by
    side after one weight-only LayerNorm a layer, q/k LayerNorms over every head where ``use_qk_norm``; Cohere2's
    ``layer_types`` sliding layers attend over ``sliding_window + 1`` tokens (vLLM adds the one to match training)."""
    hybrid: dict[str, Any] = dict(norms_per_layer=1, qk_norm=bool(cfg.get("use_qk_norm")), qk_norm_per_layer=True)
    if cfg.get("model_type") == "cohere2":
        if (kinds := _pattern_layers(cfg, name, 4)) is not None:
            hybrid["layer_types"] = kinds
        if cfg.get("sliding_window") is not None:
            cfg = {**cfg, "sliding_window": _positive_int(cfg["sliding_window"], "sliding_window", name) + 1}
    return cfg, hybrid


def _glm4(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """GLM-4-0414 (``glm4``; vLLM's ``models/glm4.py``): GQA attention with a q/k/v bias where ``attention_bias``
    (none on o_proj), RoPE over ``partial_rotary_factor`` of a head (0.5), four norms a layer (input, post
    self-attention, post-attention, post-MLP)."""
    return dict(o_bias=False, norms_per_layer=4,
                rotary_fraction=_fraction(cfg.get("partial_rotary_factor", 0.5), "partial_rotary_factor", name))


def _full_width_qk_norm(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """OLMo 2 and OLMoE (vLLM's ``models/olmo2.py``, ``models/olmoe.py``): q and k RMSNorms over every head's width
    together (OLMoE's experts, ``num_experts`` of ``intermediate_size`` on every layer, are read as any Qwen-style
    MoE's)."""
    return dict(qk_norm=True, qk_norm_per_layer=True)


def _granite_moe_shared(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Granite MoE with a shared expert (vLLM's ``models/granitemoeshared.py``): Mixtral-style experts beside one
    ungated-by-router shared MLP of ``shared_intermediate_size`` (gate and up fused, no router gate)."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    moe = _moe(cfg, "granitemoeshared", n, _positive_int(cfg.get("intermediate_size"), "intermediate_size", name),
               name)
    shared = cfg.get("shared_intermediate_size") or 0
    if moe is not None and shared:
        moe = moe.model_copy(update={"shared_experts": 1, "shared_expert_intermediate_size": _positive_int(
            shared, "shared_intermediate_size", name)})
    return {} if moe is None else {"moe": moe}


def _glm4_moe_lite(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """GLM-4.7-Flash (``glm4_moe_lite``; vLLM's ``models/glm4_moe_lite.py``): DeepSeek-V2's latent attention (MLA)
    and GLM-4.5's MoE (a float32 router with a float32 score bias, ``n_shared_experts`` fused into one shared MLP)
    from layer ``first_k_dense_replace`` on, a dense MLP before. vLLM reads ``first_k_dense_replace`` (a config
    without it fails there); transformers' ``mlp_layer_types`` must say the same, or the config is refused."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    if cfg.get("first_k_dense_replace") is None:
        raise UnsupportedArchitecture(f"{name}: no first_k_dense_replace, which vLLM's GLM-4.7-Flash reads to place "
                                      "its MoE layers (its mlp_layer_types is transformers' alone)")
    first = cfg["first_k_dense_replace"]
    if not isinstance(first, int) or isinstance(first, bool) or not 0 <= first <= n:
        raise UnsupportedArchitecture(f"{name}: first_k_dense_replace must be a layer count in [0, {n}], got "
                                      f"{first!r}")
    types = cfg.get("mlp_layer_types")
    if types is not None and types != ["dense" if i < first else "sparse" for i in range(n)]:
        raise UnsupportedArchitecture(f"{name}: mlp_layer_types disagrees with the MoE layers vLLM builds from "
                                      f"first_k_dense_replace {first}")
    if cfg.get("moe_layer_freq", 1) != 1:
        raise UnsupportedArchitecture(f"{name}: moe_layer_freq {cfg['moe_layer_freq']!r}: vLLM's GLM-4.7-Flash makes "
                                      "every layer from first_k_dense_replace on MoE")
    moe = _moe(cfg, "glm4_moe_lite", n, 0, name)
    return {} if moe is None else {"moe": moe.model_copy(update={"router_bias": True, "router_fp32": True})}


def _ernie4_5(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """ERNIE 4.5 dense (vLLM's ``models/ernie45.py``: Llama's model with o_proj's bias removed). Llama reads
    ``attention_bias`` for q, k and v and ``mlp_bias``; transformers' ``use_bias`` (biases on every projection),
    which vLLM does not read, is refused where true."""
    if cfg.get("use_bias"):
        raise UnsupportedArchitecture(f"{name}: use_bias true: vLLM's ERNIE 4.5 (Llama's model) does not read it, so "
                                      "the checkpoint's projection biases would not load")
    return dict(o_bias=False)


def _ernie4_5_moe(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """ERNIE 4.5 MoE (vLLM's ``models/ernie45_moe.py``): GQA attention without bias (``use_bias``, which vLLM reads
    only in part, is refused where true); layer ``i`` is MoE where ``use_moe`` (default: there are experts),
    ``(i + 1) % moe_layer_interval == 0`` and ``moe_layer_start_index <= i <= moe_layer_end_index``, else a dense
    MLP. A MoE layer: ``moe_num_experts`` experts of ``moe_intermediate_size``, ``moe_k`` a token, behind a float32
    router with a float32 score bias, and ``moe_num_shared_experts`` of them fused into one shared MLP."""
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    experts = cfg.get("moe_num_experts", 0)
    if not isinstance(experts, int) or isinstance(experts, bool) or experts < 0:
        raise UnsupportedArchitecture(f"{name}: moe_num_experts must be an expert count, got {experts!r} (a list "
                                      "splits experts by modality, which vLLM's text model does not build)")
    bounds = {}
    for key, default in (("moe_layer_start_index", 0), ("moe_layer_end_index", n - 1), ("moe_layer_interval", 1)):
        v = cfg.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool) or v < (1 if key == "moe_layer_interval" else 0):
            raise UnsupportedArchitecture(f"{name}: {key} must be a layer index (an interval of 1 or more), got {v!r}")
        bounds[key] = v
    use_moe = cfg.get("use_moe", experts > 0)
    moe_layers = [i for i in range(n) if use_moe and (i + 1) % bounds["moe_layer_interval"] == 0
                  and bounds["moe_layer_start_index"] <= i <= bounds["moe_layer_end_index"]]
    if cfg.get("use_bias"):
        raise UnsupportedArchitecture(f"{name}: use_bias true: vLLM's ERNIE 4.5 MoE biases q, k, v and the dense MLPs "
                                      "but not o_proj or the shared experts, which transformers' model biases too")
    out: dict[str, Any] = dict(o_bias=False)
    if moe_layers:
        shared = cfg.get("moe_num_shared_experts", 0) or 0
        inter = _positive_int(cfg.get("moe_intermediate_size"), "moe_intermediate_size", name)
        out["moe"] = _validated(
            MoE, name, num_experts=experts, experts_per_token=cfg.get("moe_k", 2), expert_intermediate_size=inter,
            shared_experts=shared, shared_expert_intermediate_size=shared * inter,
            dense_layers=tuple(i for i in range(n) if i not in moe_layers), router_bias=True, router_fp32=True)
    return out


def _qwen2_moe(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Qwen2-MoE (vLLM's ``models/qwen2_moe.py``): q, k and v always biased, whatever transformers 5's
    ``qkv_bias`` says; a config that turns it off is refused (its checkpoint would have no such bias)."""
    if cfg.get("qkv_bias", True) is not True:
        raise UnsupportedArchitecture(f"{name}: qkv_bias {cfg['qkv_bias']!r}: vLLM's Qwen2-MoE always biases q, k "
                                      "and v")
    return {}


def _llama4_text(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return {**cfg, "intermediate_size": cfg.get("intermediate_size_mlp")}, _llama4(cfg, name)  # the dense layers' MLP
