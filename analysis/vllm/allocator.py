"""What vLLM's paged KV allocator really does with a KV budget (vLLM v1, 0.3x).

Mirrors ``vllm/v1/core/kv_cache_utils.py`` and ``vllm/v1/kv_cache_interface.py``
for decoder models whose attention layers share one page size:

* every layer gets a spec: full attention, sliding window (its own window), or MLA;
* uniform models form one KV-cache group of all layers; hybrid models (sliding +
  full) are split into groups of equal layer count (group size = the smaller
  bucket, or the larger one when it is < 1.5× the smaller), each group of one type;
* a block holds ``block_size`` tokens of every layer in the widest group:
  ``bytes_per_block = layers_per_group · page_bytes``;
  ``num_blocks = budget // bytes_per_block``;
* a request's worst case, per group: full → ``cdiv(max_model_len, block_size)``;
  sliding → ``cdiv(min(window − 1 + in_flight_tokens, max_model_len), block_size) + 1``
  where ``in_flight_tokens = max_num_batched_tokens × (2 with async scheduling)``;
* ``max_concurrency = num_blocks / Σ_groups blocks_per_request`` and the logged
  ``KV cache size = int(max_concurrency × max_model_len)`` tokens;
* the block pool keeps one block out as the null block (``vllm/v1/core/block_pool.py``),
  so sequences that really fit together are counted from ``num_blocks − 1``
  (:func:`sequences_that_fit`, the only place that division is done).

Hybrid attention + recurrent models (Nemotron-H's Mamba2, Qwen3-Next's gated DeltaNet) share that one pool as
vLLM 0.32 does
(``Platform._align_hybrid_block_size``, platforms/interface.py; ``_get_kv_cache_groups_uniform_page_size``):

* the attention block is raised until its page holds a recurrent layer's state:
  ``block = unit · cdiv(state_bytes, unit · attention_bytes_per_token)`` with
  ``unit = max(kernel alignment, block_size)`` (16 on CUDA's attention backends, 32 on CPU), and the
  Mamba page is padded to the attention page;
* recurrent layers form groups of the same width as the attention groups; a request holds one block
  of each such group (``mamba_cache_mode`` none), or with prefix caching (align) two, three for a
  Mamba2 mixer (its prefill checkpoint);
* the logged token capacity is ``int(max_concurrency × max_model_len)`` from vLLM 0.20; before, the
  pool split evenly over the groups (:meth:`PagedCapacity.logged_tokens`).

Attention layers whose pages differ (Gemma-4's sliding layers of 8 KV heads of 256 beside global ones of 2 of
512) get one page as ``unify_kv_cache_spec_page_size`` gives them: the smaller page's block holds ``ratio`` times the
tokens (:func:`_unified_pages`), and each group reserves blocks of its own size. The packed groups vLLM builds
instead under a block-outermost KV-cache layout (``_get_packed_kv_cache_groups``: ``VLLM_KV_CACHE_LAYOUT`` or a KV
connector's choice; no backend's default) are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil

from analysis.model.architecture import Architecture
from analysis.model.kv import kv_dtype_bytes, layer_kv_bytes_per_token
from analysis.model.layers import (
    AttentionLayer,
    CachePage,
    CompressedSparseAttention,
    FullAttention,
    MultiHeadLatentAttention,
    RecurrentState,
    SparseMLA,
    cdiv,
)
from analysis.vllm.release import prefix_caching_default

# Kinds that keep every token of a request (vLLM's full-attention spec types, FullAttentionSpec and MLAAttentionSpec)
_EVERY_TOKEN = (FullAttention, MultiHeadLatentAttention, SparseMLA)
NULL_BLOCKS = 1  # BlockPool pops one block off the free queue as its null block at start-up


class NotModelled(ValueError):
    """A configuration whose vLLM allocation this module does not reproduce."""


@dataclass(frozen=True)
class Group:
    """One KV-cache group: layers of one kind (analysis.model.layers) that share a block table."""

    layer: AttentionLayer  # the kind every layer of the group has
    layers: tuple[int, ...]
    blocks_per_request: int
    block_size: int = 0  # tokens a block of this group holds (0: the pool's block size)
    caches: tuple[str, ...] = ()  # a packed group's caches by role (CachePage.role), else empty
    cache_window: int | None = None  # a packed group's caches' window (None: every token)

    @property
    def kind(self) -> str:
        # "full", "sliding", "mla"…; a packed group's caches ("sliding window", "compressed ÷4+indexer keys"…)
        return "+".join(self.caches) if self.caches else self.layer.kind

    @property
    def window(self) -> int | None:
        return self.cache_window if self.caches else self.layer.window


@dataclass(frozen=True)
class PagedCapacity:
    block_size: int
    max_model_len: int
    page_bytes: int  # one layer's block
    bytes_per_block: int  # one block across the widest group
    num_blocks: int
    groups: tuple[Group, ...] = field(repr=False)

    @property
    def blocks_per_request(self) -> int:
        return sum(g.blocks_per_request for g in self.groups)

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request

    @property
    def kv_cache_tokens(self) -> int:
        return int(self.max_concurrency * self.max_model_len)

    def logged_tokens(self, formula: str = "concurrency") -> int:
        """The token count vLLM's "GPU KV cache size" line prints, by the version's formula
        (``AccountingRules.kv_tokens_logged``): :attr:`kv_cache_tokens`, or before 0.20 the pool split evenly over
        the groups."""
        if formula == "pool_over_groups":
            return self.num_blocks // len(self.groups) * self.block_size
        return self.kv_cache_tokens

    @property
    def padding_layers(self) -> int:
        width = max(len(g.layers) for g in self.groups)
        return sum(width - len(g.layers) for g in self.groups)


def _layer_kinds(a: Architecture, hybrid_manager: bool, prefix_caching: bool) -> list[AttentionLayer]:
    if a.mla and a.num_sliding_layers:
        raise NotModelled(f"{a.name}: MLA with sliding-window layers")
    kinds = list(a.attention_layers)
    if a.recurrent is not None:
        if not hybrid_manager:
            raise NotModelled(f"{a.name}: recurrent layers with the hybrid KV-cache manager off")
        mode = "align" if prefix_caching else "none"  # MambaModelConfig.verify_and_update_config
        return [k.in_cache_mode(mode) if isinstance(k, RecurrentState) else k for k in kinds]
    if len(set(kinds)) > 1 and not hybrid_manager:
        # --disable-hybrid-kv-cache-manager: windowed layers allocate like full ones.
        return [k.as_full() for k in kinds]
    return kinds


def _group_layers(kinds: list[AttentionLayer]) -> list[tuple[AttentionLayer, list[int]]]:
    buckets: dict[AttentionLayer, list[int]] = {}
    for i, k in enumerate(kinds):
        buckets.setdefault(k, []).append(i)
    if len(buckets) == 1:
        ((k, layers),) = buckets.items()
        return [(k, layers)]
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < 1.5 * min(sizes):
        group_size = max(sizes)
    groups = []
    for k, layers in buckets.items():
        n = cdiv(len(layers), group_size)
        groups.extend((k, layers[i::n]) for i in range(n))
    return groups


def _unified_pages(a: Architecture, kinds: list[AttentionLayer], block_size: int, page: int, kv_cache_dtype: str,
                   tp: int) -> tuple[int, dict[AttentionLayer, int]]:
    """The one page every group's block fills, and the tokens a block holds in each attention kind whose page
    differs (``unify_kv_cache_spec_page_size``, kv_cache_utils.py, 0.32): where the attention kinds' pages differ
    (Gemma-4's sliding and global layers), a smaller page whose size divides the largest gets a block of
    ``block_size × ratio`` tokens; one that does not is padded to the largest (``page_size_padded``). Recurrent
    states are already padded to the attention page."""
    dtype = kv_dtype_bytes(kv_cache_dtype, a.torch_dtype)
    pages = {k: block_size * k.kv_bytes_per_token(tp, dtype) for k in kinds if not isinstance(k, RecurrentState)}
    if len(set(pages.values())) <= 1:
        return page, {}
    if a.recurrent is not None or any(isinstance(k, MultiHeadLatentAttention | SparseMLA) for k in pages):
        raise NotModelled(f"{a.name}: attention pages of different sizes beside recurrent or latent layers")
    top = max(pages.values())
    return top, {k: block_size * (top // p if top % p == 0 else 1) for k, p in pages.items()}


def paged_capacity(
    a: Architecture,
    kv_budget_bytes: int,
    *,
    block_size: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    kv_cache_dtype: str = "auto",
    tp: int = 1,
    async_scheduling: bool = False,
    hybrid_manager: bool = True,
    extra_bytes_per_block: int = 0,
    prefix_caching: bool | None = None,
    kernel_block_alignment: int = 16,
) -> PagedCapacity:
    """Blocks, concurrency and token capacity as vLLM computes them for a KV budget (per rank).
    ``extra_bytes_per_block``: other layers' pages in every block of a single-group pool (a speculative drafter's
    attention layers, ``analysis.vllm.speculative``). ``prefix_caching`` (None: vLLM's default, on, and off for an
    attention-free model) and ``kernel_block_alignment`` (the attention backend's smallest kernel block: 16 for
    CUDA's, 32 for vLLM's CPU backend) matter to recurrent models alone; ``block_size`` is then the configured one
    and the result's the raised one.

    An attention-free model (Mamba, Mamba2) has one group of every layer, a page of one layer's state, unpadded,
    and a block of ``max_model_len`` tokens without the prefix cache (``MambaModelConfig`` sets
    ``mamba_block_size`` so), of ``block_size`` with it (align)."""
    if prefix_caching is None:
        prefix_caching = prefix_caching_default(attention_free=a.attention_free)
    for label, v in (("block_size", block_size), ("max_model_len", max_model_len),
                     ("max_num_batched_tokens", max_num_batched_tokens)):
        if v <= 0:
            raise ValueError(f"{label} must be positive, got {v}")
    if kv_budget_bytes < 0:
        raise ValueError(f"KV budget must be >= 0 bytes, got {kv_budget_bytes}")
    if any(isinstance(k, CompressedSparseAttention) for k in a.attention_layers):
        if not hybrid_manager:
            raise NotModelled(f"{a.name}: DeepSeek-V4's caches with the hybrid KV-cache manager off")
        if extra_bytes_per_block:
            raise NotModelled(f"{a.name}: a drafter's pages beside DeepSeek-V4's packed caches")
        return _packed_capacity(a, kv_budget_bytes, block_size, max_model_len,
                                max_num_batched_tokens * (2 if async_scheduling else 1))
    per_token = layer_kv_bytes_per_token(a, kv_cache_dtype, tp)
    kinds = _layer_kinds(a, hybrid_manager, prefix_caching)
    # the model's state, not this layer range's: vLLM sizes the block from the model class (a pipeline stage without
    # recurrent layers runs the raised block too)
    state = a.recurrent.state(a.weight_dtype_bytes).state_bytes(tp) if a.recurrent else 0
    if state and a.attention_free:
        if extra_bytes_per_block:
            raise NotModelled(f"{a.name}: a drafter's pages beside an attention-free model's states")
        block_size = block_size if prefix_caching else max_model_len
        layer, count = kinds[0], len(kinds)  # one mixer kind on every layer
        return PagedCapacity(block_size=block_size, max_model_len=max_model_len, page_bytes=state,
                             bytes_per_block=count * state, num_blocks=kv_budget_bytes // (count * state),
                             groups=(Group(layer=layer, layers=tuple(range(count)), block_size=block_size,
                                           blocks_per_request=layer.blocks_per_request(block_size, max_model_len, 0)),))
    if state:
        if not per_token:
            raise NotModelled(f"{a.name}: recurrent layers with no attention layer to set the page")
        unit = max(kernel_block_alignment, block_size)
        block_size = max(block_size, unit * cdiv(state, unit * per_token))
    page = block_size * per_token
    in_flight = max_num_batched_tokens * (2 if async_scheduling else 1)
    blocks: dict[AttentionLayer, int] = {}
    if len(set(kinds)) > 1 and all(type(k) in _EVERY_TOKEN for k in kinds):
        # UniformTypeKVCacheSpecs (kv_cache_utils.get_kv_cache_groups): layers that all keep every token but cache
        # different bytes of it (a sparse model's latent rows, with or without its indexer's keys) form one group
        # whose page is the sum of theirs
        dtype = kv_dtype_bytes(kv_cache_dtype, a.torch_dtype)
        grouped = [(kinds[0], list(range(len(kinds))))]
        bytes_per_block = block_size * sum(k.kv_bytes_per_token(tp, dtype) for k in kinds) + extra_bytes_per_block
    else:
        grouped = _group_layers(kinds)
        width = max(len(layers) for _, layers in grouped)
        if extra_bytes_per_block and len(grouped) > 1:
            raise NotModelled(f"{a.name}: other layers' pages beside {len(grouped)} KV-cache groups")
        page, blocks = _unified_pages(a, [k for k, _ in grouped], block_size, page, kv_cache_dtype, tp)
        bytes_per_block = width * page + extra_bytes_per_block
    groups = tuple(
        Group(layer=k, layers=tuple(layers), block_size=blocks.get(k, block_size),
              blocks_per_request=k.blocks_per_request(blocks.get(k, block_size), max_model_len, in_flight))
        for k, layers in grouped
    )
    return PagedCapacity(
        block_size=block_size,
        max_model_len=max_model_len,
        page_bytes=page,
        bytes_per_block=bytes_per_block,
        num_blocks=kv_budget_bytes // bytes_per_block,
        groups=groups,
    )


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """vLLM 0.32's ``_approximate_gcd`` (kv_cache_utils.py): the chunk d in [lower_bound, max(values)] that pads the
    values least when each is rounded up to a multiple of d; ties go to the larger d."""
    best_d, best_pad = lower_bound, None
    for d in range(lower_bound, max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best_d, best_pad = d, pad
    return best_d


def _packed_capacity(a: Architecture, budget: int, block_size: int, max_model_len: int,
                     in_flight: int) -> PagedCapacity:
    """The pool vLLM 0.32 builds for layers with caches of several page sizes under a block-outermost layout
    (``_get_packed_kv_cache_groups``, ``_get_kv_cache_bytes_per_block``, ``get_max_concurrency_for_kv_cache_config``,
    kv_cache_utils.py), which DeepSeek-V4's backends declare:

    * every layer's caches (``CompressedSparseAttention.caches``) fall into buckets of one admission rule and block
      size (``UniformTypeKVCacheSpecs.is_uniform_type``): every token, or one sliding window;
    * a bucket is balanced when each of its page sizes has as many caches; the balanced buckets that mix page sizes
      set the floor of the pattern repeats a group covers, and ``_approximate_gcd`` of the balanced buckets' repeats
      above that floor picks how many; a balanced bucket splits into ``cdiv(repeats, that)`` groups, an unbalanced one
      stays whole;
    * a block holds one page of every cache in the widest group: ``num_blocks = budget // Σ pages``;
    * a request holds, per group, the blocks its rule needs at ``max_model_len`` (``CachePage.blocks_per_request``).
    """
    pages = [(i, c) for i, k in enumerate(a.attention_layers) for c in k.caches(block_size)]  # type: ignore[attr-defined]
    buckets: list[list[tuple[int, CachePage]]] = []
    for i, c in pages:
        for bucket in buckets:
            first = bucket[0][1]
            if (first.block_size, first.window) == (c.block_size, c.window):
                bucket.append((i, c))
                break
        else:
            buckets.append([(i, c)])

    def by_page(bucket: list[tuple[int, CachePage]]) -> dict[int, list[tuple[int, CachePage]]]:
        out: dict[int, list[tuple[int, CachePage]]] = {}
        for i, c in bucket:
            out.setdefault(c.page_bytes, []).append((i, c))
        return out

    shaped = [(bucket, by_page(bucket)) for bucket in buckets]
    balanced = [len({len(v) for v in pg.values()}) == 1 for _, pg in shaped]
    most = [max(len(v) for v in pg.values()) for _, pg in shaped]
    floor = max((m for m, b, (_, pg) in zip(most, balanced, shaped, strict=True) if b and len(pg) > 1), default=0)
    if not floor:
        raise NotModelled(f"{a.name}: packed caches without a balanced bucket of several page sizes")
    repeats = _approximate_gcd([m for m, b in zip(most, balanced, strict=True) if b], floor)
    groups: list[Group] = []
    widths: list[int] = []
    for (bucket, pg), b, m in zip(shaped, balanced, most, strict=True):
        n = cdiv(m, repeats) if b else 1
        rows = list(zip(*pg.values(), strict=True)) if b else [tuple(bucket)]
        for g in range(n):
            members = [m_ for row in rows[g::n] for m_ in row]
            first = members[0][1]
            groups.append(Group(
                layer=a.attention_layers[members[0][0]], layers=tuple(sorted({i for i, _ in members})),
                blocks_per_request=first.blocks_per_request(max_model_len, in_flight), block_size=first.block_size,
                caches=tuple(dict.fromkeys(c.role for _, c in members)), cache_window=first.window))
            widths.append(sum(c.page_bytes for _, c in members))
    bytes_per_block = max(widths)
    return PagedCapacity(block_size=block_size, max_model_len=max_model_len, page_bytes=bytes_per_block,
                         bytes_per_block=bytes_per_block, num_blocks=budget // bytes_per_block, groups=tuple(groups))


def blocks_for_sequence(length: int, block_size: int) -> int:
    """Blocks a full-attention sequence of `length` tokens holds (waste < one block)."""
    return ceil(length / block_size)


def usage_fraction(used_blocks: int, num_blocks: int) -> float:
    """vLLM's ``kv_cache_usage_perc``: used ÷ (num_blocks − 1); one block is the null block."""
    return used_blocks / (num_blocks - NULL_BLOCKS)


def sequences_that_fit(num_blocks: int, blocks_per_sequence: int) -> int:
    """Sequences of ``blocks_per_sequence`` blocks each that a pool of ``num_blocks`` holds together.

    vLLM keeps one block out of the pool as the null block, so only ``num_blocks − 1``
    are ever handed to requests. Every count of "sequences that fit" goes through here.
    """
    if blocks_per_sequence <= 0:
        raise ValueError(f"blocks_per_sequence must be positive, got {blocks_per_sequence}")
    return max(0, (num_blocks - NULL_BLOCKS) // blocks_per_sequence)


@dataclass(frozen=True)
class BatchCeiling:
    """How many sequences of one length can decode together without preemption."""

    tokens: int  # KV positions each sequence holds at its longest (prompt + output − 1)
    blocks_per_sequence: int
    usable_blocks: int  # num_blocks − 1: vLLM keeps one null block out of the pool
    kv_limit: int
    max_num_seqs: int | None
    vllm_reported: float  # what vLLM's "maximum concurrency" arithmetic implies at this length

    @property
    def ceiling(self) -> int:
        return self.kv_limit if self.max_num_seqs is None else min(self.kv_limit, self.max_num_seqs)

    @property
    def limited_by(self) -> str:
        return "kv_cache" if self.max_num_seqs is None or self.kv_limit <= self.max_num_seqs else "max_num_seqs"


def kv_ceiling(cap: PagedCapacity, tokens: int, max_num_seqs: int | None, max_num_batched_tokens: int,
               async_scheduling: bool = False) -> BatchCeiling:
    """Sequences that each hold ``tokens`` KV positions and fit together in the pool ``cap`` describes.

    Full-attention groups hold ``ceil(tokens / block_size)`` blocks per sequence;
    sliding-window groups are counted with vLLM's admission worst case.
    """
    if tokens <= 0:
        raise ValueError(f"a sequence must hold at least one token of KV, got {tokens}")
    in_flight = max_num_batched_tokens * (2 if async_scheduling else 1)
    per_seq = sum(g.layer.blocks_per_request(cap.block_size, tokens, in_flight) for g in cap.groups)
    return BatchCeiling(tokens=tokens, blocks_per_sequence=per_seq, usable_blocks=cap.num_blocks - NULL_BLOCKS,
                        kv_limit=sequences_that_fit(cap.num_blocks, per_seq), max_num_seqs=max_num_seqs,
                        vllm_reported=cap.num_blocks / per_seq)


def batch_ceiling(cap: PagedCapacity, prompt_len: int, output_len: int, max_num_seqs: int | None,
                  max_num_batched_tokens: int, async_scheduling: bool = False) -> BatchCeiling:
    """Sequences of ``prompt_len + output_len`` that fit together in the pool ``cap`` describes.

    The last generated token is never fed back, so a sequence holds at most
    ``prompt_len + output_len − 1`` KV positions (:func:`kv_ceiling` at that length).
    vLLM admits on prompt blocks only, so requests past this ceiling are admitted
    and later preempted (or queue behind ``max_num_seqs``).
    """
    if prompt_len <= 0 or output_len <= 0:
        raise ValueError(f"prompt_len and output_len must be positive, got {prompt_len}, {output_len}")
    return kv_ceiling(cap, prompt_len + output_len - 1, max_num_seqs, max_num_batched_tokens, async_scheduling)


def saturation_levels(ceiling: int, factors: list[float]) -> list[int]:
    """Concurrency levels around a predicted ceiling: factor ≤ 1 stays at or below it,
    factor > 1 lands strictly above it (at least ceiling + 1)."""
    levels = []
    for f in factors:
        if f <= 1:
            levels.append(max(1, int(f * ceiling)))
        else:
            levels.append(max(ceiling + 1, ceil(f * ceiling)))
    return levels
