"""`kvprof plan`: a model + GPU + workload → capacity and latency predictions; and what `plan`, `procure` and
`recommend` share: their common options, the device from --gpu or --probe, and one answer to bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape

from analysis import catalog
from analysis.model.architecture import UnsupportedArchitecture
from analysis.planning.calibration_file import checked_calibration, load_calibration
from analysis.planning.plan import PlanError, PlanInputs, make_plan, refuse_unrunnable
from analysis.planning.plan_inputs import option, option_flag
from analysis.planning.procurement import parse_tp_list
from analysis.results.inputs import read_json
from analysis.units import fmt_bytes
from profiler.cli.common import (
    console,
    err,
    fail,
    one_line,
    output_path,
)
from profiler.cli.model_options import parsed, with_model_options
from profiler.cli.plan_tables import plan_table, served_table

if TYPE_CHECKING:
    from analysis.catalog import GPU


# The options `plan`, `procure` and `recommend` share, declared once.
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalog name, model directory or config.json.")]
ProbeOpt = Annotated[Path | None, typer.Option(
    help="probe.json from `kvprof probe`: use this machine's measured ceilings instead of --gpu.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (its schema: analysis/planning/plan.schema.json).")]
CalibrationOpt = Annotated[Path | None, typer.Option(
    help="calibration.json from a measured sweep; without --gpu/--probe the plan is for the device it was "
         "measured on. One fitted on another model applies (and is named); one fitted on another GPU is refused "
         "unless --transfer-calibration.")]
TransferOpt = Annotated[bool, typer.Option(
    "--transfer-calibration", help="Apply a --calibration fitted on another GPU: its rates are scaled by the "
                                   "two spec sheets and the output is labelled as transferred, and how.")]
MODEL_PANEL = "The engine and the workload (vLLM's settings)"
# The served load `kvprof plan` replays through vLLM's scheduler; procure and recommend do not replay one yet.
REPLAY_FIELDS = frozenset({"serve_max_concurrency", "serve_request_rate", "serve_num_prompts", "serve_burstiness",
                           "serve_trace", "serve_trace_speed"})


@with_model_options(PlanInputs, option, panel=MODEL_PANEL)
def plan_cmd(
    model: ModelOpt,
    gpu: Annotated[str | None, typer.Option(help="GPU catalog name (see `kvprof gpus`).")] = None,
    tp: Annotated[str | None, typer.Option("--tp", help="Tensor-parallel size.")] = None,
    pp: Annotated[str, typer.Option("--pp", help="Pipeline-parallel size: vLLM's layer split over stages, each "
                                                  "stage its own weights and budget, the KV pool the smallest "
                                                  "stage's.")] = "1",
    calibration: CalibrationOpt = None,
    transfer_calibration: TransferOpt = False,
    probe: ProbeOpt = None,
    save: Annotated[Path | None, typer.Option(
        help="Store the prediction and its inputs (JSON) for `kvprof check-plan` once it is measured.")] = None,
    json_out: JsonOpt = False,
    concurrency: Annotated[int | None, typer.Option(hidden=True)] = None,
    recommend: Annotated[bool, typer.Option("--recommend", hidden=True)] = False,
    **fields: Any,
):
    """Predict KV capacity and decode latency for a model on one GPU (or --probe, or the calibration's device).

    Compare GPUs and tensor-parallel sizes for N sequences with `kvprof procure`; find the settings that hold N
    sequences of T tokens with `kvprof recommend`. --json: one object (Plan in
    analysis/planning/plan.schema.json).
    """
    if recommend:
        raise fail("--recommend is its own command: kvprof recommend --model M --gpu G --concurrency N --context T")
    lists = [f"{flag} {value}" for flag, value in (("--gpu", gpu), ("--tp", tp), ("--pp", pp))
             if value is not None and ("," in value or (flag == "--gpu" and value.strip().lower() == "all"))]
    if lists or concurrency is not None:
        given = ", ".join(lists + ([f"--concurrency {concurrency}"] if concurrency is not None else []))
        raise fail(f"{given}: comparing GPUs and tensor-parallel sizes for N sequences is the procurement table, "
                   "`kvprof procure` (the same options)")
    try:
        tps, pps = parse_tp_list("1" if tp is None else tp), parse_tp_list(pp, "--pp")
    except ValueError as exc:
        raise fail(str(exc)) from None
    check_shared_options(model, fields, calibration, transfer_calibration)
    if gpu is not None and not gpu.strip():
        raise fail("--gpu is empty: give a catalog name (`kvprof gpus`)")
    if save is not None:
        trace = Path(fields["serve_trace"]) if fields.get("serve_trace") else None
        output_path(save, "--save", inputs=(calibration, probe, trace, Path(model), Path(model) / "config.json"),
                    example="plan.json")
    settings = {**fields, "pipeline_parallel_size": pps[0]}
    context = settings.pop("context")
    with plan_errors():
        if gpu and probe:
            raise PlanError("give --gpu or --probe, not both")
        arch, _ = catalog.resolve_model(model)
        gpu_spec, gpu_note = catalog.resolve_gpu(gpu) if gpu else (None, None)
        if probe:
            gpu_spec = probed_device(probe)
        inputs = PlanInputs(**parsed_settings(settings), tensor_parallel_size=tps[0], context=context)
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
    if (served := served_table(result)) is not None:
        table, notes = served
        console.print(table)
        for note in notes:
            console.print(f"  {escape(note)}", highlight=False)
    if result.served_note:
        console.print(f"note: {escape(result.served_note)}", highlight=False)
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


@contextmanager
def plan_errors() -> Iterator[None]:
    """What planning raises for bad input, as the one-line error and exit 2 (a PlanInputs error names its option)."""
    try:
        yield
    except ValidationError as exc:
        raise fail(_plan_options_line(exc)) from None
    except (PlanError, UnsupportedArchitecture, catalog.UnknownName, ValueError, OSError, KeyError) as exc:
        raise fail(one_line(exc)) from None


def probed_device(probe: Path) -> GPU:
    """The device a `kvprof probe` file describes (a PlanError naming --probe when it cannot be read)."""
    try:
        facts = read_json(probe)
    except ValueError as exc:
        raise PlanError(f"--probe {exc} — rerun `kvprof probe --out {probe}`") from None
    try:
        return catalog.from_probe(facts, f"--probe {probe}")
    except ValueError as exc:
        raise PlanError(f"--probe {probe}: {one_line(exc)}") from None


def check_shared_options(model: str, fields: dict[str, Any], calibration: Path | None = None,
                         transfer_calibration: bool = False, slos: tuple[str | None, str | None] = (None, None)
                         ) -> None:
    """The checks every planning command makes before any work: options given as an empty string refused by name
    (an empty --model would read ./config.json), --transfer-calibration only with --calibration."""
    if not model.strip():
        raise fail("--model is empty: give a catalog name (`kvprof models`), a model directory or a config.json")
    given = [("--kv-cache-memory-bytes", fields.get("kv_cache_memory_bytes")),
             ("--reserve-bytes", fields.get("reserve_bytes")), *zip(("--tpot-slo", "--ttft-slo"), slos, strict=True)]
    for flag, value in given:
        if value is not None and not value.strip():
            raise fail(f"{flag} is empty: give a value (e.g. " + ("50ms)" if flag.endswith("-slo") else "8GiB)"))
    if transfer_calibration and calibration is None:
        raise fail("--transfer-calibration goes with --calibration FILE (it allows a calibration fitted on another "
                   "GPU or model)")


def parsed_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The plan's settings with those given as text (sizes, JSON) read by their options' parsers (a PlanError naming
    the option)."""
    return parsed(settings, option, option_flag)


def _plan_options_line(exc: ValidationError) -> str:
    """A PlanInputs validation error as one line, each field named by its `kvprof plan` option."""
    if exc.title != "PlanInputs":
        return one_line(exc)
    return "; ".join(
        f"{option_flag(str(e['loc'][0])) if e['loc'] else 'input'}"
        f": {e['msg'].removeprefix('Value error, ')}"
        + (f" (got {e['input']!r})" if e["type"] != "value_error" and not isinstance(e.get("input"), dict) else "")
        for e in exc.errors())
