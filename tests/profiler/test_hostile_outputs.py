"""Hostile input, second pass (issue #26): results directories of failed sweeps, output paths, one vLLM rule.

A failed GPU sweep leaves directories whose engines or points all crashed, or that hold capacity facts only, or
serve points only. `compare`, `check-plan` and `report` must answer them in one line or compare what they can,
never with a traceback. Every output option's path goes through ``profiler.output_paths``; and a max_num_seqs
above max_num_batched_tokens is refused everywhere, as vLLM 0.32's SchedulerConfig refuses it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from corrupt_results import assert_clean, copy_corrupted, corruption, fuzz
from hypothesis import given, seed
from hypothesis import strategies as st
from records import engine_only_run
from synthetic_results import Injected, make_results
from typer.testing import CliRunner

from analysis.catalog import model_dir
from analysis.results.schema import EngineRecord, EngineSettings, Manifest
from analysis.vllm.engine_rules import batching_problems
from profiler.cli import app
from profiler.output_paths import OutputPathError, output_dir, output_file, safe_name

runner = CliRunner()
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.19 GiB total capacity)"
PLAN = ["plan", "--model", "tiny-llama-gqa", "--kv-cache-memory-bytes", "16MiB", "--block-size", "32",
        "--max-model-len", "1024"]


def crashed_run(root: Path, status: str = "oom", manifest_status: str = "failed") -> Path:
    """What a GPU sweep whose one engine ran out of memory at start-up leaves: the engine record, no points."""
    engine = EngineSettings(model_dir=str(model_dir("tiny-llama-gqa")), model_sha256="tiny", block_size=32,
                            max_model_len=1024, kv_cache_memory_bytes=16 * 2**20)
    EngineRecord.model_validate({"id": engine.id, "status": status, "engine": engine, "message": OOM,
                                 "traceback": "torch.OutOfMemoryError: " + OOM}).save_file(
        root / "engines" / f"{engine.id}.json")
    Manifest(name=root.name, status=manifest_status, engines=[engine.id], engine_launches=1).save_file(
        root / "manifest.json")
    return root


def _rewrite(path: Path, **fields) -> None:
    doc = json.loads(path.read_text())
    doc.update(fields)
    path.write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """A synthetic H100 sweep with serve points, and what failed sweeps of it leave behind."""
    base = tmp_path_factory.mktemp("shapes") / "ok"
    make_results(base, Injected(max_model_lens=(8192,), kv_dtypes=("auto",), telemetry_samples_per_engine=20,
                                concurrency=(1, 4), prompt_lens=(512, 2048), serve=True, serve_levels=(1, 4),
                                serve_rates=(2.0,)))
    out = {"ok": base}

    def variant(name: str) -> Path:
        dest = base.parent / name
        shutil.copytree(base, dest)
        return dest

    d = variant("engines-crashed")  # every engine died at start-up: no capacity facts, no points, no server
    for p in (d / "engines").glob("*.json"):
        _rewrite(p, status="crash", message=OOM, capacity=None)
    for sub in ("points", "servers"):
        shutil.rmtree(d / sub, ignore_errors=True)
    _rewrite(d / "manifest.json", status="failed")
    out["engines-crashed"] = d
    d = variant("points-crashed")  # engines started, every point crashed
    for p in (d / "points").glob("*.json"):
        doc = json.loads(p.read_text())
        doc.pop("measurements", None)
        doc.update(status="crash", error_class="crash", message="engine core died: " + OOM)
        p.write_text(json.dumps(doc))
    out["points-crashed"] = d
    d = variant("capacity-only")
    for sub in ("points", "servers"):
        shutil.rmtree(d / sub, ignore_errors=True)
    out["capacity-only"] = d
    d = variant("serve-only")  # the offline points lost, the serve points kept
    for p in (d / "points").glob("*.json"):
        if json.loads(p.read_text())["point"].get("phase") != "serve":
            p.unlink()
    out["serve-only"] = d
    return out


SHAPES = ["engines-crashed", "points-crashed", "capacity-only", "serve-only"]


@pytest.mark.parametrize("shape", SHAPES)
def test_compare_check_plan_and_report_answer_a_failed_sweep_cleanly(shapes, shape, tmp_path):
    run = shapes[shape]
    for args in (["compare", str(shapes["ok"]), str(run), "--out", str(tmp_path / "a")],
                 ["compare", str(run), str(shapes["ok"]), "--out", str(tmp_path / "b")],
                 ["report", str(run), "--out-dir", str(tmp_path / "r")]):
        assert_clean(runner.invoke(app, args), f"{args[0]} {shape}")
    plan = tmp_path / "plan.json"
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--entry", "offline",
                              "--max-model-len", "8192", "--block-size", "16", "--gpu-memory-utilization", "0.9",
                              "--save", str(plan)])
    assert res.exit_code == 0, res.output
    assert_clean(runner.invoke(app, ["check-plan", str(plan), str(run)]), f"check-plan {shape}")


@seed(20261202)
@fuzz(12)
@given(data=st.data())
def test_failed_sweeps_corrupted_too_are_answered_cleanly(shapes, fast_pdf, tmp_path_factory, data):
    """Property-based: a failed sweep's directory with up to two more corruptions of any of its files."""
    shape = data.draw(st.sampled_from(SHAPES))
    src = shapes[shape]
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    run = copy_corrupted(src, tmp_path_factory.mktemp("fz") / "run",
                          data.draw(st.lists(corruption(files), min_size=0, max_size=2)))
    out = tmp_path_factory.mktemp("out")
    command = data.draw(st.sampled_from(["report", "compare", "check-plan"]))
    if command == "report":
        args = ["report", str(run), "--out-dir", str(out)]
    elif command == "compare":
        args = ["compare", str(shapes["ok"]), str(run), "--labels", "ok,failed", "--out", str(out)]
    else:
        plan = out / "plan.json"
        assert runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--entry", "offline",
                                   "--max-model-len", "8192", "--block-size", "16", "--save", str(plan)]).exit_code == 0
        args = ["check-plan", str(plan), str(run)]
    assert_clean(runner.invoke(app, args), f"{command} on {shape}")


def test_a_run_whose_every_engine_failed_is_compared_for_what_it_has(tmp_path):
    ok, failed = engine_only_run(tmp_path / "ok"), crashed_run(tmp_path / "failed")
    for args in ([ok, failed], [failed, ok]):
        res = runner.invoke(app, ["compare", *map(str, args), "--out", str(tmp_path / "cmp")])
        assert res.exit_code == 0, res.output
        text = " ".join(res.stdout.split())
        assert ("failed has no engine with capacity facts to compare — 1 engine(s), none started (1 oom): CUDA out "
                "of memory") in text
        assert "Traceback" not in res.output
    # The manifest may also say only that the sweep failed, the engine a crash
    crashed = crashed_run(tmp_path / "crashed", status="crash", manifest_status="complete_with_failures")
    res = runner.invoke(app, ["compare", str(ok), str(crashed), "--out", str(tmp_path / "cmp2"), "--json"])
    assert res.exit_code == 0, res.output
    assert any("crashed has no engine with capacity facts" in v for v in json.loads(res.stdout)["verdict"])


def test_check_plan_names_the_engine_the_plan_describes_when_it_failed(tmp_path):
    failed = crashed_run(tmp_path / "failed")
    plan = tmp_path / "plan.json"
    assert runner.invoke(app, [*PLAN, "--save", str(plan)]).exit_code == 0
    res = runner.invoke(app, ["check-plan", str(plan), str(failed)])
    assert res.exit_code == 2
    engine_id = next((failed / "engines").glob("*.json")).stem
    assert res.stderr.strip() == (f"error: {failed}: the engine the plan describes ({engine_id}) was launched and "
                                  f"failed (oom: {OOM}) — nothing was measured to check the plan against")


@pytest.mark.parametrize("labels", ["../../x,y", "a/b,c", "..,y", ".,y", "x\\y,z", "a\nb,c"])
def test_compare_labels_are_names_not_paths(tmp_path, monkeypatch, labels):
    monkeypatch.chdir(tmp_path)
    a, b = engine_only_run(tmp_path / "a"), engine_only_run(tmp_path / "b")
    before = set(tmp_path.parent.rglob("*"))
    res = runner.invoke(app, ["compare", str(a), str(b), "--labels", labels])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --labels ") and "name" in lines[0]
    assert set(tmp_path.parent.rglob("*")) == before  # nothing written anywhere
    # plain names write where the message says, under reports/
    res = runner.invoke(app, ["compare", str(a), str(b), "--labels", "x,y"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "reports" / "compare-x-vs-y" / "compare.pdf").is_file()
    assert "written: reports/compare-x-vs-y/compare.pdf" in " ".join(res.stdout.split())


def test_compare_out_onto_a_file_is_one_line_and_the_file_survives(tmp_path):
    a, b = engine_only_run(tmp_path / "a"), engine_only_run(tmp_path / "b")
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    res = runner.invoke(app, ["compare", str(a), str(b), "--out", str(target)])
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: --out {target} is a file: give a directory"
    assert target.read_text() == "mine\n"
    # and --out inside a results directory's records
    res = runner.invoke(app, ["compare", str(a), str(b), "--out", str(a / "engines" / "x")])
    assert res.exit_code == 2 and "is inside the records of" in res.stderr


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory on a read-only file system (a tmpfs mounted ro), as a full or remounted disk leaves it;
    root writes through permission bits, so a mode is not enough to test this."""
    d = tmp_path / "ro"
    d.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(d)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    yield d
    subprocess.run(["umount", str(d)], check=True)


def test_writes_into_a_read_only_file_system_are_one_line(tmp_path, read_only_dir):
    a, b = engine_only_run(tmp_path / "a"), engine_only_run(tmp_path / "b")
    cases = [
        (["compare", str(a), str(b), "--out", str(read_only_dir)],
         f"error: --out {read_only_dir} is not writable (Read-only file system)"),
        (["compare", str(a), str(b), "--out", str(read_only_dir / "new")],
         f"error: --out {read_only_dir / 'new'}: cannot create it: Read-only file system"),
        (["compare", str(a), str(b), "--pdf", str(read_only_dir / "c.pdf"), "--out", str(tmp_path / "o")],
         f"error: --pdf {read_only_dir / 'c.pdf'}: cannot write in {read_only_dir} (Read-only file system)"),
        ([*PLAN, "--save", str(read_only_dir / "plan.json")],
         f"error: --save {read_only_dir / 'plan.json'}: cannot write in {read_only_dir} (Read-only file system)"),
        (["report", str(a), "--out-dir", str(read_only_dir)],
         f"error: --out-dir {read_only_dir} is not writable (Read-only file system)"),
    ]
    for args, line in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.strip() == line, args
        assert "Traceback" not in res.output


def test_one_place_checks_every_output_path(tmp_path):
    results = engine_only_run(tmp_path / "run")
    record = next((results / "engines").glob("*.json"))
    spec = tmp_path / "spec.yaml"
    spec.write_text("x\n")
    fifo = tmp_path / "fifo"
    import os

    os.mkfifo(fifo)
    bad_files = [
        (tmp_path, "is a directory: give a file path"),
        (fifo, "is not a regular file"),
        (record, "would overwrite a record of the results directory"),
        (spec, "would overwrite this command's own input"),
        (tmp_path / "missing" / "x.pdf", "does not exist"),
        (tmp_path / "reports" / ".." / ".." / "x.pdf", "is outside"),
    ]
    for path, message in bad_files:
        with pytest.raises(OutputPathError, match=message):
            output_file(path, "--x", results_dirs=(results,), inputs=(spec,), within=tmp_path / "reports"
                        if "outside" in message else None)
    assert output_file(tmp_path / "ok.pdf", "--x", results_dirs=(results,), inputs=(spec,)) == tmp_path / "ok.pdf"
    with pytest.raises(OutputPathError, match="is a file: give a directory"):
        output_dir(spec, "--out")
    with pytest.raises(OutputPathError, match="is inside the records of"):
        output_dir(results / "points", "--out", results_dirs=(results,))
    with pytest.raises(OutputPathError, match="is outside"):
        output_dir(tmp_path / "elsewhere", "--out", within=tmp_path / "reports")
    made = output_dir(tmp_path / "reports" / "new" / "deep", "--out", within=tmp_path / "reports")
    assert made.is_dir()
    for bad in ("", ".", "..", "a/b", "a\\b", "-x", "a\x00b", "x" * 65):
        with pytest.raises(OutputPathError):
            safe_name(bad, "--labels")
    assert safe_name("h100 run-2", "--labels") == "h100 run-2"


def test_max_num_seqs_above_max_num_batched_tokens_is_refused_as_vllm_refuses_it(tmp_path):
    # vLLM 0.32 SchedulerConfig: max_num_batched_tokens < max_num_seqs is an error; an unset max_num_seqs is lowered
    # to fit (arg_utils); the H100 serve default is 8,192 tokens (get_batch_defaults, >= 70 GiB, not an A100).
    assert batching_problems(16384, None, 8192)[0].problem.startswith("exceeds max_num_batched_tokens 8192")
    assert batching_problems(8192, None, 8192) == []
    assert batching_problems(None, 128, 8192) == []
    assert batching_problems(512, 256, 8192)[0].allowed == "at most 256, or a max_num_batched_tokens of at least 512"
    assert batching_problems(16384, None, None) == []  # the default unknown: no rule
    for extra in (["--max-num-seqs", "16384"], ["--max-num-seqs", "1000000000000"],
                  ["--max-num-seqs", "300", "--max-num-batched-tokens", "256"]):
        res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", *extra])
        assert res.exit_code == 2, (extra, res.output)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "--max-num-seqs" in lines[0] and "exceeds max_num_batched_tokens" in lines[0]
    assert runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-num-seqs", "16384",
                               "--max-num-batched-tokens", "16384"]).exit_code == 0
    # a saved plan edited to such settings describes no run
    plan = tmp_path / "plan.json"
    assert runner.invoke(app, [*PLAN, "--save", str(plan)]).exit_code == 0
    doc = json.loads(plan.read_text())
    doc["inputs"].update(max_num_seqs=512, max_num_batched_tokens=256)
    plan.write_text(json.dumps(doc))
    res = runner.invoke(app, ["check-plan", str(plan), str(engine_only_run(tmp_path / "run"))])
    assert res.exit_code == 2 and "vLLM refuses the plan's settings" in res.stderr
    # and a sweep spec, before any engine starts
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: t\nmodel: tiny-llama-gqa\nweights: dummy\nengine:\n  max_model_len: 1024\n  block_size: 32\n"
                    "  kv_cache_memory_bytes: 16MiB\n  max_num_seqs: 8192\n  max_num_batched_tokens: 4096\n"
                    "workload:\n  concurrency: [1]\n  prompt_len: [16]\n  output_len: 4\nphases: [capacity]\n")
    res = runner.invoke(app, ["validate", str(spec)])
    assert res.exit_code == 2 and "engine.max_num_seqs: [8192] exceeds max_num_batched_tokens 4096" in res.stderr
