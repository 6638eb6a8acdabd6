"""Config readers of MoE families whose layer pattern is written per layer: K-EXAONE (``exaone_moe``; vLLM's
``models/exaone_moe.py``)."""

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
    shared = cfg.get("num_shared_experts") or 0
    if not isinstance(shared, int) or isinstance(shared, bool) or shared < 0:
        raise UnsupportedArchitecture(f"{name}: num_shared_experts must be an expert count, got {shared!r}")
    cfg = {**cfg, "layer_types": kinds, "mlp_only_layers": [i for i, t in enumerate(mlp) if t == "dense"],
           "n_shared_experts": shared, "first_k_dense_replace": 0}
    moe = _moe(cfg, "exaone_moe", n, _positive_int(cfg.get("intermediate_size"), "intermediate_size", name), name)
    fields: dict[str, Any] = dict(qk_norm=True)
    if moe is not None:
        fields["moe"] = moe.model_copy(update={"router_bias": True})
    return cfg, fields


READERS: dict[str, FamilyReader] = {"exaone_moe": _exaone_moe}
