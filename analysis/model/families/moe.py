"""Config readers of MoE families with sliding layers and dense leading layers: K-EXAONE (``exaone_moe``; vLLM's
``models/exaone_moe.py``), Arcee Trinity (``afmoe``; ``models/afmoe.py``) and Cohere's MoE (``cohere2_moe``;
``models/cohere2_moe.py``)."""

from __future__ import annotations

from typing import Any

from analysis.model.parts import (
    FamilyReader,
    UnsupportedArchitecture,
    _moe,
    _positive_int,
)

# transformers 5's ExaoneMoeConfig defaults for the keys kvprof reads (vLLM reads that config object)
EXAONE_MOE_DEFAULTS: dict[str, Any] = {
    "num_key_value_heads": 32, "tie_word_embeddings": False, "max_position_embeddings": 2048, "sliding_window": 4096,
    "sliding_window_pattern": 4, "first_k_dense_replace": 1, "moe_intermediate_size": 1024, "num_experts": 64,
    "num_experts_per_tok": 8, "num_shared_experts": 1,
}


def _per_layer(cfg: dict[str, Any], key: str, allowed: tuple[str, ...], n: int, name: str) -> list[str]:
    kinds = cfg[key]
    if not isinstance(kinds, list) or len(kinds) != n or any(k not in allowed for k in kinds):
        raise UnsupportedArchitecture(f"{name}: {key} must list one of {', '.join(allowed)} for each of the {n} "
                                      "layers")
    return kinds


def _exaone_moe(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """K-EXAONE (``exaone_moe``): GQA attention with q and k RMSNorms over a head's width, sliding over
    ``sliding_window`` on the ``layer_types`` layers that say so (where not written, transformers derives them: every
    ``sliding_window_pattern``-th layer full); layer ``i`` is MoE where ``mlp_layer_types`` says ``sparse`` (where not
    written: from ``first_k_dense_replace`` on), ``num_experts`` of ``moe_intermediate_size`` behind a router with a
    float32 score bias and ``num_shared_experts`` fused into one shared MLP; a dense layer an MLP of
    ``intermediate_size``. Per-layer ``sliding_windows`` of different sizes and the MTP layers' keys are not read."""
    cfg = {**EXAONE_MOE_DEFAULTS, **cfg}
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    if cfg.get("layer_types") is None:
        pattern = cfg.get("sliding_window_pattern")
        if cfg.get("sliding_window") is None or not isinstance(pattern, int) or isinstance(pattern, bool) \
                or pattern < 1:
            raise UnsupportedArchitecture(
                f"{name}: no layer_types, and transformers' ExaoneMoeConfig cannot derive them from sliding_window "
                f"{cfg.get('sliding_window')!r} and sliding_window_pattern {pattern!r} (it needs a window and a "
                "layer count): vLLM would not start")
        kinds = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]
    else:
        kinds = _per_layer(cfg, "layer_types", ("full_attention", "sliding_attention"), n, name)
    if cfg.get("mlp_layer_types") is None:
        first = cfg.get("first_k_dense_replace")
        if not isinstance(first, int) or isinstance(first, bool) or not 0 <= first <= n:
            raise UnsupportedArchitecture(f"{name}: first_k_dense_replace must be a layer count in [0, {n}], got "
                                          f"{first!r}")
        mlp = ["dense" if i < first else "sparse" for i in range(n)]
    else:
        mlp = _per_layer(cfg, "mlp_layer_types", ("dense", "sparse"), n, name)
    cfg = {**cfg, "layer_types": kinds, "mlp_only_layers": [i for i, t in enumerate(mlp) if t == "dense"],
           "n_shared_experts": _expert_count(cfg, "num_shared_experts", name), "first_k_dense_replace": 0}
    moe = _moe(cfg, "exaone_moe", n, _positive_int(cfg.get("intermediate_size"), "intermediate_size", name), name)
    fields: dict[str, Any] = dict(qk_norm=True)
    if moe is not None:
        fields["moe"] = moe.model_copy(update={"router_bias": True})
    return cfg, fields


# transformers 5's AfmoeConfig defaults for the keys kvprof reads
AFMOE_DEFAULTS: dict[str, Any] = {
    "head_dim": 128, "tie_word_embeddings": False, "max_position_embeddings": 16384, "sliding_window": 1024,
    "global_attn_every_n_layers": 4, "num_dense_layers": 1, "moe_intermediate_size": 1408, "num_experts": 64,
    "num_experts_per_tok": 6, "num_shared_experts": 2,
}


def _afmoe(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Arcee Trinity (``afmoe``): GQA attention without biases, q and k RMSNorms over a head's width and a sigmoid
    gate on its output (``gate_proj``, the heads' width); sliding over ``sliding_window`` on the ``layer_types``
    layers that say so (where not written, every ``global_attn_every_n_layers``-th layer full, as AfmoeConfig
    derives them); four norms a layer; a dense MLP of ``intermediate_size`` on the first ``num_dense_layers``, then
    ``num_experts`` of ``moe_intermediate_size`` behind a float32 router with a float32 expert bias, and
    ``num_shared_experts`` fused into one shared MLP."""
    cfg = {**AFMOE_DEFAULTS, **cfg}
    if cfg.get("attention_bias"):
        raise UnsupportedArchitecture(f"{name}: attention_bias true: vLLM's afmoe.py builds q, k, v and o without "
                                      "biases, so the checkpoint's would not load")
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    if cfg.get("layer_types") is None:
        every = _positive_int(cfg.get("global_attn_every_n_layers"), "global_attn_every_n_layers", name)
        kinds = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n)]
    else:
        kinds = _per_layer(cfg, "layer_types", ("full_attention", "sliding_attention"), n, name)
    dense = cfg.get("num_dense_layers")
    if not isinstance(dense, int) or isinstance(dense, bool) or not 0 <= dense <= n:
        raise UnsupportedArchitecture(f"{name}: num_dense_layers must be a layer count in [0, {n}], got {dense!r}")
    cfg = {**cfg, "layer_types": kinds, "first_k_dense_replace": dense,
           "n_shared_experts": _expert_count(cfg, "num_shared_experts", name)}
    moe = _moe(cfg, "afmoe", n, _positive_int(cfg.get("intermediate_size"), "intermediate_size", name), name)
    fields: dict[str, Any] = dict(qk_norm=True, attention_output_gate=True, norms_per_layer=4)
    if moe is not None:
        fields["moe"] = moe.model_copy(update={"router_bias": True, "router_fp32": True})
    return cfg, fields


def _expert_count(cfg: dict[str, Any], key: str, name: str) -> int:
    v = cfg.get(key) or 0
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise UnsupportedArchitecture(f"{name}: {key} must be an expert count, got {v!r}")
    return v


# transformers 5's Cohere2MoeConfig defaults for the keys kvprof reads
COHERE2_MOE_DEFAULTS: dict[str, Any] = {
    "head_dim": 128, "tie_word_embeddings": True, "max_position_embeddings": 8192, "sliding_window": 4096,
    "sliding_window_pattern": 4, "prefix_dense_sliding_window_pattern": 1, "num_experts": 8, "num_experts_per_tok": 2,
    "num_shared_experts": 0, "prefix_dense_intermediate_size": None,
}


def _cohere2_moe(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Cohere's MoE (``cohere2_moe``): Command R7B's layer (attention and the MLP side by side after one weight-only
    norm, no biases, sliding layers attending over ``sliding_window + 1`` tokens) with ``num_experts`` experts of
    ``intermediate_size`` behind a bias-free router and ``num_shared_experts`` fused into one shared MLP; the dense
    prefix layers (``mlp_layer_types`` ``dense``) an MLP of ``prefix_dense_intermediate_size``. Where config.json
    writes no ``layer_types`` / ``mlp_layer_types``, Cohere2MoeConfig derives them from ``first_k_dense_replace``: its
    dense prefix on ``prefix_dense_sliding_window_pattern``, the rest on ``sliding_window_pattern``."""
    cfg = {**COHERE2_MOE_DEFAULTS, **cfg}
    if cfg.get("attention_bias"):
        raise UnsupportedArchitecture(f"{name}: attention_bias true: vLLM's cohere2_moe.py builds q, k, v and o "
                                      "without biases, so the checkpoint's would not load")
    n = _positive_int(cfg.get("num_hidden_layers"), "num_hidden_layers", name)
    first = cfg.get("first_k_dense_replace", 0)
    if not isinstance(first, int) or isinstance(first, bool) or not 0 <= first <= n:
        raise UnsupportedArchitecture(f"{name}: first_k_dense_replace must be a layer count in [0, {n}], got "
                                      f"{first!r}")
    if cfg.get("layer_types") is None:
        prefix = _positive_int(cfg.get("prefix_dense_sliding_window_pattern"), "prefix_dense_sliding_window_pattern",
                               name)
        rest = _positive_int(cfg.get("sliding_window_pattern"), "sliding_window_pattern", name)
        kinds = ["sliding_attention" if (i + 1) % prefix else "full_attention" for i in range(first)] + [
            "sliding_attention" if (i + 1) % rest else "full_attention" for i in range(n - first)]
    else:
        kinds = _per_layer(cfg, "layer_types", ("full_attention", "sliding_attention"), n, name)
    if cfg.get("mlp_layer_types") is None:
        mlp = ["dense" if i < first else "sparse" for i in range(n)]
    else:
        mlp = _per_layer(cfg, "mlp_layer_types", ("dense", "sparse"), n, name)
    dense = [i for i, t in enumerate(mlp) if t == "dense"]
    width = _positive_int(cfg.get("intermediate_size"), "intermediate_size", name)
    sizes = None
    if dense:
        if cfg.get("prefix_dense_intermediate_size") is None:
            raise UnsupportedArchitecture(f"{name}: dense layers {dense} and no prefix_dense_intermediate_size, which "
                                          "vLLM's and transformers' Cohere2Moe build their MLP from: it won't start")
        prefix_width = _positive_int(cfg["prefix_dense_intermediate_size"], "prefix_dense_intermediate_size", name)
        sizes = tuple(prefix_width if i in dense else width for i in range(n))
    window = cfg.get("sliding_window")
    if "sliding_attention" in kinds:
        window = _positive_int(window, "sliding_window", name) + 1  # vLLM: "sees sliding_window + 1" tokens
    cfg = {**cfg, "layer_types": kinds, "mlp_only_layers": dense, "sliding_window": window,
           "n_shared_experts": _expert_count(cfg, "num_shared_experts", name), "first_k_dense_replace": 0}
    moe = _moe(cfg, "cohere2_moe", n, width, name)
    if moe is not None:
        moe = moe.model_copy(update={"expert_intermediate_size": width,
                                     "shared_expert_intermediate_size": moe.shared_experts * width})
    fields: dict[str, Any] = dict(norms_per_layer=1, mlp_sizes=sizes, moe=moe)
    return cfg, fields


READERS: dict[str, FamilyReader] = {"exaone_moe": _exaone_moe, "afmoe": _afmoe, "cohere2_moe": _cohere2_moe}
