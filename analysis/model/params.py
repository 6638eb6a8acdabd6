"""Parameter counts and weight bytes: total, active per token (MoE), and read per decode step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from analysis.model.architecture import Architecture
from analysis.model.quantization import ModuleKind


@dataclass(frozen=True)
class ParamCount:
    """Parameters by role. ``experts_*`` are routed-expert weights only."""

    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    router_and_shared: int
    experts_total: int
    experts_active: int
    norms: int
    recurrent: int = 0  # a hybrid's recurrent mixers (Mamba2, gated DeltaNet)
    hyper_connections: int = 0  # DeepSeek-V4's mHC mixing weights around each block and the head
    # of the above, parameters the token id indexes rather than multiplies (DeepSeek-V4's hash-routing tables)
    lookup_tables: int = 0

    @property
    def non_expert(self) -> int:
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp
                + self.router_and_shared + self.norms + self.recurrent + self.hyper_connections)

    @property
    def total(self) -> int:
        return self.non_expert + self.experts_total

    @property
    def active(self) -> int:
        """Parameters that touch one token (routed experts: top-k only)."""
        return self.non_expert + self.experts_active


def _attention_params(a: Architecture, num_kv_heads: int | None = None, head_dim: int | None = None) -> int:
    """One attention layer's parameters (of ``num_kv_heads`` × ``head_dim`` where a layer's shape is its own)."""
    h, hd = a.hidden_size, head_dim or a.head_dim
    if a.mla:
        m = a.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a.num_heads * qk
        else:
            q = h * a.num_heads * qk
        kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank  # + latent norm
        kv_b = m.kv_lora_rank * a.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
        o = a.num_heads * m.v_head_dim * h
        return q + kv_a + kv_b + o
    vd, kv_heads = a.v_head_dim or hd, num_kv_heads or a.num_kv_heads
    q_out, kv_out, v_out = a.num_heads * hd, kv_heads * hd, kv_heads * vd
    n = h * q_out * (2 if a.attention_output_gate else 1) + h * (kv_out + v_out) + a.num_heads * vd * h
    if a.qkv_bias:
        n += q_out + kv_out + v_out
    if a.o_bias:
        n += h
    if a.qk_norm:
        n += (a.num_heads + kv_heads) * hd if a.qk_norm_per_layer else 2 * hd
    if a.attention_sinks:
        n += a.num_heads
    return n


def _mlp_params(hidden: int, inter: int, gated: bool, bias: bool) -> int:
    mats = 3 if gated else 2
    n = mats * hidden * inter
    if bias:
        n += (2 if gated else 1) * inter + hidden
    return n


def _dsv4_layer(a: Architecture, i: int) -> dict[str, int]:
    """DeepSeek-V4 layer ``i``'s parameters by part, as vLLM 0.32 builds them (models/deepseek_v4/attention.py,
    compressor.py, nvidia/model.py): attention (``fused_wqa_wkv``, the q and kv norms, ``wq_b``, the grouped
    ``wo_a`` and ``wo_b``, a sink a head), the compressor (``ape`` of r·coff·d, ``fused_wkv_wgate`` 2·coff·d × H, a
    norm), a CSA layer's indexer (``wq_b``, ``weights_proj`` and its own ratio-4 compressor), the hyper-connections
    (``hc_attn``/``hc_ffn`` fn, base and scale), the router (a weight, and a score bias or on a hash layer a
    vocab × top-k table of expert ids)."""
    c, m = a.compressed_attention, a.moe
    assert c is not None and m is not None
    h, nh, d, qr = a.hidden_size, a.num_heads, c.head_dim, c.q_lora_rank
    r = c.compress_ratios[i]
    attention = h * (qr + d) + qr + d + qr * nh * d + nh * d * c.o_lora_rank + c.o_groups * c.o_lora_rank * h + nh
    ape = 0
    if r > 1:
        coff = 2 if r == 4 else 1
        ape += r * coff * d
        attention += 2 * coff * d * h + d
    if r == 4:
        ih, idim = c.index_n_heads, c.index_head_dim
        ape += 4 * 2 * idim
        attention += qr * ih * idim + h * ih + 2 * 2 * idim * h + idim
    mix = (2 + c.hc_mult) * c.hc_mult
    hyper = 2 * (mix * c.hc_mult * h + mix + 3)
    table = a.vocab_size * m.experts_per_token if i < c.hash_layers else 0
    bias_or_table = table or m.num_experts
    # "wide": what vLLM keeps in 32 bits (float32 ape, sinks, hyper-connections, score bias; the int32 hash table)
    return {"attention": attention + ape, "hyper_connections": hyper, "router": m.num_experts * h + bias_or_table,
            "table": table, "wide": ape + nh + hyper + bias_or_table}


def _deepseek_v4_params(a: Architecture) -> ParamCount:
    """DeepSeek-V4's counts (:func:`_dsv4_layer`; the MTP layer, loaded for speculative decoding alone, aside)."""
    m, c = a.moe, a.compressed_attention
    assert m is not None and c is not None
    h = a.hidden_size
    layers = [_dsv4_layer(a, i) for i in range(a.num_layers)]
    one = _mlp_params(h, m.expert_intermediate_size, True, False)
    return ParamCount(
        embedding=a.vocab_size * h, lm_head=0 if a.tie_word_embeddings else a.vocab_size * h,
        attention=sum(p["attention"] for p in layers), dense_mlp=0,
        router_and_shared=sum(p["router"] for p in layers)
        + a.num_layers * _mlp_params(h, m.shared_expert_intermediate_size, True, False),
        experts_total=a.num_layers * m.num_experts * one, experts_active=a.num_layers * m.experts_per_token * one,
        norms=a.num_norms * h + h,
        hyper_connections=sum(p["hyper_connections"] for p in layers) + c.hc_mult ** 2 * h + c.hc_mult + 1,
        lookup_tables=sum(p["table"] for p in layers))


def _deepseek_v4_wide(a: Architecture) -> int:
    """DeepSeek-V4's parameters vLLM keeps in 32 bits whatever the model dtype, every one on every rank: the
    hyper-connections, the compressors' ``ape``, the routers' score biases (float32), the hash tables (int32) and
    the attention sinks (float32; split by head, and on CUDA padded to 64 or 128 a rank: a few kilobytes)."""
    c = a.compressed_attention
    assert c is not None
    head = c.hc_mult ** 2 * a.hidden_size + c.hc_mult + 1  # hc_head fn, base and scale
    return head + sum(_dsv4_layer(a, i)["wide"] for i in range(a.num_layers))


def _zamba2_params(a: Architecture) -> ParamCount:
    """Zamba2's counts (``Architecture.shared_blocks``): the embeddings; a Mamba2 mixer and its norm on every layer;
    each shared block's attention (q, k and v over 2 × hidden, o back to hidden), gated MLP and two norms (over
    2 × hidden and hidden), once a block; each hybrid layer's ``linear`` (hidden²) and adapters (q, k, v: 2h × r + r ×
    2h each where the attention has them; gate and up: h × r + r × 2·inter); the final norm."""
    s = a.shared_blocks
    assert s is not None and a.recurrent is not None
    h, width, r, inter = a.hidden_size, a.num_heads * a.head_dim, s.adapter_rank, a.intermediate_size
    hybrids = a.layer_types.count("parallel_hybrid")
    adapters = (3 * 2 * width * r if s.attention_adapters else 0) + h * r + r * 2 * inter
    return ParamCount(
        embedding=a.vocab_size * h, lm_head=0 if a.tie_word_embeddings else a.vocab_size * h,
        attention=s.blocks * (3 * width * width + width * h) + hybrids * (h * h + adapters),
        dense_mlp=s.blocks * _mlp_params(h, inter, True, s.mlp_bias), router_and_shared=0, experts_total=0,
        experts_active=0, norms=a.num_layers * h + s.blocks * (width + h) + h,
        recurrent=a.num_layers * a.recurrent.params(h))


def _zamba2_matrices(a: Architecture) -> list[Matrix]:
    """Zamba2's weight matrices by vLLM's names: the mixers, each shared block's attention and MLP once, each hybrid
    layer's ``linear`` (ReplicatedLinear: whole on every rank) and adapters."""
    s = a.shared_blocks
    assert s is not None and a.recurrent is not None
    h, width, r, inter = a.hidden_size, a.num_heads * a.head_dim, s.adapter_rank, a.intermediate_size
    out = [Matrix("model.embed_tokens", "embedding", a.vocab_size, h)]
    if not a.tie_word_embeddings:
        out.append(Matrix("lm_head", "lm_head", a.vocab_size, h))
    for b in range(s.blocks):
        block = f"model.blocks.{b}"
        out += [Matrix(f"{block}.self_attn.{x}_proj", "linear", width, width) for x in "qkv"]
        out += [Matrix(f"{block}.self_attn.o_proj", "linear", h, width),
                Matrix(f"{block}.feed_forward.gate_up_proj", "linear", 2 * inter, h),
                Matrix(f"{block}.feed_forward.down_proj", "linear", h, inter)]
    for i, t in enumerate(a.layer_types):
        layer = f"model.layers.{i}"
        out += [Matrix(f"{layer}.mamba.{n}", "linear", o, k) for n, o, k in a.recurrent.matrices(h)]
        if t != "parallel_hybrid":
            continue
        out.append(Matrix(f"{layer}.linear", "linear", h, h, replicated=True))
        if s.attention_adapters:
            out += [m for x in "qkv" for m in (Matrix(f"{layer}.{x}_adapter.A", "linear", r, width),
                                               Matrix(f"{layer}.{x}_adapter.B", "linear", width, r))]
        out += [Matrix(f"{layer}.gate_up_proj_adapter.A", "linear", r, h),
                Matrix(f"{layer}.gate_up_proj_adapter.B", "linear", 2 * inter, r)]
    return out


def count_params(a: Architecture) -> ParamCount:
    """Total and active (per token, MoE) parameter counts from the config alone."""
    if a.compressed_attention is not None:
        return _deepseek_v4_params(a)
    if a.shared_blocks is not None:
        return _zamba2_params(a)
    h = a.hidden_size
    embedding = a.vocab_size * h + a.learned_position_embeddings * h
    lm_head = (0 if a.tie_word_embeddings else a.vocab_size * h) + (a.vocab_size if a.lm_head_bias else 0)
    if a.full_attention_kv is None:
        attention = a.num_attention_layers * _attention_params(a)
    else:  # layers of two shapes (Gemma-4's sliding and global)
        attention = sum(_attention_params(a, *a.attention_shape(i)) for i, t in enumerate(a.layer_types[:a.num_layers])
                        if t in ("full_attention", "sliding_attention", "chunked_attention"))
    if a.sliding_attention_sinks:  # a sink a query head on each sliding layer
        attention += a.layer_types[:a.num_layers].count("sliding_attention") * a.num_heads
    if a.sparse_indexer is not None and a.mla is not None:
        attention += len(a.sparse_indexer.layers) * a.sparse_indexer.params(h, a.mla.q_lora_rank or 0)
    recurrent = a.num_recurrent_layers * a.recurrent.params(h) if a.recurrent else 0
    # Final norm too, unless the model is the seeds' idealised one with no norm weights.
    norms = (a.num_norms * h + (h if a.norms_per_layer else 0) + (h if a.embedding_norm else 0)) \
        * (2 if a.norm_bias else 1)
    dense_mlp = router_shared = experts_total = experts_active = 0
    for i in range(a.num_layers):
        if not a.has_mlp(i):
            continue
        if not a.is_moe_layer(i):
            dense_mlp += _mlp_params(h, a.mlp_size(i), a.mlp_gated, a.mlp_bias) + a.mlp_activation_params
            continue
        m = a.moe
        assert m is not None
        one_expert = _mlp_params(m.latent_size or h, m.expert_intermediate_size, a.mlp_gated, m.expert_bias)
        experts_total += m.num_experts * one_expert
        experts_active += m.experts_per_token * one_expert
        router_shared += h * m.num_experts + (m.num_experts if m.router_bias else 0)
        router_shared += (h + m.num_experts) if m.router_scale else 0
        if m.latent_size:  # the projections into and out of the experts' latent width
            router_shared += 2 * h * m.latent_size + ((m.latent_size + h) if a.mlp_bias else 0)
        if m.shared_experts:
            router_shared += _mlp_params(h, m.shared_expert_intermediate_size, a.mlp_gated, False)
            if m.shared_expert_gate:
                router_shared += h
    return ParamCount(
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        dense_mlp=dense_mlp,
        router_and_shared=router_shared,
        experts_total=experts_total,
        experts_active=experts_active,
        norms=norms,
        recurrent=recurrent,
    )


def _expert_bytes(a: Architecture, n_params: float) -> float:
    if a.moe and a.moe.expert_weight_bits:
        return n_params * a.moe.expert_weight_bits / 8
    return n_params * a.weight_dtype_bytes


@dataclass(frozen=True)
class Matrix:
    """One weight matrix ``out × in`` as the checkpoint names it (``count`` copies)."""

    name: str
    kind: ModuleKind
    out_features: int
    in_features: int
    # held whole on every tensor-parallel rank (vLLM's ReplicatedLinear or disable_tp: MoE routers, MLA's
    # down-projections of q and kv, the sparse-attention indexer, a latent MoE's projections)
    replicated: bool = False


def weight_matrices(a: Architecture) -> list[Matrix]:
    """Every weight matrix outside the routed experts, named as in a Hugging Face checkpoint.

    Biases, norms and attention sinks are not matrices; the routed experts are
    counted per layer by the scheme (:meth:`QuantScheme.experts_bytes`).
    """
    if a.compressed_attention is not None:
        return _deepseek_v4_matrices(a)
    if a.shared_blocks is not None:
        return _zamba2_matrices(a)
    h, out = a.hidden_size, []
    out.append(Matrix("model.embed_tokens", "embedding", a.vocab_size, h))
    if a.learned_position_embeddings:
        out.append(Matrix("model.embed_positions", "embedding", a.learned_position_embeddings, h))
    if not a.tie_word_embeddings:
        out.append(Matrix("lm_head", "lm_head", a.vocab_size, h))
    for i in range(a.num_layers):
        attn, mlp = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        kind = a.layer_types[i]
        if kind in ("recurrent", "parallel_hybrid"):
            assert a.recurrent is not None
            out += [Matrix(f"model.layers.{i}.mixer.{n}", "linear", o, k) for n, o, k in a.recurrent.matrices(h)]
        if kind in ("recurrent", "mlp"):
            pass
        elif a.mla:
            m, qk = a.mla, a.mla.qk_nope_head_dim + a.mla.qk_rope_head_dim
            # fused_qkv_a_proj (disable_tp) and kv_a_proj_with_mqa (ReplicatedLinear): whole on every rank
            if m.q_lora_rank:
                out += [Matrix(f"{attn}.q_a_proj", "linear", m.q_lora_rank, h, replicated=True),
                        Matrix(f"{attn}.q_b_proj", "linear", a.num_heads * qk, m.q_lora_rank)]
            else:
                out.append(Matrix(f"{attn}.q_proj", "linear", a.num_heads * qk, h))
            out += [Matrix(f"{attn}.kv_a_proj_with_mqa", "linear", m.kv_lora_rank + m.qk_rope_head_dim, h,
                           replicated=True),
                    Matrix(f"{attn}.kv_b_proj", "linear",
                           a.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
                    Matrix(f"{attn}.o_proj", "linear", h, a.num_heads * m.v_head_dim)]
            if a.sparse_indexer is not None and i in a.sparse_indexer.layers:
                out += [Matrix(f"{attn}.indexer.{n}", kind, o, k, replicated=True)  # type: ignore[arg-type]
                        for n, kind, o, k in a.sparse_indexer.matrices(h, m.q_lora_rank or 0)]
        else:
            kv_heads, hd = a.attention_shape(i)
            vd = a.v_head_dim or hd
            q, kv = a.num_heads * hd, kv_heads * hd
            q_rows = q * (2 if a.attention_output_gate else 1)  # the output gate's rows beside the queries
            out += [Matrix(f"{attn}.q_proj", "linear", q_rows, h), Matrix(f"{attn}.k_proj", "linear", kv, h),
                    Matrix(f"{attn}.v_proj", "linear", kv_heads * vd, h),
                    Matrix(f"{attn}.o_proj", "linear", h, a.num_heads * vd)]
        if not a.has_mlp(i):
            continue
        if not a.is_moe_layer(i):
            out += _mlp_matrices(mlp, h, a.mlp_size(i), a.mlp_gated)
            continue
        m = a.moe
        assert m is not None
        router = "router" if a.model_type == "gpt_oss" else "gate"
        out.append(Matrix(f"{mlp}.{router}", "router", m.num_experts, h, replicated=True))  # ReplicatedLinear
        if m.latent_size:
            out += [Matrix(f"{mlp}.fc1_latent_proj", "linear", m.latent_size, h, replicated=True),
                    Matrix(f"{mlp}.fc2_latent_proj", "linear", h, m.latent_size, replicated=True)]
        if m.shared_experts:
            shared = f"{mlp}.shared_expert" if m.shared_expert_gate else f"{mlp}.shared_experts"
            out += _mlp_matrices(shared, h, m.shared_expert_intermediate_size, a.mlp_gated)
            if m.shared_expert_gate:
                out.append(Matrix(f"{mlp}.shared_expert_gate", "router", 1, h, replicated=True))
    return out


def _deepseek_v4_matrices(a: Architecture) -> list[Matrix]:
    """DeepSeek-V4's weight matrices by vLLM 0.32's names: the linears fp8 (``fused_wqa_wkv``, the indexer's
    ``wq_b`` replicated), the compressors' ``fused_wkv_wgate`` and the indexer's ``weights_proj`` built without a
    quant_config and replicated, the router replicated."""
    c, m = a.compressed_attention, a.moe
    assert c is not None and m is not None
    h, nh, d, qr = a.hidden_size, a.num_heads, c.head_dim, c.q_lora_rank
    out = [Matrix("model.embed_tokens", "embedding", a.vocab_size, h), Matrix("lm_head", "lm_head", a.vocab_size, h)]
    for i, r in enumerate(c.compress_ratios[:a.num_layers]):
        attn, ffn = f"model.layers.{i}.attn", f"model.layers.{i}.ffn"
        out += [Matrix(f"{attn}.fused_wqa_wkv", "linear", qr + d, h, replicated=True),
                Matrix(f"{attn}.wq_b", "linear", nh * d, qr),
                Matrix(f"{attn}.wo_a", "linear", c.o_groups * c.o_lora_rank, nh * d // c.o_groups),
                Matrix(f"{attn}.wo_b", "linear", h, c.o_groups * c.o_lora_rank)]
        if r > 1:
            coff = 2 if r == 4 else 1
            out.append(Matrix(f"{attn}.compressor.fused_wkv_wgate", "unquantized", 2 * coff * d, h, replicated=True))
        if r == 4:
            out += [Matrix(f"{attn}.indexer.wq_b", "linear", c.index_n_heads * c.index_head_dim, qr,
                           replicated=True),
                    Matrix(f"{attn}.indexer.weights_proj", "unquantized", c.index_n_heads, h, replicated=True),
                    Matrix(f"{attn}.indexer.compressor.fused_wkv_wgate", "unquantized", 4 * c.index_head_dim, h,
                           replicated=True)]
        out.append(Matrix(f"{ffn}.gate", "router", m.num_experts, h, replicated=True))
        out += _mlp_matrices(f"{ffn}.shared_experts", h, m.shared_expert_intermediate_size, True)
    return out


def _mlp_matrices(prefix: str, hidden: int, inter: int, gated: bool) -> list[Matrix]:
    mats = [Matrix(f"{prefix}.up_proj", "linear", inter, hidden),
            Matrix(f"{prefix}.down_proj", "linear", hidden, inter)]
    if gated:
        mats.insert(0, Matrix(f"{prefix}.gate_proj", "linear", inter, hidden))
    return mats


@dataclass(frozen=True)
class WeightBytes:
    """Bytes of all weights, all ranks together, by role (``experts``: routed experts only)."""

    embedding: float
    lm_head: float
    experts: float
    other: float
    replicated: float = 0.0  # of ``other``: what every tensor-parallel rank holds whole (Matrix.replicated)

    @property
    def total(self) -> float:
        return self.embedding + self.lm_head + self.experts + self.other

    def per_rank(self, tp: int = 1, part: float | None = None) -> float:
        """Bytes one of ``tp`` ranks holds of ``part`` (a sum that includes every replicated byte; default: all):
        the split share, and the replicated matrices whole."""
        whole = self.total if part is None else part
        return (whole - self.replicated) / tp + self.replicated

    @property
    def non_expert(self) -> float:
        return self.total - self.experts


def weight_breakdown(a: Architecture, tp: int = 1) -> WeightBytes:
    """Weight bytes by role under the architecture's quantization scheme (all ranks together).

    Without a scheme every parameter is at the model dtype. With one, each matrix the
    scheme quantizes costs what the scheme says; everything else (biases, norms,
    sinks, unquantized matrices) stays at the model dtype. ``tp`` matters only to
    schemes whose kernels pad per rank (mxfp4).
    """
    p, d, q = count_params(a), a.weight_dtype_bytes, a.quantization
    # a float32 router (MoE.router_fp32): its weight's bytes past the model dtype's, on every rank
    fp32_router = 0
    if a.moe is not None and a.moe.router_fp32:
        fp32_router = (4 - d) * a.hidden_size * a.moe.num_experts * sum(map(a.is_moe_layer, range(a.num_layers)))
    if a.compressed_attention is not None:
        fp32_router = (4 - d) * _deepseek_v4_wide(a)  # its 32-bit parameters' bytes past the model dtype's
    if q is None:
        replicated = sum(m.out_features * m.in_features for m in weight_matrices(a) if m.replicated) * d
        return WeightBytes(embedding=p.embedding * d, lm_head=p.lm_head * d,
                           experts=_expert_bytes(a, p.experts_total),
                           other=(p.non_expert - p.embedding - p.lm_head) * d + fp32_router,
                           replicated=replicated + fp32_router)
    parts = {"embedding": 0.0, "lm_head": 0.0, "other": 0.0, "replicated": 0.0}
    matrix_params = 0
    for mat in weight_matrices(a):
        n = mat.out_features * mat.in_features
        matrix_params += n
        b = (q.module_bytes(mat.name, mat.kind, mat.out_features, mat.in_features, d)
             if q.quantizes(mat.name, mat.kind) else n * d)
        parts[mat.kind if mat.kind in ("embedding", "lm_head") else "other"] += b
        parts["replicated"] += b if mat.replicated else 0
    experts = 0.0
    if a.moe:
        m = a.moe
        for i in range(a.num_layers):
            if a.is_moe_layer(i):
                experts += q.experts_bytes(f"model.layers.{i}.mlp.experts", m.num_experts,
                                           m.latent_size or a.hidden_size, m.expert_intermediate_size, a.mlp_gated,
                                           m.expert_bias, d, tp)
    rest = p.non_expert - matrix_params
    assert rest >= 0, f"{a.name}: weight matrices exceed the parameter count"
    parts["other"] += rest * d + fp32_router
    parts["replicated"] += fp32_router
    return WeightBytes(experts=experts, **parts)


def weight_bytes(a: Architecture, tp: int = 1) -> int:
    """Bytes of all weights held per GPU: tensor-parallel shards split evenly, replicated matrices whole."""
    return round(weight_breakdown(a, tp).per_rank(tp))


def rotary_cache_bytes(a: Architecture) -> int:
    """vLLM's RoPE ``cos_sin_cache`` buffers: positions × rotary dim in the model dtype, on every GPU.

    ``RotaryEmbedding.__init__`` (``layers/rotary_embedding/base.py``) registers each as a buffer while the model
    is built, so "Model loading took X GiB" counts them beside the weights; ``get_rope`` keeps one per distinct
    RoPE configuration (``Architecture.rope_cache_positions``). 32 MiB for Llama 3.1 (131,072 × 128 × 2), 0.24 GiB
    for Mistral-Nemo's 1,024,000 positions, 0.56 GiB for Gemma 3 12B (its global RoPE's linear factor 8 makes
    1,048,576 positions × 256 × 2 B, beside the sliding layers' 131,072).
    """
    if not a.max_position_embeddings or a.learned_position_embeddings or a.transformers_backend:
        return 0  # the Transformers backend runs transformers' rotary embedding: cos/sin computed a step, not kept
    rotary_dim = a.mla.qk_rope_head_dim if a.mla else int(a.head_dim * a.rotary_fraction)
    if a.rope_cache_widths:
        return sum(p * w for p, w in zip(a.rope_cache_positions, a.rope_cache_widths, strict=True)) \
            * a.weight_dtype_bytes
    positions = sum(a.rope_cache_positions) if a.rope_cache_positions else a.max_position_embeddings
    return positions * rotary_dim * a.weight_dtype_bytes


def encoder_bytes(a: Architecture, tp: int = 1) -> int:
    """A multimodal checkpoint's vision encoder and projector per GPU, in the model dtype (its layers are
    tensor-parallel like the decoder's; ``encoder_replicated_params`` whole on every rank)."""
    split = a.encoder_params - a.encoder_replicated_params
    return round((split / tp + a.encoder_replicated_params) * a.weight_dtype_bytes)


def model_loading_bytes(a: Architecture, tp: int = 1, encoder_tp: int | None = None,
                        max_num_batched_tokens: int | None = None,
                        mm_limits: Mapping[str, int] | None = None) -> int:
    """What vLLM's "Model loading took X GiB" counts per GPU: the decoder's weights, a multimodal checkpoint's
    encoder (split over ``encoder_tp`` ranks, default ``tp``; 1 under ``--mm-encoder-tp-mode data``, where every
    rank holds all of it; none where ``mm_limits``, vLLM's --limit-mm-per-prompt, turns off every modality it serves:
    ``Architecture.builds_encoder``), the RoPE caches, and buffers the model allocates for its tower's outputs when
    it is built (Qwen3-VL's DeepStack inputs, sized by ``max_num_batched_tokens``; none counted without it, and
    none without the tower: qwen3_vl.py's ``use_deepstack`` is false for a ``StageMissingLayer``). The decode step
    streams the decoder's weights alone (:func:`weight_bytes`)."""
    if not a.builds_encoder(mm_limits):
        return weight_bytes(a, tp) + rotary_cache_bytes(a)
    buffers = 0
    if a.vision is not None and max_num_batched_tokens:
        buffers = a.vision.decoder_buffer_bytes(max_num_batched_tokens, a.hidden_size, a.weight_dtype_bytes)
    return weight_bytes(a, tp) + encoder_bytes(a, tp if encoder_tp is None else encoder_tp) + rotary_cache_bytes(a) \
        + buffers


def expected_experts_touched(num_experts: int, top_k: int, batch: int) -> float:
    """Expected distinct experts a batch routes to, with uniform independent routing.

    Each token picks k of E experts; an expert is untouched by one token with
    probability (1 - k/E), by the whole batch with (1 - k/E)^batch.
    """
    if batch <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** batch)


def decode_weight_bytes(a: Architecture, batch: int = 1, tp: int = 1) -> float:
    """Weight bytes one decode step streams from memory, per GPU.

    The input embedding is a row lookup (a few KiB), not a full read, unless it
    doubles as the LM head (tied). Routed experts are read only when some token
    in the batch selects them.
    """
    w = weight_breakdown(a, tp)
    total = w.per_rank(tp, w.non_expert - (0 if a.tie_word_embeddings else w.embedding))
    if a.moe:
        touched = expected_experts_touched(a.moe.num_experts, a.moe.experts_per_token, batch)
        total += w.experts * touched / a.moe.num_experts / tp
    return total
