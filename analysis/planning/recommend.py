"""The inverse plan (`kvprof recommend`): what to set so that N sequences of T tokens fit.

The question users type is the inverse of the plan's: not "how many sequences fit at these settings" but "what
should I set so that N users of T tokens fit?". The answer, for one GPU model:

1. **Which tensor-parallel size and how many replicas**: the procurement table's first row (the fewest GPUs that
   hold N sequences of T at the highest utilization allowed, ``--gpu-memory-utilization``, vLLM's default), so
   each replica holds ``b = ceil(N / replicas)`` sequences.
2. **The smallest KV budget that holds them**: vLLM's pool must have ``b × blocks per sequence`` usable blocks
   plus its null block, so the budget is that many blocks of ``bytes_per_block`` (the plan's allocator, every
   attention-layer kind's blocks per request included). That is the ``--kv-cache-memory-bytes`` to set.
3. **The smallest ``--gpu-memory-utilization`` that gives that budget**: vLLM's budget is
   ``ceil(total × utilization) − weights − reserve`` (``analysis.vllm.budget.kv_budget``), so the utilization is
   ``(budget + weights + reserve) / total``, rounded up at the sixth decimal.

Both are planned back with :func:`analysis.planning.plan.make_plan` before they are returned: at the recommended
setting the replica holds ``b`` sequences, and one block less holds fewer (the recommendation is within one block
of the smallest setting that holds the workload). ``max_model_len`` is set to T (vLLM refuses to start where one
sequence of ``max_model_len`` does not fit, and a shorter one leaves more room). Pipelines are considered where
``pps`` lists them (``--pp 1,2``): every stage must then hold the replica's sequences in its own layers' blocks,
so the utilization is the largest any stage needs and the fixed budget the largest stage block's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from analysis.catalog import GPU
from analysis.model.architecture import Architecture
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.planning.procurement import procurement
from analysis.vllm.allocator import NULL_BLOCKS

UTILIZATION_DECIMALS = 6  # 1e-6 of an 80 GiB device is 86 KB: less than one KV block of any real model


class Recommendation(BaseModel):
    """What to set so that ``concurrency`` sequences of ``context`` tokens fit (``kvprof recommend``)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    gpu: str
    concurrency: int
    context: int
    tensor_parallel_size: int
    pipeline_parallel_size: int = 1
    replicas: int = Field(description="data-parallel replicas of tensor_parallel_size × pipeline_parallel_size GPUs")
    gpus_needed: int = Field(description="replicas × tensor_parallel_size × pipeline_parallel_size")
    sequences_per_replica: int = Field(description="ceil(concurrency / replicas)")
    max_model_len: int
    max_num_seqs: int | None = Field(description="set only where vLLM's default would run fewer at once")
    max_num_batched_tokens: int | None = Field(description="set only where max_num_seqs needs it raised")
    blocks_per_sequence: int
    bytes_per_block: int
    kv_cache_memory_bytes: int = Field(description="the smallest KV budget per GPU that holds the replica's "
                                                   "sequences: (sequences × blocks per sequence + the null block) "
                                                   "× bytes per block")
    gpu_memory_utilization: float = Field(description="the smallest utilization whose KV budget is that")
    max_gpu_memory_utilization: float = Field(description="the ceiling the search was allowed")
    weight_bytes: int
    reserve_bytes: int
    device_total_bytes: int
    unused_bytes_per_gpu: int = Field(description="device memory vLLM leaves alone at that utilization")
    sequences_fit: int = Field(description="sequences of context tokens a replica holds at the recommendation")
    sequences_fit_one_block_less: int = Field(description="the same with one block less: fewer than needed")
    serve_flags: list[str] = Field(description="vllm serve flags to paste, with --gpu-memory-utilization")
    serve_flags_fixed_kv: list[str] = Field(description="the same with --kv-cache-memory-bytes instead")
    notes: list[str] = []


def recommend(a: Architecture, base: PlanInputs, gpu: GPU, tps: Sequence[int], *, concurrency: int,
              context: int, pps: Sequence[int] = (1,)) -> Recommendation:
    """The smallest setting on ``gpu`` that holds ``concurrency`` sequences of ``context`` tokens (module docstring).

    ``base`` carries the user's other settings (dtype, KV dtype, block size, vLLM version, …); its
    ``gpu_memory_utilization`` is the ceiling. A PlanError when no tensor-parallel size holds them, with the
    procurement table's reasons."""
    if base.kv_cache_memory_bytes is not None:
        raise PlanError("recommend finds the KV budget itself: drop --kv-cache-memory-bytes")
    if gpu.cpu:
        raise PlanError(f"recommend plans GPU memory; {gpu.name} is a CPU")
    if base.max_model_len is not None and base.max_model_len < context:
        raise PlanError(f"--max-model-len {base.max_model_len:,} is shorter than --context {context:,}")
    base = base.model_copy(update={"max_model_len": base.max_model_len or context})
    rows = procurement(a, base, [gpu], tps, concurrency=concurrency, context=context, pps=pps)
    best = next((r for r in rows if r.fits), None)
    if best is None:
        reasons = "; ".join(f"tp {r.tensor_parallel_size}"
                            + (f" pp {r.pipeline_parallel_size}" if r.pipeline_parallel_size > 1 else "")
                            + f": {r.reason}" for r in rows)
        raise PlanError(f"no tensor-parallel size of {', '.join(map(str, tps))}"
                        + (f" (pipeline {', '.join(map(str, pps))})" if list(pps) != [1] else "")
                        + f" holds one sequence of {context:,} tokens on {gpu.name} at --gpu-memory-utilization "
                        f"{base.gpu_memory_utilization}: {reasons}")
    tp, pp, replicas = best.tensor_parallel_size, best.pipeline_parallel_size, best.replicas
    assert replicas is not None and best.gpus_needed is not None
    b = math.ceil(concurrency / replicas)
    inputs = base.model_copy(update={"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "context": context,
                                     "batch": None})
    at_max = make_plan(a, inputs, gpu)
    notes: list[str] = []
    max_num_seqs = max_num_batched_tokens = None
    if b > at_max.max_num_seqs:
        # vLLM would run at most max_num_seqs at once: raise it to b (and the token budget with it, which
        # vLLM requires to be at least max_num_seqs).
        max_num_seqs = b
        if b > at_max.max_num_batched_tokens:
            max_num_batched_tokens = b
        inputs = inputs.model_copy(update={"max_num_seqs": max_num_seqs,
                                           "max_num_batched_tokens": max_num_batched_tokens
                                           or inputs.max_num_batched_tokens})
        at_max = make_plan(a, inputs, gpu)
    per_seq = at_max.blocks_per_sequence_at_context
    total, reserve = at_max.device_total_bytes, at_max.reserve
    assert total is not None and reserve is not None, "planned on a GPU without a fixed KV budget"
    fixed = reserve.non_torch_bytes + reserve.cuda_graph_bytes
    # Every GPU of a stage must hold the replica's sequences in its own layers' blocks: (stage weights, stage
    # activation peak, stage bytes per block); one stage without a pipeline.
    parts = ([(st.weight_bytes, st.activation_bytes or 0, st.bytes_per_block) for st in at_max.pipeline_stages]
             if at_max.pipeline_stages else [(at_max.weight_bytes, reserve.activation_bytes, at_max.bytes_per_block)])
    needs = [((b * per_seq + NULL_BLOCKS) * block, weights, activation + fixed) for weights, activation, block in parts]
    _, weights, reserve_total = max(needs, key=sum)  # the stage that needs the most memory (reported)
    block = max(block for _, _, block in parts)
    budget = max(n[0] for n in needs)  # a fixed budget per GPU serves every stage
    scale = 10 ** UTILIZATION_DECIMALS

    def enough(u: float) -> bool:
        return all(math.ceil(total * u) - w - r >= kv for kv, w, r in needs)

    util = max(math.ceil((kv + w + r) / total * scale) / scale for kv, w, r in needs)
    while not enough(util):  # float rounding: one more step
        util = round(util + 1 / scale, UTILIZATION_DECIMALS)
    if util > base.gpu_memory_utilization:  # the procurement row said it fits at the ceiling: cannot happen
        raise PlanError(f"internal: {util} exceeds the ceiling {base.gpu_memory_utilization}")

    def fit(**update) -> int:
        fits = make_plan(a, inputs.model_copy(update=update), gpu).kv_full_batch
        assert fits is not None, "a plan with a KV budget counts the sequences that fit"
        return fits

    holds, less = fit(gpu_memory_utilization=util), fit(kv_cache_memory_bytes=budget - block)
    if holds < b or fit(kv_cache_memory_bytes=budget) < b or less >= b:
        raise PlanError(f"internal: the recommendation does not plan back ({holds}, {less} for {b})")
    if replicas > 1:
        notes.append(f"{replicas} replicas of tp {tp}: one replica at the ceiling holds {best.sequences_fit} "
                     f"sequences of {context:,} tokens, fewer than {concurrency:,}")
    if pp > 1:
        notes.append(f"pipeline of {pp} stages: the KV pool is the smallest stage's; latency with pipeline "
                     "parallelism is not modelled yet")
    flags = [f"--tensor-parallel-size {tp}"] + ([f"--pipeline-parallel-size {pp}"] if pp > 1 else []) \
        + ([f"--data-parallel-size {replicas}"] if replicas > 1 else [])
    flags.append(f"--max-model-len {inputs.max_model_len}")
    if inputs.kv_cache_dtype != "auto":
        flags.append(f"--kv-cache-dtype {inputs.kv_cache_dtype}")
    if base.block_size is not None:
        flags.append(f"--block-size {base.block_size}")
    if max_num_seqs is not None:
        flags.append(f"--max-num-seqs {max_num_seqs}")
    if max_num_batched_tokens is not None:
        flags.append(f"--max-num-batched-tokens {max_num_batched_tokens}")
    # the memory features the plan counted, so the pasted flags allocate what was planned
    if base.max_loras is not None:
        flags.append(f"--enable-lora --max-loras {base.max_loras} --max-lora-rank {base.max_lora_rank}")
    if base.kv_offloading_size is not None:
        flags.append(f"--kv-offloading-size {base.kv_offloading_size:g} --kv-offloading-backend "
                     f"{base.kv_offloading_backend}")
    if base.speculative_config is not None:
        spec = base.speculative_config.model_dump(exclude_none=True)
        flags.append(f"--speculative-config '{json.dumps(spec)}'")
        if spec.get("model"):
            notes.append(f"--speculative-config names the draft as planned ({spec['model']}): give vLLM its "
                         "checkpoint (a Hugging Face repo or directory) in its place, as MODEL for the target")
    return Recommendation(
        model=a.name, gpu=gpu.name, concurrency=concurrency, context=context, tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        replicas=replicas, gpus_needed=best.gpus_needed, sequences_per_replica=b,
        max_model_len=inputs.max_model_len, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        blocks_per_sequence=per_seq, bytes_per_block=block, kv_cache_memory_bytes=budget,
        gpu_memory_utilization=util, max_gpu_memory_utilization=base.gpu_memory_utilization,
        weight_bytes=weights, reserve_bytes=reserve_total, device_total_bytes=total,
        unused_bytes_per_gpu=total - math.ceil(total * util), sequences_fit=holds, sequences_fit_one_block_less=less,
        serve_flags=[*flags, f"--gpu-memory-utilization {util}"],
        serve_flags_fixed_kv=[*flags, f"--kv-cache-memory-bytes {budget}"], notes=notes)
