"""The engine a plan describes, as the replay needs it (:func:`replay_engine`): the block pool and block table of
``analysis.vllm.allocator`` (the same ``paged_capacity`` the plan sizes, held to the plan's block count), the
scheduler limits the plan resolved (max_num_seqs, max_num_batched_tokens, chunked prefill, the prefix cache), and the
step model of ``analysis.latency.step`` with its fitted constants."""

from __future__ import annotations

import numpy as np

from analysis.catalog import GPU
from analysis.latency import step as latency
from analysis.model.architecture import Architecture
from analysis.planning.plan import PlanInputs, make_plan
from analysis.planning.plan_inputs import async_scheduling
from analysis.serving.replay import ReplayEngine, ReplayError, bucketed
from analysis.vllm.allocator import paged_capacity
from analysis.vllm.release import chunked_prefill_default, prefix_caching_default


def replay_engine(a: Architecture, inputs: PlanInputs, gpu: GPU,
                  constants: latency.LatencyConstants | None = None) -> ReplayEngine:
    """The engine ``inputs`` plan for ``a`` on ``gpu``, for the replay; a configuration the replay does not
    reproduce is refused by name (:class:`ReplayError`)."""
    if gpu.cpu:
        raise ReplayError(f"{gpu.display} is a CPU: the step model's constants are fitted on GPUs (a CPU sweep's "
                          "calibration is not yet applied to the replay)")
    for what, unsupported in (("--speculative-config", inputs.speculative_config is not None),
                              ("--pp above 1", inputs.pipeline_parallel_size > 1),
                              ("--max-loras", bool(inputs.max_loras))):
        if unsupported:
            raise ReplayError(f"{what}: the serving replay does not model it yet")
    plan = make_plan(a, inputs, gpu)
    if plan.num_blocks is None or plan.kv_budget_bytes is None:
        raise ReplayError(f"no KV pool for {a.name} on {gpu.display}: {plan.weights_note or 'nothing fits'}")
    tp = inputs.tensor_parallel_size
    prefix = (inputs.enable_prefix_caching if inputs.enable_prefix_caching is not None
              else prefix_caching_default(inputs.vllm_version, attention_free=a.attention_free))
    paged = paged_capacity(a, plan.kv_budget_bytes, block_size=plan.block_size, max_model_len=plan.max_model_len,
                           max_num_batched_tokens=plan.max_num_batched_tokens,
                           kv_cache_dtype=inputs.kv_cache_dtype, tp=tp, async_scheduling=plan.async_scheduling,
                           prefix_caching=inputs.enable_prefix_caching)
    if paged.num_blocks != plan.num_blocks:
        raise ReplayError(f"the replay's pool ({paged.num_blocks:,} blocks) is not the plan's ({plan.num_blocks:,})")
    if any(g.caches for g in paged.groups):
        raise ReplayError(f"{a.name} keeps packed caches (DeepSeek-V4's layout): the replay does not model them yet")
    bs = paged.block_size
    tokens = np.arange(-(-plan.max_model_len // bs) + 2, dtype=np.int64) * bs
    blocks_at = np.zeros(tokens.size, np.int64)
    for g in paged.groups:
        g_bs = g.block_size or bs
        blocks_at += np.array([g.layer.blocks_per_request(g_bs, int(t), 1) if t else 0 for t in tokens], np.int64)
    c = constants or latency.shipped_constants()
    eng = latency.Engine(a, gpu, tp=tp, kv_cache_dtype=inputs.kv_cache_dtype, enforce_eager=inputs.enforce_eager,
                         vllm_version=inputs.vllm_version, max_num_batched_tokens=plan.max_num_batched_tokens,
                         async_scheduling=async_scheduling(inputs, True))

    def step_s(d: int, ctx: float, p: int, prefix_tokens: float, ps: int) -> float:
        return latency.step_time(eng.step(decode_seqs=d, decode_context=ctx, prefill_tokens=p,
                                          prefill_prefix=prefix_tokens, prefill_seqs=max(ps, 1) if p else None), c)

    chunked = chunked_prefill_default(inputs.vllm_version)
    return ReplayEngine(num_blocks=paged.num_blocks, block_size=bs, max_num_seqs=plan.max_num_seqs,
                        max_num_batched_tokens=plan.max_num_batched_tokens, max_model_len=plan.max_model_len,
                        chunked_prefill=chunked, prefix_caching=prefix, blocks_at=blocks_at, step_s=bucketed(step_s),
                        api_s=c.value("api_s") if inputs.entry == "serve" else 0.0)
