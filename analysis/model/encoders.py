"""A multimodal checkpoint's encoders as its config.json describes them: the vision (and audio) towers' parameters
and the tower whose start-up profile run kvprof plans (analysis.model.vision), for the wrappers vLLM 0.32 builds
(Gemma 3 and 4, Qwen2/2.5/3-VL, Qwen3.5, Kimi-K2.5's MoonViT, Llava, Llama 4).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.model import config_keys
from analysis.model.config_checks import read_json_file
from analysis.model.parts import (
    QWEN3_VL,
    UnsupportedArchitecture,
)
from analysis.model.vision import Qwen2VisionTower, Qwen3VisionTower, Qwen25VisionTower, SiglipVisionTower, VisionTower

# A SigLIP vision tower (Gemma 3, PaliGemma): patch and position embeddings, pre-norm encoder layers with biased
# attention and a two-matrix MLP, a final norm; Gemma 3's projector maps it to the decoder's width (a weight and an
# RMSNorm of the vision width, Gemma3MultiModalProjector).
_SIGLIP_PROJECTOR = {"gemma3": lambda v, text: v * text + v}


def _ints(v: dict[str, Any], *keys: str) -> tuple[int, ...] | None:
    """Positive integers of a vision_config, None when one is missing or not one."""
    try:
        out = tuple(int(v[k]) for k in keys)
    except (KeyError, TypeError, ValueError):
        return None
    return out if min(out) > 0 else None


def _siglip_params(v: dict[str, Any], project: Callable[[int, int], int], text_hidden: int) -> int | None:
    got = _ints(v, "hidden_size", "intermediate_size", "num_hidden_layers", "patch_size", "image_size")
    channels = _ints({"c": v.get("num_channels", 3)}, "c")
    if got is None or channels is None:
        return None
    (h, inter, layers, patch, image), (c,) = got, channels
    embeddings = c * patch * patch * h + h + (image // patch) ** 2 * h
    layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 2 * 2 * h
    return embeddings + layers * layer + 2 * h + project(h, text_hidden)


def _qwen_vl_params(v: dict[str, Any], model_type: str, text_hidden: int) -> int | None:
    """Qwen2-VL's and Qwen2.5-VL's vision towers, as vLLM's ``qwen2_vl.py`` / ``qwen2_5_vl.py`` build them: a
    bias-free Conv3d patch embedding (channels × temporal patch × patch² × width), ``depth`` blocks of two norms,
    a biased fused QKV and output projection and a biased MLP — Qwen2-VL: LayerNorms (weight and bias) and two
    matrices of width × mlp_ratio (QuickGELU); Qwen2.5-VL: RMSNorms and a gated MLP of ``intermediate_size``
    (gate and up fused) — and the patch merger: a norm of the width, then two biased linears over the
    spatial_merge_size² patches it merges, the second to the decoder's width (``hidden_size`` in Qwen2-VL's
    vision_config, ``out_hidden_size`` in Qwen2.5-VL's)."""
    qwen25 = model_type == "qwen2_5_vl"
    width_key = "hidden_size" if qwen25 else "embed_dim"
    got = _ints(v, width_key, "depth", "patch_size")
    extra = _ints({"c": v.get("in_chans", v.get("in_channels", 3)), "t": v.get("temporal_patch_size", 2),
                   "m": v.get("spatial_merge_size", 2),
                   "o": v.get("out_hidden_size" if qwen25 else "hidden_size", text_hidden)}, "c", "t", "m", "o")
    if got is None or extra is None:
        return None
    (d, depth, patch), (c, t, m, out) = got, extra
    if qwen25:
        inter = _ints(v, "intermediate_size")
        if inter is None:
            return None
        norms, mlp = 2 * d, (d * 2 * inter[0] + 2 * inter[0]) + (inter[0] * d + d)
    else:
        ratio = v.get("mlp_ratio", 4)
        if not isinstance(ratio, int | float) or isinstance(ratio, bool) or ratio <= 0:
            return None
        hidden = int(d * ratio)
        norms, mlp = 2 * 2 * d, (d * hidden + hidden) + (hidden * d + d)
    block = norms + (3 * d * d + 3 * d) + (d * d + d) + mlp
    merged = d * m * m
    merger = (d if qwen25 else 2 * d) + (merged * merged + merged) + (merged * out + out)
    return c * t * patch * patch * d + depth * block + merger


def _qwen3_vl_params(v: dict[str, Any], text_hidden: int) -> int | None:
    """Qwen3-VL's vision tower, as vLLM's ``qwen3_vl.py`` builds it: a biased Conv3d patch embedding, learned
    position embeddings (num_position_embeddings × width), ``depth`` blocks of two LayerNorms, a biased fused QKV
    and output projection and a biased two-matrix MLP of ``intermediate_size``; the patch merger (a LayerNorm of
    the width, two biased linears over the spatial_merge_size² patches it merges, the second to
    ``out_hidden_size``) and one more such merger per ``deepstack_visual_indexes`` entry, whose LayerNorm is of
    the merged width (``use_postshuffle_norm``)."""
    got = _ints(v, "hidden_size", "depth", "patch_size", "intermediate_size")
    extra = _ints({"c": v.get("in_channels", 3), "t": v.get("temporal_patch_size", 2),
                   "m": v.get("spatial_merge_size", 2), "o": v.get("out_hidden_size", text_hidden),
                   "n": v.get("num_position_embeddings", 2304)}, "c", "t", "m", "o", "n")
    levels = v.get("deepstack_visual_indexes", [])
    if got is None or extra is None or not isinstance(levels, list):
        return None
    (d, depth, patch, inter), (c, t, m, out, positions) = got, extra
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * inter + inter) + (inter * d + d)
    merged = d * m * m
    linears = (merged * merged + merged) + (merged * out + out)
    mergers = (2 * d + linears) + len(levels) * (2 * merged + linears)
    return c * t * patch * patch * d + d + positions * d + depth * block + mergers


# Kimi-K2.5's MoonViT, as vLLM 0.32 builds it (kimi_k25_vit.py MoonViT3dPretrainedModel and
# KimiK25MultiModalProjector) from transformers' Kimi_K25VisionConfig: that class's fields and defaults; the keys
# vLLM's model file reads with getattr and their defaults there; the legacy remote-code keys (vt_*, init_pos_emb_*)
# of the published checkpoints, which name the shapes the weights were saved in.
_MOONVIT_FIELDS = {"hidden_size": 1152, "num_hidden_layers": 27, "intermediate_size": 4304,
                   "num_attention_heads": 16, "patch_size": 14, "pos_emb_height": 64, "pos_emb_width": 64,
                   "pos_emb_time": 4}


_MOONVIT_LEGACY = {"vt_hidden_size": "hidden_size", "vt_num_hidden_layers": "num_hidden_layers",
                   "vt_intermediate_size": "intermediate_size", "vt_num_attention_heads": "num_attention_heads"}


_MOONVIT_FLAGS = {"attn_bias": True, "linear_bias": True, "patch_embed_proj_bias": True}


_MOONVIT_CHOICES = {"norm_type": ("layernorm",), "mlp_type": ("mlp2",), "pos_emb_type": ("divided_fixed",),
                    "mm_projector_type": ("patchmerger",), "video_attn_type": ("spatial_temporal",),
                    "merge_type": ("sd2_tpool",)}


# What changes no weight: an activation, an epsilon, an attention kernel, the merged width as the remote code names
# it (checked below), interpolation of the position grid.
_MOONVIT_INERT = {"_attn_implementation", "hidden_act", "activation_func", "projector_hidden_act",
                  "projector_ln_eps", "mm_hidden_size", "text_hidden_size", "pos_emb_interpolation_mode",
                  "merge_kernel_size", "model_type", "init_pos_emb_height", "init_pos_emb_width", "init_pos_emb_time",
                  "rope_parameters", "qkv_hidden_size"}


def _moonvit_params(v: dict[str, Any], text_hidden: int, name: str) -> tuple[int, int]:
    """Parameters of Kimi-K2.5's MoonViT tower and patch-merger projector as vLLM 0.32 builds them: a Conv2d patch
    embedding (biased), a learned pos_emb_height × pos_emb_width × width grid, ``num_hidden_layers`` blocks of two
    LayerNorms, a biased fused QKV of qkv_hidden_size (default the width) and output projection and a biased
    two-matrix MLP, a final LayerNorm; the projector: a LayerNorm of the width, then two biased linears over the
    merge_kernel_size patches it merges, the second to the decoder's width. Returns (all of them, those every
    tensor-parallel rank holds whole). A key that would build another tower is refused by name."""
    unread = sorted(k for k in v if k not in {*_MOONVIT_FIELDS, *_MOONVIT_LEGACY, *_MOONVIT_FLAGS,
                                              *_MOONVIT_CHOICES, *_MOONVIT_INERT}
                    and not config_keys.is_inert(k))
    if unread:
        raise UnsupportedArchitecture(f"{name}: vision_config {'key' if len(unread) == 1 else 'keys'} "
                                      f"{', '.join(unread)} not read by kvprof's MoonViT reader; the tower is "
                                      "refused rather than counted as something else")
    shape = {k: v.get(k, d) for k, d in _MOONVIT_FIELDS.items()}
    for legacy, field in _MOONVIT_LEGACY.items():
        if legacy in v and v[legacy] != shape[field]:
            raise UnsupportedArchitecture(
                f"{name}: vision_config {legacy} is {v[legacy]!r} but vLLM 0.32 builds the tower from {field} "
                f"({shape[field]!r}{'' if field in v else ', its default'}); the checkpoint's weights would not "
                "load into it")
    for dim in ("height", "width", "time"):  # vLLM's _get_pos_emb_size: the legacy key wins
        if v.get(f"init_pos_emb_{dim}") is not None:
            shape[f"pos_emb_{dim}"] = v[f"init_pos_emb_{dim}"]
    merge = v.get("merge_kernel_size", [2, 2])
    qkv = v.get("qkv_hidden_size") or shape["hidden_size"]
    ints = _ints({**shape, "qkv": qkv, "mh": merge[0] if isinstance(merge, list | tuple) and len(merge) == 2 else 0,
                  "mw": merge[1] if isinstance(merge, list | tuple) and len(merge) == 2 else 0},
                 *shape, "qkv", "mh", "mw")
    if ints is None:
        raise UnsupportedArchitecture(f"{name}: vision_config's MoonViT shapes ({', '.join(shape)}, "
                                      "qkv_hidden_size, merge_kernel_size) must be positive integers")
    for key, allowed in _MOONVIT_CHOICES.items():
        if key in v and v[key] not in allowed:
            raise UnsupportedArchitecture(f"{name}: vision_config {key} {v[key]!r} is not read by kvprof's MoonViT "
                                          f"reader (it reads {', '.join(map(repr, allowed))})")
    flags = {k: v.get(k, d) for k, d in _MOONVIT_FLAGS.items()}
    if any(not isinstance(f, bool) for f in flags.values()):
        raise UnsupportedArchitecture(f"{name}: vision_config {', '.join(_MOONVIT_FLAGS)} are true or false")
    if v.get("text_hidden_size") not in (None, text_hidden):
        raise UnsupportedArchitecture(f"{name}: vision_config text_hidden_size {v['text_hidden_size']!r} is not the "
                                      f"decoder's hidden_size {text_hidden}")
    if v.get("mm_hidden_size") not in (None, shape["hidden_size"]):
        raise UnsupportedArchitecture(f"{name}: vision_config mm_hidden_size {v['mm_hidden_size']!r} is not the "
                                      f"tower's width {shape['hidden_size']}")
    h, layers, inter, _heads, patch, ph, pw, _t, q, mh, mw = ints
    attn_b, lin_b = flags["attn_bias"], flags["linear_bias"]
    embed = 3 * patch * patch * h + (h if flags["patch_embed_proj_bias"] else 0) + ph * pw * h
    block = 2 * 2 * h + (h * 3 * q + (3 * q if attn_b else 0)) + (q * h + (h if attn_b else 0)) \
        + (h * inter + (inter if lin_b else 0)) + (inter * h + (h if lin_b else 0))
    merged = h * mh * mw
    projector = 2 * h + (merged * merged + merged) + (merged * text_hidden + text_hidden)
    # whole on every tensor-parallel rank: the patch embedding (Conv2dLayer) and position grid, the LayerNorms, the
    # row-parallel layers' biases (wo, fc1), the final norm and the projector (ReplicatedLinear)
    block_replicated = 2 * 2 * h + (h if attn_b else 0) + (h if lin_b else 0)
    return embed + layers * block + 2 * h + projector, embed + layers * block_replicated + 2 * h + projector


# Gemma-4's vision tower: vLLM 0.32's gemma4_mm.py builds transformers' own Gemma4VisionModel from vision_config and
# replaces its linears with replicated ones (recursive_replace_linear "replicate"), beside a ReplicatedLinear embedder
# to the decoder's width. Keys read, with transformers' Gemma4VisionConfig defaults; keys that change nothing here.
_GEMMA4_VISION = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 16, "num_attention_heads": 12,
                  "num_key_value_heads": 12, "head_dim": 64, "patch_size": 16, "position_embedding_size": 10240,
                  "standardize": False, "use_clipped_linears": False, "attention_bias": False}


_GEMMA4_VISION_INERT = {"global_head_dim", "hidden_activation", "max_position_embeddings", "rope_parameters",
                        "pooling_kernel_size", "default_output_length", "model_type", "chunk_size_feed_forward",
                        "is_encoder_decoder", "return_dict", "image_seq_length", "video_seq_length"}


def _gemma4_vision_params(v: dict[str, Any], text_hidden: int, name: str) -> int:
    """Gemma-4's vision tower and embedder: a bias-free patch projection (3 × patch² → width) and a 2 × positions ×
    width position table; ``num_hidden_layers`` blocks of q/k/v/o projections, q and k norms of a head, four RMSNorms
    and a gated MLP, all bias-free; with ``standardize`` a scale and a bias of the width (buffers, loaded with the
    weights); the embedder's projection to the decoder's width. Every rank holds all of it."""
    unread = sorted(k for k in v if k not in {*_GEMMA4_VISION, *_GEMMA4_VISION_INERT} and not config_keys.is_inert(k))
    if unread:
        raise UnsupportedArchitecture(f"{name}: vision_config {'key' if len(unread) == 1 else 'keys'} "
                                      f"{', '.join(unread)} not read by kvprof's Gemma-4 vision reader")
    shape = {k: v.get(k, d) for k, d in _GEMMA4_VISION.items()}
    for flag in ("use_clipped_linears", "attention_bias"):
        if shape[flag] is not False:
            raise UnsupportedArchitecture(f"{name}: vision_config {flag} {shape[flag]!r}: only the published tower "
                                          "(no clipped linears, no attention bias) is counted")
    if v.get("global_head_dim") not in (None, shape["head_dim"]):
        raise UnsupportedArchitecture(f"{name}: vision_config global_head_dim differs from its head_dim")
    ints = _ints(shape, "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "patch_size", "position_embedding_size")
    if ints is None or not isinstance(shape["standardize"], bool):
        raise UnsupportedArchitecture(f"{name}: vision_config's Gemma-4 tower shapes must be positive integers")
    h, inter, layers, heads, kv, hd, patch, positions = ints
    block = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 2 * hd + 4 * h + 3 * h * inter
    return 3 * patch * patch * h + 2 * positions * h + layers * block + (2 * h if shape["standardize"] else 0) \
        + h * text_hidden


def _max_pixels(path: Path) -> int | None:
    """The largest image a checkpoint's preprocessor_config.json lets through (``max_pixels``, or the newer
    ``size.longest_edge``), None where the file is absent or names none."""
    if not path.is_file():
        return None
    pre = read_json_file(path, "a preprocessor config")
    size = pre.get("size") if isinstance(pre, dict) else None
    value = (pre.get("max_pixels") if isinstance(pre, dict) else None) or (
        size.get("longest_edge") if isinstance(size, dict) else None)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UnsupportedArchitecture(f"{path}: max_pixels must be a positive integer, got {value!r}")
    return value


def _vision_tower(raw: dict[str, Any], text_hidden: int, max_pixels: int | None,
                  video_max_pixels: int | None = None) -> VisionTower | None:
    """The tower whose profile run kvprof plans: Gemma 3's SigLIP (256 tokens an image), Qwen2-VL's and
    Qwen2.5-VL's (the same fields ``_qwen_vl_params`` counts, sized for the largest image ``max_pixels``;
    default: Qwen's published one)."""
    model_type = str(raw.get("model_type"))
    v = raw.get("vision_config")
    if model_type in _SIGLIP_PROJECTOR and isinstance(v, dict) and v.get("model_type") in (None, "siglip_vision_model"):
        got = _ints(v, "hidden_size", "intermediate_size", "image_size", "patch_size")
        tokens = _ints({"t": raw.get("mm_tokens_per_image", 256), "c": v.get("num_channels", 3)}, "t", "c")
        if got is None or tokens is None:
            return None
        (width, inter, image, patch), (per_image, channels) = got, tokens
        return SiglipVisionTower(width=width, intermediate=inter, out_width=text_hidden, image_size=image,
                                 patch_size=patch, in_channels=channels, tokens_per_image=per_image)
    if model_type in QWEN3_VL and isinstance(v, dict) and v.get("model_type") in (None, *QWEN3_VL):
        if _qwen3_vl_params(v, text_hidden) is None:
            return None
        shapes = dict(width=int(v["hidden_size"]), intermediate=int(v["intermediate_size"]),
                      out_width=int(v.get("out_hidden_size", text_hidden)), patch_size=int(v["patch_size"]),
                      temporal_patch_size=int(v.get("temporal_patch_size", 2)),
                      in_channels=int(v.get("in_channels", 3)), spatial_merge_size=int(v.get("spatial_merge_size", 2)),
                      deepstack_levels=len(v.get("deepstack_visual_indexes", [])))
        if max_pixels is not None:
            shapes["max_pixels"] = max_pixels
        if video_max_pixels is not None:
            shapes["video_max_pixels"] = video_max_pixels
        return Qwen3VisionTower(**shapes)
    if (model_type not in ("qwen2_vl", "qwen2_5_vl") or not isinstance(v, dict)
            or v.get("model_type") not in (None, model_type) or _qwen_vl_params(v, model_type, text_hidden) is None):
        return None
    qwen25 = model_type == "qwen2_5_vl"
    width = int(v["hidden_size" if qwen25 else "embed_dim"])
    shapes = dict(width=width, out_width=int(v.get("out_hidden_size" if qwen25 else "hidden_size", text_hidden)),
                  patch_size=int(v["patch_size"]), temporal_patch_size=int(v.get("temporal_patch_size", 2)),
                  in_channels=int(v.get("in_chans", v.get("in_channels", 3))),
                  spatial_merge_size=int(v.get("spatial_merge_size", 2)))
    if max_pixels is not None:
        shapes["max_pixels"] = max_pixels
    if qwen25:
        return Qwen25VisionTower(intermediate=int(v["intermediate_size"]), **shapes)
    return Qwen2VisionTower(intermediate=int(width * v.get("mlp_ratio", 4)), **shapes)


# The modalities each multimodal wrapper's vLLM 0.32 model file builds its tower for (``_mark_tower_model``):
# gemma3_mm.py, llava.py, mllama4.py, qwen2_vl.py, qwen2_5_vl.py, qwen3_vl.py, qwen3_vl_moe.py, qwen3_5.py,
# kimi_k25.py. Where --limit-mm-per-prompt sets each to 0 the tower is not built.
ENCODER_MODALITIES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("gemma3", "llava", "llama4"), ("image",)),
    "gemma4": ("image", "video", "audio"),  # gemma4_mm.py: the vision tower, and an audio tower where audio_config
    **dict.fromkeys(("qwen2_vl", "qwen2_5_vl", *QWEN3_VL), ("image", "video")),
    "kimi_k25": ("vision_chunk",),
}


# Towers whose weights kvprof counts and whose profile run it does not model (no analysis.model.vision class): what
# vLLM profiles there.
_UNPROFILED_TOWERS = {
    "gemma4": "Gemma-4's vision tower profiles its largest image or video as its processor sizes them "
              "(vision_soft_tokens_per_image soft tokens an image)",
    "kimi_k25": "Kimi-K2.5's MoonViT profiles a 3,000 × 3,000 image or a 4-frame video chunk, whichever has more "
                "tokens as the checkpoint's own image processor (remote code, media_proc_cfg) counts them",
}


def _encoder_modalities(raw: dict[str, Any]) -> tuple[str, ...]:
    """The modalities a wrapper's towers serve (an audio tower only where the config has an audio_config)."""
    return tuple(m for m in ENCODER_MODALITIES.get(str(raw.get("model_type")), ())
                 if m != "audio" or raw.get("audio_config") is not None)


def _encoder_params(raw: dict[str, Any], text_hidden: int, name: str) -> tuple[int, int, str | None]:
    """Parameters of a multimodal checkpoint's vision encoder and projector, counted from ``vision_config``, and
    what was left uncounted: SigLIP towers with a known projector (Gemma 3) and the Qwen2-VL and Qwen2.5-VL towers
    are counted; another ``vision_config`` or ``audio_config`` is named in the note (its weights load beside the
    decoder, so a plan without them is short by their size)."""
    model_type = str(raw.get("model_type"))
    v = raw.get("vision_config")
    counted: int | None = None
    replicated = 0
    if isinstance(v, dict):
        kind = v.get("model_type")
        project = _SIGLIP_PROJECTOR.get(model_type)
        if project is not None and kind in (None, "siglip_vision_model"):
            counted = _siglip_params(v, project, text_hidden)
        elif model_type in ("qwen2_vl", "qwen2_5_vl") and kind in (None, model_type):
            counted = _qwen_vl_params(v, model_type, text_hidden)
        elif model_type in QWEN3_VL and kind in (None, *QWEN3_VL):
            counted = _qwen3_vl_params(v, text_hidden)
        elif model_type == "kimi_k25" and kind in (None, "", "kimi_k25_vision"):
            counted, replicated = _moonvit_params(v, text_hidden, name)
        elif model_type == "gemma4" and kind == "gemma4_vision":
            counted = replicated = _gemma4_vision_params(v, text_hidden, name)
    notes = []
    if v is not None and counted is None:
        what = v.get("model_type") if isinstance(v, dict) else None
        notes.append(f"vision_config ({what or model_type}) is not counted")
    elif v is None and model_type == "llama4":  # Llama4ForConditionalGeneration builds its default tower regardless
        notes.append("Llama 4's vision tower (transformers' default vision_config; this config names none) is not "
                     "counted")
    if raw.get("audio_config") is not None:
        notes.append("audio_config is not counted")
    note = None
    if notes:
        note = ("; ".join(notes) + ": vLLM loads that encoder beside the decoder, so the weights here are short by "
                "its size (kvprof counts SigLIP towers with Gemma 3's projector, the Qwen2-VL, Qwen2.5-VL and "
                "Qwen3-VL towers, Kimi-K2.5's MoonViT and Gemma-4's tower)")
    elif counted and model_type in _UNPROFILED_TOWERS:
        note = (f"{_UNPROFILED_TOWERS[model_type]}: its weights are counted but not the start-up profile run vLLM "
                "gives it, so the activation reserve here leaves that run out")
    modalities = _encoder_modalities(raw)
    if note and modalities:
        off = ", ".join(f'"{m}": 0' for m in modalities)
        note += (f"; with --limit-mm-per-prompt '{{{off}}}' vLLM builds no tower and kvprof plans that text-only "
                 "engine exactly")
    return counted or 0, replicated, note
