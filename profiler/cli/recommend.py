"""`kvprof recommend`: the inverse plan, what to set on one GPU model so that N sequences of T tokens fit."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from analysis import catalog
from analysis.planning.plan import PlanError, PlanInputs
from analysis.planning.plan_inputs import option
from analysis.planning.procurement import parse_tp_list
from analysis.units import fmt_bytes
from profiler.cli.common import console
from profiler.cli.model_options import with_model_options
from profiler.cli.plan import (
    MODEL_PANEL,
    REPLAY_FIELDS,
    JsonOpt,
    ModelOpt,
    ProbeOpt,
    check_shared_options,
    parsed_settings,
    plan_errors,
    probed_device,
)


@with_model_options(PlanInputs, option, panel=MODEL_PANEL, exclude=REPLAY_FIELDS)
def recommend_cmd(
    model: ModelOpt,
    gpu: Annotated[str | None, typer.Option(help="One GPU catalog name (see `kvprof gpus`).")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Sequences to hold at once (N).")] = None,
    tp: Annotated[str, typer.Option("--tp", help="Tensor-parallel sizes to try, a comma list.")] = "1,2,4,8",
    pp: Annotated[str, typer.Option("--pp", help="Pipeline-parallel sizes to try, a comma list.")] = "1",
    probe: ProbeOpt = None,
    json_out: JsonOpt = False,
    **fields: Any,
):
    """Find what to set so that N sequences of T tokens fit on one GPU model: the inverse plan.

    The smallest --gpu-memory-utilization (or --kv-cache-memory-bytes), tp and GPU count on --gpu that hold
    --concurrency sequences of --context tokens, as vllm serve flags (--gpu-memory-utilization is the ceiling).
    --json: Recommendation in analysis/planning/plan.schema.json.
    """
    from analysis.planning.recommend import recommend

    check_shared_options(model, fields)
    settings = dict(fields)
    context = settings.pop("context")
    with plan_errors():
        tps, pps = parse_tp_list(tp), parse_tp_list(pp, "--pp")
        for flag, key, why in (("--batch", "batch", "--concurrency is the sequences to hold"),
                               ("--kv-cache-memory-bytes", "kv_cache_memory_bytes",
                                "recommend finds the KV budget itself")):
            if settings.pop(key) is not None:
                raise PlanError(f"{flag} does not go with recommend: {why}")
        if concurrency is None or context is None:
            raise PlanError("recommend needs --concurrency N and --context T (N sequences of T tokens to hold at "
                            "once)")
        if concurrency < 1 or context < 1:
            raise PlanError(f"--concurrency {concurrency}, --context {context}: both must be at least 1")
        if gpu and probe:
            raise PlanError("give --gpu or --probe, not both")
        if probe:
            gpu_spec = probed_device(probe)
        elif gpu is None or not gpu.strip() or "," in gpu or gpu.strip().lower() == "all":
            raise PlanError("recommend needs one GPU: --gpu h100-sxm (compare GPUs with `kvprof procure`)")
        else:
            gpu_spec, _ = catalog.resolve_gpu(gpu)
        arch, _ = catalog.resolve_model(model)
        rec = recommend(arch, PlanInputs(**parsed_settings(settings)), gpu_spec, tps, concurrency=concurrency,
                        context=context, pps=pps)
    if json_out:
        print(rec.model_dump_json(indent=2))
        return
    per = f", {rec.sequences_per_replica:,} per replica" if rec.replicas > 1 else ""
    console.print(f"{rec.model} on {rec.gpu}: {rec.concurrency:,} sequences of {rec.context:,} tokens need "
                  f"{rec.gpus_needed} GPU(s): tp {rec.tensor_parallel_size}"
                  + (f" × pp {rec.pipeline_parallel_size}" if rec.pipeline_parallel_size > 1 else "")
                  + f" × {rec.replicas} replica(s){per}",
                  highlight=False)
    console.print(f"  vllm serve MODEL {' '.join(rec.serve_flags)}", highlight=False, soft_wrap=True)
    console.print(f"  or, a fixed KV budget: vllm serve MODEL {' '.join(rec.serve_flags_fixed_kv)}", highlight=False,
                  soft_wrap=True)
    console.print(
        f"  margin: {rec.sequences_fit:,} sequences fit per replica ({rec.sequences_fit_one_block_less:,} with one "
        f"{fmt_bytes(rec.bytes_per_block)} block less); per GPU: weights {fmt_bytes(rec.weight_bytes)}, reserve "
        f"{fmt_bytes(rec.reserve_bytes)}, KV {fmt_bytes(rec.kv_cache_memory_bytes)}, "
        f"{fmt_bytes(rec.unused_bytes_per_gpu)} of {fmt_bytes(rec.device_total_bytes)} left unused "
        f"(the ceiling was {rec.max_gpu_memory_utilization})", highlight=False)
    for note in rec.notes:
        console.print(f"  note: {escape(note)}", highlight=False)
