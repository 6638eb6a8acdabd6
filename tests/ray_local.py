"""A local Ray cluster for the tests: one head node on this machine's loopback, started by the test with CPUs
standing in for GPUs, its own temp directory (TMPDIR too, so the hosts' scratch directories and core file
are the test's), stopped (its own processes only) and removed afterwards."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).parent / "ray")


def ray_missing() -> str | None:
    """Why Ray tests cannot run here, or None."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed (kvprof's ray extra)"
    if not Path(RAY).exists():
        return f"no ray command beside {sys.executable}"
    return None


@dataclass
class LocalRay:
    address: str
    tmpdir: Path  # the nodes' TMPDIR: hosts' scratch directories live here

    def scratch_dirs(self) -> list[Path]:
        return sorted(self.tmpdir.glob("kvprof-ray-*"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[LocalRay]:
    base = Path(tempfile.mkdtemp(prefix="kvray-"))  # short: Ray's socket paths must stay under 108 bytes
    tmpdir = base / "t"
    tmpdir.mkdir()
    port = _free_port()
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    started = subprocess.run([RAY, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                              f"--num-cpus={num_cpus}", "--num-gpus=0", "--include-dashboard=false",
                              "--disable-usage-stats", f"--temp-dir={base / 'ray'}"],
                             env=env, capture_output=True, text=True, timeout=300)
    try:
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        yield LocalRay(address=f"127.0.0.1:{port}", tmpdir=tmpdir)
    finally:
        stop(base, port)
        shutil.rmtree(base, ignore_errors=True)


def stop(base: Path, port: int) -> None:
    """Stop this cluster alone (`ray stop` would stop every Ray cluster on the machine): its processes are the
    ones whose command line names its temp directory or its head's port, and their descendants (workers,
    engine children)."""
    import psutil

    def mine(cmdline: list[str]) -> bool:
        return any(str(base) in part or (part.startswith(("--address=", "--gcs-address=", "--gcs_address="))
                                         and part.endswith(f":{port}")) for part in cmdline)

    ours = [proc for proc in psutil.process_iter(["cmdline"]) if mine(proc.info["cmdline"] or [])]
    every = {p.pid: p for p in ours}
    for proc in ours:
        with contextlib.suppress(psutil.Error):
            every.update({c.pid: c for c in proc.children(recursive=True)})
    for proc in every.values():
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(list(every.values()), timeout=30)
