"""`kvprof sweep --dry-run`: the plan as a table or JSON, and what it will cost on a target GPU
(analysis.planning.sweep_cost) or, without one, a flat estimate.
"""

from __future__ import annotations

import json
from typing import Any

from profiler import machine
from profiler.preflight import async_scheduling, run_architecture, scheduler_defaults
from profiler.spec import (
    DROPPED_LISTED,
    Plan,
    dropped_summary,
)

FLAT_STARTUP_S = 25.0  # the estimate without a target GPU: per engine start …


FLAT_STEP_S = 0.02  # … and per engine step


def target_gpu(name: str | None, platform: str | None) -> tuple[Any, str]:
    """The GPU a dry run costs the sweep on, and a line saying where it came from (or why there is none).

    ``--gpu NAME`` wins; else, for a CUDA sweep, GPU 0 as NVML sees it; a CPU sweep keeps the flat estimate.
    Raises ``UnknownName`` for a name the catalog does not know.
    """
    from analysis.catalog import UnknownName, resolve_gpu

    flat = f"a flat {FLAT_STARTUP_S:g} s per engine start and {FLAT_STEP_S * 1e3:g} ms per step"
    if name is not None:
        gpu, note = resolve_gpu(name)
        return gpu, note or f"target GPU: {gpu.name} ({gpu.display})"
    if (platform or machine.detect_platform()) != "cuda":
        return None, f"CPU sweep: {flat} (`--gpu NAME` costs it on a GPU)"
    _, nvml_name = machine.platform_device("cuda")
    if not nvml_name:
        return None, (f"the GPU-time estimate needs --gpu NAME (`kvprof gpus` lists them): NVML sees no GPU "
                      f"here; shown instead: {flat}")
    try:
        gpu, _ = resolve_gpu(nvml_name)
    except UnknownName:
        return None, (f"NVML sees {nvml_name!r}, which is not in the GPU catalog: the GPU-time estimate needs "
                      f"--gpu NAME (`kvprof gpus` lists them); shown instead: {flat}")
    return gpu, f"target GPU: {gpu.name} (GPU 0 as NVML sees it: {nvml_name})"


def plan_cost(plan: Plan, gpu: Any) -> Any:
    """The sweep's predicted cost on ``gpu`` (analysis.planning.sweep_cost), or None without a GPU or engines."""
    if gpu is None or not plan.engines:
        return None
    from analysis.planning.sweep_cost import sweep_cost

    arch = run_architecture(plan)
    return sweep_cost(arch, gpu, plan.engines, plan.points, plan.spec.phases)


def dry_run_table(plan: Plan, platform: str | None = None, cost: Any = None, rows: int | None = None) -> Any:
    """The plan as a rich table with the analytic capacity prediction per engine (scheduler
    settings the spec leaves unset take vLLM's defaults for ``platform``: this machine's by default).
    With ``cost`` (a :class:`analysis.planning.sweep_cost.SweepCost`) the capacity is the target GPU's
    predicted pool, and each engine's duration (start-up included) and flagged points are added.
    ``rows``: at most this many engines, the others counted in the caption."""
    from rich.table import Table

    from analysis.vllm.allocator import paged_capacity

    arch = run_architecture(plan)
    sat = plan.spec.saturation if "saturation" in plan.spec.phases else None
    on_gpu = f" on {cost.gpu}" if cost is not None else ""
    t = Table(title=f"sweep {plan.spec.name}{on_gpu}: {len(plan.engines)} engines, {plan.num_points} points")
    cols = ["engine", "max_model_len", "block", "kv dtype", "KV budget", "points", "predicted blocks",
            "predicted max conc."]
    if sat:
        cols.append("saturation ceiling")
    if cost is not None:
        cols += ["duration", "flagged"]
    for col in cols:
        t.add_column(col, justify="left" if col == "engine" else "right")
    costs = {e.id: e for e in cost.engines} if cost is not None else {}
    if rows is not None and len(plan.engines) > rows:
        t.caption = f"… and {len(plan.engines) - rows:,} more engines (-v lists each)"
    for cfg in plan.engines[:rows]:
        blocks = conc = ceiling = "—"
        budget = cfg.kv_cache_memory_bytes
        ec = costs.get(cfg.id)
        if ec is not None and ec.kv_budget_bytes is not None:
            budget = ec.kv_budget_bytes
            blocks, conc = f"{ec.num_blocks:,}", f"{ec.max_concurrency:.2f}x"
            sat_points = [p for p in ec.points if p.phase == "saturation"]
            if sat and sat_points:
                p0 = sat_points[0]
                ceiling = f"{p0.ceiling} @ {p0.prompt_len + p0.output_len:,} tok"
        elif budget is not None and arch is not None:
            on = platform or machine.detect_platform()
            mnbt, seqs = scheduler_defaults(cfg, on)
            cap = paged_capacity(arch, budget, block_size=cfg.block_size, max_model_len=cfg.max_model_len,
                                 max_num_batched_tokens=mnbt, kv_cache_dtype=cfg.kv_cache_dtype,
                                 tp=cfg.tensor_parallel_size, async_scheduling=async_scheduling(cfg, on),
                                 prefix_caching=cfg.enable_prefix_caching)
            blocks, conc = f"{cap.num_blocks:,}", f"{cap.max_concurrency:.2f}x"
            if sat:
                from analysis.vllm.allocator import batch_ceiling

                p = sat.prompt_len or cfg.max_model_len // 2
                if p + sat.output_len <= cfg.max_model_len:
                    c = batch_ceiling(cap, p, sat.output_len, seqs, mnbt, async_scheduling(cfg, on))
                    ceiling = f"{c.ceiling} @ {p + sat.output_len:,} tok"
        row = [cfg.id, str(cfg.max_model_len), str(cfg.block_size), cfg.kv_cache_dtype,
               "—" if budget is None else f"{budget / 2**20:,.0f} MiB", str(len(plan.points[cfg.id])), blocks, conc]
        extra = [ceiling] if sat else []
        if cost is not None:
            extra += [minutes(ec.seconds),
                      "cannot start" if ec.error else str(sum(1 for p in ec.points if p.flags))]
        t.add_row(*row, *extra)
    return t


def minutes(s: float) -> str:
    return f"{s / 60:,.1f} min"


def cost_lines(cost: Any, flagged: int | None = None) -> list[str]:
    """What a dry run says under its table: engines that cannot start, flagged points with the
    reason (at most ``flagged`` of each, the rest counted), the start-up terms and the total GPU time."""
    lines = []
    errors = [f"cannot start {e.id} on {cost.gpu}: {e.error}" for e in cost.engines if e.error]
    flags = [f"{flag}: {p.id}: {reason}" for e in cost.engines for p in e.points
             for flag, reason in zip(p.flags, p.reasons, strict=True)]
    for what, found in (("engines that cannot start", errors), ("flagged points", flags)):
        lines += found[:flagged]
        if flagged is not None and len(found) > flagged:
            lines.append(f"… and {len(found) - flagged:,} more {what} (-v lists each)")
    if cost.engines:
        s = cost.engines[0].startup
        totals = sorted({round(e.startup.total_s) for e in cost.engines})
        each = "each" if len(totals) == 1 else f"({totals[0]}–{totals[-1]} s by engine); the first"
        lines.append(f"engine start-up ≈ {s.total_s:.0f} s {each}: process {s.process_s:.0f} s, weights "
                     f"{s.load_s:.1f} s ({s.load_how}), torch.compile {s.compile_s:.0f} s, profile + KV "
                     f"{s.profile_and_kv_s:.1f} s, CUDA graphs {s.graph_capture_s:.0f} s (published vLLM logs)")
    flagged = len(cost.flagged)
    gpus = max(e.tensor_parallel_size * e.pipeline_parallel_size for e in cost.engines) if cost.engines else 1
    lines.append(f"GPU time to budget on {cost.gpu}: {cost.seconds / 3600:.2f} h wall"
                 + (f", {cost.gpu_seconds / 3600:.2f} GPU-hours" if gpus > 1 else "")
                 + f" ({len(cost.engines)} engine launches; steps from the roofline, a floor)"
                 + (f"; {flagged} flagged points" if flagged else ""))
    return lines


def estimate_seconds(plan: Plan, startup_s: float = FLAT_STARTUP_S, step_s: float = FLAT_STEP_S) -> float:
    """Rough duration without a target GPU: engine start-ups (and a server's, for serve points) plus
    (warm-up + repeats) × output tokens per point; a serve point's requests in waves of those in flight."""
    total = startup_s * len(plan.engines)
    for pts in plan.points.values():
        if any(p.phase == "serve" for p in pts):
            total += startup_s
        for p in pts:
            if p.phase == "serve":
                n = (p.num_requests or 1) + p.warmup
                t = -(-n // (p.concurrency or n)) * (p.output_len + 2) * step_s
                total += max(t, n / p.request_rate) if p.request_rate else t
            else:
                total += (p.warmup + p.repeats) * (p.output_len + 2) * step_s
    return total


def dump_plan(plan: Plan, cost: Any = None, estimate_note: str = "", detail: bool = True) -> str:
    """The plan as JSON: engines with their settings and point counts, dropped combinations (as
    `profiler.spec.dropped_summary`), the ETA (``estimated_seconds``: the target GPU's total with ``cost``,
    else the flat estimate) and, with ``cost``, every engine's predicted parts under ``cost``. With
    ``detail`` also each point: its id under its engine, its predicted parts under ``cost``, every
    dropped combination and flagged point; without it the output stays a few hundred bytes an engine."""
    engines = []
    for e in plan.engines:
        pts = plan.points[e.id]
        engines.append(e.model_dump() | {"id": e.id, "point_count": len(pts)}
                       | ({"points": [p.id for p in pts]} if detail else {}))
    dropped = dropped_summary(plan.dropped, detail)
    costs = cost.as_dict() if cost is not None else None
    if costs is not None and not detail:
        for ec in costs["engines"]:
            ec["point_count"] = len(ec.pop("points"))
        costs["flagged_count"] = len(costs["flagged_points"])
        costs["flagged_points"] = costs["flagged_points"][:DROPPED_LISTED]
    return json.dumps({
        "detail": "complete" if detail else "summary",
        "engines": engines,
        "points": plan.num_points,
        **dropped, "dropped": [d.model_dump() for d in dropped["dropped"]],
        "estimated_seconds": cost.seconds if cost is not None else estimate_seconds(plan),
        "estimate": estimate_note,
        "cost": costs,
    }, indent=2)
