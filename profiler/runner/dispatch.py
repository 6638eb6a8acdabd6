"""Where engine configurations run: one at a time, side by side on a device pool (dispatch_local), or on a Ray cluster
(dispatch_ray), each in a thread of its own; the parent stays the only writer.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from analysis.results.schema import EngineRecord
from profiler.devices import Placement, Pool
from profiler.ray_cluster import HostLost, HostSetupError, HostSilent, RayHost
from profiler.runner import children
from profiler.runner.children import ABORTED, STOP, stop_all
from profiler.spec import (
    EngineConfig,
    Point,
)
from profiler.store import (
    ResultsDir,
)


@dataclass
class Work:
    """One engine configuration's pending work: its offline points (and whether the engine must start at all,
    for its capacity phase) and its serve points."""
    cfg: EngineConfig
    points: list[Point]
    serve_points: list[Point]
    needs_engine: bool = False


def engines_label(progress: Any, task: Any, running: dict[str, str], single: str) -> None:
    """The engines bar: the engine running, or how many run side by side and where."""
    if len(running) <= 1:
        progress.update(task, description=single)
    else:
        where = ", ".join(f"{eid[:24]}@{at}" for eid, at in running.items())
        progress.update(task, description=f"engines · {len(running)} running: {where}")


def dispatch_local(work: list[Work], pool: Pool | None, platform: str, exclusive: bool, run_one: Any) -> None:
    """Run every item of ``work``: one after another without a pool, as before; with one, each on the lowest
    free ``world_size`` (tensor × pipeline parallel) devices, as many at once as fit (in the plan's order: an
    engine waits for devices rather than being overtaken), or one at a time when ``exclusive``. Ctrl-C, or any
    failure in the parent, stops every child (``stop_all``) and is raised once the others have let go."""
    if pool is None:
        for w in work:
            run_one(w, None)
        return
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    queue = list(work)
    running: dict[Future[None], Work] = {}
    with ThreadPoolExecutor(max_workers=len(pool.devices), thread_name_prefix="kvprof-engine") as ex:
        try:
            while queue or running:
                while queue and not (exclusive and running):
                    devices = pool.take(queue[0].cfg.id, queue[0].cfg.world_size)
                    if devices is None:
                        break
                    w = queue.pop(0)
                    running[ex.submit(run_one, w, Placement(platform, devices))] = w
                done, _ = wait(running, timeout=children.POLL_S, return_when=FIRST_COMPLETED)
                for f in done:
                    pool.give_back(running.pop(f).cfg.id)
                    f.result()  # a failure in the parent's own work (a write) stops the sweep
        except BaseException:
            stop_all()
            for f in running:
                with contextlib.suppress(BaseException):
                    f.result()  # each child is down and its thread returns (Stopped)
            raise


def dispatch_ray(work: list[Work], cluster: Any, store: ResultsDir, exclusive: bool, run_one: Any, progress: Any,
                  engines_task: Any, points_task: Any) -> None:
    """Run every item of ``work`` on the Ray cluster: each in its own host (profiler.ray_cluster.RayHost),
    which Ray places where its devices are free — as many at once as the cluster holds, or one at a time
    when ``exclusive``. A host that cannot run its configuration on its node records every point of it
    with the reason; Ctrl-C or a failure in this process stops every child, as locally."""
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    def run_on_host(w: Work) -> None:
        host = None
        try:
            host = RayHost(cluster, w.cfg, store.root, STOP)
            run_one(w, None, host)
        except HostSetupError as exc:  # this configuration cannot run there: every point says why
            fail_work(store, w, "error", str(exc))
        except (HostLost, HostSilent) as exc:  # gone between launches: what never ran waits for a rerun
            fail_work(store, w, ABORTED, f"not run: {exc}; a rerun of the sweep runs it")
            for _ in [*w.points, *w.serve_points]:
                progress.advance(points_task)
            progress.advance(engines_task)
        finally:
            if host is not None:
                host.release()

    slots = 1 if exclusive else max(1, min(len(work), cluster.capacity // max(
        1, min((w.cfg.world_size for w in work), default=1))))
    running: dict[Future[None], Work] = {}
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="kvprof-ray") as ex:
        try:
            for w in work:
                running[ex.submit(run_on_host, w)] = w
            while running:
                done, _ = wait(running, timeout=children.POLL_S, return_when=FIRST_COMPLETED)
                for f in done:
                    running.pop(f)
                    f.result()
        except BaseException:
            stop_all()
            for f in running:
                f.cancel()
            for f in running:
                with contextlib.suppress(BaseException):
                    f.result()
            raise


def fail_work(store: ResultsDir, w: Work, status: str, message: str) -> None:
    """Record the points of a configuration its Ray host could not run (``status`` error: it cannot run there,
    the engine record says so too; aborted: the host was lost before they ran)."""
    rec = store.read_engine(w.cfg.id)
    if status != ABORTED and w.needs_engine and (rec is None or rec.status != "ok"):
        store.write_engine(EngineRecord(id=w.cfg.id, status=status, engine=w.cfg, llm_kwargs=w.cfg.llm_kwargs(),
                                        telemetry=rec.telemetry if rec else None, message=message))
    for p in [*w.points, *w.serve_points]:
        if store.point_status(p) in (None, "corrupt", ABORTED):
            store.write_failure({"id": p.id, "engine_id": w.cfg.id, "engine": w.cfg, "point": p}, status, message)
