"""Cache-layer kinds, one class each owning its formulas, as vLLM's ``v1/kv_cache_interface.py`` has one
spec class per KV-cache kind (``FullAttentionSpec``, ``SlidingWindowSpec``, ``MLAAttentionSpec``, ``MambaSpec``):
attention that caches tokens, and the recurrent layers of hybrid models (Mamba, Mamba2, gated DeltaNet, short
convolutions) that hold a state a request instead (``RecurrentState``).

Each kind answers, for one layer:

* ``kv_elements_per_token(tp)``: what it caches per token on one rank, in elements (× the KV dtype's bytes);
* ``tokens_held(context)``: the tokens of a ``context``-token sequence it keeps (``window``: its cap, or None);
* ``blocks_per_request(block_size, max_model_len, in_flight_tokens)``: the blocks vLLM reserves per request for
  a group of such layers, its admission worst case (vllm/v1/core/single_type_kv_cache_manager.py);
* ``attention_flops(context)``: FLOPs of one query token attending over what the layer holds.

``Architecture.attention_layers`` gives every layer of a model its kind; the KV arithmetic (analysis.model.kv),
the rooflines (analysis.model.roofline), the latency model and vLLM's allocator (analysis.vllm.allocator) sum
over those layers and never branch on the kind. A new kind is a class here and the line of
``Architecture.attention_layers`` that recognises it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, Literal


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(x: int, multiple: int) -> int:
    return cdiv(x, multiple) * multiple


def sliding_window_blocks(window: int, block_size: int, max_model_len: int, in_flight_tokens: int) -> int:
    """Blocks a request holds of a sliding-window cache (``SlidingWindowSpec.max_admission_blocks_per_request``,
    v1/kv_cache_interface.py, 0.32): the window plus the tokens in flight (a step's batched tokens, two steps' with
    async scheduling), never past max_model_len, plus one block for a window that straddles a block boundary."""
    return cdiv(min(window - 1 + in_flight_tokens, max_model_len), block_size) + 1


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """KV heads one rank stores: vLLM 0.32's ``ModelConfig.get_num_kv_heads`` (vllm/config/model.py),
    max(1, n_kv // tp). Past n_kv ranks each head is replicated on tp // n_kv ranks, which must be whole
    (``QKVParallelLinear``: ``divide(tp, n_kv)``): 8 KV heads at tp 16 is one head per rank, on two ranks each."""
    if tp < 1:
        raise ValueError("tensor parallel size must be >= 1")
    if num_kv_heads >= tp and num_kv_heads % tp:
        raise ValueError(f"{num_kv_heads} KV heads cannot be split evenly over {tp} ranks")
    if num_kv_heads < tp and tp % num_kv_heads:
        raise ValueError(f"{tp} ranks cannot replicate {num_kv_heads} KV heads evenly")
    return max(1, num_kv_heads // tp)


@dataclass(frozen=True)
class AttentionLayer:
    """One attention layer's KV cache and attention arithmetic. ``num_heads``: its query heads."""

    kind: ClassVar[str]
    num_heads: int

    @property
    def window(self) -> int | None:
        """Most tokens of a sequence the layer keeps (None: every token)."""
        return None

    @property
    def label(self) -> str:
        """Its kind as tables name it."""
        return self.kind

    @property
    def indexer_bytes(self) -> int:
        """Bytes a token of a sparse-attention indexer's keys (none but in a sparse layer)."""
        return 0

    def kv_elements_per_token(self, tp: int = 1) -> int:
        raise NotImplementedError

    def state_bytes(self, tp: int = 1) -> int:
        """Bytes a request holds whatever its length (a recurrent layer's state; attention: none)."""
        return 0

    def kv_bytes_per_token(self, tp: int = 1, dtype_bytes: int = 2) -> int:
        """Bytes it caches per token on one rank with a KV cache of ``dtype_bytes`` an element (vLLM's page size
        over its block size)."""
        return self.kv_elements_per_token(tp) * dtype_bytes

    def kv_bytes_read(self, context: int, tp: int = 1, dtype_bytes: int = 2) -> int:
        """Bytes of cache one decode token of a ``context``-token sequence reads: what the layer holds (a sparse
        layer reads less than it holds)."""
        return self.tokens_held(context) * self.kv_bytes_per_token(tp, dtype_bytes) + self.state_bytes(tp)

    def read_rates(self, tp: int = 1, dtype_bytes: int = 2) -> list[tuple[int, int | None]]:
        """:meth:`kv_bytes_read` past the state as pieces ``(bytes a token of context, up to how many tokens)``."""
        return [(self.kv_bytes_per_token(tp, dtype_bytes), self.window)]

    def tokens_held(self, context: int) -> int:
        return context if self.window is None else min(context, self.window)

    def blocks_per_request(self, block_size: int, max_model_len: int, in_flight_tokens: int) -> int:
        """Every token of the longest request: ``cdiv(max_model_len, block_size)``
        (``FullAttentionManager``)."""
        return cdiv(max_model_len, block_size)

    def flops_per_held_token(self) -> float:
        raise NotImplementedError

    def attention_flops(self, context: int) -> float:
        """FLOPs of one query token attending over the ``context`` tokens before it (as far as the layer keeps
        them)."""
        return self.tokens_held(context) * self.flops_per_held_token()

    def as_full(self) -> AttentionLayer:
        """The layer as vLLM allocates it with the hybrid KV-cache manager off (a window allocates like full
        attention; every other kind as itself)."""
        return self


@dataclass(frozen=True)
class FullAttention(AttentionLayer):
    """Multi-head, grouped-query or multi-query attention over every token: K and V of each KV head."""

    kind: ClassVar[str] = "full"
    num_kv_heads: int
    head_dim: int
    head_dim_v: int | None = None  # V's width where it is not K's (MiMo-V2: K 192, V 128; vLLM's head_size_v)

    @property
    def value_dim(self) -> int:
        return self.head_dim if self.head_dim_v is None else self.head_dim_v

    def kv_elements_per_token(self, tp: int = 1) -> int:
        return kv_heads_per_rank(self.num_kv_heads, tp) * (self.head_dim + self.value_dim)

    def flops_per_held_token(self) -> float:
        return 2 * self.num_heads * (self.head_dim + self.value_dim)  # QK^T and AV, 2 FLOPs per multiply-add


@dataclass(frozen=True)
class SlidingWindowAttention(FullAttention):
    """Attention over the last ``window_size`` tokens only; vLLM frees the blocks that fall out of the window."""

    kind: ClassVar[str] = "sliding"
    window_size: int = 0

    @property
    def window(self) -> int | None:
        return self.window_size

    def blocks_per_request(self, block_size: int, max_model_len: int, in_flight_tokens: int) -> int:
        """The window plus the tokens in flight, plus a straddling block (:func:`sliding_window_blocks`)."""
        return sliding_window_blocks(self.window_size, block_size, max_model_len, in_flight_tokens)

    def as_full(self) -> FullAttention:
        """The layer as vLLM allocates it with the hybrid KV-cache manager off: like a full-attention layer."""
        return FullAttention(num_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                             head_dim_v=self.head_dim_v)


@dataclass(frozen=True)
class ChunkedLocalAttention(FullAttention):
    """Attention within fixed chunks of ``chunk_size`` tokens (Llama 4's RoPE layers, ``attention_chunk_size``): a
    token attends to the tokens of its own chunk only, so a sequence holds at most one chunk's KV that matters; vLLM
    frees the blocks of chunks behind it. A request's worst case (``ChunkedLocalAttentionSpec
    .max_admission_blocks_per_request``): one chunk plus the tokens in flight, ``cdiv(min(chunk + in_flight,
    max_model_len), block_size)``."""

    kind: ClassVar[str] = "chunked"
    chunk_size: int = 0

    @property
    def window(self) -> int | None:
        return self.chunk_size

    def blocks_per_request(self, block_size: int, max_model_len: int, in_flight_tokens: int) -> int:
        return cdiv(min(self.chunk_size + in_flight_tokens, max_model_len), block_size)

    def as_full(self) -> FullAttention:
        """With the hybrid KV-cache manager off, vLLM allocates it like full attention
        (kv_cache_utils: ChunkedLocalAttentionSpec promoted to FullAttentionSpec)."""
        return FullAttention(num_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                             head_dim_v=self.head_dim_v)


@dataclass(frozen=True)
class MultiHeadLatentAttention(AttentionLayer):
    """DeepSeek's MLA: one compressed latent plus the decoupled RoPE key per token, shared by every head and
    replicated on every rank; attention runs absorbed, over the latent."""

    kind: ClassVar[str] = "mla"
    kv_lora_rank: int
    qk_rope_head_dim: int

    def kv_elements_per_token(self, tp: int = 1) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def flops_per_held_token(self) -> float:
        # Absorbed MLA: scores over latent + rope, output over the latent, per head.
        return 2 * self.num_heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)


@dataclass(frozen=True, kw_only=True)
class SparseMLA(MultiHeadLatentAttention):
    """DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): MLA whose query attends to the ``index_topk`` tokens an
    indexer picks. Per token it caches the MLA latent row and, where the layer has an indexer, the indexer's key:
    ``index_head_dim`` fp8 bytes and a float32 scale per 128 (132 B for a 128-wide key, whatever the KV dtype:
    ``DeepseekV32IndexerCache``, models/deepseek_v2.py). The latent row (``MLAAttentionSpec``,
    v1/kv_cache_interface.py; layers/attention/mla_attention.py) is 576 elements in the model dtype, or with an fp8
    cache ``fp8_ds_mla``'s 656 B (512 fp8 values, four float32 scales, the 64 RoPE values in bf16: FlashMLA-sparse,
    which vLLM canonicalises every quantized sparse cache to) or, on Blackwell's FlashInfer sparse backend, plain fp8
    (576 B). Every layer, latent and indexer, is one KV-cache group (``UniformTypeKVCacheSpecs``) of every token."""

    kind: ClassVar[str] = "sparse_mla"
    indexer: bool = True  # False: the layer reuses the previous layer's picks (GLM-5.2's IndexCache)
    index_head_dim: int = 128
    index_n_heads: int = 64
    index_topk: int = 2048
    fp8_format: Literal["fp8_ds_mla", "fp8"] = "fp8_ds_mla"

    @property
    def label(self) -> str:
        return self.kind if self.indexer else f"{self.kind} (no indexer)"

    @property
    def indexer_bytes(self) -> int:
        return self.index_head_dim + self.index_head_dim // 128 * 4 if self.indexer else 0

    def latent_bytes(self, dtype_bytes: int) -> int:
        latent = self.kv_lora_rank + self.qk_rope_head_dim
        if dtype_bytes == 1 and self.fp8_format == "fp8_ds_mla":
            return self.kv_lora_rank + self.kv_lora_rank // 128 * 4 + 2 * self.qk_rope_head_dim
        return latent * dtype_bytes

    def kv_bytes_per_token(self, tp: int = 1, dtype_bytes: int = 2) -> int:
        return self.latent_bytes(dtype_bytes) + self.indexer_bytes

    def kv_bytes_read(self, context: int, tp: int = 1, dtype_bytes: int = 2) -> int:
        """The indexer scores every cached token (its keys), then attention reads the ``index_topk`` latent rows it
        picked (a layer without an indexer reuses the previous layer's picks)."""
        return context * self.indexer_bytes + min(context, self.index_topk) * self.latent_bytes(dtype_bytes)

    def read_rates(self, tp: int = 1, dtype_bytes: int = 2) -> list[tuple[int, int | None]]:
        return [(self.latent_bytes(dtype_bytes), self.index_topk), (self.indexer_bytes, None)]

    def attention_flops(self, context: int) -> float:
        """Absorbed MLA over the picked tokens, and the indexer's ``index_n_heads`` dot products of
        ``index_head_dim`` with every cached token."""
        scoring = 2 * self.index_n_heads * self.index_head_dim * context if self.indexer else 0
        return min(context, self.index_topk) * self.flops_per_held_token() + scoring


def sparse_mla_fp8_format(generation: str | None, local_heads: int) -> Literal["fp8_ds_mla", "fp8"]:
    """The fp8 sparse-MLA cache vLLM 0.32 runs (platforms/cuda.py's backend order): on Blackwell with at most 16
    query heads a rank, FlashInfer's sparse MLA, plain fp8 (it refuses fp8_ds_mla); elsewhere FlashMLA-sparse, whose
    quantized caches are all fp8_ds_mla."""
    return "fp8" if generation == "blackwell" and local_heads <= 16 else "fp8_ds_mla"


@dataclass(frozen=True, kw_only=True)
class RecurrentState(AttentionLayer):
    """A recurrent layer's state (vLLM's ``MambaSpec``): bytes a request, not a token, in a convolution state (the
    model dtype) and an SSM state (``mamba_ssm_cache_dtype``). ``num_heads``: the heads its state is split by.

    Its blocks a request (``MambaSpec.max_memory_usage_bytes``, v1/kv_cache_interface.py): one with
    ``mamba_cache_mode`` none; with the prefix cache on (align, vLLM's default for hybrid models) two, plus the prefill
    checkpoint blocks its kind adds."""

    conv_bytes: int
    ssm_bytes: int
    cache_mode: Literal["none", "align"] = "none"
    prefill_checkpoint_blocks: ClassVar[int] = 0

    def kv_elements_per_token(self, tp: int = 1) -> int:
        return 0

    def tokens_held(self, context: int) -> int:
        return 0

    def blocks_per_request(self, block_size: int, max_model_len: int, in_flight_tokens: int) -> int:
        return 1 if self.cache_mode == "none" else 2 + self.prefill_checkpoint_blocks

    def flops_per_held_token(self) -> float:
        return 0.0

    def in_cache_mode(self, mode: Literal["none", "align"]) -> RecurrentState:
        return replace(self, cache_mode=mode)


@dataclass(frozen=True, kw_only=True)
class Mamba2State(RecurrentState):
    """A Mamba2 mixer's state (Nemotron-H's ``M`` layers). vLLM 0.32's ``MambaStateShapeCalculator.mamba2_state_shape``
    (model_executor/layers/mamba/mamba_utils.py): a convolution state of ``conv_kernel − 1`` rows of ``H·P + 2·G′·N``
    channels split over the ranks, and an SSM state of ``H/tp × P × N``, where G′ is ``n_groups`` raised to ``tp``
    when the groups cannot be split (``extra_groups_for_head_shards``). ``num_heads`` H, ``head_dim`` P,
    ``state_size`` N. ``MambaMixer2.get_kv_cache_spec`` adds one prefill checkpoint block."""

    kind: ClassVar[str] = "mamba2"
    prefill_checkpoint_blocks: ClassVar[int] = 1
    head_dim: int
    n_groups: int
    state_size: int
    conv_kernel: int

    def state_bytes(self, tp: int = 1) -> int:
        if self.num_heads % tp:
            raise ValueError(f"{self.num_heads} Mamba heads cannot be split evenly over {tp} ranks")
        groups = self.n_groups + (0 if self.n_groups % tp == 0 else tp - self.n_groups)
        conv_dim = self.num_heads * self.head_dim + 2 * groups * self.state_size
        conv = (self.conv_kernel - 1) * (conv_dim // tp) * self.conv_bytes
        return conv + self.num_heads // tp * self.head_dim * self.state_size * self.ssm_bytes

    def attention_flops(self, context: int) -> float:
        """A decode token's mixer work beside its projections: the causal convolution over ``conv_kernel`` taps of
        every channel, and the state update ``h ← exp(dt·A)·h + dt·x⊗B`` with its read-out ``C·h``: about five FLOPs
        a state element."""
        conv_dim = self.num_heads * self.head_dim + 2 * self.n_groups * self.state_size
        return 2 * self.conv_kernel * conv_dim + 5 * self.num_heads * self.head_dim * self.state_size


@dataclass(frozen=True, kw_only=True)
class Mamba1State(RecurrentState):
    """A Mamba (v1) mixer's state (Jamba's mamba layers). vLLM 0.32's ``MambaStateShapeCalculator
    .mamba1_state_shape``: a convolution state of ``conv_kernel − 1`` rows of the inner width split over the ranks,
    and an SSM state of ``inner/tp × state_size``. No prefill checkpoint block (``MambaMixer`` keeps the base
    spec). ``num_heads``: the inner width (Mamba1 has no heads; its state splits by channel)."""

    kind: ClassVar[str] = "mamba1"
    state_size: int
    conv_kernel: int

    def state_bytes(self, tp: int = 1) -> int:
        if self.num_heads % tp:
            raise ValueError(f"a Mamba inner width of {self.num_heads} cannot be split evenly over {tp} ranks")
        inner = self.num_heads // tp
        return (self.conv_kernel - 1) * inner * self.conv_bytes + inner * self.state_size * self.ssm_bytes

    def attention_flops(self, context: int) -> float:
        """The causal convolution over every channel and the selective scan's update and read-out: about five FLOPs
        a state element."""
        return 2 * self.conv_kernel * self.num_heads + 5 * self.num_heads * self.state_size


@dataclass(frozen=True, kw_only=True)
class ShortConvState(RecurrentState):
    """A short convolution's state (LFM2's ``conv`` layers, vLLM's ``ShortConv``): ``short_conv_state_shape``'s
    ``conv_kernel − 1`` rows of the convolution's width split over the ranks, in the model dtype; no SSM state and
    no prefill checkpoint block. ``num_heads``: the convolution's width (its state splits by channel)."""

    kind: ClassVar[str] = "short_conv"
    conv_kernel: int

    def state_bytes(self, tp: int = 1) -> int:
        if self.num_heads % tp:
            raise ValueError(f"a convolution {self.num_heads} wide cannot be split evenly over {tp} ranks")
        return (self.conv_kernel - 1) * (self.num_heads // tp) * self.conv_bytes

    def attention_flops(self, context: int) -> float:
        """The gated causal convolution over every channel."""
        return 2 * self.conv_kernel * self.num_heads + 2 * self.num_heads


@dataclass(frozen=True, kw_only=True)
class GatedDeltaNetState(RecurrentState):
    """A gated DeltaNet layer's state (Qwen3-Next's and Qwen3.5's ``linear_attention`` layers). vLLM 0.32's
    ``gated_delta_net_state_shape``: a convolution state of ``conv_kernel − 1`` rows of ``2·Hk·dk + Hv·dv`` channels
    split over the ranks, and an SSM state of ``Hv/tp × dv × dk``. ``num_heads``: the value heads Hv."""

    kind: ClassVar[str] = "gated_deltanet"
    num_k_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int

    @property
    def conv_dim(self) -> int:
        return 2 * self.num_k_heads * self.head_k_dim + self.num_heads * self.head_v_dim

    def state_bytes(self, tp: int = 1) -> int:
        if self.num_heads % tp or self.conv_dim % tp:
            raise ValueError(f"{self.num_heads} DeltaNet value heads cannot be split evenly over {tp} ranks")
        conv = (self.conv_kernel - 1) * (self.conv_dim // tp) * self.conv_bytes
        return conv + self.num_heads // tp * self.head_v_dim * self.head_k_dim * self.ssm_bytes

    def attention_flops(self, context: int) -> float:
        """A decode token's mixer work beside its projections: the causal convolution, and the delta rule on each
        value head's dv × dk state (decay, the key's read-out, the rank-one update and the query's read-out): about
        seven FLOPs a state element."""
        return 2 * self.conv_kernel * self.conv_dim + 7 * self.num_heads * self.head_v_dim * self.head_k_dim


@dataclass(frozen=True)
class CachePage:
    """One of the caches a multi-cache layer keeps (a vLLM ``KVCacheSpec`` of its own layer name): ``block_size``
    tokens a block, ``page_bytes`` a block (padded as vLLM pads it), and its admission rule: every token
    (``window`` None, ``FullAttentionSpec``/``MLAAttentionSpec``) or the last ``window`` tokens
    (``SlidingWindowSpec``). ``role`` names it in tables."""

    role: str
    block_size: int
    page_bytes: int
    window: int | None = None

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        """``FullAttentionSpec.max_memory_usage_bytes`` or ``SlidingWindowSpec.max_admission_blocks_per_request`` over
        the page (v1/kv_cache_interface.py, 0.32)."""
        if self.window is None:
            return cdiv(max_model_len, self.block_size)
        return sliding_window_blocks(self.window, self.block_size, max_model_len, in_flight_tokens)


@dataclass(frozen=True, kw_only=True)
class CompressedSparseAttention(AttentionLayer):
    """DeepSeek-V4's attention (vLLM 0.32's ``DeepseekV4Attention``, models/deepseek_v4/attention.py): one latent
    row of ``head_dim`` (``rope_head_dim`` of it rotary) a token, shared by every query head and replicated on every
    rank (``max_tp_shards=1``), kept in up to five caches of their own:

    * the last ``window`` tokens' rows (``DeepseekV4SWACache``: blocks of 64 tokens, every layer);
    * with ``compress_ratio`` r > 1, one row for every r tokens (``MLAAttentionSpec`` with ``tokens_per_state`` r, in
      blocks of the engine's block size) and the compressor's float32 state over the last ``coff·r`` tokens
      (``CompressorStateCache``: ``2·coff·head_dim`` wide, coff 2 where r is 4, blocks of 4 tokens where r is 4 and
      8 where it is 128);
    * where r is 4 (CSA), a lightning indexer picks the ``index_topk`` compressed rows the query attends to: its
      keys, one ``index_head_dim`` fp8 row and a float32 scale for every 4 tokens, and its own compressor's state.

    A row is ``fp8_ds_mla``'s 584 bytes (448 fp8 NoPE values, 64 bf16 RoPE ones, 8 scale bytes), the only cache vLLM
    0.32's FlashMLA-sparse path keeps; every page is padded to a multiple of 576 bytes (``_apply_alignment_padding``).
    The pages differ, so vLLM packs them block-outermost (analysis.vllm.allocator, ``_get_packed_kv_cache_groups``).
    """

    kind: ClassVar[str] = "csa"
    ROW_BYTES: ClassVar[int] = 584
    ALIGNMENT: ClassVar[int] = 576
    SWA_BLOCK: ClassVar[int] = 64
    head_dim: int = 512
    rope_head_dim: int = 64
    window_size: int = 128
    compress_ratio: int = 1
    index_head_dim: int = 128
    index_n_heads: int = 64
    index_topk: int = 512

    @property
    def label(self) -> str:
        return {1: "SWA", 4: "CSA (÷4)", 128: "HCA (÷128)"}.get(self.compress_ratio, f"C{self.compress_ratio}A")

    @property
    def indexer_row_bytes(self) -> int:
        return self.index_head_dim + self.index_head_dim // 128 * 4 if self.compress_ratio == 4 else 0

    def _page(self, data_bytes: int) -> int:
        return round_up(data_bytes, self.ALIGNMENT)

    def _windows(self) -> list[tuple[str, int, int, int]]:
        """The caches that hold a window a request, as (role, block, window, bytes a token): the rows' window, and
        where r > 1 the compressor's float32 state (``2·coff·head_dim`` wide over ``coff·r`` tokens, coff 2 where r
        is 4) and where r is 4 the indexer compressor's (``2·2·index_head_dim`` over 8)."""
        r = self.compress_ratio
        out = [("sliding window", self.SWA_BLOCK, self.window_size, self.ROW_BYTES)]
        if r > 1:
            coff = 2 if r == 4 else 1
            out.append((f"compressor ÷{r} state", 4 if r == 4 else 8, coff * r, 2 * coff * self.head_dim * 4))
        if r == 4:
            out.append(("indexer compressor state", 4, 8, 2 * 2 * self.index_head_dim * 4))
        return out

    def caches(self, block_size: int) -> tuple[CachePage, ...]:
        """This layer's caches as vLLM 0.32 specs them for an engine block of ``block_size`` tokens."""
        out = [CachePage(role, block, self._page(block * per_token), window)
               for role, block, window, per_token in self._windows()]
        r = self.compress_ratio
        if r > 1:
            out.append(CachePage(f"compressed ÷{r}", block_size, self._page(block_size // r * self.ROW_BYTES)))
        if r == 4:
            out.append(CachePage("indexer keys", block_size, self._page(block_size // 4 * self.indexer_row_bytes)))
        return tuple(out)

    def kv_bytes_per_token(self, tp: int = 1, dtype_bytes: int = 2) -> float:  # type: ignore[override]
        """Bytes a token adds past the window, whatever the KV dtype (the fp8_ds_mla row): a compressed row's share
        and the indexer key's, unpadded."""
        r = self.compress_ratio
        return 0.0 if r == 1 else (self.ROW_BYTES + (self.indexer_row_bytes * r // 4 if r == 4 else 0)) / r

    def kv_elements_per_token(self, tp: int = 1) -> int:
        # what the rows hold in bytes (one byte an fp8 element); the window's rows are state (state_bytes)
        return max(1, round(self.kv_bytes_per_token()))

    def state_bytes(self, tp: int = 1) -> int:
        """Bytes a request holds whatever its length: the window's rows and the compressors' float32 states."""
        return sum(window * per_token for _, _, window, per_token in self._windows())

    def tokens_held(self, context: int) -> int:
        return context

    def kv_bytes_read(self, context: int, tp: int = 1, dtype_bytes: int = 2) -> float:  # type: ignore[override]
        """A decode token reads the window's rows, then on a CSA layer every indexer key and the ``index_topk``
        compressed rows it picked, on an HCA layer every compressed row."""
        return sum(rate * (context if cap is None else min(context, cap))
                   for rate, cap in self.read_rates(tp, dtype_bytes))

    def read_rates(self, tp: int = 1, dtype_bytes: int = 2) -> list[tuple[float, int | None]]:  # type: ignore[override]
        r = self.compress_ratio
        rates: list[tuple[float, int | None]] = [(self.ROW_BYTES, self.window_size)]
        if r == 4:
            rates += [(self.ROW_BYTES / 4, 4 * self.index_topk), (self.indexer_row_bytes / 4, None)]
        elif r > 1:
            rates.append((self.ROW_BYTES / r, None))
        return rates

    def flops_per_held_token(self) -> float:
        return 4 * self.num_heads * self.head_dim  # scores over the row and the output from it, per head

    def attention_flops(self, context: int) -> float:
        r = self.compress_ratio
        attended = min(context, self.window_size)
        scoring = 0.0
        if r == 4:
            attended += min(context // 4, self.index_topk)
            scoring = 2 * self.index_n_heads * self.index_head_dim * (context // 4)
        elif r > 1:
            attended += context // r
        return attended * self.flops_per_held_token() + scoring
