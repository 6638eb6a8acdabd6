"""`kvprof procure`: GPU × tp (× pp) ranked for N sequences of T tokens, the procurement table."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape

from analysis import catalog
from analysis.planning.cost import Pricing, parse_power_price, parse_prices
from analysis.planning.plan import Calibration, PlanError, PlanInputs, make_plan
from analysis.planning.plan_inputs import option
from analysis.planning.procurement import RANK_BY, parse_gpu_list, parse_tp_list, procurement
from analysis.units import parse_seconds
from profiler.cli.common import console, err
from profiler.cli.model_options import with_model_options
from profiler.cli.plan import (
    MODEL_PANEL,
    REPLAY_FIELDS,
    CalibrationOpt,
    JsonOpt,
    ModelOpt,
    ProbeOpt,
    TransferOpt,
    check_shared_options,
    parsed_settings,
    plan_errors,
    probed_device,
)
from profiler.cli.plan_tables import cost_table, procurement_tables, served_rows_table

ORDER = {"gpus": "by GPUs needed (fewest first), then tokens/s per GPU (most first)",
         "tokens": "by tokens/s per GPU (most first)",
         "cost": "by USD per million output tokens (cheapest first; unpriced ones after)"}


@with_model_options(PlanInputs, option, panel=MODEL_PANEL, exclude=REPLAY_FIELDS)
def procure_cmd(
    model: ModelOpt,
    gpu: Annotated[str | None, typer.Option(
        help="GPU catalog names, a comma list (h100-sxm,h200,b200), or `all` (every data-centre GPU).")] = None,
    tp: Annotated[str, typer.Option("--tp", help="Tensor-parallel sizes, a comma list (1,2,4,8).")] = "1",
    pp: Annotated[str, typer.Option("--pp", help="Pipeline-parallel sizes, a comma list (1,2): each stage its own "
                                                  "weights and budget, the KV pool the smallest stage's.")] = "1",
    concurrency: Annotated[int | None, typer.Option(
        help="Sequences of --context tokens to hold at once (N).")] = None,
    tpot_slo: Annotated[str | None, typer.Option(
        help="Decode-step ceiling per replica, seconds or with a unit (50ms).")] = None,
    ttft_slo: Annotated[str | None, typer.Option(
        help="Time-to-first-token ceiling for a --prompt-len prompt (default: --context) arriving while the "
             "replica's batch decodes, seconds or with a unit (500ms).")] = None,
    price: Annotated[str | None, typer.Option(
        help="USD per GPU-hour, GPU=USD pairs (h100-sxm=2.99,h200=3.80), in place of the catalog's cited cloud "
             "list prices (`kvprof gpus`).")] = None,
    power_price: Annotated[str | None, typer.Option(
        help="USD per kWh, added to the GPU-hour price for the boards' predicted draw (your own machines; a cloud "
             "price already includes it).")] = None,
    rank_by: Annotated[str, typer.Option(
        help="Order among configurations that fit the SLOs: gpus (fewest needed), tokens (most tokens/s per GPU) "
             "or cost (cheapest per million output tokens).")] = "gpus",
    calibration: CalibrationOpt = None,
    transfer_calibration: TransferOpt = False,
    probe: ProbeOpt = None,
    served: Annotated[bool, typer.Option(
        "--served", help="Also replay each fitting row's closed loop (its batch in flight on one replica, requests of "
                         "--prompt-len and --output-len) through vLLM's scheduler: median and p99 TTFT and TPOT.")
    ] = False,
    json_out: JsonOpt = False,
    **fields: Any,
):
    """Rank GPUs × tensor-parallel sizes for N sequences of --context tokens: the procurement table.

    Each GPU × tp is one vLLM replica of tp GPUs, planned as `kvprof plan` does: its KV budget per
    GPU and the share of it N sequences of --context tokens need, the sequences that fit per
    replica, replicas = ceil(N / fit) and GPUs needed = replicas × tp, the decode step at
    ceil(N / replicas) sequences per replica and tokens/s per GPU. With --tpot-slo a replica holds
    no more sequences than meet it. Order: configurations that fit first (--rank-by), then those
    that do not, with the reason (tp does not divide the heads, weights, not one sequence fits,
    SLO). With --calibration the calibrated figures stand beside the spec-sheet ones and decide fit
    and order. --json: a list of rows (ProcurementRow in analysis/planning/plan.schema.json).
    """
    check_shared_options(model, fields, calibration, transfer_calibration, (tpot_slo, ttft_slo))
    settings = dict(fields)
    context = settings.pop("context")
    with plan_errors():
        tps, pps = parse_tp_list(tp), parse_tp_list(pp, "--pp")
        if rank_by not in RANK_BY:
            raise PlanError(f"--rank-by {rank_by!r}: give one of {', '.join(RANK_BY)}")
        pricing = Pricing(gpu_usd_per_hour=parse_prices(price) if price is not None else {},
                          power_usd_per_kwh=parse_power_price(power_price) if power_price is not None else None)
        if settings.pop("batch") is not None:
            raise PlanError("--batch does not go with the procurement table: each row's batch follows from "
                            "--concurrency")
        if concurrency is None:
            raise PlanError("the procurement table needs --concurrency N (the sequences of --context tokens to hold "
                            "at once)")
        if gpu and probe:
            raise PlanError("give --gpu or --probe, not both")
        if not gpu and not probe:
            raise PlanError("the procurement table needs GPUs: --gpu h100-sxm,h200,b200 or --gpu all")
        arch, _ = catalog.resolve_model(model)
        gpus = [(probed_device(probe), None)] if probe else parse_gpu_list(gpu or "")
        base = PlanInputs(**parsed_settings(settings))
        slo, ttft = _seconds("--tpot-slo", tpot_slo), _seconds("--ttft-slo", ttft_slo)
        cal_for = None
        if calibration:
            from analysis.planning.calibration_file import checked_calibration, load_calibration

            def cal_for(g: Any) -> Calibration:
                return checked_calibration(load_calibration(calibration, g), calibration, g, arch.name, model,
                                           settings.get("vllm_version"), transfer_calibration)[0]
        if context is not None and context < 1:
            raise PlanError(f"--context {context}: Input should be greater than 0 (tokens each sequence holds)")
        ctx = context if context is not None else make_plan(arch, base).max_model_len
        rows = procurement(arch, base, [g for g, _ in gpus], tps, concurrency=concurrency, context=ctx,
                           tpot_slo_s=slo, calibration=cal_for, ttft_slo_s=ttft, pps=pps, pricing=pricing,
                           rank_by=rank_by, served=served)  # type: ignore[arg-type]
    if json_out:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
        return
    for _, note in gpus:
        if note:
            err.print(f"note: {note}", highlight=False)
    cap, lat, notes = procurement_tables(arch.name, rows)
    console.print(cap)
    for i, note in enumerate(notes, 1):
        console.print(f"  [{i}] {escape(note)}", highlight=False)
    console.print(lat)
    if served and (table := served_rows_table(rows)) is not None:
        console.print(table)
    money_table, money_notes = cost_table(rows, pricing)
    if money_table is not None:
        console.print(money_table)
        for note in money_notes:
            console.print(f"  {escape(note)}", highlight=False)
    console.print(f"order: configurations that fit, {ORDER[rank_by]}; GPUs needed = replicas × tp (× pp), replicas = "
                  "ceil(N / sequences that fit)" + (", calibrated figures decide" if calibration else ""),
                  highlight=False)
    for note in dict.fromkeys(r.calibration_note for r in rows if r.calibration_note):
        console.print(f"calibrated with {escape(note)}", highlight=False)


def _seconds(flag: str, text: str | None) -> float | None:
    """An SLO's text (50ms, 0.5) in seconds; None when not given, a PlanError naming the option otherwise."""
    if text is None:
        return None
    try:
        return parse_seconds(text)
    except ValueError as exc:
        raise PlanError(f"{flag}: {exc}") from None

