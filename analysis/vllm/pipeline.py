"""Pipeline parallelism as vLLM lays it out: which layers each stage holds, its weights, its profile run's
activation peak, and a KV pool that is the smallest stage's (issue #28).

* **Layers per stage**: vLLM's ``get_pp_indices`` (vllm/distributed/utils.py, 0.32): ``num_layers // pp`` each,
  the remainder spread over all stages but the last (``partitions[-i] += 1`` for i = 2 … remainder + 1), or
  ``VLLM_PP_LAYER_PARTITION`` (a comma list of per-stage counts summing to the layers) where the user sets it.
* **Weights per stage**: its layers; the input embedding on the first stage; the LM head on the last (a model with
  tied embeddings holds the embedding again there, as its LM head: vLLM's Llama builds ``embed_tokens`` on the
  last rank too when ``tie_word_embeddings``). Each stage's layers are the difference of two prefixes of the model
  (layers 0…end less layers 0…start), so MoE and dense layers keep their own sizes.
* **Activation peak per stage**: the sampler warms up on the last stage only (``profile_run`` samples where
  ``get_pp_group().is_last_rank``); the other stages' peak is one layer's forward pass. Published: Llama-3.1-8B at
  pp 2 on vLLM 0.19 logged 1.1 GiB on stage 0 and 2.01 GiB on stage 1 (tests/fixtures/gpu_corpus).
* **The pool**: every stage sizes its own KV cache from its budget and its layers' bytes per block; the engine core
  gives every worker the smallest stage's block count (V1 ``get_kv_cache_configs`` unifies ``num_blocks`` to the
  minimum), so the last stage's larger activation peak usually sets it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from analysis.model.architecture import Architecture
from analysis.model.params import encoder_bytes, rotary_cache_bytes, weight_breakdown, weight_bytes

PARTITION_ENV = "VLLM_PP_LAYER_PARTITION"


def layer_partition(num_layers: int, pp: int, partition: str | None = None) -> list[int]:
    """Layers per pipeline stage as vLLM's ``get_pp_indices`` gives them (``partition``: the
    ``VLLM_PP_LAYER_PARTITION`` value, a comma list; None: read from the environment)."""
    if pp < 1:
        raise ValueError(f"pipeline_parallel_size must be at least 1, got {pp}")
    partition = os.environ.get(PARTITION_ENV) if partition is None else partition
    if partition:
        try:
            parts = [int(x) for x in partition.split(",")]
        except ValueError:
            raise ValueError(f"{PARTITION_ENV}={partition!r} is not a comma list of layer counts") from None
        if len(parts) != pp:
            raise ValueError(f"{PARTITION_ENV}={partition!r} gives {len(parts)} stages; pipeline_parallel_size is {pp}")
        if sum(parts) != num_layers or min(parts) < 1:
            raise ValueError(f"{PARTITION_ENV}={partition!r} sums to {sum(parts)} layers (each at least 1); the "
                             f"model has {num_layers}")
        return parts
    if pp > num_layers:
        raise ValueError(f"pipeline_parallel_size {pp} is more than the model's {num_layers} layers")
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def prefix(a: Architecture, layers: int) -> Architecture:
    """The model cut after its first ``layers`` layers (layer indices unchanged, so MoE layers stay MoE)."""
    return a.model_copy(update={"num_layers": layers, "layer_types": a.layer_types[:layers]})


def stage(a: Architecture, start: int, end: int) -> Architecture:
    """Layers ``start`` … ``end − 1`` as a model of their own, for the KV arithmetic (attention kinds only)."""
    return a.model_copy(update={"num_layers": end - start, "layer_types": a.layer_types[start:end]})


@dataclass(frozen=True)
class Stage:
    rank: int
    start: int
    layers: int
    weight_bytes: int  # per GPU of the stage (its tensor-parallel shard)
    first: bool
    last: bool


def stages(a: Architecture, tp: int, pp: int, partition: str | None = None,
           mm_limits: Mapping[str, int] | None = None) -> list[Stage]:
    """Every pipeline stage: its layers and the weight bytes each of its GPUs holds (module docstring); a
    multimodal encoder only where ``mm_limits`` (--limit-mm-per-prompt) leaves vLLM building it."""
    parts = layer_partition(a.num_layers, pp, partition)
    whole = weight_breakdown(a, tp)
    embedding, lm_head = whole.embedding / tp, whole.lm_head / tp
    ends = [sum(parts[:i + 1]) for i in range(pp)]
    body = [weight_bytes(prefix(a, e), tp) - embedding - lm_head for e in [0, *ends]]  # layers 0…e (and norms)
    out = []
    for r in range(pp):
        first, last = r == 0, r == pp - 1
        w = body[r + 1] - body[r]
        w += embedding if first or (last and a.tie_word_embeddings) else 0
        w += lm_head if last else 0
        # "Model loading took" on every rank also counts the RoPE caches its layers build, and on the first a
        # multimodal checkpoint's encoder (analysis.model.params.model_loading_bytes).
        w += rotary_cache_bytes(a) + (encoder_bytes(a, tp) if first and a.builds_encoder(mm_limits) else 0)
        out.append(Stage(rank=r, start=ends[r] - parts[r], layers=parts[r], weight_bytes=round(w), first=first,
                         last=last))
    return out
