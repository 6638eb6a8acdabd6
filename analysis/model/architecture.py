"""A model's architecture facts, read from a Hugging Face ``config.json``.

Only what the KV-cache and roofline arithmetic needs is kept. Anything the
arithmetic cannot model (state-space layers, linear attention, encoder-decoder)
is refused with an :class:`UnsupportedArchitecture` that names the problem,
rather than producing a silently wrong number.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from analysis.model import config_keys
from analysis.model.layers import (
    AttentionLayer,
    ChunkedLocalAttention,
    CompressedSparseAttention,
    FullAttention,
    GatedDeltaNetState,
    Mamba1State,
    Mamba2State,
    MultiHeadLatentAttention,
    ShortConvState,
    SlidingWindowAttention,
    SparseMLA,
)
from analysis.model.module_names import MODULE_NAMES
from analysis.model.quantization import (
    AnyScheme,
    DeepseekV4Fp8,
    Fp8,
    QuantizationError,
    scheme_for_override,
    scheme_from_config,
)
from analysis.model.vision import Qwen2VisionTower, Qwen3VisionTower, Qwen25VisionTower, SiglipVisionTower, VisionTower
from analysis.model.vllm_models import supported_architectures

# A layer's sequence mixer: attention over every token or a window, a recurrent mixer (Mamba2, gated DeltaNet) that
# keeps a state, or none (an MLP-only layer of a hybrid: Nemotron-H's "-" and "E").
# "parallel_hybrid": attention and a recurrent mixer side by side in one layer (Falcon-H1), each with its cache
LayerType = Literal["full_attention", "sliding_attention", "chunked_attention", "recurrent", "parallel_hybrid", "mlp",
                    "compressed_attention"]


class UnsupportedArchitecture(ValueError):
    """The config describes something the analytic model cannot represent."""


# Families whose MLP has two matrices (up, down) instead of gate/up/down, and
# that carry biases and learned position embeddings (GPT-2 lineage).
_NON_GATED = {"gpt2", "gpt_bigcode", "gpt_neox", "opt", "gptj", "falcon", "phi", "bloom"}
_LEARNED_POSITIONS = {"gpt2", "gpt_bigcode", "opt"}
# Families whose norms are LayerNorms with a bias beside the weight (vLLM's gpt2.py, gpt_bigcode.py: nn.LayerNorm)
_NORM_BIAS = {"gpt2", "gpt_bigcode"}
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
# Layer kinds that carry recurrent state rather than a KV cache.
_STATEFUL_LAYER_TYPES = {"mamba", "linear_attention", "conv", "hybrid", "recurrent"}
_ENCODER_DECODER = {"t5", "mt5", "bart", "mbart", "whisper", "pegasus", "marian"}

_DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4,
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float8_e4m3fn": 1, "fp8": 1, "int8": 1,
}


# Plausibility bounds on a config.json's sizes, checked before anything is built per layer: each is far above
# any published model (the largest have ~126 layers, hidden 16384 to 25600, 128 heads of at most 512, 384
# experts, vocabularies of 262,144, 10M positions), so only a corrupt or hostile config reaches one.
MAX_LAYERS = 4096
MAX_HIDDEN_SIZE = 1 << 18  # 262,144
MAX_HEADS = 8192
MAX_HEAD_DIM = 8192
MAX_INTERMEDIATE_SIZE = 1 << 20  # 1,048,576
MAX_VOCAB_SIZE = 1 << 24  # 16,777,216
MAX_EXPERTS = 16384
MAX_POSITIONS = 1 << 28  # 268,435,456
MAX_CONFIG_BYTES = 16 << 20  # a config.json is kilobytes; quantization ignore lists make some a few hundred

# vLLM 0.32's keys for a model's length (ModelArchConfigConvertorBase.derive_max_model_len_and_key,
# transformers_utils/model_arch_config_convertor.py): the smallest one present counts, model_max_length wins.
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# RoPE types whose max_position_embeddings is already the scaled length (_get_and_verify_max_len).
_ROPE_PRESCALED = {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}


def dtype_bytes(name: str) -> int:
    """Bytes per element of a torch/HF dtype name (``torch.bfloat16`` or ``bfloat16``)."""
    key = name.removeprefix("torch.").lower()
    if key not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(_DTYPE_BYTES))}")
    return _DTYPE_BYTES[key]


class MoE(BaseModel):
    """Mixture-of-experts MLP layout."""

    model_config = ConfigDict(frozen=True)

    num_experts: int = Field(gt=0, le=MAX_EXPERTS)
    experts_per_token: int = Field(gt=0, le=MAX_EXPERTS)
    expert_intermediate_size: int = Field(gt=0, le=MAX_INTERMEDIATE_SIZE)
    shared_experts: int = Field(0, ge=0, le=MAX_EXPERTS)
    shared_expert_intermediate_size: int = Field(0, ge=0, le=MAX_EXPERTS * MAX_INTERMEDIATE_SIZE)
    shared_expert_gate: bool = False
    dense_layers: tuple[int, ...] = ()
    expert_bias: bool = False
    router_bias: bool = False
    # Gemma-4's router: a learned scale of the hidden size on its input and one a routed expert on its output
    router_scale: bool = False
    # The router's weight kept in float32 whatever the model dtype (vLLM's GateLinear with params_dtype float32:
    # MiniMax-M2's, MiMo-V2's moe_router_dtype)
    router_fp32: bool = False
    # A latent MoE (Nemotron-3 Super and Ultra's moe_latent_size): the routed experts run on a projection of the
    # hidden state to this width (fc1_latent_proj in, fc2_latent_proj out, once a MoE layer); None: on the hidden state
    latent_size: int | None = Field(None, gt=0, le=MAX_HIDDEN_SIZE)
    # Bits per expert weight, for a hand-built architecture without a quantization scheme
    # (a checkpoint's quantization_config becomes Architecture.quantization instead).
    expert_weight_bits: float | None = None


class MLA(BaseModel):
    """DeepSeek multi-head latent attention dimensions."""

    model_config = ConfigDict(frozen=True)

    kv_lora_rank: int = Field(gt=0, le=MAX_HIDDEN_SIZE)
    qk_rope_head_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    qk_nope_head_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    v_head_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    q_lora_rank: int | None = Field(None, le=MAX_HIDDEN_SIZE)


class SparseIndexer(BaseModel):
    """DeepSeek Sparse Attention's lightning indexer (vLLM's ``Indexer``, models/deepseek_v32/attention.py) on the
    ``layers`` that have one: ``n_heads`` query heads of ``head_dim`` scoring every cached token, the ``topk`` best
    of which MLA attends to. Its weights: ``wq_b`` (n_heads·head_dim × q_lora_rank, quantizable), ``wk`` (head_dim ×
    hidden, and a LayerNorm with bias over head_dim) and ``weights_proj`` (n_heads × hidden), the last two kept in
    the model dtype. ``fp8_format``: the latent row an fp8 cache stores (analysis.model.layers.SparseMLA)."""

    model_config = ConfigDict(frozen=True)

    n_heads: int = Field(gt=0, le=MAX_HEADS)
    head_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    topk: int = Field(gt=0, le=MAX_POSITIONS)
    layers: tuple[int, ...]
    fp8_format: Literal["fp8_ds_mla", "fp8"] = "fp8_ds_mla"

    def matrices(self, hidden: int, q_lora_rank: int) -> list[tuple[str, str, int, int]]:
        """(name, kind, out, in) of one layer's indexer."""
        return [("wq_b", "linear", self.n_heads * self.head_dim, q_lora_rank),
                ("wk", "unquantized", self.head_dim, hidden), ("weights_proj", "unquantized", self.n_heads, hidden)]

    def params(self, hidden: int, q_lora_rank: int) -> int:
        return sum(o * i for _, _, o, i in self.matrices(hidden, q_lora_rank)) + 2 * self.head_dim


class SharedBlocks(BaseModel):
    """Zamba2's shared transformer blocks (vLLM's ``Zamba2AttentionDecoderLayer``): ``blocks`` copies of attention
    over the layer's input beside the embeddings (``2 × hidden``) and a gated MLP, taken in turn by the hybrid
    layers; each hybrid layer adds its own ``linear`` projection and low-rank adapters of ``adapter_rank`` (on the
    MLP's gate and up projections, and on q, k and v with ``attention_adapters``). The attention's and MLP's weights
    are counted once a block, their KV cache once a hybrid layer."""

    model_config = ConfigDict(frozen=True)

    blocks: int = Field(gt=0, le=MAX_LAYERS)
    adapter_rank: int = Field(gt=0, le=MAX_HIDDEN_SIZE)
    attention_adapters: bool = False
    mlp_bias: bool = False


class CompressedAttention(BaseModel):
    """DeepSeek-V4's attention (vLLM 0.32's ``DeepseekV4Attention``, models/deepseek_v4/attention.py; the cache kinds
    are analysis.model.layers.CompressedSparseAttention's): per layer a ``compress_ratios`` entry, 1 for a sliding
    window alone, 4 for compressed sparse attention (CSA) with a lightning indexer of ``index_n_heads`` ×
    ``index_head_dim`` picking ``index_topk`` compressed rows, 128 for heavily compressed attention (HCA); every layer
    keeps the last ``window`` tokens. One latent row of ``head_dim`` (``rope_head_dim`` of it rotary) a token; queries
    through a ``q_lora_rank`` bottleneck; the output through ``o_groups`` grouped projections to ``o_lora_rank``."""

    model_config = ConfigDict(frozen=True)

    compress_ratios: tuple[Literal[1, 4, 128], ...]
    head_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    rope_head_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    window: int = Field(gt=0, le=MAX_POSITIONS)
    q_lora_rank: int = Field(gt=0, le=MAX_HIDDEN_SIZE)
    o_lora_rank: int = Field(gt=0, le=MAX_HIDDEN_SIZE)
    o_groups: int = Field(gt=0, le=MAX_HEADS)
    index_n_heads: int = Field(gt=0, le=MAX_HEADS)
    index_head_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    index_topk: int = Field(gt=0, le=MAX_POSITIONS)
    hc_mult: int = Field(1, gt=0, le=64)  # hyper-connection streams (mHC)
    hash_layers: int = Field(0, ge=0, le=MAX_LAYERS)  # the first layers route by token id, not a learned gate


class Mamba2(BaseModel):
    """A Mamba2 mixer (vLLM's ``MambaMixer2``): ``num_heads`` heads of ``head_dim`` (its inner width I = H·P),
    ``n_groups`` groups of B and C of ``state_size`` N, a causal convolution of ``conv_kernel`` taps, and the dtype of
    its SSM state in the cache."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["mamba2"] = "mamba2"
    num_heads: int = Field(gt=0, le=MAX_HEADS)
    head_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    n_groups: int = Field(gt=0, le=MAX_HEADS)
    state_size: int = Field(gt=0, le=MAX_HEAD_DIM)
    conv_kernel: int = Field(gt=1, le=64)
    conv_bias: bool = True
    proj_bias: bool = False
    gated_norm: bool = True  # the gated RMSNorm over the inner width (Falcon-H1 builds it only with mamba_rms_norm)
    ssm_cache_dtype: str = "float32"

    @property
    def inner(self) -> int:
        return self.num_heads * self.head_dim

    def tp_problem(self, tp: int) -> str | None:
        """Why vLLM's ``MambaMixer2`` cannot split over ``tp`` ranks (None: it can): its heads must split evenly,
        its groups too unless there is one group (replicated)."""
        if self.num_heads % tp:
            return (f"does not divide the model's {self.num_heads} Mamba2 heads (vLLM: 'Tensor parallel world size "
                    "must divide num heads.')")
        if self.n_groups % tp and self.n_groups != 1:
            return (f"does not divide the Mamba2 mixer's {self.n_groups} groups (vLLM: 'If tensor parallel world "
                    "size does not divide num_groups, then num_groups must equal 1.')")
        return None

    def state(self, model_dtype_bytes: int) -> Mamba2State:
        return Mamba2State(num_heads=self.num_heads, head_dim=self.head_dim, n_groups=self.n_groups,
                           state_size=self.state_size, conv_kernel=self.conv_kernel, conv_bytes=model_dtype_bytes,
                           ssm_bytes=_ssm_bytes(self.ssm_cache_dtype, model_dtype_bytes))

    def matrices(self, hidden: int) -> list[tuple[str, int, int]]:
        """(name, out, in) of its projections: in_proj to z, x, B, C and dt (2·I + 2·G·N + H rows), out_proj."""
        rows = 2 * self.inner + 2 * self.n_groups * self.state_size + self.num_heads
        return [("in_proj", rows, hidden), ("out_proj", hidden, self.inner)]

    def params(self, hidden: int) -> int:
        """The projections, the depthwise convolution over x, B and C (I + 2·G·N channels × conv_kernel, and its
        bias), dt_bias, A and D (H each), the gated RMSNorm over I, and the projections' biases with use_bias."""
        conv_dim = self.inner + 2 * self.n_groups * self.state_size
        n = sum(o * i for _, o, i in self.matrices(hidden)) + conv_dim * self.conv_kernel + 3 * self.num_heads
        n += (self.inner if self.gated_norm else 0) + (conv_dim if self.conv_bias else 0)
        if self.proj_bias:
            n += self.matrices(hidden)[0][1] + hidden
        return n


class GatedDeltaNet(BaseModel):
    """A gated DeltaNet layer (Qwen3-Next's and Qwen3.5's ``linear_attention``; vLLM's
    ``QwenGatedDeltaNetAttention``): ``num_k_heads`` query/key heads of ``head_k_dim`` and ``num_v_heads`` value heads
    of ``head_v_dim``, a causal convolution of ``conv_kernel`` taps over q, k and v, and its SSM state's dtype in the
    cache ("auto": the model dtype)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["gated_deltanet"] = "gated_deltanet"
    num_k_heads: int = Field(gt=0, le=MAX_HEADS)
    num_v_heads: int = Field(gt=0, le=MAX_HEADS)
    head_k_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    head_v_dim: int = Field(gt=0, le=MAX_HEAD_DIM)
    conv_kernel: int = Field(gt=1, le=64)
    ssm_cache_dtype: str = "auto"

    def tp_problem(self, tp: int) -> str | None:
        """Why vLLM cannot split the layer over ``tp`` ranks (None: it can): its state splits by value head
        (``gated_delta_net_state_shape``: ``divide(num_v_heads, tp)``)."""
        if self.num_v_heads % tp:
            return f"does not divide the gated DeltaNet's {self.num_v_heads} value heads"
        return None

    def state(self, model_dtype_bytes: int) -> GatedDeltaNetState:
        return GatedDeltaNetState(num_heads=self.num_v_heads, num_k_heads=self.num_k_heads,
                                  head_k_dim=self.head_k_dim, head_v_dim=self.head_v_dim,
                                  conv_kernel=self.conv_kernel, conv_bytes=model_dtype_bytes,
                                  ssm_bytes=_ssm_bytes(self.ssm_cache_dtype, model_dtype_bytes))

    def matrices(self, hidden: int) -> list[tuple[str, int, int]]:
        """in_proj_qkvz (q and k of Hk·dk, v and the output gate z of Hv·dv), in_proj_ba (β and the decay's a, one
        a value head), out_proj."""
        key, value = self.num_k_heads * self.head_k_dim, self.num_v_heads * self.head_v_dim
        return [("in_proj_qkvz", 2 * key + 2 * value, hidden), ("in_proj_ba", 2 * self.num_v_heads, hidden),
                ("out_proj", hidden, value)]

    def params(self, hidden: int) -> int:
        """The projections, the bias-free convolution over q, k and v (2·Hk·dk + Hv·dv channels × conv_kernel),
        dt_bias and A_log (Hv each), and the gated RMSNorm over dv."""
        conv_dim = 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim
        return (sum(o * i for _, o, i in self.matrices(hidden)) + conv_dim * self.conv_kernel
                + 2 * self.num_v_heads + self.head_v_dim)


class Mamba1(BaseModel):
    """A Mamba (v1) mixer (vLLM's ``MambaMixer``, Jamba's): an inner width of ``inner`` channels, a selective state
    of ``state_size`` per channel, a causal convolution of ``conv_kernel`` taps, Δ through a ``dt_rank`` bottleneck,
    and (Jamba's) RMSNorms over Δ, B and C."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["mamba1"] = "mamba1"
    inner: int = Field(gt=0, le=MAX_INTERMEDIATE_SIZE)
    state_size: int = Field(gt=0, le=MAX_HEAD_DIM)
    conv_kernel: int = Field(gt=1, le=64)
    dt_rank: int = Field(gt=0, le=MAX_HIDDEN_SIZE)
    conv_bias: bool = True
    proj_bias: bool = False
    dt_bc_norms: bool = True
    ssm_cache_dtype: str = "auto"

    def tp_problem(self, tp: int) -> str | None:
        """Why vLLM's ``MambaMixer`` cannot split over ``tp`` ranks (None: it can): its projections split the
        inner width evenly (``divide``)."""
        if self.inner % tp:
            return f"does not divide the Mamba mixer's inner width {self.inner}"
        return None

    def state(self, model_dtype_bytes: int) -> Mamba1State:
        return Mamba1State(num_heads=self.inner, state_size=self.state_size, conv_kernel=self.conv_kernel,
                           conv_bytes=model_dtype_bytes, ssm_bytes=_ssm_bytes(self.ssm_cache_dtype, model_dtype_bytes))

    def matrices(self, hidden: int) -> list[tuple[str, int, int]]:
        """in_proj to x and the gate z (2·I rows), x_proj to Δ's bottleneck, B and C, dt_proj back to I, out_proj."""
        return [("in_proj", 2 * self.inner, hidden), ("x_proj", self.dt_rank + 2 * self.state_size, self.inner),
                ("dt_proj", self.inner, self.dt_rank), ("out_proj", hidden, self.inner)]

    def params(self, hidden: int) -> int:
        """The projections, the depthwise convolution (I × conv_kernel, and its bias), dt_proj's bias, A (I × N), D
        (I), the in/out projections' biases with use_bias, and the norms over Δ, B and C."""
        n = sum(o * i for _, o, i in self.matrices(hidden)) + self.inner * self.conv_kernel
        n += (self.inner if self.conv_bias else 0) + self.inner + self.inner * self.state_size + self.inner
        if self.proj_bias:
            n += 2 * self.inner + hidden
        if self.dt_bc_norms:
            n += self.dt_rank + 2 * self.state_size
        return n


class ShortConv(BaseModel):
    """A gated short convolution (LFM2's ``conv`` layers, vLLM's ``ShortConv``): in_proj to B, C and x (3 × ``dim``),
    a depthwise causal convolution of ``conv_kernel`` taps (``conv_L_cache``), out_proj; biases with ``bias``."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["short_conv"] = "short_conv"
    dim: int = Field(gt=0, le=MAX_HIDDEN_SIZE)
    conv_kernel: int = Field(gt=1, le=64)
    bias: bool = False

    def tp_problem(self, tp: int) -> str | None:
        """Why vLLM cannot split the convolution over ``tp`` ranks (None: it can): its channels split evenly."""
        if self.dim % tp:
            return f"does not divide the short convolution's {self.dim} channels"
        return None

    def state(self, model_dtype_bytes: int) -> ShortConvState:
        return ShortConvState(num_heads=self.dim, conv_kernel=self.conv_kernel, conv_bytes=model_dtype_bytes,
                              ssm_bytes=0)

    def matrices(self, hidden: int) -> list[tuple[str, int, int]]:
        return [("in_proj", 3 * self.dim, hidden), ("out_proj", hidden, self.dim)]

    def params(self, hidden: int) -> int:
        n = sum(o * i for _, o, i in self.matrices(hidden)) + self.dim * self.conv_kernel
        return n + ((3 * self.dim + self.dim + hidden) if self.bias else 0)


RecurrentMixer = Annotated[Mamba1 | Mamba2 | GatedDeltaNet | ShortConv, Field(discriminator="kind")]


def _ssm_bytes(dtype: str, model_dtype_bytes: int) -> int:
    return model_dtype_bytes if dtype == "auto" else dtype_bytes(dtype)


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
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise UnsupportedArchitecture(f"no config.json at {path}")
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise UnsupportedArchitecture(f"{path}: {path.stat().st_size:,} bytes; a model's config.json is at most "
                                          f"{MAX_CONFIG_BYTES:,} bytes")
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UnsupportedArchitecture(f"{path} is not valid JSON: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise UnsupportedArchitecture(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        except RecursionError:
            raise UnsupportedArchitecture(f"{path}: nested too deeply to be a model's config.json") from None
        if not isinstance(cfg, dict):
            raise UnsupportedArchitecture(f"{path} does not hold a JSON object")
        cfg = _with_modelopt_sidecar(path.parent / "hf_quant_config.json", cfg, name or path.parent.name)
        return _from_dict(cfg, name or path.parent.name, _max_pixels(path.parent / "preprocessor_config.json"),
                          _max_pixels(path.parent / "video_preprocessor_config.json"))


def _check_keys(raw: dict[str, Any], cfg: dict[str, Any], model_type: str, name: str) -> None:
    """Refuse a config whose family has no reader, or that has a key its reader does not understand or a read key
    of another type than published configs give it (analysis.model.config_keys), naming each."""
    checks = [(cfg, model_type)]
    if cfg is not raw:  # a multimodal wrapper: its own keys against its family, the decoder's against the decoder's
        checks.insert(0, (raw, str(raw.get("model_type") or model_type)))
    for keys, family in checks:
        if not config_keys.has_reader(family):
            raise UnsupportedArchitecture(
                f"{name}: model_type {family!r} has no reader in kvprof, so its layer mix and weights are unknown "
                f"(read: {', '.join(config_keys.families())})")
        unread = config_keys.unread_keys(keys, family)
        if unread:
            raise UnsupportedArchitecture(
                f"{name}: config.json {'key' if len(unread) == 1 else 'keys'} {', '.join(unread)} "
                f"{'is' if len(unread) == 1 else 'are'} not read by kvprof's {family} reader; such a key may change "
                "the layer mix, the weights or the KV cache, so the model is refused rather than planned as "
                "something else")
        mistyped = config_keys.mistyped_keys(keys, family)
        if mistyped:
            raise UnsupportedArchitecture(f"{name}: config.json {'; '.join(mistyped)} (as every published "
                                          f"{family} config has it)")


def _first(cfg: dict[str, Any], keys: tuple[str, ...], what: str, name: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    raise UnsupportedArchitecture(
        f"{name}: config.json has no {what} (looked for {', '.join(keys)})"
    )


def _positive_int(value: Any, field: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UnsupportedArchitecture(f"{name}: {field} must be a positive integer, got {value!r}")
    return value


def _check_bounds(cfg: dict[str, Any], name: str) -> None:
    """Refuse a size past its plausibility bound (MAX_*) before anything is built per layer or per expert,
    naming the config key, its value and the bound."""
    bounds = (
        (("num_hidden_layers", "n_layer", "num_layers"), MAX_LAYERS),
        (("hidden_size", "n_embd", "d_model"), MAX_HIDDEN_SIZE),
        (("num_attention_heads", "n_head", "num_key_value_heads", "n_head_kv"), MAX_HEADS),
        (("head_dim", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"), MAX_HEAD_DIM),
        (("intermediate_size", "n_inner", "ffn_dim", "moe_intermediate_size"), MAX_INTERMEDIATE_SIZE),
        (("vocab_size", "padded_vocab_size"), MAX_VOCAB_SIZE),
        (("num_local_experts", "n_routed_experts", "num_experts", "num_experts_per_tok", "moe_topk",
          "n_shared_experts"), MAX_EXPERTS),
        (("kv_lora_rank", "q_lora_rank"), MAX_HIDDEN_SIZE),
        # model_max_length is left out: tokenizer-style configs write 1e30 for "no limit"
        ((*(k for k in _MAX_LEN_KEYS if k != "model_max_length"), "sliding_window"), MAX_POSITIONS),
    )
    for keys, bound in bounds:
        for key in keys:
            value = cfg.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > bound:
                raise UnsupportedArchitecture(
                    f"{name}: config.json {key} {value:,} is past kvprof's bound of {bound:,} (far above any "
                    "published model): not a real model's config")


def _derived_max_len(cfg: dict[str, Any], model_type: str) -> tuple[int | None, str | None]:
    """vLLM 0.32's derived max_model_len (``_get_and_verify_max_len``, vllm/config/model.py) and where it comes
    from: the smallest length key (model_max_length wins), times the RoPE scaling factor unless the RoPE type
    already scales max_position_embeddings (llama3, yarn, longrope …) or the model is a Gemma 3. (None, None)
    when that is just max_position_embeddings, or when config.json names no length."""
    derived, key = math.inf, None
    for k in _MAX_LEN_KEYS:
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


def _fraction(v: Any, what: str, name: str) -> float:
    """A share of a head (``partial_rotary_factor``): a number in (0, 1], else refused naming ``what``."""
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v <= 1:
        raise UnsupportedArchitecture(f"{name}: {what} must be in (0, 1], got {v!r}")
    return float(v)


def _positive_number(v: Any) -> float | None:
    """A config value that is a positive finite number (not a bool, a string or a list), else None."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return v if ok else None


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


# Qwen3-VL's model types (dense and MoE decoders; the same tower), and Qwen3.5's, whose vLLM model builds that tower
# (qwen3_5.py: Qwen3_VisionTransformer).
QWEN3_VL = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
# Qwen3.5's decoders: Qwen3-Next's layers (qwen3_5.py's Qwen3_5DecoderLayer), every layer MoE in the MoE model.
QWEN3_5_TEXT = ("qwen3_5_text", "qwen3_5_moe_text")

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


def _with_modelopt_sidecar(path: Path, cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """config.json with the quantization vLLM 0.32 reads for it (``transformers_utils/config.py``): its own
    ``quantization_config`` (or ``text_config``'s) wins; without one, a ModelOpt ``hf_quant_config.json`` beside it
    (the legacy ``{"producer", "quantization"}`` shape, ``quant_method`` set from its ``quant_algo`` as
    ``_normalize_quantization_config`` does); a config.json MIXED_PRECISION without ``quantized_layers`` takes the
    file's (``weight_utils.get_quant_config``). Where vLLM would refuse the file, so does kvprof, by name."""
    if not path.is_file():
        return cfg
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise UnsupportedArchitecture(f"{name}: {path}: {path.stat().st_size:,} bytes; a quantization config is at "
                                      f"most {MAX_CONFIG_BYTES:,} bytes")
    try:
        side = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):
        raise UnsupportedArchitecture(f"{name}: {path.name} is not readable JSON") from None
    quant = side.get("quantization") if isinstance(side, dict) else None
    if not isinstance(quant, dict):
        raise UnsupportedArchitecture(f"{name}: {path.name} has no \"quantization\" object, so vLLM cannot read it")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    own = cfg.get("quantization_config") or text.get("quantization_config")
    if isinstance(own, dict):
        method = str(own.get("quant_method") or "").lower()
        algo = str(own.get("quant_algo") or "").upper()
        if method.startswith("modelopt") and algo == "MIXED_PRECISION" and not own.get("quantized_layers"):
            where = "quantization_config" if cfg.get("quantization_config") else "text_config.quantization_config"
            merged = {**own, "quantized_layers": quant.get("quantized_layers")}
            if where == "quantization_config":
                return {**cfg, "quantization_config": merged}
            return {**cfg, "text_config": {**text, "quantization_config": merged}}
        return cfg
    producer = side.get("producer") if isinstance(side.get("producer"), dict) else {}
    if producer.get("name") != "modelopt" and "modelopt_quant_config" not in quant:
        raise UnsupportedArchitecture(
            f"{name}: {path.name} names no producer \"modelopt\", so vLLM 0.32 does not read it as a ModelOpt "
            f"checkpoint and would not start; kvprof cannot say which scheme it would run")
    algo = str(quant.get("quant_algo") or "").upper()
    methods = {"FP8": "modelopt", "FP8_PER_CHANNEL_PER_TOKEN": "modelopt", "FP8_PB_WO": "modelopt",
               "NVFP4": "modelopt_fp4"}
    if algo not in methods:
        raise UnsupportedArchitecture(
            f"{name}: {path.name} has quant_algo {quant.get('quant_algo')!r}; vLLM 0.32 reads only "
            f"{', '.join(methods)} from this file (\"Unknown ModelOpt quant algo\") and would not start")
    return {**cfg, "quantization_config": {**side, "quant_method": methods[algo]}}


def _max_pixels(path: Path) -> int | None:
    """The largest image a checkpoint's preprocessor_config.json lets through (``max_pixels``, or the newer
    ``size.longest_edge``), None where the file is absent or names none."""
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise UnsupportedArchitecture(f"{path}: {path.stat().st_size:,} bytes; a preprocessor config is at most "
                                      f"{MAX_CONFIG_BYTES:,} bytes")
    try:
        pre = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise UnsupportedArchitecture(f"{path} is not a readable JSON preprocessor config") from None
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


def _layer_types(cfg: dict[str, Any], model_type: str, n_layers: int, name: str) -> tuple[LayerType, ...]:
    """Which layers use a sliding window, from every convention HF configs use."""
    explicit = cfg.get("layer_types")
    if explicit:
        stateful = sorted({t for t in explicit if t in _STATEFUL_LAYER_TYPES})
        if stateful:
            raise UnsupportedArchitecture(
                f"{name}: layers of type {', '.join(stateful)} keep recurrent state, "
                "not a KV cache; kvprof models attention layers only"
            )
        unknown = sorted(set(explicit) - {"full_attention", "sliding_attention"})
        if unknown:
            raise UnsupportedArchitecture(f"{name}: unknown layer types {unknown} in layer_types")
        return tuple(explicit)
    window = cfg.get("sliding_window")
    if window:
        _positive_int(window, "config.json sliding_window", name)  # -1 or 0.5 is no window size
    if not window:
        return ("full_attention",) * n_layers
    pattern = cfg.get("sliding_window_pattern")
    pattern = pattern or cfg.get("_sliding_window_pattern")  # transformers 5 serialises it with an underscore
    if model_type in ("gemma3", "gemma3_text") and pattern:
        # Gemma 3: every `pattern`-th layer is global, the rest are local.
        return tuple(
            "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
            for i in range(n_layers)
        )
    if model_type == "gemma2":
        # Gemma 2 alternates, starting with a sliding layer.
        return tuple("sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers))
    if "use_sliding_window" in cfg:
        # Qwen2 convention: the window applies to layers at index >= max_window_layers.
        if not cfg["use_sliding_window"]:
            return ("full_attention",) * n_layers
        start = cfg.get("max_window_layers", 0) or 0
        return tuple("sliding_attention" if i >= start else "full_attention" for i in range(n_layers))
    # Mistral v0.1 convention: one window for every layer.
    return ("sliding_attention",) * n_layers


def _moe(cfg: dict[str, Any], model_type: str, n_layers: int, intermediate: int, name: str) -> MoE | None:
    counts = {k: cfg[k] for k in ("num_local_experts", "n_routed_experts", "num_experts") if cfg.get(k) is not None}
    if len({repr(v) for v in counts.values()}) > 1:  # transformers 5 writes num_experts as num_local_experts too
        listed = ", ".join(f"{k} {v!r}" for k, v in counts.items())
        raise UnsupportedArchitecture(f"{name}: the expert counts disagree ({listed})")
    n_experts = cfg.get("num_local_experts") or cfg.get("n_routed_experts") or cfg.get("num_experts")
    if not n_experts:
        return None
    top_k = _first(cfg, ("num_experts_per_tok", "moe_topk"), "experts per token", name)
    expert_inter = cfg.get("moe_intermediate_size") or intermediate
    shared = int(cfg.get("n_shared_experts") or 0)
    shared_inter = shared * expert_inter
    shared_gate = False
    if cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one gated shared expert
        shared, shared_inter, shared_gate = 1, int(cfg["shared_expert_intermediate_size"]), True
    dense: set[int] = set(range(int(cfg.get("first_k_dense_replace") or 0)))
    dense.update(cfg.get("mlp_only_layers") or [])
    # Qwen's MoE layer is every decoder_sparse_step-th, counted from 1 (qwen3_moe.py: (i + 1) % step == 0);
    # DeepSeek's every moe_layer_freq-th counted from 0 (deepseek_v2.py: i % freq == 0)
    step = cfg.get("decoder_sparse_step") or 1
    dense.update(i for i in range(n_layers) if (i + 1) % step != 0)
    freq = cfg.get("moe_layer_freq") or 1
    dense.update(i for i in range(n_layers) if i % freq != 0)
    return _validated(
        MoE, name,
        num_experts=n_experts,
        experts_per_token=top_k,
        expert_intermediate_size=expert_inter,
        shared_experts=shared,
        shared_expert_intermediate_size=shared_inter,
        shared_expert_gate=shared_gate,
        dense_layers=tuple(sorted(dense)),
        expert_bias=model_type == "gpt_oss",
        router_bias=model_type == "gpt_oss",
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


def _flags(v: Any, n: int, key: str, name: str) -> list[int]:
    if not isinstance(v, list) or len(v) != n or any(x not in (0, 1) or isinstance(x, bool) for x in v):
        raise UnsupportedArchitecture(f"{name}: {key} must list a 0 or 1 for each of the {n} layers")
    return v


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


def _check_architectures(raw: dict[str, Any], name: str) -> None:
    """Refuse a config.json whose ``architectures`` names a class vLLM 0.32 has no model for (where it names any)."""
    archs = raw.get("architectures")
    if archs is None or archs == []:
        return
    if not isinstance(archs, list) or not all(isinstance(x, str) for x in archs):
        raise UnsupportedArchitecture(f"{name}: config.json architectures must be a list of class names, got "
                                      f"{archs!r}")
    unknown = [x for x in archs if x not in supported_architectures()]
    if unknown:
        raise UnsupportedArchitecture(
            f"{name}: config.json names architecture {', '.join(unknown)}, which vLLM 0.32 has no model class for "
            "(its model registry); it would refuse the model or run it through its Transformers modeling backend, "
            "whose memory kvprof does not plan")


# A family's own reading: the config with its keys rewritten to the generic ones ``_from_dict`` reads, and the
# Architecture fields the family sets itself (its layer kinds, recurrent mixer, MoE …). A family without an entry is
# read by ``_from_dict`` alone. A new family with keys of its own is one function and one entry here (and its keys in
# analysis.model.config_keys).
FamilyReader = Callable[[dict[str, Any], str], tuple[dict[str, Any], dict[str, Any]]]


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


def _qwen2_moe(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Qwen2-MoE (vLLM's ``models/qwen2_moe.py``): q, k and v always biased, whatever transformers 5's
    ``qkv_bias`` says; a config that turns it off is refused (its checkpoint would have no such bias)."""
    if cfg.get("qkv_bias", True) is not True:
        raise UnsupportedArchitecture(f"{name}: qkv_bias {cfg['qkv_bias']!r}: vLLM's Qwen2-MoE always biases q, k "
                                      "and v")
    return {}


def _fields(read: Callable[[dict[str, Any], str], dict[str, Any]]) -> FamilyReader:
    """A reading that only sets Architecture fields."""
    return lambda cfg, name: (cfg, read(cfg, name))


def _llama4_text(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return {**cfg, "intermediate_size": cfg.get("intermediate_size_mlp")}, _llama4(cfg, name)  # the dense layers' MLP


def _qwen3_next_text(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    hybrid = _qwen3_next(cfg, name)
    if cfg.get("model_type") == "qwen3_5_moe_text" and cfg.get("intermediate_size") is None:
        cfg = {**cfg, "intermediate_size": cfg.get("moe_intermediate_size")}  # no dense MLP: every layer MoE
    return cfg, hybrid


FAMILY_READERS: dict[str, FamilyReader] = {
    "dbrx": lambda cfg, name: (_dbrx_keys(cfg), {}),
    "nemotron_h": _nemotron_h,
    "granitemoehybrid": _granite_hybrid,
    **dict.fromkeys(_SPARSE_ATTENTION, lambda cfg, name: (_sparse_attention_keys(cfg, name), {})),
    "minimax_m2": _fields(_minimax_m2),
    "falcon_h1": _falcon_h1,
    "jamba": _jamba,
    "nemotron-nas": _nemotron_nas,
    "gemma4_text": _gemma4,
    "mimo_v2_flash": _mimo_v2,
    "glm4_moe": _fields(_glm4_moe),
    "lfm2": _lfm2,
    "lfm2_moe": _lfm2_moe,
    "llama4_text": _llama4_text,
    "deepseek_v4": _deepseek_v4,
    "exaone4": _exaone4,
    "olmo_hybrid": _fields(_olmo_hybrid),
    "glm4_moe_lite": _fields(_glm4_moe_lite),
    "ernie4_5": _fields(_ernie4_5),
    "qwen2_moe": _fields(_qwen2_moe),
    "ernie4_5_moe": _fields(_ernie4_5_moe),
    "zamba2": _zamba2,
    **dict.fromkeys(("cohere", "cohere2"), _cohere),
    "glm4": _fields(_glm4),
    **dict.fromkeys(("olmo2", "olmoe"), _fields(_full_width_qk_norm)),
    "granitemoeshared": _fields(_granite_moe_shared),
    **dict.fromkeys(("mamba", "falcon_mamba"), _mamba),
    "mamba2": _mamba2,
    **dict.fromkeys(("qwen3_next", *QWEN3_5_TEXT), _qwen3_next_text),
}


def _from_dict(raw: dict[str, Any], name: str, max_pixels: int | None = None,
               video_max_pixels: int | None = None) -> Architecture:
    _check_architectures(raw, name)
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
    _check_bounds(cfg, name)
    _check_keys(raw, cfg, model_type, name)
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
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if cfg.get("mlp_bias"):
            raise UnsupportedArchitecture(f"{name}: mlp_bias true: vLLM's latent-attention models build their MLPs "
                                          "without bias")

    layer_types = hybrid.get("layer_types") or _layer_types(cfg, model_type, n_layers, name)
    derived_len, derived_from = _derived_max_len(cfg, model_type)
    window = cfg.get("sliding_window") if "sliding_attention" in layer_types else None
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


def _validated(model: type[BaseModel], label: str, /, **fields: Any) -> Any:
    """``model(**fields)``, its validation errors refused as an :class:`UnsupportedArchitecture` naming each field."""
    try:
        return model(**fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}".removeprefix(": ").replace("Value error, ", "")
            for e in exc.errors()
        )
        raise UnsupportedArchitecture(f"{label}: {problems}") from None


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
