"""Results are never lost or corrupted, and exit codes say what happened (issue #15, "lost or corrupted results").

Sweeps here run the real parent (profiler.runner) with an engine double in the child's place
(``profiler.runner.children.ENGINE_COMMAND``): a small script that writes the records an engine child writes,
through the same contract, or dies the way a child dies. No vLLM runs; nothing is timed.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT
from typer.testing import CliRunner

from profiler.cli import app
from profiler.runner import children as sweep_children
from profiler.runner import sweep as sweep_runner
from profiler.store import LOCK_NAME, ResultsDir, StoreError

cli = CliRunner()

# The engine child's stand-in. KVPROF_DOUBLE says how it behaves:
#   ok             the engine comes up, measures its capacity phase and every point
#   dies           exits 1 before writing anything (vLLM crashed at start-up)
#   capacity-dies  the engine comes up (record ok), then dies inside the capacity phase
#   dies-on-64     dies like `dies` when its block size is 64, else like `ok`
#   up-then-dies   the engine comes up (record ok), starts its first point and dies in it
DOUBLE = textwrap.dedent(f"""
    import os, sys, time
    sys.path.insert(0, {str(ROOT)!r})
    from analysis.results.schema import (CapacityFacts, DecodeMeasurements, DecodePoint, EngineRecord,
                                         PhaseMarker)
    from profiler.spec import EngineJob
    from profiler.store import ResultsDir

    job = EngineJob.model_validate_json(open(sys.argv[-1]).read())
    mode = os.environ["KVPROF_DOUBLE"]
    if mode == "dies-on-64":
        mode = "dies" if job.engine.block_size == 64 else "ok"
    print("engine double:", mode, job.engine_id, flush=True)
    if mode == "dies":
        sys.exit(1)
    store = ResultsDir(job.results_dir)
    facts = CapacityFacts(num_gpu_blocks=512, block_size=job.engine.block_size, cache_dtype="auto",
                          max_model_len=job.engine.max_model_len, max_num_batched_tokens=4096, max_num_seqs=64,
                          model_dtype="bfloat16")
    rec = EngineRecord(id=job.engine_id, status="ok", engine=job.engine, llm_kwargs=job.llm_kwargs,
                       capacity=facts, started_at=time.time())
    store.write_engine(rec)
    if mode == "capacity-dies":
        print("RuntimeError: the capacity phase crashed", flush=True)
        sys.exit(1)
    if mode == "up-then-dies":
        print("KVPROF_POINT_START", job.points[0].id, flush=True)
        sys.exit(1)
    if "capacity" in job.phases:
        now = time.time()
        rec.phases.append(PhaseMarker(phase="capacity", start=now, end=now, engine_s=0.0))
        store.write_engine(rec)
    for p in job.points:
        m = DecodeMeasurements(ttft_s=0.01, tpot_s=0.002, decode_step_s=0.002, output_tokens_per_s=500.0,
                               mean_context=p.prompt_len + p.output_len / 2, requests_measured=p.concurrency)
        store.write_point(DecodePoint(id=p.id, engine_id=job.engine_id, engine=job.engine, point=p, status="ok",
                                      measurements=m))
""")

SPEC = """name: {name}
model: tiny-llama-gqa
engine:
  max_model_len: 1024
  block_size: {block_size}
  kv_cache_memory_bytes: 16MiB
workload:
  concurrency: {concurrency}
  prompt_len: [64]
  output_len: 8
phases: {phases}
probe: false
telemetry:
  enabled: false
"""


def spec(tmp_path: Path, name: str = "a", block_size: str = "32", concurrency: str = "[1, 2]",
         phases: str = "[decode]", file: str | None = None) -> Path:
    path = tmp_path / (file or f"{name}.yaml")
    path.write_text(SPEC.format(name=name, block_size=block_size, concurrency=concurrency, phases=phases))
    return path


@pytest.fixture
def double(tmp_path, monkeypatch):
    """Engine children are the double; returns a setter for its behaviour."""
    script = tmp_path / "engine_double.py"
    script.write_text(DOUBLE)
    monkeypatch.setattr(sweep_children, "ENGINE_COMMAND", [sys.executable, str(script)])
    monkeypatch.setattr(sweep_children, "POLL_S", 0.05)

    def behave(mode: str) -> None:
        monkeypatch.setenv("KVPROF_DOUBLE", mode)

    behave("ok")
    return behave


def sweep(spec_path: Path, out: Path, *extra: str):
    return cli.invoke(app, ["sweep", str(spec_path), "--out", str(out), "--no-report", *extra])


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def files(root: Path) -> dict[str, bytes]:
    """Every file under root (the lock file aside: a refusal may open it) → its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != LOCK_NAME}


# --- sweep --out into another sweep --------------------------------------------------------------

def test_sweep_into_a_directory_holding_another_sweep_is_refused_naming_both(tmp_path, double):
    out = tmp_path / "out"
    a = sweep(spec(tmp_path, "a"), out)
    assert a.exit_code == 0, a.output
    before = files(out)
    b = sweep(spec(tmp_path, "b", concurrency="[1, 2, 4]"), out)
    assert b.exit_code == 2, b.output
    text = " ".join(b.output.split())
    hash_a = manifest(out)["spec_hash"]
    assert f"holds another sweep: 'a' (spec hash {hash_a}" in text
    assert "this spec is sweep 'b' (spec hash " in text and "they differ in name, workload.concurrency" in text
    assert "--force" in text and "Traceback" not in b.output
    assert files(out) == before  # neither its spec, its manifest nor any record was touched


def test_the_same_spec_resumes_even_with_other_comments(tmp_path, double):
    out = tmp_path / "out"
    path = spec(tmp_path, "a")
    assert sweep(path, out).exit_code == 0
    points = {p.name: p.read_bytes() for p in (out / "points").iterdir()}
    path.write_text("# the same sweep, annotated\n" + path.read_text())
    again = sweep(path, out)
    assert again.exit_code == 0, again.output
    assert {p.name: p.read_bytes() for p in (out / "points").iterdir()} == points  # done before: not rerun
    assert manifest(out)["engine_launches"] == 0 and manifest(out)["status"] == "complete"


def test_force_moves_the_old_spec_aside_and_keeps_every_record(tmp_path, double):
    out = tmp_path / "out"
    spec_a = spec(tmp_path, "a")
    assert sweep(spec_a, out).exit_code == 0
    manifest_a = (out / "manifest.json").read_bytes()
    points_a = {p.name: p.read_bytes() for p in (out / "points").iterdir()}
    res = sweep(spec(tmp_path, "b", concurrency="[1, 2, 4]"), out, "--force")
    assert res.exit_code == 0, res.output
    (kept,) = (out / "superseded").iterdir()
    assert kept.name.endswith(json.loads(manifest_a)["spec_hash"])
    assert (kept / "manifest.json").read_bytes() == manifest_a
    assert (kept / "spec.yaml").read_text() == spec_a.read_text()
    assert manifest(out)["name"] == "b" and "name: b" in (out / "spec.yaml").read_text()
    # a's points are b's first two (same engine, same workload): reused as they were, not measured again
    after = {p.name: p.read_bytes() for p in (out / "points").iterdir()}
    assert {k: after[k] for k in points_a} == points_a and len(after) == 3
    assert "superseded" in res.output
    # the superseded spec and manifest are records no output may overwrite
    assert ResultsDir(out).is_record(kept / "manifest.json")


# --- exit codes and the manifest's status ----------------------------------------------------------

@pytest.mark.parametrize("mode", ["dies", "capacity-dies"])
def test_a_capacity_only_sweep_whose_engines_all_crash_fails(tmp_path, double, mode):
    """Its only phase crashed on every engine: nothing was measured. Exit 1 and status failed, not 0 and
    complete."""
    double(mode)
    out = tmp_path / "out"
    res = cli.invoke(app, ["sweep", str(spec(tmp_path, block_size="[32, 64]", phases="[capacity]")),
                           "--out", str(out)])
    assert res.exit_code == 1, res.output
    assert manifest(out)["status"] == "failed"
    text = " ".join(res.output.split())
    assert "nothing was measured" in text and "no report built" in text and not (out / "report.pdf").exists()
    engines = manifest(out)["engines"]
    assert len(engines) == 2 and all(f"crash: engine {e} (capacity phase)" in text for e in engines)


def test_one_engine_failing_is_complete_with_failures_and_exit_1(tmp_path, double):
    double("dies-on-64")
    out = tmp_path / "out"
    res = sweep(spec(tmp_path, block_size="[32, 64]", phases="[capacity, decode]"), out)
    assert res.exit_code == 1, res.output
    assert manifest(out)["status"] == "complete_with_failures"
    statuses = sorted(json.loads(p.read_text())["status"] for p in (out / "points").iterdir())
    assert statuses == ["crash", "crash", "ok", "ok"]  # 2 points × 2 engines, the block-64 engine's failed


def test_an_engine_that_came_up_and_died_before_the_parent_looked_failed_on_its_first_point(
        tmp_path, double, monkeypatch):
    """The child wrote its ready record and died inside a point between two looks of the supervisor (on Ray:
    before the record reached the driver's last look). The race is made certain: the supervisor here never
    looks, it only waits for the child. What the child left still says it was up, so the point it died on is a
    crash and the ones after it were never tried (aborted: a plain rerun runs them), not all crashed 'before
    the engine was ready'."""
    def never_looks(proc, *args):
        proc.wait()
        return None, False, set()

    monkeypatch.setattr(sweep_children, "supervise_child", never_looks)
    double("up-then-dies")
    out = tmp_path / "out"
    res = sweep(spec(tmp_path, concurrency="[1, 2, 4]"), out)
    assert res.exit_code == 1, res.output
    recs = {json.loads(p.read_text())["point"]["concurrency"]: json.loads(p.read_text())
            for p in (out / "points").iterdir()}
    assert recs[1]["status"] == "crash" and "before the engine was ready" not in recs[1]["message"]
    assert [recs[c]["status"] for c in (2, 4)] == ["aborted", "aborted"]
    assert all("a rerun of the sweep runs it" in recs[c]["message"] for c in (2, 4))


def test_every_point_failing_is_status_failed(tmp_path, double):
    double("dies")
    out = tmp_path / "out"
    res = sweep(spec(tmp_path), out)
    assert res.exit_code == 1 and manifest(out)["status"] == "failed", res.output


def test_everything_measured_is_complete_and_exit_0(tmp_path, double):
    out = tmp_path / "out"
    res = sweep(spec(tmp_path, block_size="[32, 64]", phases="[capacity, decode]"), out)
    assert res.exit_code == 0, res.output
    assert manifest(out)["status"] == "complete"


# --- report: the lock, atomic outputs, stale calibration, --out-dir ------------------------------------

HOLDER = textwrap.dedent("""
    import sys
    from profiler.store import ResultsDir
    ResultsDir(sys.argv[1]).lock(sys.argv[2])
    print("locked", flush=True)
    sys.stdin.read()
""")


class Holder:
    """Another process holding the directory's lock, as a sweep (or a report) takes it, until closed."""

    def __init__(self, root: Path, command: str = "sweep"):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), command], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == "locked\n"

    def __enter__(self) -> subprocess.Popen:
        return self.proc

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def results(tmp_path) -> Path:
    from synthetic_results import make_results

    root = tmp_path / "run"
    make_results(root)
    return root


def test_report_refuses_a_directory_a_sweep_is_writing_and_names_it(results):
    with Holder(results) as h:
        res = cli.invoke(app, ["report", str(results)])
    assert res.exit_code == 2, res.output
    assert f"is in use by a running sweep (pid {h.pid} on " in " ".join(res.output.split())
    assert "Traceback" not in res.output and not (results / "report.pdf").exists()


def test_a_sweep_refused_by_a_running_report_is_told_it_is_a_report(results):
    with Holder(results, "report") as h, pytest.raises(StoreError) as info:
        ResultsDir(results).lock()
    assert f"is in use by a running `kvprof report` (pid {h.pid} on " in str(info.value)


def test_an_interrupted_report_leaves_every_earlier_output_whole(results, monkeypatch):
    """Ctrl-C while results.parquet is being written: the old summary, table and calibration stay as they were
    (the old code wrote the table in place and left it truncated)."""
    from analysis.report.run import build_report

    build_report(results)
    before = {n: (results / n).read_bytes() for n in ("report.pdf", "summary.md", "results.parquet",
                                                     "calibration.json")}

    def interrupted_write(self, path, *args, **kwargs):
        with (open(path, "wb") if isinstance(path, str | os.PathLike) else path) as f:
            f.write(b"PAR1 half a table")
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_parquet", interrupted_write)
    with pytest.raises(KeyboardInterrupt):
        build_report(results)
    assert {n: (results / n).read_bytes() for n in before} == before
    assert not [p.name for p in results.iterdir() if p.name.startswith(".") and p.name != LOCK_NAME]


def test_a_stale_calibration_is_removed_and_no_longer_feeds_plan(results):
    assert cli.invoke(app, ["report", str(results)]).exit_code == 0
    cal = results / "calibration.json"
    assert "effective_bandwidth_Bps" in json.loads(cal.read_text())
    for p in (results / "points").glob("*.json"):  # the decode points are gone: no fit any more
        if json.loads(p.read_text())["point"]["phase"] == "decode":
            p.unlink()
    res = cli.invoke(app, ["report", str(results)])
    assert res.exit_code == 0, res.output
    assert not cal.exists() and f"removed {cal}" in " ".join(res.output.split())
    plan = cli.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--calibration", str(cal)])
    assert plan.exit_code == 2 and "Traceback" not in plan.output


def test_report_out_dir_writes_everything_there_and_nothing_in_the_results(results, tmp_path):
    before = files(results)
    dest = tmp_path / "elsewhere" / "report"
    res = cli.invoke(app, ["report", str(results), "--out-dir", str(dest), "--json"])
    assert res.exit_code == 0, res.output
    written = json.loads(res.stdout)
    assert {k: Path(v) for k, v in written.items()} == {
        "pdf": dest / "report.pdf", "summary": dest / "summary.md", "results": dest / "results.parquet",
        "calibration": dest / "calibration.json"}
    assert all(Path(v).stat().st_size > 0 for v in written.values())
    assert files(results) == before


def test_report_out_dir_inside_the_records_or_a_file_is_refused(results, tmp_path):
    res = cli.invoke(app, ["report", str(results), "--out-dir", str(results / "points")])
    assert res.exit_code == 2 and "inside the records" in res.output
    (tmp_path / "a-file").write_text("x")
    res = cli.invoke(app, ["report", str(results), "--out-dir", str(tmp_path / "a-file")])
    assert res.exit_code == 2 and "is a file: give a directory" in res.output and "Traceback" not in res.output


@pytest.fixture
def read_only(monkeypatch):
    """Make a directory behave as on a read-only file system: opening anything under it for writing (or
    creating, renaming or removing there) fails with EROFS, as the kernel answers on a read-only mount.
    Returns the function that marks a directory so."""
    marked: list[Path] = []

    def under(path) -> bool:
        try:
            p = Path(os.fsdecode(path)).resolve()
        except (TypeError, ValueError):
            return False
        return any(p.is_relative_to(d) for d in marked)

    def refuse(path) -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

    real_os_open, real_open, real_replace = os.open, builtins.open, os.replace
    real_unlink, real_mkdir = os.unlink, os.mkdir
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def os_open(path, flags, *args, **kwargs):
        if flags & writing and under(path):
            raise refuse(path)
        return real_os_open(path, flags, *args, **kwargs)

    def open_(file, mode="r", *args, **kwargs):
        if isinstance(file, str | bytes | os.PathLike) and set(mode) & set("wax+") and under(file):
            raise refuse(file)
        return real_open(file, mode, *args, **kwargs)

    def replace(src, dst, *args, **kwargs):
        if under(src) or under(dst):
            raise refuse(dst)
        return real_replace(src, dst, *args, **kwargs)

    def unlink(path, *args, **kwargs):
        if under(path):
            raise refuse(path)
        return real_unlink(path, *args, **kwargs)

    def mkdir(path, *args, **kwargs):
        if under(path):
            raise refuse(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "mkdir", mkdir)
    return lambda d: marked.append(Path(d).resolve())


def test_a_read_only_results_directory_is_one_line_suggesting_out_dir(results, read_only, tmp_path):
    before = files(results)
    read_only(results)
    res = cli.invoke(app, ["report", str(results)])
    assert res.exit_code == 2, res.output
    assert "is not writable (Read-only file system); write the report elsewhere with --out-dir DIR" in \
        " ".join(res.output.split())
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) <= 2
    # --out-dir reads it without a lock (none can be created there, so no sweep holds one) and writes elsewhere
    res = cli.invoke(app, ["report", str(results), "--out-dir", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rep" / "report.pdf").stat().st_size > 0 and (tmp_path / "rep" / "calibration.json").exists()
    assert files(results) == before and not (results / LOCK_NAME).exists()


def test_a_read_only_directory_a_sweep_holds_is_still_refused(results, read_only, tmp_path):
    """The sweep made the lock file before the directory became unwritable to us: flock needs only a
    read-only descriptor, so the report still sees the sweep."""
    with Holder(results) as h:
        read_only(results)
        res = cli.invoke(app, ["report", str(results), "--out-dir", str(tmp_path / "rep")])
    assert res.exit_code == 2, res.output
    assert f"in use by a running sweep (pid {h.pid} on " in " ".join(res.output.split())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through file permissions")
def test_a_results_directory_without_write_permission(results, tmp_path):
    results.chmod(0o555)
    try:
        res = cli.invoke(app, ["report", str(results)])
        assert res.exit_code == 2 and "--out-dir" in res.output, res.output
        res = cli.invoke(app, ["report", str(results), "--out-dir", str(tmp_path / "rep")])
        assert res.exit_code == 0, res.output
    finally:
        results.chmod(0o755)


# --- Ctrl-C: exit 130, one line, no traceback, for every command ---------------------------------------

def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("command, target", [
    (["validate", "SPEC"], "profiler.preflight.validate"),
    (["sweep", "SPEC", "--dry-run"], "profiler.runner.dry_run.dry_run_table"),
    (["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"], "profiler.cli.plan.make_plan"),
    (["procure", "--model", "llama-3.1-8b", "--gpu", "h100-sxm,h200", "--concurrency", "4"],
     "profiler.cli.procure.procurement"),
    (["report", "RESULTS"], "analysis.report.run.load"),
    (["compare", "RESULTS", "RESULTS"], "analysis.measured.comparison.compare_runs"),
    (["check-plan", "PLAN", "RESULTS"], "analysis.measured.plan_check.check_plan"),
    (["probe", "--quick"], "profiler.probe.run_probe"),
    (["log", "LOG"], "analysis.planning.startup_log_check.read_log"),
    (["models"], "analysis.catalog.model_names"),
    (["gpus"], "analysis.catalog.gpus"),
])
def test_ctrl_c_in_any_command_exits_130_with_one_line(tmp_path, monkeypatch, command, target):
    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(__import__(module, fromlist=[name]), name, _interrupt)
    paths = {"SPEC": spec(tmp_path), "RESULTS": tmp_path, "PLAN": tmp_path / "plan.json", "LOG": tmp_path / "v.log"}
    (tmp_path / "plan.json").write_text("{}")
    (tmp_path / "v.log").write_text("INFO vllm\n")
    res = cli.invoke(app, [str(paths.get(a, a)) for a in command])
    assert res.exit_code == 130, res.output
    assert "interrupted" in res.output and "Traceback" not in res.output


def test_ctrl_c_during_a_sweep_marks_it_interrupted_and_exits_130(tmp_path, double, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setattr(sweep_runner, "run_engine", _interrupt)
    res = sweep(spec(tmp_path), out)
    assert res.exit_code == 130, res.output
    assert manifest(out)["status"] == "interrupted"
    assert "rerun the same command to resume" in res.output and "Traceback" not in res.output


def test_a_ctrl_c_swallowed_by_a_finalizer_still_stops_the_command(results, monkeypatch):
    """Python swallows a KeyboardInterrupt raised inside a finalizer or weakref callback ("Exception ignored
    in …" with a traceback) and carries on: `kvprof report` then finished and exited 0. Delivered again, it
    stops the report like any Ctrl-C."""
    from analysis.report import run as report
    real_load = report.load

    class Finalized:
        def __del__(self):
            raise KeyboardInterrupt  # where SIGINT landed: inside a finalizer

    def load(root):
        Finalized()  # collected at once: its __del__ runs here
        return real_load(root)

    monkeypatch.setattr(report, "load", load)
    res = cli.invoke(app, ["report", str(results)])
    assert res.exit_code == 130, res.output
    assert "interrupted" in res.output
    assert "Traceback" not in res.output and "Exception ignored" not in res.output


INTERRUPT_WHILE_LOADING = textwrap.dedent("""
    import os, signal, sys

    class Finder:  # Ctrl-C arrives while kvprof's modules are still being imported
        def find_spec(self, name, path=None, target=None):
            if name == "analysis.planning.plan":
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, Finder())
    sys.argv = ["kvprof", "models"]
    from profiler.cli import app
    app()
""")


def test_ctrl_c_while_kvprof_is_still_loading_exits_130_without_a_traceback():
    res = subprocess.run([sys.executable, "-c", INTERRUPT_WHILE_LOADING], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (res.returncode, res.stderr, res.stdout) == (130, "interrupted\n", "")
