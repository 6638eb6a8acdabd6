"""The pieces a model's architecture is made of, and what every config reader shares.

The layer kinds a config names (``LayerType``), the sub-models an :class:`~analysis.model.architecture.Architecture`
holds (experts, latent attention, a sparse indexer, recurrent mixers, Zamba2's shared blocks, DeepSeek-V4's
compressed attention), the plausibility bounds, and the small readers every family uses (a positive integer, a
fraction, a layer pattern, an MoE block). A new sub-model or mixer goes here; a new family's reading goes in
:mod:`analysis.model.families`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analysis.model.layers import (
    GatedDeltaNetState,
    Mamba1State,
    Mamba2State,
    ShortConvState,
)

# A layer's sequence mixer: attention over every token or a window, a recurrent mixer (Mamba2, gated DeltaNet) that
# keeps a state, or none (an MLP-only layer of a hybrid: Nemotron-H's "-" and "E").
# "parallel_hybrid": attention and a recurrent mixer side by side in one layer (Falcon-H1), each with its cache
LayerType = Literal["full_attention", "sliding_attention", "chunked_attention", "recurrent", "parallel_hybrid", "mlp",
                    "compressed_attention"]


class UnsupportedArchitecture(ValueError):
    """The config describes something the analytic model cannot represent."""


# Layer kinds that carry recurrent state rather than a KV cache.
_STATEFUL_LAYER_TYPES = {"mamba", "linear_attention", "conv", "hybrid", "recurrent"}


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
    # vLLM caches each head's K and V (V padded to K's qk_nope + qk_rope width) through its standard Attention, not the
    # latent: MiniCPM3's minicpm3.py, whose projections are MLA's but whose attention is not
    expanded_cache: bool = False


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


def _fraction(v: Any, what: str, name: str) -> float:
    """A share of a head (``partial_rotary_factor``): a number in (0, 1], else refused naming ``what``."""
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v <= 1:
        raise UnsupportedArchitecture(f"{name}: {what} must be in (0, 1], got {v!r}")
    return float(v)


def _positive_number(v: Any) -> float | None:
    """A config value that is a positive finite number (not a bool, a string or a list), else None."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return v if ok else None


def _flags(v: Any, n: int, key: str, name: str) -> list[int]:
    if not isinstance(v, list) or len(v) != n or any(x not in (0, 1) or isinstance(x, bool) for x in v):
        raise UnsupportedArchitecture(f"{name}: {key} must list a 0 or 1 for each of the {n} layers")
    return v


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


# Qwen3-VL's model types (dense and MoE decoders; the same tower), and Qwen3.5's, whose vLLM model builds that tower
# (qwen3_5.py: Qwen3_VisionTransformer).
QWEN3_VL = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")


# Qwen3.5's decoders: Qwen3-Next's layers (qwen3_5.py's Qwen3_5DecoderLayer), every layer MoE in the MoE model.
QWEN3_5_TEXT = ("qwen3_5_text", "qwen3_5_moe_text")


# A family's own reading: the config with its keys rewritten to the generic ones ``_from_dict`` reads, and the
# Architecture fields the family sets itself (its layer kinds, recurrent mixer, MoE …). A family without an entry is
# read by ``_from_dict`` alone. A new family with keys of its own is one function and one entry here (and its keys in
# analysis.model.config_keys).
FamilyReader = Callable[[dict[str, Any], str], tuple[dict[str, Any], dict[str, Any]]]


def _fields(read: Callable[[dict[str, Any], str], dict[str, Any]]) -> FamilyReader:
    """A reading that only sets Architecture fields."""
    return lambda cfg, name: (cfg, read(cfg, name))
