"""The sweep's children: each engine configuration's engine child and serve child started in its own process group,
supervised (progress, point and start timeouts, a crash, a hang), their records finished and the points they left
unfinished recorded; the sampler that runs beside them and its telemetry stored. Every child is registered while it
runs, so Ctrl-C or a failed write stops them all (stop_all).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.results.schema import EngineRecord, EngineTelemetry, ProcessTimes, StartupLog
from profiler import machine
from profiler.devices import Placement
from profiler.machine import Stopped
from profiler.serve import SERVER_DIED
from profiler.spec import (
    EngineConfig,
    EngineJob,
    Point,
    ServeJob,
)
from profiler.store import (
    LOG_TAIL_CHARS,
    ResultsDir,
    atomic_write_text,
    log_tail,
)
from profiler.vllm_log import parse_startup

POLL_S = 0.2  # how often the parent looks at the child's records


# The engine child's command line, before its job file (tests put a failing double here).
ENGINE_COMMAND = [sys.executable, "-u", "-m", "profiler.engine"]


class WriteFailed(RuntimeError):
    """A results file could not be written mid-sweep (disk full, directory removed)."""


# A point never attempted because its engine died on an earlier point: a plain
# rerun picks it up (it did not fail itself); real failures wait for --retry-failed.
ABORTED = "aborted"


def pending_points(store: ResultsDir, points: list[Point], retry_failed: bool) -> list[Point]:
    """Points still to run: never run, off-contract (a truncated write) or aborted; failed ones
    only with ``retry_failed``. A point whose record says ok is never run again."""
    todo = []
    for p in points:
        status = store.point_status(p)
        if status == "ok":
            continue
        if status not in (None, "corrupt", ABORTED) and not retry_failed:
            continue
        todo.append(p)
    return todo


def kill_group(proc: Any) -> None:
    """SIGKILL a child's process group and reap it (a child on a Ray node: its host does)."""
    if not isinstance(proc, subprocess.Popen):
        proc.kill_group()
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# Children running now, so that a sweep running engines side by side can take them all down at once.
STOP = threading.Event()


COUNT_LOCK = threading.Lock()


LIVE: dict[int, Any] = {}  # id(child) → the child (a Popen, or a RemoteProc on a Ray node)


LIVE_LOCK = threading.Lock()


def start_child(cmd: list[str], log: Any, env: dict[str, Any], host: Any = None, sampler: Any = None,
                 log_path: Path | None = None) -> Any:
    """A child in its own process group (its workers, or the server, with it), registered until it is reaped;
    on ``host`` (a Ray node) when given."""
    with LIVE_LOCK:
        if STOP.is_set():
            raise Stopped
        if host is not None:
            proc = host.start(cmd, log_path, env, sampler)
        else:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        LIVE[id(proc)] = proc
    return proc


def unregister(proc: Any) -> None:
    with LIVE_LOCK:
        LIVE.pop(id(proc), None)


def stop_all() -> None:
    """Kill every running child's process group (the sweep is stopping)."""
    with LIVE_LOCK:
        STOP.set()
        procs = list(LIVE.values())
    for proc in procs:
        kill_group(proc)


@dataclass
class EngineRun:
    """How one engine child ended."""
    outcome: str  # "ok", "timeout", "crash", or the child's own error class
    ready: bool  # the engine came up (its record says ok) before the outcome
    failed_point: str | None = None


def point_label(point_id: str) -> str:
    return point_id.split("--", 1)[-1]


def supervise_child(proc: subprocess.Popen[bytes], store: ResultsDir, ready_now: Any, points: list[Point],
                    timeouts: Any, on_point_done: Any, on_current: Any, progress_marker: Any = None,
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
            if p.id not in seen_done and store.point_status(p) is not None:
                seen_done.add(p.id)
                if on_point_done:
                    on_point_done(p)
        current = next((p for p in points if p.id not in seen_done), None)
        now_marker = (ready, progress_marker() if progress_marker else 0, len(seen_done))
        if now_marker != marker:
            marker, last_progress = now_marker, time.monotonic()
            if on_current:
                on_current(starting if not ready else point_label(current.id) if current else "finishing")
        limit = timeouts.point_s if ready else timeouts.engine_start_s
        if time.monotonic() - last_progress > limit:
            kill_group(proc)
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
    env = child_env(placement, host)
    child: dict[str, int | None] = {"pid": None}
    sampler = start_sampler(store, cfg, telemetry, lambda: child["pid"],  # its first sample is the baseline
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

    proc, outcome, ready, seen_done = run_child(
        [*ENGINE_COMMAND, str(job_path)], log_path, env, child, sampler,
        lambda proc: supervise_child(proc, store, ready_now, points, timeouts, on_point_done, on_current, phases_done),
        ready_now, host)
    failed = finish_engine_record(store, cfg, log_path, proc.returncode, outcome, points, ready, phases,
                                   {"launched_at": launched_at, "exited_at": host.now() if host else time.time()},
                                   host_labels(placement, host), getattr(proc, "lost", None))
    if sampler:
        store_telemetry(store, cfg.id, sampler, launched_at, points)
    if on_point_done:
        for p in points:
            if p.id not in seen_done:
                on_point_done(p)
    return EngineRun(outcome=outcome, ready=ready, failed_point=failed)


def run_child(cmd: list[str], log_path: Path, env: dict[str, Any], child: dict[str, int | None], sampler: Any,
               supervise: Any, ready_now: Any, host: Any = None) -> tuple[Any, str, bool, set[str]]:
    """Start a child (output appended to ``log_path``), watch it with ``supervise`` until it exits, then take
    its process group down: what it leaves behind (vLLM's workers, the server) goes with it. Whether it became
    ready is asked of its records once more at the end (``ready_now``): a child can come up and die between two
    looks of the supervisor (on Ray, its record can reach the driver after the last look), and what it left says
    whether it was up, and so which point it died on. On Ctrl-C, any
    failure in the parent or a stopping sweep the group goes at once and what was sampled stays in the
    partial file. Returns (the child, its outcome: ok / crash / timeout, whether it became ready, the points
    whose records appeared)."""
    with log_path.open("ab") as log:
        try:
            proc = start_child(cmd, log, env, host, sampler, log_path)
        except Stopped:
            abandon(sampler)
            raise
        child["pid"] = proc.pid
        try:
            outcome, ready, seen_done = supervise(proc)
            outcome = outcome or ("ok" if proc.returncode == 0 else "crash")
            kill_group(proc)
            ready = ready or ready_now()
            if STOP.is_set():
                raise Stopped
        except BaseException:
            kill_group(proc)
            abandon(sampler)
            raise
        finally:
            unregister(proc)
    return proc, outcome, ready, seen_done


def child_env(placement: Placement | None, host: Any = None) -> dict[str, Any]:
    """A child's environment: CUDA indices in PCI order (so the sampler's NVML devices are the engine's
    devices), and its own devices when the runner placed it. On a Ray node only what changes the node's own
    environment (a None value unsets); its host adds the devices Ray gave it."""
    order = {"CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")}
    if host is not None:
        return order
    env = {**os.environ, **order}
    return env | placement.env() if placement else env


def host_labels(placement: Placement | None, host: Any) -> list[str]:
    """The devices a launch ran on, as its record names them ('gpu2'; on a Ray node '10.0.0.5/gpu2')."""
    return host.labels if host is not None else placement.labels if placement else []


def abandon(sampler: Any) -> None:
    """The launch ends without its records being finished (Ctrl-C): what was sampled stays in the partial file."""
    if sampler:
        sampler.stop()
        sampler.flush()


# The serve child's command line, before its job file (tests put a failing double here).
SERVE_COMMAND = [sys.executable, "-u", "-m", "profiler.serve"]


def recorded_death(store: ResultsDir, points: list[Point], launched_at: float) -> str | None:
    """The point this launch's serve child recorded as a crash (the server died during it), if any."""
    for p in points:
        rec = store.read_point(p)
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
    env = child_env(placement, host)
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = None  # the server runs its engine core in its own process
    env = {k: v for k, v in env.items() if v is not None} if host is None else env
    child: dict[str, int | None] = {"pid": None}
    sampler = start_sampler(store, cfg, spec.telemetry, lambda: child["pid"], metrics_url=f"{job.base_url}/metrics",
                             cuda_visible=env.get("CUDA_VISIBLE_DEVICES") if placement else None, host=host)
    launched_at = host.now() if host else time.time()

    def ready_now() -> bool:
        rec = store.read_server(cfg.id)
        return rec is not None and rec.status == "ok" and (rec.started_at or 0) >= launched_at - 1

    proc, outcome, ready, seen_done = run_child(
        [*SERVE_COMMAND, str(job_path)], log_path, env, child, sampler,
        lambda proc: supervise_child(proc, store, ready_now, points, spec.timeouts, on_point_done, on_current,
                                starting="starting server"), ready_now, host)
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
    rec.devices = host_labels(placement, host)
    store.write_server(rec)
    failed = None
    if outcome != "ok":
        died_on = recorded_death(store, points, launched_at) if proc.returncode == SERVER_DIED else None
        if died_on is not None:  # the child recorded the point the server died on: the ones after it wait
            fail_unfinished(store, cfg, points, outcome, proc.returncode, False, log_path, "serve",
                             where=f"point {point_label(died_on)} (the server exited)")
            failed = died_on
        else:
            failed = fail_unfinished(store, cfg, points, outcome, proc.returncode, ready, log_path, "serve",
                                      cause=lost)
    if sampler:
        store_telemetry(store, cfg.id, sampler, launched_at, points, owner="server")
    if on_point_done:
        for p in points:
            if p.id not in seen_done:
                on_point_done(p)
    return EngineRun(outcome=outcome, ready=ready, failed_point=failed)


def start_sampler(store: ResultsDir, cfg: EngineConfig, telemetry: Any, root_pid: Any,
                   metrics_url: str | None = None, cuda_visible: str | None = None, host: Any = None) -> Any:
    """The launch's sampler (None: telemetry off): here, or on ``host``'s node with its samples kept here."""
    if telemetry is None or not telemetry.enabled:
        return None
    # One partial file per launch: an interrupted launch's samples are never overwritten.
    partial = store.telemetry / f"{cfg.id}.{int(time.time() * 1000)}.partial.parquet"
    if host is not None:
        return host.sampler(telemetry, cfg.world_size, metrics_url, partial)
    from profiler.telemetry.sampler import Sampler, open_sources

    sources, unavailable = open_sources(telemetry.backend, cfg.world_size, root_pid,
                                        metrics_url=metrics_url, cuda_visible=cuda_visible)
    return Sampler(sources, telemetry.interval_s, partial, unavailable).start()


def store_telemetry(store: ResultsDir, engine_id: str, sampler: Any, launched_at: float,
                    points: list[Point], owner: str = "engine") -> None:
    """Tag this launch's samples, append them to telemetry/<engine>.parquet, aggregate per point.

    ``owner``: whose launch it was, the engine child's ("engine") or the serve child's ("server"); that
    record keeps the launch's description. Launches are numbered across both in the one file."""
    import pandas as pd

    from profiler.store import atomic_write_bytes
    from profiler.telemetry.energy import launch_series, point_energy
    from profiler.telemetry.sampler import aggregate, tag_phases

    df = sampler.stop()
    rec: Any = store.read_engine(engine_id) if owner == "engine" else store.read_server(engine_id)
    if rec is None:  # the runner always leaves one; a vanished file is a write failure
        where = store.engine_path(engine_id) if owner == "engine" else store.server_path(engine_id)
        raise OSError(f"{owner} record {where} is missing or unreadable")
    point_recs = [r for r in (store.read_point(p) for p in points) if r is not None]
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
    series = launch_series(df[df["launch"] == df["launch"].max()], info.unavailable)
    for prec in point_recs:
        mine = df[df["point_id"] == prec.id]
        if mine.empty:
            continue
        prec.telemetry = aggregate(mine, devices, start=prec.started_at)
        # Energy needs the samples either side of the point too: they bound its window's ends.
        for label, energy in point_energy(series, prec.started_at, prec.finished_at).items():
            if label in prec.telemetry:
                prec.telemetry[label].update(energy)
        store.write_point(prec)


def finish_engine_record(store: ResultsDir, cfg: EngineConfig, log_path: Path, returncode: int | None,
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
    return fail_unfinished(store, cfg, points, outcome, returncode, ready and not in_capacity, log_path,
                            "engine", where="the capacity phase" if ready else None, cause=cause)


def fail_unfinished(store: ResultsDir, cfg: EngineConfig, points: list[Point], outcome: str,
                     returncode: int | None, ready: bool, log_path: Path, who: str,
                     where: str | None = None, cause: str | None = None) -> str | None:
    """Give every point without a record its fate after a child ended with ``outcome``; returns the point
    it died on. Never ready: every point shares the failure. Up and died on a point: that point failed,
    the ones after it were never tried (aborted: a plain rerun runs them). ``where``: what it died in when
    not on a point (the capacity phase)."""
    unfinished = [p for p in points if store.point_status(p) in (None, "corrupt")]
    culprit = unfinished[0] if ready and unfinished else None
    for p in unfinished:
        base = {"id": p.id, "engine_id": cfg.id, "engine": cfg, "point": p}
        if (ready or where) and p is not culprit:
            at = f"point {point_label(culprit.id)}" if culprit else where
            store.write_failure(base, ABORTED, f"not run: the {who} ended with {outcome} during "
                                               f"{at}; a rerun of the sweep runs it")
            continue
        store.write_failure(base, outcome, f"{who} child ended with {outcome} ({cause or f'return code {returncode}'})"
                                           + ("" if ready or where else " before the engine was ready"),
                            log_tail=log_tail(log_path))
    return culprit.id if culprit else None
