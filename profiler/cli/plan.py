"""`kvprof plan`: a model + GPU + workload → capacity and latency predictions, or the procurement table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape

from analysis import catalog
from analysis.model.architecture import UnsupportedArchitecture
from analysis.planning.calibration_file import checked_calibration, load_calibration
from analysis.planning.cost import Pricing, parse_power_price, parse_prices
from analysis.planning.plan import Calibration, PlanError, PlanInputs, make_plan, refuse_unrunnable
from analysis.planning.plan_inputs import option, option_flag
from analysis.planning.procurement import RANK_BY, parse_gpu_list, parse_tp_list, procurement
from analysis.results.inputs import InputFileError, read_json
from analysis.units import fmt_bytes, parse_seconds
from profiler.cli.common import (
    console,
    err,
    fail,
    one_line,
    output_path,
)
from profiler.cli.model_options import parsed, with_model_options
from profiler.cli.plan_tables import cost_table, plan_table, procurement_tables


@with_model_options(PlanInputs, option, panel="The engine and the workload (vLLM's settings)")
def plan_cmd(
    model: Annotated[str, typer.Option("--model", "-m", help="Catalog name, model directory or config.json.")],
    gpu: Annotated[str | None, typer.Option(
        help="GPU catalog name (see `kvprof gpus`); a comma list or `all` (every data-centre GPU) for the "
             "procurement table.")] = None,
    tp: Annotated[str | None, typer.Option("--tp", help="Tensor-parallel size (default 1); a comma list (1,2,4,8) "
                                                        "for the procurement table.")] = None,
    pp: Annotated[str, typer.Option("--pp", help="Pipeline-parallel size: vLLM's layer split over stages, each "
                                                  "stage its own weights and budget, the KV pool the smallest "
                                                  "stage's; a comma list (1,2) for the procurement table.")] = "1",
    calibration: Annotated[Path | None, typer.Option(
        help="calibration.json from a measured sweep; without --gpu/--probe the plan is for the device it was "
             "measured on. One fitted on another model applies (and is named); one fitted on another GPU is refused "
             "unless --transfer-calibration.")] = None,
    transfer_calibration: Annotated[bool, typer.Option(
        "--transfer-calibration", help="Apply a --calibration fitted on another GPU: its rates are scaled by the "
                                       "two spec sheets and the output is labelled as transferred, and how.")
    ] = False,
    probe: Annotated[Path | None, typer.Option(
        help="probe.json from `kvprof probe`: use this machine's measured ceilings instead of --gpu.")] = None,
    save: Annotated[Path | None, typer.Option(
        help="Store the prediction and its inputs (JSON) for `kvprof check-plan` once it is measured.")] = None,
    concurrency: Annotated[int | None, typer.Option(
        help="Sequences of --context tokens to hold at once: gives the procurement table.")] = None,
    tpot_slo: Annotated[str | None, typer.Option(
        help="Procurement table: decode-step ceiling per replica, seconds or with a unit (50ms).")] = None,
    ttft_slo: Annotated[str | None, typer.Option(
        help="Procurement table: time-to-first-token ceiling for a --prompt-len prompt (default: --context) "
             "arriving while the replica's batch decodes, seconds or with a unit (500ms).")] = None,
    price: Annotated[str | None, typer.Option(
        help="Procurement table: USD per GPU-hour, GPU=USD pairs (h100-sxm=2.99,h200=3.80), in place of the "
             "catalog's cited cloud list prices (`kvprof gpus`).")] = None,
    power_price: Annotated[str | None, typer.Option(
        help="Procurement table: USD per kWh, added to the GPU-hour price for the boards' predicted draw (your own "
             "machines; a cloud price already includes it).")] = None,
    rank_by: Annotated[str, typer.Option(
        help="Procurement table order among configurations that fit the SLOs: gpus (fewest needed), tokens (most "
             "tokens/s per GPU) or cost (cheapest per million output tokens).")] = "gpus",
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object (the procurement table: a list of rows).")] = False,
    recommend: Annotated[bool, typer.Option(
        "--recommend", help="The inverse plan: the smallest --gpu-memory-utilization (or --kv-cache-memory-bytes), "
                            "tp and GPU count on --gpu that hold --concurrency sequences of --context tokens, as "
                            "vllm serve flags (tp 1,2,4,8 unless --tp lists others; --gpu-memory-utilization is "
                            "the ceiling).")] = False,
    **fields: Any,
):
    """Predict KV capacity and decode latency for a model on a GPU.

    With a list of GPUs or tensor-parallel sizes, or --concurrency N: the procurement table. Each
    GPU × tp is one vLLM replica of tp GPUs, planned as above: its KV budget per GPU and the share
    of it N sequences of --context tokens need, the sequences that fit per replica, replicas =
    ceil(N / fit) and GPUs needed = replicas × tp, the decode step at ceil(N / replicas) sequences
    per replica and tokens/s per GPU. With --tpot-slo a replica holds no more sequences than meet
    it. Order: configurations that fit first, by GPUs needed (fewest first), then tokens/s per GPU
    (most first); then those that do not, with the reason (tp does not divide the heads, weights,
    not one sequence fits, SLO). With --calibration the calibrated figures stand beside the
    spec-sheet ones and decide fit and order. --json: a list of rows (keys:
    analysis.planning.procurement.ProcurementRow).
    """
    try:
        tps = parse_tp_list(tp if tp is not None else ("1,2,4,8" if recommend else "1"))
        pps = parse_tp_list(pp, "--pp")
    except ValueError as exc:
        raise fail(str(exc)) from None
    _check_plan_options(model, fields["kv_cache_memory_bytes"], fields["reserve_bytes"], tpot_slo, ttft_slo)
    if transfer_calibration and calibration is None:
        raise fail("--transfer-calibration goes with --calibration FILE (it allows a calibration fitted on another "
                   "GPU or model)")
    # PlanInputs' fields as the options give them (text ones still text; tp and context set per path).
    settings = {**fields, "pipeline_parallel_size": pps[0]}
    context = settings.pop("context")
    if recommend:
        _recommend_cmd(model, gpu, probe, (tps, pps), concurrency, context, (calibration, save, tpot_slo, ttft_slo),
                       json_out, settings)
        return
    money = (price, power_price, rank_by)
    if (gpu is not None and ("," in gpu or gpu.strip().lower() == "all")) or len(tps) > 1 or len(pps) > 1 \
            or concurrency is not None or tpot_slo is not None or ttft_slo is not None:
        _procurement_cmd(model, gpu, probe, (tps, pps), concurrency, (tpot_slo, ttft_slo), context,
                         (calibration, transfer_calibration) if calibration else None, save, json_out, settings,
                         money)
        return
    for flag, value, default in (("--price", price, None), ("--power-price", power_price, None),
                                 ("--rank-by", rank_by, "gpus")):
        if value != default:
            raise fail(f"{flag} goes with the procurement table (--concurrency N, or GPU or tp lists)")
    if gpu is not None and not gpu.strip():
        raise fail("--gpu is empty: give a catalog name (`kvprof gpus`), a comma list or all")
    if save is not None:
        output_path(save, "--save", inputs=(calibration, probe, Path(model), Path(model) / "config.json"),
                    example="plan.json")
    try:
        if gpu and probe:
            raise PlanError("give --gpu or --probe, not both")
        arch, _ = catalog.resolve_model(model)
        gpu_spec, gpu_note = catalog.resolve_gpu(gpu) if gpu else (None, None)
        if probe:
            try:
                probe_facts = read_json(probe)
            except ValueError as exc:
                raise PlanError(f"--probe {exc} — rerun `kvprof probe --out {probe}`") from None
            gpu_spec = catalog.from_probe(probe_facts, f"--probe {probe}")
        inputs = PlanInputs(**_parsed(settings), tensor_parallel_size=tps[0], context=context)
        cal = load_calibration(calibration, gpu_spec) if calibration else None
        if cal is not None and gpu_spec is None and (gpu_spec := cal.device_spec()) is not None:
            gpu_note = f"device from the calibration: {gpu_spec.display} (its ceilings: {cal.measured_on.ceilings})"
        provenance = None
        if cal is not None:
            cal, provenance = checked_calibration(cal, calibration, gpu_spec, arch.name, model, inputs.vllm_version,
                                                  transfer_calibration)
        result = make_plan(arch, inputs, gpu_spec, cal)
        refuse_unrunnable(result, inputs)
        if provenance is not None:
            result.calibration_provenance = provenance
        if gpu_note:
            result.gpu_note = gpu_note
    except ValidationError as exc:
        raise fail(_plan_options_line(exc)) from None
    except (PlanError, UnsupportedArchitecture, catalog.UnknownName, ValueError, OSError, KeyError) as exc:
        raise fail(one_line(exc)) from None
    if save:
        from analysis.planning.saved_plan import SavedPlanError, save_plan
        from profiler.output_paths import OutputPathError, writing

        try:
            with writing(save, "--save"):
                save_plan(save, model=model, architecture=arch.model_dump(mode="json"), gpu=gpu,
                          probe=str(probe) if probe else None, calibration=str(calibration) if calibration else None,
                          inputs=inputs.model_dump(), prediction=result)
        except (OutputPathError, SavedPlanError) as exc:
            raise fail(str(exc)) from None
    prov = result.calibration_provenance
    for warning in [*(result.calibration_warnings or []), *(prov.warnings if prov else [])]:
        err.print(f"[bold yellow]warning:[/] {escape(warning)}", highlight=False)
    for unknown in prov.unknown if prov else []:
        err.print(f"note: {unknown}", highlight=False)
    if json_out:
        print(json.dumps(result.to_json(), indent=2))
        return
    if gpu_note:
        err.print(f"note: {gpu_note}", highlight=False)
    console.print(plan_table(result, console.width))
    for note in (result.weights_note, result.latency_note, result.calibration_speculative_note):
        if note:
            console.print(f"note: {note}", highlight=False)
    if (sp := result.speculative) is not None and result.decode_step_s is not None:
        console.print(f"note: speculative decoding: {sp.latency}", highlight=False)
    if result.kv_budget_bytes is None:
        console.print("no KV budget: give --gpu (or --probe) or --kv-cache-memory-bytes for blocks, "
                      "concurrency and sequences that fit", highlight=False)
    if result.calibration_source:  # a transferred calibration's source says so, and from what
        console.print(f"calibrated with {escape(result.calibration_source)}", highlight=False)
    if result.reserve:
        r = result.reserve
        console.print(
            f"reserve ({r.source}): activations {fmt_bytes(r.activation_bytes)}, non-torch "
            f"{fmt_bytes(r.non_torch_bytes)}, CUDA graphs {fmt_bytes(r.cuda_graph_bytes)}",
            highlight=False)


def _plan_options_line(exc: ValidationError) -> str:
    """A PlanInputs validation error as one line, each field named by its `kvprof plan` option."""
    if exc.title != "PlanInputs":
        return one_line(exc)
    return "; ".join(
        f"{option_flag(str(e['loc'][0])) if e['loc'] else 'input'}"
        f": {e['msg'].removeprefix('Value error, ')}"
        + (f" (got {e['input']!r})" if e["type"] != "value_error" and not isinstance(e.get("input"), dict) else "")
        for e in exc.errors())


def _seconds(flag: str, text: str | None) -> float | None:
    """An SLO's text (50ms, 0.5) in seconds; None when not given, a PlanError naming the option otherwise."""
    if text is None:
        return None
    try:
        return parse_seconds(text)
    except ValueError as exc:
        raise PlanError(f"{flag}: {exc}") from None


def _parsed(settings: dict[str, Any]) -> dict[str, Any]:
    """The plan's settings with those given as text (sizes, JSON) read by their options' parsers (a PlanError naming
    the option)."""
    return parsed(settings, option, option_flag)


def _check_plan_options(model: str, *byte_and_slo: str | None) -> None:
    """Options given as an empty string: refused by name (an empty --model would read ./config.json)."""
    if not model.strip():
        raise fail("--model is empty: give a catalog name (`kvprof models`), a model directory or a config.json")
    for flag, value in zip(("--kv-cache-memory-bytes", "--reserve-bytes", "--tpot-slo", "--ttft-slo"),
                           byte_and_slo, strict=True):
        if value is not None and not value.strip():
            raise fail(f"{flag} is empty: give a value (e.g. "
                       + ("50ms)" if flag.endswith("-slo") else "8GiB)"))


def _procurement_cmd(model: str, gpu: str | None, probe: Path | None, sizes: tuple[list[int], list[int]],
                     concurrency: int | None,
                     slos: tuple[str | None, str | None], context: int | None, calibration: tuple[Path, bool] | None,
                     save: Path | None, json_out: bool, settings: dict[str, Any],
                     money: tuple[str | None, str | None, str] = (None, None, "gpus")) -> None:
    """`kvprof plan` with GPU or tp lists, or --concurrency: the ranked procurement table. ``calibration``:
    the file and whether --transfer-calibration allows one fitted on another GPU or model; ``money``: --price,
    --power-price and --rank-by."""
    try:
        if money[2] not in RANK_BY:
            raise PlanError(f"--rank-by {money[2]!r}: give one of {', '.join(RANK_BY)}")
        pricing = Pricing(gpu_usd_per_hour=parse_prices(money[0]) if money[0] is not None else {},
                          power_usd_per_kwh=parse_power_price(money[1]) if money[1] is not None else None)
        for flag, value, why in (
                ("--save", save, "`kvprof check-plan` takes one configuration: give one --gpu and one --tp"),
                ("--batch", settings.pop("batch"), "each row's batch follows from --concurrency")):
            if value is not None:
                raise PlanError(f"{flag} does not go with the procurement table: {why}")
        if concurrency is None:
            raise PlanError("the procurement table (GPU or tp lists, --tpot-slo, --ttft-slo) needs --concurrency N "
                            "(the sequences of --context tokens to hold at once)")
        if gpu and probe:
            raise PlanError("give --gpu or --probe, not both")
        if not gpu and not probe:
            raise PlanError("the procurement table needs GPUs: --gpu h100-sxm,h200,b200 or --gpu all")
        arch, _ = catalog.resolve_model(model)
        if probe:
            try:
                gpus = [(catalog.from_probe(read_json(probe), f"--probe {probe}"), None)]
            except InputFileError as exc:
                raise PlanError(f"--probe {exc}") from None
            except ValueError as exc:
                raise PlanError(f"--probe {probe}: {one_line(exc)}") from None
        else:
            gpus = parse_gpu_list(gpu)
        base = PlanInputs(**_parsed(settings))
        slo = _seconds("--tpot-slo", slos[0])
        ttft_slo = _seconds("--ttft-slo", slos[1])
        cal_for = None
        if calibration:
            def cal_for(g: Any) -> Calibration:
                return checked_calibration(load_calibration(calibration[0], g), calibration[0], g, arch.name,
                                           model, settings.get("vllm_version"), calibration[1])[0]
        if context is not None and context < 1:
            raise PlanError(f"--context {context}: Input should be greater than 0 (tokens each sequence holds)")
        ctx = context if context is not None else make_plan(arch, base).max_model_len
        rows = procurement(arch, base, [g for g, _ in gpus], sizes[0], concurrency=concurrency, context=ctx,
                           tpot_slo_s=slo, calibration=cal_for, ttft_slo_s=ttft_slo, pps=sizes[1],
                           pricing=pricing, rank_by=money[2])  # type: ignore[arg-type]
    except ValidationError as exc:
        raise fail(_plan_options_line(exc)) from None
    except (PlanError, UnsupportedArchitecture, catalog.UnknownName, ValueError, OSError, KeyError) as exc:
        raise fail(one_line(exc)) from None
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
    money_table, money_notes = cost_table(rows, pricing)
    if money_table is not None:
        console.print(money_table)
        for note in money_notes:
            console.print(f"  {escape(note)}", highlight=False)
    order = {"gpus": "by GPUs needed (fewest first), then tokens/s per GPU (most first)",
             "tokens": "by tokens/s per GPU (most first)",
             "cost": "by USD per million output tokens (cheapest first; unpriced ones after)"}[money[2]]
    console.print(f"order: configurations that fit, {order}; GPUs needed = replicas × tp (× pp), replicas = "
                  "ceil(N / sequences that fit)" + (", calibrated figures decide" if calibration else ""),
                  highlight=False)
    for note in dict.fromkeys(r.calibration_note for r in rows if r.calibration_note):
        console.print(f"calibrated with {escape(note)}", highlight=False)


def _recommend_cmd(model: str, gpu: str | None, probe: Path | None, sizes: tuple[list[int], list[int]],
                   concurrency: int | None,
                   context: int | None, not_with: tuple[Any, ...], json_out: bool, settings: dict[str, Any]) -> None:
    """`kvprof plan --recommend`: what to set on one GPU model so that N sequences of T tokens fit."""
    from analysis.planning.recommend import recommend

    try:
        for flag, value in zip(("--calibration", "--save", "--tpot-slo", "--ttft-slo"), not_with, strict=True):
            if value is not None:
                raise PlanError(f"{flag} does not go with --recommend (it sizes memory for N sequences of T tokens)")
        for flag, key in (("--batch", "batch"), ("--kv-cache-memory-bytes", "kv_cache_memory_bytes")):
            if settings.get(key) is not None:
                raise PlanError(f"{flag} does not go with --recommend: "
                                + ("--concurrency is the sequences to hold" if key == "batch"
                                   else "--recommend finds the KV budget itself"))
        if concurrency is None or context is None:
            raise PlanError("--recommend needs --concurrency N and --context T (N sequences of T tokens to hold "
                            "at once)")
        if concurrency < 1 or context < 1:
            raise PlanError(f"--concurrency {concurrency}, --context {context}: both must be at least 1")
        if gpu and probe:
            raise PlanError("give --gpu or --probe, not both")
        if probe:
            gpu_spec = catalog.from_probe(read_json(probe), f"--probe {probe}")
        elif gpu is None or not gpu.strip() or "," in gpu or gpu.strip().lower() == "all":
            raise PlanError("--recommend needs one GPU: --gpu h100-sxm (compare GPUs with the procurement table: "
                            "drop --recommend and give a list)")
        else:
            gpu_spec, _ = catalog.resolve_gpu(gpu)
        arch, _ = catalog.resolve_model(model)
        rec = recommend(arch, PlanInputs(**_parsed(settings)), gpu_spec, sizes[0], concurrency=concurrency,
                        context=context, pps=sizes[1])
    except ValidationError as exc:
        raise fail(_plan_options_line(exc)) from None
    except (PlanError, UnsupportedArchitecture, catalog.UnknownName, InputFileError, ValueError, OSError,
            KeyError) as exc:
        raise fail(one_line(exc)) from None
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




