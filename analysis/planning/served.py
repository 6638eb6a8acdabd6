"""The engine a plan describes, as the replay needs it (:func:`replay_engine`): the block pool and block table of
``analysis.vllm.allocator`` (the same ``paged_capacity`` the plan sizes, held to the plan's block count), the
scheduler limits the plan resolved (max_num_seqs, max_num_batched_tokens, chunked prefill, the prefix cache), and the
step model of ``analysis.latency.step`` with its fitted constants."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from analysis.catalog import GPU
from analysis.latency import step as latency
from analysis.model.architecture import Architecture
from analysis.planning.plan_inputs import PlanInputs, async_scheduling
from analysis.serving.evidence import replay_evidence
from analysis.serving.replay import ReplayEngine, ReplayError, bucketed, replay
from analysis.serving.workload import ServedWorkload, trace_workload
from analysis.vllm.allocator import paged_capacity
from analysis.vllm.release import chunked_prefill_default, prefix_caching_default

if TYPE_CHECKING:
    from analysis.planning.plan_schema import Plan, ServedPlan

DEFAULT_PROMPTS = 1000  # vllm bench serve --num-prompts's default


def replay_engine(a: Architecture, inputs: PlanInputs, gpu: GPU, plan: Plan,
                  constants: latency.LatencyConstants | None = None) -> ReplayEngine:
    """The engine ``plan`` (``make_plan(a, inputs, gpu)``) describes, for the replay; a configuration the replay does
    not reproduce is refused by name (:class:`ReplayError`)."""
    if gpu.cpu:
        raise ReplayError(f"{gpu.display} is a CPU: the step model's constants are fitted on GPUs (a CPU sweep's "
                          "calibration is not yet applied to the replay)")
    for what, unsupported in (("--speculative-config", inputs.speculative_config is not None),
                              ("--pp above 1", inputs.pipeline_parallel_size > 1),
                              ("--max-loras", bool(inputs.max_loras))):
        if unsupported:
            raise ReplayError(f"{what}: the serving replay does not model it yet")
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


def served_plan(a: Architecture, inputs: PlanInputs, gpu: GPU, plan: Plan) -> ServedPlan:
    """The load ``inputs`` names (--max-concurrency, --request-rate, --num-prompts, --burstiness with --prompt-len and
    --output-len) replayed on the engine ``plan`` describes, with the interval and evidence the replay's held-out
    error on published serving runs gives."""
    from analysis.planning.plan_schema import ServedPlan

    if inputs.serve_trace is not None:
        w = trace_workload(inputs.serve_trace, inputs.serve_num_prompts, inputs.serve_max_concurrency,
                           inputs.serve_trace_speed)
    else:
        assert inputs.prompt_len is not None and inputs.output_len is not None
        w = ServedWorkload(num_requests=inputs.serve_num_prompts or DEFAULT_PROMPTS, prompt_len=inputs.prompt_len,
                           output_len=inputs.output_len, request_rate=inputs.serve_request_rate,
                           burstiness=inputs.serve_burstiness, max_concurrency=inputs.serve_max_concurrency)
    o = replay(replay_engine(a, inputs, gpu, plan), w)
    ev = replay_evidence()
    assert o.ttft.median_s is not None
    return ServedPlan(
        outcome=o, ttft_median_interval_s=list(ev.interval("ttft", o.ttft.median_s)),
        tpot_mean_interval_s=list(ev.interval("tpot", o.tpot.mean_s)) if o.tpot.mean_s is not None else None,
        checked_against={f: ev.checked_against(f) for f in ("ttft", "tpot")},
        note=("replayed through vLLM 0.32's V1 scheduler (running requests first within max_num_batched_tokens, "
              "chunked prefill, admission when a prompt's blocks are free, preemption by recompute) on the plan's "
              "block pool, each step priced by the fitted step model (shipped constants); "
              + (f"the requests of {inputs.serve_trace} at its timestamps, its shared prefixes through the prefix "
                 "cache" if inputs.serve_trace else "every request of --prompt-len and --output-len, no shared "
                 "prefix")))


def served_row(a: Architecture, inputs: PlanInputs, gpu: GPU, plan: Plan, batch: int
               ) -> dict[str, float | str | None]:
    """A procurement row's served figures: a closed loop of ``batch`` requests in flight on one replica (``inputs``:
    the row's settings, with --prompt-len and --output-len; ``plan``: its plan), 8 requests a slot (200 to 2,000),
    replayed; its median and p99 TTFT and TPOT, or the reason none were (``served_note``)."""
    assert inputs.prompt_len is not None and inputs.output_len is not None
    w = ServedWorkload(num_requests=min(max(8 * batch, 200), 2000), prompt_len=inputs.prompt_len,
                       output_len=inputs.output_len, max_concurrency=batch)
    try:
        o = replay(replay_engine(a, inputs, gpu, plan), w)
    except ReplayError as exc:
        return {"served_note": f"not replayed: {exc}"}
    return {"served_ttft_median_s": o.ttft.median_s, "served_ttft_p99_s": o.ttft.p99_s,
            "served_tpot_median_s": o.tpot.median_s, "served_tpot_p99_s": o.tpot.p99_s}
