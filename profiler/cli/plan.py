"""`kvprof plan`: a model + GPU + workload → capacity and latency predictions, or the procurement table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich import box
from rich.markup import escape
from rich.table import Table

from analysis import catalog
from analysis.latency.intervals import INTERVAL_MEANING
from analysis.model.architecture import UnsupportedArchitecture
from analysis.planning.calibration_file import checked_calibration, load_calibration
from analysis.planning.cost import Pricing, parse_power_price, parse_prices
from analysis.planning.plan import Calibration, PlanError, PlanInputs, make_plan, refuse_unrunnable
from analysis.planning.plan_inputs import option, option_flag
from analysis.planning.plan_schema import Plan
from analysis.planning.procurement import RANK_BY, parse_gpu_list, parse_tp_list, procurement
from analysis.results.inputs import InputFileError, read_json
from analysis.units import fmt_bytes, fmt_count, fmt_seconds, parse_seconds
from profiler.cli.common import (
    console,
    err,
    fail,
    one_line,
    output_path,
)
from profiler.cli.model_options import parsed, with_model_options

# Below this many columns (a pipe, CI, a narrow terminal) the plan is one value a quantity, not two columns
NARROW_COLUMNS = 110


def _plan_table(p: Plan, width: int | None = None) -> Table:
    """The plan as a table: a column of the seeds' ideal arithmetic beside vLLM's; narrower than
    ``NARROW_COLUMNS``, one value a quantity: vLLM's, the ideal one in brackets where it differs or stands alone."""
    narrow = width is not None and width < NARROW_COLUMNS
    t = Table(title=f"kvprof plan — {p.model} ({p.attention})"
              + (f" on {p.gpu}" if p.gpu else "") + f", tp={p.tensor_parallel_size}"
              + (f", pp={p.pipeline_parallel_size}" if p.pipeline_stages else ""),
              box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD)
    t.add_column("quantity")
    if narrow:
        t.add_column(escape("vLLM [ideal: seed arithmetic]"), justify="right")
    else:
        t.add_column("ideal (seed arithmetic; roofline)", justify="right")
        t.add_column("vLLM (paged allocator; latency model)", justify="right")

    def row(label: str, ideal: str = "", paged: str = "") -> None:
        if not narrow:
            t.add_row(label, ideal, paged)
        elif paged and ideal and paged != ideal:
            t.add_row(label, escape(f"{paged} [{ideal}]"))
        else:
            t.add_row(label, paged or (escape(f"[{ideal}]") if ideal else ""))

    row("weights per GPU" + (" (stage 0)" if p.pipeline_stages else ""), fmt_bytes(p.weight_bytes),
        fmt_bytes(p.weight_bytes))
    if p.lora_bytes is not None:
        row("  of which LoRA slots", "", fmt_bytes(p.lora_bytes))
    if (sp := p.speculative) is not None:
        row(f"  of which the {sp.method} drafter (k={sp.num_speculative_tokens})", "",
            fmt_bytes(sp.draft_weight_bytes))
        row("  drafter KV bytes / token (its layers in every block)", "", f"{sp.draft_kv_bytes_per_token:,} B")
        row("  slots a request holds past its context (1 + k + lookahead)", "", str(sp.slots_beyond_context))
    for st in p.pipeline_stages or []:
        pool = " (sets the pool)" if st.stage == p.pool_stage else ""
        row(f"  stage {st.stage}: layers {st.first_layer}–{st.first_layer + st.layers - 1}{pool}", "",
            f"weights {fmt_bytes(st.weight_bytes)}, activation {fmt_bytes(st.activation_bytes)}, "
            f"KV {fmt_bytes(st.kv_budget_bytes)}, {fmt_count(st.num_blocks)} blocks")
    row("KV bytes / token (all layers)", f"{p.kv_bytes_per_token:,} B")
    row(f"KV bytes / sequence @ {p.context:,} tok", fmt_bytes(p.kv_bytes_per_sequence))
    row("KV budget per GPU", fmt_bytes(p.kv_budget_bytes), fmt_bytes(p.kv_budget_bytes))
    row(f"block ({p.kv_block_size:,} tok, all layers of a group)", "", f"{p.bytes_per_block:,} B")
    row("blocks", "", fmt_count(p.num_blocks))
    groups = ", ".join(f"{g.kind}×{g.layers}:{g.blocks_per_request}" for g in p.kv_cache_groups)
    row("blocks reserved per request", "", f"{p.blocks_per_request:,} ({groups})")
    row("KV cache tokens", fmt_count(p.ideal_kv_cache_tokens), fmt_count(p.kv_cache_tokens))
    row(f"max concurrency @ {p.max_model_len:,} tok", *(
        "—" if c is None else f"{c:.2f}x" for c in (p.ideal_max_concurrency, p.max_concurrency)))
    row(f"sequences of {p.context:,} tok that fit (null block excluded)", "", fmt_count(p.kv_full_batch))
    if (off := p.kv_offloading) is not None:
        reach = ("not planned (LMCache sizes its own store)" if off.offloaded_kv_tokens is None else
                 f"{fmt_count(off.offloaded_kv_tokens)} tokens ({fmt_count(off.offloaded_sequences)} sequences)")
        row(f"KV offloaded to CPU ({off.backend}, {off.size_gib:g} GiB pinned)", "",
            f"prefix cache beyond the GPU: {reach}; runs at once: {fmt_count(off.gpu_resident_sequences)}")
    if p.crossover_context is not None:
        row("crossover context t* (KV read = weight read)", fmt_count(p.crossover_context))
    if p.ridge_point is not None:
        row("ridge point", f"{p.ridge_point:.0f} FLOP/B")
    def with_range(t: float, iv: list[float] | None) -> str:
        return fmt_seconds(t) + (f" ({fmt_seconds(iv[0])}–{fmt_seconds(iv[1])})" if iv else "")

    if p.decode_step_s is not None:
        bound = p.decode_bound + ("" if p.decode_bound in ("memory", "compute") else " term largest")
        row(f"decode step (batch {p.batch}; {bound})", "", with_range(p.decode_step_s,
                                                                          p.decode_step_interval_s))
        for k, v in (p.decode_terms or {}).items():
            if v:
                row(f"  {k.removesuffix('_s')}", "", fmt_seconds(v))
        if p.tpot_s is not None:
            row(f"  time per output token ({p.decode_tokens_per_step:g} tokens a step)", "",
                with_range(p.tpot_s, p.tpot_interval_s))
        row("decode throughput", "", f"{p.tokens_per_s:,.0f} tok/s")
        if p.decode_power_w is not None:
            iv = p.decode_power_interval_w
            row(f"board power per GPU (TDP {p.tdp_w:,.0f} W)", "", f"{p.decode_power_w:,.0f} W"
                + (f" ({iv[0]:,.0f}–{iv[1]:,.0f} W)" if iv else ""))
            jv = p.decode_j_per_output_token_interval
            row("energy per output token", "", f"{p.decode_j_per_output_token:.3g} J"
                + (f" ({jv[0]:.3g}–{jv[1]:.3g} J)" if jv else ""))
        if p.roofline_decode_step_s is not None:
            row(f"decode step, bare roofline ({p.roofline_decode_bound}-bound)", fmt_seconds(
                p.roofline_decode_step_s))
    if p.calibrated_decode_step_s is not None:
        row("decode step, calibrated", fmt_seconds(p.calibrated_decode_step_s))
        row("decode throughput, calibrated", f"{p.calibrated_tokens_per_s:,.0f} tok/s")
    if p.calibrated_decode_power_w is not None:
        row("board power per GPU, measured by the calibration", f"{p.calibrated_decode_power_w:,.0f} W")
        row("energy per output token, calibrated", f"{p.calibrated_j_per_output_token:.3g} J")
    if p.prefill_s is not None:
        row(f"prefill of {p.prompt_len:,} tokens", fmt_seconds(p.roofline_prefill_s), fmt_seconds(p.prefill_s))
    if p.ttft_s is not None:
        row(f"time to first token ({p.ttft_running_sequences} others decoding)", "",
            with_range(p.ttft_s, p.ttft_interval_s))
    if p.served_tpot_s is not None:
        row(f"served TPOT ({p.request_concurrency} in flight, {p.prompt_len:,} in / {p.output_len:,} out)",
            "", with_range(p.served_tpot_s, p.served_tpot_interval_s))
    if p.burst_ttft_s is not None:
        row(f"TTFT, {p.request_concurrency} prompts at once (a closed loop's waves; mean, median "
            f"{fmt_seconds(p.burst_ttft_median_s)})", "",
            with_range(p.burst_ttft_s, p.burst_ttft_interval_s))
    if p.request_latency_s is not None:
        row("request latency (TTFT + TPOT × the rest)", "",
            with_range(p.request_latency_s, p.request_latency_interval_s))
    if p.bench_latency_s is not None:
        row(f"vllm bench latency (batch {p.request_concurrency}, {p.prompt_len:,} in / {p.output_len:,} out)",
            "", with_range(p.bench_latency_s, p.bench_latency_interval_s))
    if p.accounting_rules:
        t.caption = (f"accounting rules: {p.accounting_rules}; {p.entry} defaults: "
                     f"max_num_batched_tokens {p.max_num_batched_tokens:,}, max_num_seqs {p.max_num_seqs:,}")
    if p.decode_step_interval_s:
        t.caption = ((t.caption + "\n") if t.caption else "") + (
            f"(ranges): {INTERVAL_MEANING} (--json: *_checked_against)")
    return t


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
    console.print(_plan_table(result, console.width))
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


def procurement_tables(model: str, rows: list[Any]) -> tuple[Table, Table, list[str]]:
    """The procurement table as two tables that each fit an 80-column terminal — capacity (what fits where) and
    latency (the predicted figures with their intervals) — and numbered notes (why a row does not fit)."""
    first = rows[0]
    cal = any(r.calibration_note for r in rows)
    tp_head = "tp×pp" if any(r.pipeline_parallel_size > 1 for r in rows) else "tp"
    slos = ", ".join(x for x in (f"TPOT ≤ {fmt_seconds(first.tpot_slo_s)}" if first.tpot_slo_s else "",
                                 f"TTFT ≤ {fmt_seconds(first.ttft_slo_s)}" if first.ttft_slo_s else "") if x)
    notes: list[str] = []
    note_of: dict[int, str] = {}
    for i, r in enumerate(rows):
        if not r.fits and r.reason:
            if r.reason not in notes:
                notes.append(r.reason)
            note_of[i] = f"[{notes.index(r.reason) + 1}]"

    def table(title: str, cols: list[str]) -> Table:
        t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0), title_justify="left")
        for c in cols:
            t.add_column(c, justify="left" if c in ("GPU", "") else "right", no_wrap=True)
        return t

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{100 * x:,.0f}%"

    def g(r: Any, k: str) -> Any:
        return getattr(r, f"calibrated_{k}") if cal and getattr(r, f"calibrated_{k}", None) is not None \
            else getattr(r, k)

    cap = table(f"{model}: {first.concurrency:,} sequences of {first.context:,} tokens" + (f", {slos}" if slos else "")
                + (" (calibrated)" if cal else "") + "; GiB per GPU",
                ["#", "GPU", tp_head, "weights", "KV/GPU", "N×T needs", "fit@T", "repl.", "GPUs", ""])
    spec = first.speculative_tokens_per_step
    lat = table(f"predicted latency; range: {INTERVAL_MEANING}; "
                f"TTFT of a {first.prompt_len or first.context:,}-token prompt (its range in --json)"
                + (f"; speculative decoding at {spec:g} tokens a step (ranges widened to its published runs)"
                   if spec else ""),
                ["#", "GPU", tp_head, "batch", "TPOT ms" if first.served_tpot or spec else "step ms", "range",
                 "TTFT ms", "tok/s/GPU", "bound"])

    def num(v: float) -> str:
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

    def ms(x: float | None) -> str:
        return "—" if x is None else num(1e3 * x)

    def span(iv: list[float] | None) -> str:
        return "—" if not iv else f"{num(1e3 * iv[0])}–{num(1e3 * iv[1])}"

    def size(r: Any) -> str:
        """tp, or tp×pp for a pipeline."""
        return str(r.tensor_parallel_size) + (f"×{r.pipeline_parallel_size}" if r.pipeline_parallel_size > 1 else "")

    def gib(x: float | None) -> str:
        return "—" if x is None else f"{x / 2**30:,.1f}"

    for i, r in enumerate(rows):
        rank = str(r.rank) if r.rank else "—"
        cap.add_row(rank, r.gpu, size(r), gib(r.weight_bytes), gib(g(r, "kv_budget_bytes")),
                    pct(g(r, "kv_fraction_needed")), fmt_count(g(r, "sequences_fit")),
                    fmt_count(g(r, "replicas")), fmt_count(g(r, "gpus_needed")), note_of.get(i, ""))
        if r.fits:
            step_iv = None if cal and r.calibrated_decode_step_s is not None else r.decode_step_interval_s
            tok = g(r, "tokens_per_s_per_gpu")
            lat.add_row(rank, r.gpu, size(r), fmt_count(g(r, "batch")),
                        ms(g(r, "decode_step_s")), span(step_iv), ms(r.ttft_s),
                        "—" if tok is None else f"{tok:,.0f}",
                        r.decode_bound or ("pp: —" if r.pipeline_parallel_size > 1 else "—"))
    return cap, lat, notes


def cost_table(rows: list[Any], pricing: Pricing) -> tuple[Table | None, list[str]]:
    """Energy and cost of the configurations that fit (80 columns): board power per GPU, the deployment's kW,
    joules and USD per million output tokens with their ranges, and where each price comes from (notes). None
    where no row has a power or a price."""
    fitting = [r for r in rows if r.fits and (r.power_w_per_gpu is not None or r.usd_per_gpu_hour is not None)]
    if not fitting:
        return None, []
    t = Table(title="energy and cost: boards only (not hosts or cooling); USD per million output tokens = price per "
                    "GPU-hour" + (" + electricity" if pricing.power_usd_per_kwh else "") + " ÷ tokens per GPU-hour",
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0), title_justify="left")
    for c in ("#", "GPU", "tp", "W/GPU", "kW", "J/token", "$/GPU-h", "$/M tok", "range", "price"):
        t.add_column(c, justify="left" if c in ("GPU", "price") else "right", no_wrap=True)
    sources: list[str] = []

    def num(v: float | None, digits: int = 2) -> str:
        return "—" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.{digits}f}"

    for r in fitting:
        if r.price_source and r.price_source not in sources:
            sources.append(r.price_source)
        iv = r.usd_per_million_tokens_interval
        t.add_row(str(r.rank), r.gpu, str(r.tensor_parallel_size), num(r.power_w_per_gpu), num(r.kw),
                  num(r.j_per_output_token, 3), num(r.usd_per_gpu_hour), num(r.usd_per_million_tokens),
                  "—" if not iv else f"{num(iv[0])}–{num(iv[1])}",
                  f"[{sources.index(r.price_source) + 1}]" if r.price_source else "—")
    notes = [f"[{i}] {s}" for i, s in enumerate(sources, 1)]
    if pricing.power_usd_per_kwh:
        notes.append(f"electricity: {pricing.power_usd_per_kwh:g} USD per kWh (--power-price)")
    return t, notes
