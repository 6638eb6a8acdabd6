"""``kvprof sweep --ray``: engines on a Ray cluster, the driver the only writer (issue #17).

The cluster is real (Ray on this machine's loopback, started by the test, CPUs standing in for GPUs) and so
is the driver (``python -m profiler.cli sweep``, a subprocess). The engine child is a double (a script that
writes the records an engine child writes, as tests/profiler/test_results_safety.py's does), so that faults can be
placed exactly: a point that never ends, the Ray worker killed while it runs, Ctrl-C. The real engine
through Ray is in tests/engines/test_sweep_e2e.py. Nothing is timed; every wait is for a state, with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ray_local import ROOT, local_ray, ray_missing

# The engine child's stand-in. The file hang.json beside it names (block size, concurrency) pairs whose point
# never ends: the double logs the start, writes inflight-<engine id>.json (its pid and its parent's, the Ray
# worker) beside itself and sleeps. Like the real child it holds a lifeline to its parent.
DOUBLE = textwrap.dedent(f"""
    import json, os, sys, time
    from pathlib import Path
    sys.path.insert(0, {str(ROOT)!r})
    from analysis.results.schema import CapacityFacts, DecodeMeasurements, DecodePoint, EngineRecord, PhaseMarker
    from profiler.lifeline import hold
    from profiler.spec import EngineJob
    from profiler.store import ResultsDir

    hold()
    here = Path(__file__).parent
    job = EngineJob.model_validate_json(open(sys.argv[-1]).read())
    hang = [tuple(x) for x in json.loads((here / "hang.json").read_text())]
    store = ResultsDir(job.results_dir)
    facts = CapacityFacts(num_gpu_blocks=512 // (job.engine.block_size // 16), block_size=job.engine.block_size,
                          cache_dtype="auto", max_model_len=job.engine.max_model_len, max_num_batched_tokens=4096,
                          max_num_seqs=64, model_dtype="bfloat16")
    rec = EngineRecord(id=job.engine_id, status="ok", engine=job.engine, llm_kwargs=job.llm_kwargs,
                       capacity=facts, started_at=time.time(), ready_at=time.time())
    store.write_engine(rec)
    for p in job.points:
        print(f"KVPROF_POINT_START {{p.id}}", flush=True)
        if (job.engine.block_size, p.concurrency) in hang:
            # written whole and renamed into place, so the test never reads a file half written
            part = here / f".inflight-{{job.engine_id}}.part"
            part.write_text(json.dumps(
                {{"pid": os.getpid(), "ppid": os.getppid(), "point": p.id, "results_dir": job.results_dir}}))
            os.replace(part, here / f"inflight-{{job.engine_id}}.json")
            while True:
                time.sleep(1)
        m = DecodeMeasurements(ttft_s=0.01, tpot_s=0.002, decode_step_s=0.002, output_tokens_per_s=500.0,
                               mean_context=p.prompt_len + p.output_len / 2, requests_measured=p.concurrency)
        store.write_point(DecodePoint(id=p.id, engine_id=job.engine_id, engine=job.engine, point=p, status="ok",
                                      measurements=m, started_at=time.time(), finished_at=time.time()))
        print(f"KVPROF_POINT_DONE {{p.id}} ok", flush=True)
    rec.finished_at = time.time()
    store.write_engine(rec)
""")

# The driver, with the double as its engine child.
BOOT = ("import sys; import profiler.runner.children as r; r.ENGINE_COMMAND = [sys.executable, {script!r}]; "
        "from profiler.cli import app; sys.argv[0] = 'kvprof'; app()")

SPEC = """name: ray-double
model: tiny-llama-gqa
engine:
  max_model_len: 1024
  block_size: [32, 64]
  kv_cache_memory_bytes: 16MiB
workload:
  concurrency: [1, 2, 3]
  prompt_len: [64]
  output_len: 8
phases: [decode]
probe: false
telemetry:
  enabled: true
  backend: cpu
  interval_s: 0.1
timeouts:
  engine_start_s: 120
  point_s: {point_s}
"""


@pytest.fixture(scope="module")
def cluster():
    if ray_missing():
        pytest.skip(ray_missing())
    with local_ray(num_cpus=2) as c:
        yield c


@pytest.fixture
def double(tmp_path):
    """Writes the double and its hang list; returns (spec path, setter for the hang list)."""
    script = tmp_path / "double" / "engine_double.py"
    script.parent.mkdir()
    script.write_text(DOUBLE)

    def hang(*pairs: tuple[int, int], point_s: float = 600) -> Path:
        (script.parent / "hang.json").write_text(json.dumps([list(p) for p in pairs]))
        spec = tmp_path / "spec.yaml"
        spec.write_text(SPEC.format(point_s=point_s))
        return spec

    hang.script = script  # type: ignore[attr-defined]
    return hang


def driver(double, spec: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-c", BOOT.format(script=str(double.script)), "sweep", str(spec), "--out", str(out),
            "--no-report", *extra]


def run(cmd: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def records(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))}


def level(recs: dict[str, dict], engine_id: str, concurrency: int) -> dict:
    """The record of the engine's point at that concurrency ({} while there is none)."""
    return next((r for r in recs.values() if r["engine_id"] == engine_id and r["point"]["concurrency"] == concurrency),
                {})


def engines(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "engines").glob("*.json"))}


def wait_for(what, deadline_s: float = 300, why: str = ""):
    """Poll until ``what()`` is truthy (a state, not a duration: the deadline only bounds a broken run)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not reached within {deadline_s} s: {why}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
    return bool(stat) and stat[stat.rindex(")") + 2] != "Z"


def inflight(double) -> dict | None:
    files = list(double.script.parent.glob("inflight-*.json"))
    return json.loads(files[0].read_text()) if files else None


def test_a_sweep_through_ray_writes_what_a_local_sweep_writes(cluster, double, tmp_path):
    spec = double()
    local, remote = tmp_path / "local", tmp_path / "ray"
    a = run(driver(double, spec, local))
    assert a.returncode == 0, a.stderr[-3000:]
    b = run(driver(double, spec, remote, "--ray", cluster.address))
    assert b.returncode == 0, b.stderr[-3000:]
    ra, rb = records(local), records(remote)
    assert len(ra) == 6 and sorted(ra) == sorted(rb)
    assert all(r["status"] == "ok" for r in rb.values())
    for pid in ra:  # the same measurements (the double's), the same point settings
        assert ra[pid]["measurements"] == rb[pid]["measurements"] and ra[pid]["point"] == rb[pid]["point"]
    ea, eb = engines(local), engines(remote)
    assert {k: v["capacity"] for k, v in ea.items()} == {k: v["capacity"] for k, v in eb.items()}
    # Where each ran: a core of the node (one each: tensor_parallel_size 1), as the record names it.
    for rec in eb.values():
        (label,) = rec["devices"]
        node, core = label.split("/")
        assert core.startswith("cpu") and node
        assert rec["telemetry"]["launches"][0]["samples"] > 0  # sampled on the node, kept by the driver
    overlapping = [(x, y) for x in eb for y in eb if x < y and f"engine {y}" in eb[x]["beside"]]
    for x, y in overlapping:  # side by side only on different cores
        assert eb[x]["devices"] != eb[y]["devices"]
    manifest = json.loads((remote / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["ray"]["address"] == cluster.address and manifest["ray"]["resource"] == "CPU"
    assert [n["devices"] for n in manifest["ray"]["nodes"]] == [2]
    # Paths in records are the driver's, never a node's scratch directory; the scratch is gone.
    assert "kvprof-ray-" not in "".join(p.read_text() for p in remote.rglob("*.json"))
    assert (remote / "telemetry" / f"{next(iter(eb))}.parquet").is_file()
    assert not list((remote / "telemetry").glob("*.partial.parquet"))
    assert cluster.scratch_dirs() == []
    assert "KVPROF_POINT_START" in (remote / "logs" / f"{next(iter(eb))}.log").read_text()  # its log came back


def test_a_killed_ray_worker_costs_its_point_the_sweep_finishes_and_a_rerun_resumes(cluster, double, tmp_path):
    spec = double((32, 2))  # the block-32 engine's concurrency-2 point never ends
    out = tmp_path / "out"
    proc = subprocess.Popen(driver(double, spec, out, "--ray", cluster.address), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        flight = wait_for(lambda: inflight(double), why="the hanging point to start")
        engine_id = flight["point"].split("--")[0]
        # The point before it is on the driver's disk (handed back) before the worker dies.
        wait_for(lambda: level(records(out), engine_id, 1).get("status") == "ok", why="the c1 point to be handed back")
        os.kill(flight["ppid"], signal.SIGKILL)  # the Ray worker running the engine child
        _, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    wait_for(lambda: not alive(flight["pid"]), 60, "the orphaned child to take itself down")
    after = records(out)
    crashed = after[flight["point"]]
    assert crashed["status"] == "crash" and "Ray worker" in crashed["message"] and "was lost" in crashed["message"]
    assert level(after, engine_id, 3)["status"] == "aborted"  # never tried: a plain rerun runs it
    assert sum(r["status"] == "ok" for r in after.values()) == 4  # c1 here, and the other engine's three
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete_with_failures"

    double()  # nothing hangs now
    again = run(driver(double, spec, out, "--ray", cluster.address))
    assert again.returncode == 1, again.stderr[-3000:]  # the crashed point stays crashed without --retry-failed
    final = records(out)
    assert level(final, engine_id, 3)["status"] == "ok" and final[flight["point"]]["status"] == "crash"
    assert json.loads((out / "manifest.json").read_text())["engine_launches"] == 1
    assert cluster.scratch_dirs() == []  # the dead host's scratch was cleaned by the next host on the node


def test_ctrl_c_on_the_driver_stops_the_nodes_children_and_a_rerun_resumes(cluster, double, tmp_path):
    spec = double((64, 2))
    out = tmp_path / "out"
    proc = subprocess.Popen(driver(double, spec, out, "--ray", cluster.address), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        flight = wait_for(lambda: inflight(double), why="the hanging point to start")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    wait_for(lambda: not alive(flight["pid"]), 60, "the node's child to be killed")
    assert flight["point"] not in records(out)  # in flight: not recorded as anything, as locally
    double()
    again = run(driver(double, spec, out, "--ray", cluster.address))
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(records(out)) == 6 and all(r["status"] == "ok" for r in records(out).values())
    wait_for(lambda: cluster.scratch_dirs() == [], 60, "every host's scratch directory to be removed")


def test_a_hung_point_on_a_node_times_out_alone_as_locally(cluster, double, tmp_path):
    spec = double((32, 2), point_s=3)
    out = tmp_path / "out"
    res = run(driver(double, spec, out, "--ray", cluster.address))
    assert res.returncode == 1, res.stderr[-3000:]
    statuses = {(r["engine"]["block_size"], r["point"]["concurrency"]): r["status"] for r in records(out).values()}
    assert statuses == {(32, 1): "ok", (32, 2): "timeout", (32, 3): "ok",
                        (64, 1): "ok", (64, 2): "ok", (64, 3): "ok"}, statuses
    assert json.loads((out / "manifest.json").read_text())["engine_launches"] == 3  # one relaunch after the hang


def test_ray_flag_errors_are_one_line_before_anything_starts(cluster, double, tmp_path):
    spec = double()
    out = tmp_path / "out"
    both = run(driver(double, spec, out, "--ray", cluster.address, "--devices", "all"))
    assert both.returncode == 2 and "--ray with --devices" in both.stderr and "Traceback" not in both.stderr
    nobody = run(driver(double, spec, out, "--ray", "127.0.0.1:1"))
    assert nobody.returncode == 2 and "nothing answers at" in nobody.stderr and "Traceback" not in nobody.stderr
    assert not out.exists()
    dry = run(driver(double, spec, out, "--ray", cluster.address, "--dry-run"))
    assert dry.returncode == 0, dry.stderr
    assert f"Ray cluster at {cluster.address}: 1 node(s), 2 CPUs in all" in " ".join(dry.stdout.split())
    assert not out.exists()
    big = tmp_path / "tp4.yaml"
    big.write_text(spec.read_text().replace("max_model_len: 1024", "max_model_len: 1024\n  tensor_parallel_size: 4"))
    toobig = run(driver(double, big, out, "--ray", cluster.address))
    assert toobig.returncode == 2, toobig.stderr
    assert "needs 4 CPUs on one node" in " ".join(toobig.stderr.split()) and "largest node" in toobig.stderr
    assert not out.exists()


def test_without_ray_the_flag_says_how_to_get_it(tmp_path):
    """Ray hidden (an import that fails, as where the extra is not installed): exit 2 with the remedy."""
    shadow = tmp_path / "shadow" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = {**os.environ, "PYTHONPATH": f"{shadow.parent}{os.pathsep}{ROOT}"}
    res = subprocess.run([sys.executable, "-m", "profiler.cli", "sweep", "sweeps/tiny-cpu.yaml", "--ray", "auto",
                          "--out", str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2
    assert "--ray needs Ray" in res.stderr and "kvprof[ray]" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_a_node_host_hands_back_what_its_child_wrote_under_the_drivers_paths(tmp_path, monkeypatch):
    """The node side alone (no Ray): a child writes a record naming its results directory, a log in two
    parts, a seeded record it does not touch, and a tokenizer directory still being written. Each poll hands
    back only what is whole and new, with the scratch path mapped to the driver's."""
    import tempfile

    from profiler.ray_cluster import NodeHost

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))
    (tmp_path / "node-tmp").mkdir()
    driver_root = str(tmp_path / "results")
    seeded = b'{"id": "e", "note": "from an earlier launch"}'
    host = NodeHost(driver_root, "cuda", 1, {"engines/e.json": seeded})
    try:
        _check_node_host(host, tmp_path, driver_root)
    finally:
        host.close()  # a failed check leaves no child behind


def _check_node_host(host, tmp_path: Path, driver_root: str) -> None:
    from profiler.ray_cluster import model_files

    scratch = Path(host.scratch)
    assert scratch.parent == tmp_path / "node-tmp" and scratch.name.startswith(f"kvprof-ray-{os.getpid()}-")
    go = tmp_path / "go"
    child = textwrap.dedent(f"""
        import json, os, sys, time
        root = sys.argv[1]
        print("first part", flush=True)
        os.makedirs(os.path.join(root, "tokenizers", ".tok.abc.tmp"))
        open(os.path.join(root, "tokenizers", ".tok.abc.tmp", "tokenizer.json"), "w").write("half")
        open(os.path.join(root, "tokenizers", ".tok.lock"), "w").write("")
        job = json.load(open(os.path.join(root, "jobs", "e.json")))
        assert open(os.path.join(job["model"], "config.json")).read() == '{{"vocab_size": 7}}'  # the staged copy
        json.dump({{"results_dir": root, "model": job["model"]}}, open(os.path.join(root, "points", "p.json"), "w"))
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        print("second part", flush=True)
    """)
    script = tmp_path / "child.py"
    script.write_text(child)
    # A model with dummy weights travels with the job: its config files, not its weights.
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"vocab_size": 7}')
    (model / "model.safetensors").write_bytes(b"\0" * 1024)
    (model / ".cache").write_text("x")
    files = model_files(str(model))
    assert files == {"config.json": b'{"vocab_size": 7}'}
    staged = host.stage_model(str(model), files)
    assert staged.startswith(str(scratch))
    # The job file and the command's arguments under the driver's root arrive under the scratch directory.
    job = json.dumps({"results_dir": driver_root, "model": str(model)}).encode()
    host.start([sys.executable, str(script), driver_root], {"jobs/e.json": job}, {}, "logs/e.log")
    assert json.loads((scratch / "jobs" / "e.json").read_text()) == {"results_dir": str(scratch), "model": staged}

    def until(cond):
        end = time.monotonic() + 120
        got = []
        while time.monotonic() < end:
            got.append(host.poll())
            if cond(got):
                return got
            time.sleep(0.02)
        raise AssertionError(got)

    first = until(lambda got: any(rel == "points/p.json" for g in got for rel, _ in g["files"]))
    files = {rel: data for g in first for rel, data in g["files"]}
    assert first[-1]["returncode"] is None, b"".join(c for g in first for _, c in g["logs"])
    assert json.loads(files["points/p.json"]) == {"results_dir": driver_root, "model": str(model)}  # the driver's
    assert set(files) == {"points/p.json"}  # not the seeded record, the temp directory or the lock
    assert b"".join(c for g in first for rel, c in g["logs"]) == b"first part\n"
    go.write_text("")
    rest = until(lambda got: got[-1]["returncode"] is not None)
    assert rest[-1]["returncode"] == 0
    assert b"".join(c for g in rest for rel, c in g["logs"]) == b"second part\n"  # appended, not resent
    assert not any(g["files"] for g in rest)
    host.close()
    assert not scratch.exists()


def test_what_a_node_cannot_run_is_recorded_with_the_nodes_reason(cluster, double, tmp_path):
    """telemetry.backend nvml on a node without NVML (this one): the driver cannot check a node's devices
    before the sweep, so the node's refusal becomes every point's error, and the sweep says nothing ran."""
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine: its node would sample GPUs, not refuse")
    except pynvml.NVMLError:
        pass
    spec = double()
    spec.write_text(spec.read_text().replace("backend: cpu", "backend: nvml"))
    out = tmp_path / "out"
    res = run(driver(double, spec, out, "--ray", cluster.address))
    assert res.returncode == 1, res.stderr[-3000:]
    recs = records(out)
    assert len(recs) == 6 and {r["status"] for r in recs.values()} == {"error"}
    assert all("telemetry.backend nvml" in r["message"] and "on node" in r["message"] for r in recs.values())
    assert json.loads((out / "manifest.json").read_text())["status"] == "failed"
    assert cluster.scratch_dirs() == []


@pytest.mark.parametrize("address", ["a" * 100_000, "\udcff\udcfe:12", "x:" + "9" * 50, "bogus"])
def test_a_garbage_ray_address_is_one_short_line(tmp_path, address):
    if ray_missing():
        pytest.skip(ray_missing())
    from profiler.ray_cluster import RayError, connect

    with pytest.raises(RayError) as err:
        connect(address)
    text = str(err.value)
    assert text.startswith("--ray ") and "\n" not in text and len(text) < 300
    assert "not an address" in text or "Invalid address format" in text


def test_a_remote_childs_wait_honours_its_timeout(tmp_path):
    """RemoteProc.wait(timeout) polled forever whatever the timeout (#48); it now raises TimeoutExpired as a local
    Popen's wait does, and returns the code once the child ends."""
    import subprocess
    import time
    import types

    from profiler.ray_cluster import RemoteProc

    state = {"returncode": None}
    actor = types.SimpleNamespace(poll=types.SimpleNamespace(remote=lambda: "poll"))
    host = types.SimpleNamespace(actor=actor, root=tmp_path,
                                 call=lambda _ref: {"returncode": state["returncode"], "logs": [], "files": [],
                                                    "rows": []})
    proc = RemoteProc(host, pid=4242, sampler=None, log_path=tmp_path / "child.log")
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.3)
    assert 0.3 <= time.monotonic() - t0 < 5
    state["returncode"] = 3
    assert proc.wait(timeout=5) == 3
