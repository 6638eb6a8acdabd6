"""Parameter counts and weight bytes: total, active per token (MoE), and read per decode step."""

from __future__ import annotations

from dataclasses import dataclass

from analysis.architecture import Architecture


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

    @property
    def non_expert(self) -> int:
        return (self.embedding + self.lm_head + self.attention + self.dense_mlp
                + self.router_and_shared + self.norms)

    @property
    def total(self) -> int:
        return self.non_expert + self.experts_total

    @property
    def active(self) -> int:
        """Parameters that touch one token (routed experts: top-k only)."""
        return self.non_expert + self.experts_active


def _attention_params(a: Architecture) -> int:
    h, hd = a.hidden_size, a.head_dim
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
    q_out, kv_out = a.num_heads * hd, a.num_kv_heads * hd
    n = h * q_out + 2 * h * kv_out + q_out * h
    if a.qkv_bias:
        n += q_out + 2 * kv_out
    if a.o_bias:
        n += h
    if a.qk_norm:
        n += 2 * hd
    if a.attention_sinks:
        n += a.num_heads
    return n


def _mlp_params(hidden: int, inter: int, gated: bool, bias: bool) -> int:
    mats = 3 if gated else 2
    n = mats * hidden * inter
    if bias:
        n += (2 if gated else 1) * inter + hidden
    return n


def count_params(a: Architecture) -> ParamCount:
    """Total and active (per token, MoE) parameter counts from the config alone."""
    h = a.hidden_size
    embedding = a.vocab_size * h + a.learned_position_embeddings * h
    lm_head = 0 if a.tie_word_embeddings else a.vocab_size * h
    attention = a.num_layers * _attention_params(a)
    # Final norm too, unless the model is the seeds' idealised one with no norm weights.
    norms = a.num_layers * a.norms_per_layer * h + (h if a.norms_per_layer else 0)
    dense_mlp = router_shared = experts_total = experts_active = 0
    for i in range(a.num_layers):
        if not a.is_moe_layer(i):
            dense_mlp += _mlp_params(h, a.intermediate_size, a.mlp_gated, a.mlp_bias)
            continue
        m = a.moe
        assert m is not None
        one_expert = _mlp_params(h, m.expert_intermediate_size, a.mlp_gated, m.expert_bias)
        experts_total += m.num_experts * one_expert
        experts_active += m.experts_per_token * one_expert
        router_shared += h * m.num_experts + (m.num_experts if m.router_bias else 0)
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
    )


def _expert_bytes(a: Architecture, n_params: int) -> float:
    if a.moe and a.moe.expert_weight_bits:
        return n_params * a.moe.expert_weight_bits / 8
    return n_params * a.weight_dtype_bytes


def weight_bytes(a: Architecture, tp: int = 1) -> int:
    """Bytes of all weights held per GPU (tensor-parallel shards split evenly)."""
    p = count_params(a)
    total = p.non_expert * a.weight_dtype_bytes + _expert_bytes(a, p.experts_total)
    return round(total / tp)


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
    p = count_params(a)
    read = p.non_expert - (0 if a.tie_word_embeddings else p.embedding)
    total = read * a.weight_dtype_bytes
    if a.moe:
        m = a.moe
        n_moe_layers = a.num_layers - len(m.dense_layers)
        per_expert = p.experts_total / (m.num_experts * n_moe_layers) if n_moe_layers else 0
        touched = expected_experts_touched(m.num_experts, m.experts_per_token, batch)
        total += _expert_bytes(a, per_expert * touched * n_moe_layers)
    return total / tp
