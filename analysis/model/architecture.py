"""A model's architecture facts, read from a Hugging Face ``config.json``.

Only what the KV-cache, weight and roofline arithmetic needs is kept. ``_from_dict`` reads what every decoder has
(layers, widths, heads, vocabulary, quantization, lengths); a family's own keys are its reader's
(:mod:`analysis.model.families`), the sub-models it builds are in :mod:`analysis.model.parts`, a multimodal
wrapper's towers in :mod:`analysis.model.encoders`. Anything kvprof cannot model is refused with an
:class:`UnsupportedArchitecture` that names it, rather than producing a silently wrong number.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from analysis.model.config_checks import (
    MAX_LEN_KEYS,
    check_architectures,
    check_bounds,
    check_keys,
    read_config_file,
    runs_transformers_backend,
    with_modelopt_sidecar,
)
from analysis.model.encoders import (
    ENCODER_MODALITIES,
    _encoder_modalities,
    _encoder_params,
    _max_pixels,
    _vision_tower,
)
from analysis.model.families import (
    FAMILY_READERS,
)
from analysis.model.families.attention import (
    _SPARSE_ATTENTION,
    _deepseek_v4_scheme,
    _sparse_indexer,
)
from analysis.model.layers import (
    AttentionLayer,
    ChunkedLocalAttention,
    CompressedSparseAttention,
    FullAttention,
    MultiHeadLatentAttention,
    SlidingWindowAttention,
    SparseMLA,
)
from analysis.model.module_names import MODULE_NAMES
from analysis.model.parts import (
    _DTYPE_BYTES,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN_SIZE,
    MAX_INTERMEDIATE_SIZE,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_VOCAB_SIZE,
    MLA,
    CompressedAttention,
    GatedDeltaNet,
    LayerType,
    Mamba2,
    MoE,
    RecurrentMixer,
    SharedBlocks,
    SparseIndexer,
    UnsupportedArchitecture,
    _first,
    _layer_types,
    _moe,
    _positive_int,
    _positive_number,
    _validated,
    dtype_bytes,
)
from analysis.model.quantization import (
    AnyScheme,
    QuantizationError,
)
from analysis.model.quantization_config import scheme_for_override, scheme_from_config
from analysis.model.vision import VisionTower

# What other modules import from here, defined in the parts and encoders modules
__all__ = ["ENCODER_MODALITIES", "MAX_POSITIONS", "MAX_VOCAB_SIZE", "Architecture", "UnsupportedArchitecture",
           "dtype_bytes"]

# Families whose MLP has two matrices (up, down) instead of gate/up/down, and
# that carry biases and learned position embeddings (GPT-2 lineage).
_NON_GATED = {"gpt2", "gpt-sw3", "gpt_bigcode", "gpt_neox", "opt", "gptj", "falcon", "phi", "bloom"}


_LEARNED_POSITIONS = {"gpt2", "gpt-sw3", "gpt_bigcode", "opt"}


# Families whose norms are LayerNorms with a bias beside the weight (vLLM's gpt2.py, gpt_bigcode.py: nn.LayerNorm)
_NORM_BIAS = {"gpt2", "gpt-sw3", "gpt_bigcode"}


# Families whose q/k/v projections have biases even though the config says nothing.
_QKV_BIAS = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "mimo"}


# Families with q/k RMSNorm over head_dim (two small vectors per layer).
_QK_NORM = {"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_vl", "qwen3_vl_moe",
            "qwen3_vl_text", "qwen3_vl_moe_text", "gemma3", "gemma3_text", "exaone4"}


# Families with four norms per layer (pre/post attention, pre/post MLP).
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text"}


# HF PretrainedConfig defaults tie_word_embeddings to True; these families override it.
_UNTIED_BY_DEFAULT = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "deepseek_v2", "deepseek_v3", "kimi_k2", "llama4_text", "gpt_oss", "olmo2", "phi3", "nemotron_h", "qwen3_next",
    "qwen3_5_text", "qwen3_5_moe_text", "granitemoehybrid", "deepseek_v32", "glm_moe_dsa", "minimax_m2", "falcon_h1",
    "mimo", "jamba", "granite", "granitemoe", "granitemoeshared", "olmoe", "exaone4", "glm4",
    "olmo_hybrid", "glm4_moe_lite", "ministral3",
}


_ENCODER_DECODER = {"t5", "mt5", "bart", "mbart", "whisper", "pegasus", "marian"}


# RoPE types whose max_position_embeddings is already the scaled length (_get_and_verify_max_len).
_ROPE_PRESCALED = {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}


class Architecture(BaseModel):
    """Decoder-only transformer hyperparameters the KV and roofline arithmetic use."""

    model_config = ConfigDict(frozen=True)

    name: str = "model"
    model_type: str = "custom"
    num_layers: int = Field(gt=0, le=MAX_LAYERS)
    hidden_size: int = Field(gt=0, le=MAX_HIDDEN_SIZE)
    num_heads: int = Field(gt=0, le=MAX_HEADS)
    num_kv_heads: int = Field(gt=0, le=MAX_HEADS)
    head_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    vocab_size: int = Field(ge=0, le=MAX_VOCAB_SIZE)
    intermediate_size: int = Field(ge=0, le=MAX_INTERMEDIATE_SIZE)
    mlp_gated: bool = True
    tie_word_embeddings: bool = False
    torch_dtype: str = "bfloat16"
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    # q/k RMSNorm over every head's width together (MiniMax-M2's "per_layer"), not over one head_dim
    qk_norm_per_layer: bool = False
    # The attention output gate (Qwen3-Next: q_proj also gives a sigmoid gate of the heads' width)
    attention_output_gate: bool = False
    # The share of a head RoPE rotates (partial_rotary_factor): the RoPE cache's width
    rotary_fraction: float = Field(1.0, ge=0, le=1)  # 0: no RoPE (Nemotron-H, Granite-4.0-H's "nope")
    attention_sinks: bool = False
    # Sinks on the sliding-window layers alone (MiMo-V2's add_swa_attention_sink_bias): one a query head there
    sliding_attention_sinks: bool = False
    # V's head width where it is not K's (MiMo-V2: K 192, V 128 on every attention layer); None: head_dim
    v_head_dim: int | None = Field(None, gt=0, le=MAX_HEAD_DIM)
    norms_per_layer: int = 2
    norm_bias: bool = False  # LayerNorms with a bias: two vectors a norm, not one
    # Learned scalars of each dense MLP's activation (Apertus's xIELU: alpha_p and alpha_n)
    mlp_activation_params: int = Field(0, ge=0, le=16)
    lm_head_bias: bool = False  # a bias on the LM head's vocabulary rows (Phi, GPT-J)
    embedding_norm: bool = False  # a norm right after the token embeddings (BLOOM's word_embeddings_layernorm)
    # vLLM 0.32 runs the model through its Transformers modeling backend (analysis.model.vllm_models): transformers'
    # own layers, whose rotary embedding keeps no cos/sin cache of every position
    transformers_backend: bool = False
    learned_position_embeddings: int = 0
    max_position_embeddings: int | None = Field(None, le=MAX_POSITIONS)
    # vLLM's longest max_model_len for the model where it is not max_position_embeddings (another length key,
    # model_max_length, a RoPE scaling factor), and where it comes from: see `max_len_limit`.
    derived_max_len: int | None = Field(None, gt=0)
    derived_max_len_from: str | None = None
    sliding_window: int | None = Field(None, le=MAX_POSITIONS)
    # Llama 4's chunked local attention: the chunk its "chunked_attention" layers attend within
    attention_chunk_size: int | None = Field(None, gt=0, le=MAX_POSITIONS)
    # (KV heads, head_dim) of the full-attention layers where they differ from the other layers' (Gemma-4's global
    # layers: 2 KV heads of 512 beside sliding layers' 8 of 256); None: every attention layer has num_kv_heads of
    # head_dim. Their pages then differ, and vLLM's allocator raises the smaller page's block (analysis.vllm.allocator).
    full_attention_kv: tuple[Annotated[int, Field(gt=0, le=MAX_HEADS)], Annotated[int, Field(gt=0, le=MAX_HEAD_DIM)]] \
        | None = None
    layer_types: tuple[LayerType, ...] = ()
    moe: MoE | None = None
    mla: MLA | None = None
    # DeepSeek Sparse Attention's indexer (DeepSeek-V3.2, GLM-5): MLA layers then attend to its top-k tokens
    sparse_indexer: SparseIndexer | None = None
    compressed_attention: CompressedAttention | None = None
    # Zamba2's shared attention and MLP blocks (the layers of type "parallel_hybrid" run one, beside their mixer)
    shared_blocks: SharedBlocks | None = None
    # A hybrid's recurrent mixer (the layers of type "recurrent"), and the layers that have an MLP where not every one
    # does (None: every layer; Nemotron-H's mixer layers have none).
    recurrent: RecurrentMixer | None = None
    mlp_layers: tuple[int, ...] | None = None
    # Each layer's dense-MLP width where the layers differ (NAS models' block_configs; None: intermediate_size for
    # every layer), and the RMSNorms each layer holds where that differs (None: norms_per_layer each).
    mlp_sizes: tuple[int, ...] | None = None
    layer_norms: tuple[int, ...] | None = None
    # The checkpoint's weight quantization (config.json quantization_config), or an override.
    quantization: AnyScheme | None = None
    # Speculative decoding's shapes (analysis.vllm.speculative): the multi-token-prediction layers a checkpoint
    # carries past its decoder (num_nextn_predict_layers; vLLM loads them only for the mtp method), and an EAGLE-3
    # draft's own vocabulary (draft_vocab_size; its LM head's rows).
    mtp_layers: int = Field(0, ge=0, le=64)
    draft_vocab_size: int | None = Field(None, gt=0, le=MAX_VOCAB_SIZE)
    # The positions of each RoPE cos/sin cache vLLM builds while loading the model (one per distinct RoPE
    # configuration the layers use; `_rope_cache_positions`). Empty: one cache of max_position_embeddings.
    rope_cache_positions: tuple[int, ...] = ()
    # Each of those caches' width where they differ (Gemma-4: its sliding layers' 256, its global layers' 512);
    # empty: the layers' rotary dimension.
    rope_cache_widths: tuple[int, ...] = ()
    # A multimodal checkpoint's vision encoder and projector (`_encoder_params`), loaded beside the decoder.
    encoder_params: int = Field(0, ge=0)
    # Of those, the ones every tensor-parallel rank holds whole (MoonViT's embeddings, norms and projector); the rest
    # split over the ranks like the decoder's layers
    encoder_replicated_params: int = Field(0, ge=0)
    # An encoder the config declares and kvprof does not count (None: none, or every one counted).
    encoder_note: str | None = None
    # A vision tower whose start-up profile run kvprof plans (analysis.model.vision), None where there is none or
    # kvprof does not model its profile (the encoder's weights may still be counted in encoder_params).
    vision: VisionTower | None = None
    # The modalities vLLM builds the encoder for (its model file's ``_mark_tower_model``): where
    # --limit-mm-per-prompt sets every one to 0, vLLM builds no tower (``StageMissingLayer``), so neither its
    # weights nor its profile run are on the GPU. Empty: a text model, or a wrapper kvprof has not read this of.
    encoder_modalities: tuple[str, ...] = ()

    def builds_encoder(self, limits: Mapping[str, int] | None) -> bool:
        """Whether vLLM builds the multimodal encoder under ``--limit-mm-per-prompt`` ``limits`` (a modality not
        named allows items): False only where every modality the tower serves is limited to 0."""
        limits = limits or {}
        return not self.encoder_modalities or any(limits.get(m, 1) > 0 for m in self.encoder_modalities)

    @model_validator(mode="after")
    def _check(self) -> Architecture:
        if not self.layer_types:
            object.__setattr__(self, "layer_types", ("full_attention",) * self.num_layers)
        if len(self.layer_types) != self.num_layers:
            raise UnsupportedArchitecture(
                f"{self.name}: layer_types has {len(self.layer_types)} entries "
                f"but the model has {self.num_layers} layers"
            )
        for per_layer in ("mlp_sizes", "layer_norms"):
            got = getattr(self, per_layer)
            if got is not None and len(got) != self.num_layers:
                raise UnsupportedArchitecture(f"{self.name}: {per_layer} has {len(got)} entries but the model has "
                                              f"{self.num_layers} layers")
        if "chunked_attention" in self.layer_types and not self.attention_chunk_size:
            raise UnsupportedArchitecture(f"{self.name}: chunked-attention layers but no attention_chunk_size")
        if {"recurrent", "parallel_hybrid"} & set(self.layer_types) and self.recurrent is None:
            raise UnsupportedArchitecture(f"{self.name}: recurrent layers but no recurrent mixer's shapes")
        if "sliding_attention" in self.layer_types and not self.sliding_window:
            raise UnsupportedArchitecture(
                f"{self.name}: sliding-attention layers but no sliding_window size"
            )
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedArchitecture(
                f"{self.name}: {self.num_heads} attention heads are not divisible "
                f"into {self.num_kv_heads} KV heads"
            )
        return self

    # -- convenience ---------------------------------------------------------
    @property
    def max_len_limit(self) -> int | None:
        """The longest max_model_len vLLM accepts for this model (None: config.json names no length)."""
        return self.derived_max_len or self.max_position_embeddings

    @property
    def max_len_source(self) -> str:
        """Where `max_len_limit` comes from, for messages."""
        return self.derived_max_len_from or "max_position_embeddings in config.json"

    @property
    def weight_dtype_bytes(self) -> int:
        return dtype_bytes(self.torch_dtype)

    @property
    def attention_layers(self) -> tuple[AttentionLayer, ...]:
        """Every layer's attention kind (analysis.model.layers), which owns its KV-cache and attention formulas."""
        return _attention_layers(self.num_heads, self.num_kv_heads, self.head_dim, self.sliding_window,
                                 self.layer_types, self.mla, self.recurrent, dtype_bytes(self.torch_dtype),
                                 self.attention_chunk_size, self.sparse_indexer, self.full_attention_kv,
                                 self.v_head_dim, self.compressed_attention)

    @property
    def attention_kinds(self) -> tuple[tuple[AttentionLayer, int], ...]:
        """The distinct layer kinds and how many layers have each, in order of first appearance: what a sum
        over the layers needs."""
        return _kinds(self.attention_layers)

    @property
    def num_sliding_layers(self) -> int:
        return sum(t == "sliding_attention" for t in self.layer_types)

    @property
    def num_full_layers(self) -> int:
        # Layers of any other kind are not full: a new kind is not counted as full attention.
        return self.num_layers - sum(t != "full_attention" for t in self.layer_types)

    @property
    def attention_kind(self) -> str:
        """MHA / GQA / MQA / MLA, or the mixer of an attention-free model, for display."""
        if self.attention_free:
            return "attention-free"
        if self.compressed_attention is not None:
            return "CSA/HCA"  # DeepSeek-V4's compressed sparse and heavily compressed attention
        if self.mla:
            return "MLA"
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    def with_dtype(self, dtype: str = "auto") -> Architecture:
        """This architecture with its weights (and an auto KV cache) in the dtype vLLM runs for ``--dtype``.

        ``auto`` follows vLLM's ``_resolve_auto_dtype`` (vllm/config/model.py, 0.32): a float32 checkpoint
        is downcast to the platform's first supported dtype — bfloat16 on Ampere or newer and on x86 CPUs,
        float16 on Volta/Turing: 2 bytes either way — and any other config dtype is kept. An explicit
        dtype replaces the config's (``float32`` runs a bf16 checkpoint in float32)."""
        name = dtype.removeprefix("torch.").lower()
        if name == "auto":
            if dtype_bytes(self.torch_dtype) != 4:
                return self
            name = "bfloat16"
        name = {"float": "float32", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
                "half": "float16"}.get(name, name)
        if _DTYPE_BYTES.get(name) not in (2, 4):
            raise ValueError(f"--dtype {dtype!r}: vLLM runs weights in auto, bfloat16, float16 or float32")
        return self if name == self.torch_dtype else self.model_copy(update={"torch_dtype": name})

    def with_quantization(self, name: str | None, generation: str | None = None,
                          vllm_version: str | None = None, segment: str | None = None) -> Architecture:
        """This architecture as vLLM runs it with ``--quantization NAME`` (None: as the checkpoint
        says) on a GPU of ``generation`` (the catalog's ``GPU.generation``: some kernels pad per
        device architecture)."""
        scheme = self.quantization
        if name is not None:
            try:
                scheme = scheme_for_override(name, scheme)
            except QuantizationError as exc:
                raise UnsupportedArchitecture(f"{self.name}: {exc}") from None
        if scheme is not None:
            scheme = scheme.for_device(generation, vllm_version, segment)
        if scheme == self.quantization:
            return self
        return self.model_copy(update={"quantization": scheme})

    def is_moe_layer(self, index: int) -> bool:
        return self.has_mlp(index) and self.moe is not None and index not in self.moe.dense_layers

    def has_mlp(self, index: int) -> bool:
        return self.mlp_layers is None or index in self.mlp_layers

    def attention_shape(self, index: int) -> tuple[int, int]:
        """Layer ``index``'s (KV heads, head_dim): ``full_attention_kv`` on a full-attention layer where set."""
        if self.full_attention_kv is not None and self.layer_types[index] == "full_attention":
            return self.full_attention_kv
        return self.num_kv_heads, self.head_dim

    def mlp_size(self, index: int) -> int:
        """Layer ``index``'s dense-MLP intermediate width."""
        return self.mlp_sizes[index] if self.mlp_sizes is not None else self.intermediate_size

    @property
    def num_norms(self) -> int:
        """The decoder layers' norm weights (the final norm aside)."""
        if self.layer_norms is not None:
            return sum(self.layer_norms[:self.num_layers])
        return self.num_layers * self.norms_per_layer

    @property
    def num_attention_layers(self) -> int:
        """Layers with attention (a hybrid's recurrent and MLP-only layers have none)."""
        return sum(t in ("full_attention", "sliding_attention", "chunked_attention", "parallel_hybrid",
                         "compressed_attention") for t in self.layer_types)

    @property
    def attention_free(self) -> bool:
        """No layer attends: every layer a recurrent mixer (Mamba, Mamba2). vLLM's ``IsAttentionFree`` models, for
        which it turns the prefix cache off by default (``ModelConfig.is_prefix_caching_supported``)."""
        return self.num_attention_layers == 0 and self.num_recurrent_layers == self.num_layers

    @property
    def num_recurrent_layers(self) -> int:
        return sum(t in ("recurrent", "parallel_hybrid") for t in self.layer_types)

    @property
    def sublayers(self) -> int:
        """Mixers and MLPs over every layer: each ends in a row-parallel projection (an all-reduce under tensor
        parallelism). Two a layer in a plain decoder, one in Nemotron-H's."""
        mixers = sum((2 if t == "parallel_hybrid" else 1) for t in self.layer_types if t != "mlp")
        return mixers + sum(self.has_mlp(i) for i in range(self.num_layers))

    # -- construction ---------------------------------------------------------
    @classmethod
    def from_config(cls, source: str | Path | dict[str, Any], name: str | None = None) -> Architecture:
        """Build from a config.json path, a model directory, or an already-parsed dict."""
        if isinstance(source, dict):
            return _from_dict(source, name or source.get("_name_or_path") or "model")
        path = Path(source)
        path = path / "config.json" if path.is_dir() else path
        cfg = read_config_file(path)
        cfg = with_modelopt_sidecar(path.parent / "hf_quant_config.json", cfg, name or path.parent.name)
        return _from_dict(cfg, name or path.parent.name, _max_pixels(path.parent / "preprocessor_config.json"),
                          _max_pixels(path.parent / "video_preprocessor_config.json"))


def _derived_max_len(cfg: dict[str, Any], model_type: str) -> tuple[int | None, str | None]:
    """vLLM 0.32's derived max_model_len (``_get_and_verify_max_len``, vllm/config/model.py) and where it comes
    from: the smallest length key (model_max_length wins), times the RoPE scaling factor unless the RoPE type
    already scales max_position_embeddings (llama3, yarn, longrope …) or the model is a Gemma 3. (None, None)
    when that is just max_position_embeddings, or when config.json names no length."""
    derived, key = math.inf, None
    for k in MAX_LEN_KEYS:
        v = cfg.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and v < derived:
            derived, key = v, k
    if isinstance(cfg.get("model_max_length"), int | float) and cfg["model_max_length"]:
        derived, key = cfg["model_max_length"], "model_max_length"
    if key is None:
        return None, None
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    params: list[dict[str, Any]] = []
    if isinstance(rope, dict) and rope:
        nested = all(isinstance(v, dict) for v in rope.values())  # per layer type (Gemma 3, …)
        params = [p for p in rope.values() if p] if nested else [rope]
    factor: Any = 1.0
    if params and "gemma3" not in model_type:
        for rp in params:
            if rp.get("rope_type", rp.get("type")) not in _ROPE_PRESCALED:
                factor = rp.get("factor", factor)
        if not isinstance(factor, int | float) or isinstance(factor, bool) or not factor > 0:
            factor = 1.0  # vLLM falls back to 1.0 for a null factor
    if key == "max_position_embeddings" and factor == 1:
        return None, None
    source = f"{key} {derived:,} in config.json" + (f" × RoPE scaling factor {factor:g}" if factor != 1 else "")
    limit = derived * factor
    if not limit <= MAX_POSITIONS:  # model_max_length 1e30 ("no limit"), or a factor past the bound
        return MAX_POSITIONS, f"{source}, capped at kvprof's bound"
    return int(limit), source


def _rope_cache_positions(cfg: dict[str, Any], model_type: str) -> tuple[int, ...]:
    """The positions of each RoPE cos/sin cache vLLM builds (``get_rope``, layers/rotary_embedding/__init__.py).

    ``get_rope`` keeps one instance per distinct configuration, so a model whose layer types use different RoPE
    parameters (Gemma 3: a local base for sliding layers, the scaled global one for full layers) holds one cache
    each. A cache spans max_position_embeddings positions, × the factor for linear and dynamic-NTK scaling
    (``LinearScalingRotaryEmbedding``: "the maximum length after applying the rope scaling"), the original length ×
    the factor for YaRN (``YaRNScalingRotaryEmbedding``, DeepSeek's), the short and the long cache together for
    LongRoPE, and × 4 for multimodal RoPE (``MRotaryEmbedding``'s positions_factor). Empty where config.json names
    no length or the model has learned positions."""
    max_pos = cfg.get("max_position_embeddings")
    if not isinstance(max_pos, int) or isinstance(max_pos, bool) or max_pos <= 0 or model_type in _LEARNED_POSITIONS:
        return ()
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        return ()
    if rope and all(isinstance(v, dict) for v in rope.values()):  # per layer type
        configs = list(rope.values())
    elif model_type in ("gemma3", "gemma3_text") and cfg.get("rope_local_base_freq"):
        configs = [rope, {"rope_type": "default", "local": True}]  # the global RoPE, and the sliding layers' own
    else:
        configs = [rope]
    out = []
    for rp in configs:
        if not isinstance(rp, dict):
            continue
        kind = rp.get("rope_type", rp.get("type", "default"))
        factor = _positive_number(rp.get("factor")) or 1
        original = _positive_number(rp.get("original_max_position_embeddings")) or max_pos
        if kind in ("linear", "dynamic"):
            n = max_pos * factor
        elif kind in ("yarn", "deepseek_yarn"):
            n = original * factor
        elif kind in ("longrope", "su"):
            n = original + max_pos
        else:
            n = max_pos * (4 if "mrope_section" in rp else 1)
        out.append(min(int(n), MAX_POSITIONS * 8))
    return tuple(out)


def _from_dict(raw: dict[str, Any], name: str, max_pixels: int | None = None,
               video_max_pixels: int | None = None) -> Architecture:
    check_architectures(raw, name)
    cfg = dict(raw)
    text = cfg.get("text_config")
    if isinstance(text, dict):
        # Multimodal wrappers (Gemma 3, Llava, Qwen-VL…) nest the decoder's facts.
        merged = {**text}
        for k in ("torch_dtype", "dtype", "tie_word_embeddings"):
            if k not in merged and k in cfg:
                merged[k] = cfg[k]
        cfg = merged
    model_type = str(cfg.get("model_type") or raw.get("model_type") or "custom")
    if model_type in _ENCODER_DECODER or cfg.get("is_encoder_decoder"):
        raise UnsupportedArchitecture(f"{name}: encoder-decoder models ({model_type}) are not supported")
    if cfg.get("use_bidirectional_attention") is True:  # Gemma-4's "vision" (image tokens only) is its reader's
        raise UnsupportedArchitecture(f"{name}: use_bidirectional_attention true: an encoder (an embedding model), "
                                      "not the causal decoder kvprof plans")
    check_bounds(cfg, name)
    check_keys(raw, cfg, model_type, name)
    reader = FAMILY_READERS.get(model_type)
    cfg, hybrid = reader(cfg, name) if reader is not None else (cfg, {})

    n_layers = _positive_int(
        _first(cfg, ("num_hidden_layers", "n_layer", "num_layers"), "layer count", name), "layer count", name
    )
    hidden = _positive_int(_first(cfg, ("hidden_size", "n_embd", "d_model"), "hidden size", name),
                           "hidden size", name)
    heads = _positive_int(_first(cfg, ("num_attention_heads", "n_head"), "attention head count", name),
                          "attention head count", name)
    if model_type == "gpt_bigcode" and cfg.get("num_key_value_heads") not in (None, 1 if cfg.get("multi_query")
                                                                               else heads):
        raise UnsupportedArchitecture(f"{name}: num_key_value_heads {cfg['num_key_value_heads']!r} disagrees with "
                                      f"multi_query {bool(cfg.get('multi_query'))}, which vLLM's GPTBigCode reads")
    kv_heads = 1 if cfg.get("multi_query") else cfg.get("num_key_value_heads") or cfg.get("n_head_kv") or heads
    for key in ("num_key_value_heads", "n_head_kv"):  # written but 0 or negative: not "absent" (= heads)
        if not cfg.get("multi_query") and cfg.get(key) is not None:
            kv_heads = _positive_int(cfg[key], f"config.json {key}", name)
            break
    head_dim = cfg.get("head_dim")
    if head_dim is None and cfg.get("kv_lora_rank"):
        head_dim = 1  # MLA: set from qk_nope_head_dim + qk_rope_head_dim below (GLM-4.7-Flash: 2,048 over 20 heads)
    if head_dim is None:
        if hidden % heads:
            raise UnsupportedArchitecture(
                f"{name}: no head_dim and hidden_size {hidden} is not divisible by {heads} heads"
            )
        head_dim = hidden // heads
    gated = model_type not in _NON_GATED
    default_inter = 4 * hidden if not gated else None
    intermediate = cfg.get("intermediate_size") or cfg.get("n_inner") or cfg.get("ffn_dim") or default_inter
    if intermediate is None:
        raise UnsupportedArchitecture(f"{name}: config.json has no intermediate_size")
    vocab = _first(cfg, ("vocab_size", "padded_vocab_size"), "vocab size", name)
    tie = cfg.get("tie_word_embeddings")
    if tie is None:
        tie = model_type not in _UNTIED_BY_DEFAULT

    mla = None
    if cfg.get("kv_lora_rank"):
        mla = _validated(MLA, name,
            kv_lora_rank=cfg["kv_lora_rank"],
            qk_rope_head_dim=_first(cfg, ("qk_rope_head_dim",), "qk_rope_head_dim", name),
            qk_nope_head_dim=_first(cfg, ("qk_nope_head_dim",), "qk_nope_head_dim", name),
            v_head_dim=_first(cfg, ("v_head_dim",), "v_head_dim", name),
            q_lora_rank=cfg.get("q_lora_rank"),
            expanded_cache=bool(hybrid.pop("mla_expanded_cache", False)),  # a family reader's say (MiniCPM3)
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if cfg.get("mlp_bias"):
            raise UnsupportedArchitecture(f"{name}: mlp_bias true: vLLM's latent-attention models build their MLPs "
                                          "without bias")

    layer_types = hybrid.get("layer_types") or _layer_types(cfg, model_type, n_layers, name)
    derived_len, derived_from = _derived_max_len(cfg, model_type)
    window = cfg.get("sliding_window") if "sliding_attention" in layer_types else None
    if window is not None:  # however the layer types were read or derived: -3 or 0.5 is no window size
        window = _positive_int(window, "config.json sliding_window", name)
    learned_pos = cfg.get("n_positions") or cfg.get("max_position_embeddings") or 0
    torch_dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    try:
        dtype_bytes(torch_dtype)
    except ValueError as exc:
        raise UnsupportedArchitecture(f"{name}: {exc}") from exc

    encoder = _encoder_params(raw, hidden, name)
    fields = dict(
        name=name,
        model_type=model_type,
        num_layers=n_layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        intermediate_size=intermediate,
        mlp_gated=gated,
        tie_word_embeddings=bool(tie),
        torch_dtype=torch_dtype,
        qkv_bias=bool(cfg.get("attention_bias") or model_type in _QKV_BIAS or not gated),
        # Qwen2's family biases q, k and v only (qwen2.py: o_proj bias=False, whatever attention_bias says)
        o_bias=(bool(cfg.get("attention_bias")) and model_type not in _QKV_BIAS) or not gated,
        mlp_bias=bool(cfg.get("mlp_bias")) or not gated,
        qk_norm=model_type in _QK_NORM,
        attention_sinks=model_type == "gpt_oss",
        norms_per_layer=4 if model_type in _FOUR_NORMS else 2,
        norm_bias=model_type in _NORM_BIAS,
        learned_position_embeddings=learned_pos if model_type in _LEARNED_POSITIONS else 0,
        max_position_embeddings=cfg.get("max_position_embeddings") or cfg.get("n_positions"),
        derived_max_len=derived_len,
        derived_max_len_from=derived_from,
        sliding_window=window,
        layer_types=layer_types,
        mtp_layers=int(cfg.get("num_nextn_predict_layers") or 0),
        draft_vocab_size=cfg.get("draft_vocab_size"),
        rope_cache_positions=_rope_cache_positions(cfg, model_type),
        encoder_params=encoder[0], encoder_replicated_params=encoder[1], encoder_note=encoder[2],
        vision=_vision_tower(raw, hidden, max_pixels, video_max_pixels),
        encoder_modalities=_encoder_modalities(raw),
        transformers_backend=runs_transformers_backend(raw),
    )
    try:
        quantization = scheme_from_config(cfg.get("quantization_config", raw.get("quantization_config")),
                                          MODULE_NAMES.get(str(raw.get("model_type"))) or MODULE_NAMES.get(model_type))
    except QuantizationError as exc:
        raise UnsupportedArchitecture(f"{name}: {exc}") from None
    if model_type == "deepseek_v4":
        quantization = _deepseek_v4_scheme(quantization, cfg, name)
    moe = hybrid.pop("moe") if "moe" in hybrid else _moe(cfg, model_type, n_layers, intermediate, name)
    fields.update(hybrid)
    sparse = _sparse_indexer(cfg, n_layers, name) if model_type in _SPARSE_ATTENTION else None
    if sparse is not None and mla is None:
        raise UnsupportedArchitecture(f"{name}: a sparse-attention indexer without MLA (kv_lora_rank)")
    return _validated(Architecture, name, **fields, moe=moe, mla=mla, quantization=quantization,
                      sparse_indexer=sparse)


@lru_cache(maxsize=256)
def _attention_layers(num_heads: int, num_kv_heads: int, head_dim: int, sliding_window: int | None,
                      layer_types: tuple[str, ...], mla: MLA | None, recurrent: Mamba2 | GatedDeltaNet | None = None,
                      model_dtype_bytes: int = 2, chunk: int | None = None,
                      sparse: SparseIndexer | None = None,
                      full_kv: tuple[int, int] | None = None, v_dim: int | None = None,
                      compressed: CompressedAttention | None = None) -> tuple[AttentionLayer, ...]:
    """Every layer with a cache, in order: its attention kind or its recurrent state (MLP-only layers have none)."""
    if compressed is not None:
        c = compressed
        return tuple(CompressedSparseAttention(
            num_heads=num_heads, head_dim=c.head_dim, rope_head_dim=c.rope_head_dim, window_size=c.window,
            compress_ratio=r, index_head_dim=c.index_head_dim, index_n_heads=c.index_n_heads, index_topk=c.index_topk)
            for r in c.compress_ratios[:len(layer_types)])
    if mla is not None and sparse is not None:
        return tuple(SparseMLA(num_heads=num_heads, kv_lora_rank=mla.kv_lora_rank,
                               qk_rope_head_dim=mla.qk_rope_head_dim, indexer=i in sparse.layers,
                               index_head_dim=sparse.head_dim, index_n_heads=sparse.n_heads, index_topk=sparse.topk,
                               fp8_format=sparse.fp8_format) for i in range(len(layer_types)))
    if recurrent is not None:
        state = recurrent.state(model_dtype_bytes)
        full = FullAttention(num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim)
        out: list[AttentionLayer] = []
        for t in layer_types:
            out += {"recurrent": [state], "mlp": [], "parallel_hybrid": [full, state]}.get(t, [full])
        return tuple(out)
    attending = [t for t in layer_types if t != "mlp"]  # a NAS model's no-op attention layers hold nothing
    if mla is not None and mla.expanded_cache:  # every head's K and V, V padded to K's width (MiniCPM3)
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        return (FullAttention(num_heads=num_heads, num_kv_heads=num_heads, head_dim=qk),) * len(attending)
    if mla is not None:  # every layer; vLLM's allocator refuses MLA with windows (analysis.vllm.allocator)
        return (MultiHeadLatentAttention(num_heads=num_heads, kv_lora_rank=mla.kv_lora_rank,
                                         qk_rope_head_dim=mla.qk_rope_head_dim),) * len(attending)
    kv_heads, dim = full_kv or (num_kv_heads, head_dim)
    full = FullAttention(num_heads=num_heads, num_kv_heads=kv_heads, head_dim=dim, head_dim_v=v_dim)
    sliding = SlidingWindowAttention(num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                                     head_dim_v=v_dim, window_size=sliding_window or 0)
    chunked = ChunkedLocalAttention(num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                                    chunk_size=chunk or 0)
    by_type = {"sliding_attention": sliding, "chunked_attention": chunked}
    return tuple(by_type.get(t, full) for t in attending)


@lru_cache(maxsize=256)
def _kinds(layers: tuple[AttentionLayer, ...]) -> tuple[tuple[AttentionLayer, int], ...]:
    return tuple(Counter(layers).items())
