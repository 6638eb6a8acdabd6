"""Broken results directories, probes and model paths: one clear line (exit 2) or a report that says what it
left out — never a traceback.

The rule (analysis.results.load): a record (manifest, engine, point) that is damaged, off the contract or in the wrong
place stops every command with the file and what is wrong; what can be left out while the rest still means
what it says is left out with a warning, on stderr and in the report: a point whose engine record is missing,
a telemetry file that cannot be read, a probe.json or spec.yaml that is not UTF-8 (or not the probe's shape),
a model config that is neither stored nor on this machine. Engine records keep the model's config.json, so a
results directory copied to another machine still gets its predictions.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT
from synthetic_results import Injected, make_results
from typer.testing import CliRunner

from analysis.catalog import model_dir
from profiler.cli import app

runner = CliRunner()
SMALL = {"max_model_lens": (8192,), "telemetry_samples_per_engine": 20, "concurrency": (1, 4),
         "prompt_lens": (512, 2048, 6144)}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("robust") / "run"
    make_results(root, Injected(**SMALL))
    return root


@pytest.fixture
def run(synthetic, tmp_path):
    """A fresh copy of the synthetic directory to break."""
    return Path(shutil.copytree(synthetic, tmp_path / "run"))


def engines_of(root: Path) -> list[Path]:
    return sorted((root / "engines").glob("*.json"))


def points_of(root: Path, engine_id: str | None = None) -> list[Path]:
    return sorted(p for p in (root / "points").glob("*.json") if engine_id is None or p.name.startswith(engine_id))


def one_error_line(result) -> str:
    """The command failed cleanly: exit 2, one `error:` line on stderr, no traceback. Returns the line."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def warnings_of(result) -> list[str]:
    """The command succeeded with no traceback; its `warning:` lines."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0, result.output
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


def plan_for(tmp_path: Path) -> Path:
    """A saved plan for the synthetic engines (llama-3.1-8b on an H100 SXM, max_model_len 8192, block 16)."""
    path = tmp_path / "plan.json"
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--entry", "offline",
                              "--max-model-len", "8192", "--block-size", "16", "--batch", "4", "--context", "2048",
                              "--save", str(path)])
    assert res.exit_code == 0, res.output
    return path


def every_command(root: Path, tmp_path: Path, other: Path) -> dict[str, list[str]]:
    return {"report": ["report", str(root)],
            "compare": ["compare", str(root), str(other), "--labels", "broken,good", "--out", str(tmp_path / "cmp")],
            "check-plan": ["check-plan", str(plan_for(tmp_path)), str(root)]}


# --- one clear line ------------------------------------------------------------------------------------

def _truncate(path: Path) -> None:
    path.write_text(path.read_text()[:150])


BROKEN_RECORDS = {
    # case: (which file, how it is broken, what the error line must say)
    "truncated engine record": ("engine", _truncate, "Invalid JSON"),
    "truncated point record": ("point", _truncate, "rerun the sweep"),
    "list-shaped engine record": ("engine", lambda p: p.write_text("[1, 2]"), "Input should be an object"),
    "list-shaped point record": ("point", lambda p: p.write_text("[]"), "Input should be an object"),
    "list-shaped manifest": ("manifest", lambda p: p.write_text("[]"), "Input should be an object"),
    "engine record in Latin-1": ("engine", lambda p: p.write_bytes(p.read_text().replace(
        '"status": "ok"', '"status": "ok", "message": "café"').encode("latin-1")), "not UTF-8 text (byte 0xe9"),
    "engine record of random bytes": ("engine", lambda p: p.write_bytes(bytes(range(128, 256))), "not UTF-8"),
    "block size 0": ("engine", lambda p: p.write_text(p.read_text().replace('"block_size": 16', '"block_size": 0')),
                     "capacity.block_size: Input should be greater than 0"),
}


@pytest.mark.parametrize("case", list(BROKEN_RECORDS))
def test_a_broken_record_stops_every_command_with_one_line_naming_it(run, synthetic, tmp_path, case):
    which, breaks, says = BROKEN_RECORDS[case]
    path = {"engine": engines_of(run)[0], "point": points_of(run)[0], "manifest": run / "manifest.json"}[which]
    breaks(path)
    for name, args in every_command(run, tmp_path, synthetic).items():
        line = one_error_line(runner.invoke(app, args))
        assert str(path) in line and says in line, (name, line)


def test_a_record_of_the_wrong_kind_is_named_as_such(run, synthetic, tmp_path):
    engine, point = engines_of(run)[0], points_of(run)[0]
    shutil.copy(point, engine)  # a point record where an engine record belongs
    line = one_error_line(runner.invoke(app, ["report", str(run)]))
    assert line == f"error: {engine}: holds a point record, not EngineRecord — a file copied or moved into the " \
                   "wrong place; put it back or remove it"
    shutil.copy(synthetic / "engines" / engine.name, engine)
    shutil.copy(engine, point)  # and an engine record among the points
    line = one_error_line(runner.invoke(app, ["report", str(run)]))
    assert f"{point}: holds an engine record, not a point record" in line


@pytest.mark.parametrize("case", ["no engines", "no engines and no points", "engines is a file"])
def test_a_directory_without_engine_records_is_one_line_for_every_command(run, synthetic, tmp_path, case):
    shutil.rmtree(run / "engines")
    if case == "no engines and no points":
        shutil.rmtree(run / "points")
    if case == "engines is a file":
        (run / "engines").write_text("not a directory")
    for name, args in every_command(run, tmp_path, synthetic).items():
        line = one_error_line(runner.invoke(app, args))
        assert f"{run}: no engine records (engines/*.json)" in line, (name, line)


@pytest.mark.parametrize("case,says", [
    ("empty directory", "no manifest.json — not a kvprof results directory"),
    ("manifest missing", "no manifest.json — not a kvprof results directory"),
    ("a file", "not a directory"),
    ("nothing there", "not a directory (nothing is there)"),
])
def test_not_a_results_directory_is_one_line(run, synthetic, tmp_path, case, says):
    if case == "empty directory":
        shutil.rmtree(run)
        run.mkdir()
    elif case == "manifest missing":
        (run / "manifest.json").unlink()
    elif case == "a file":
        shutil.rmtree(run)
        run.write_text("{}")
    else:
        shutil.rmtree(run)
    for name in ("report", "check-plan"):
        line = one_error_line(runner.invoke(app, every_command(run, tmp_path, synthetic)[name]))
        assert line.startswith(f"error: {run}: {says}"), (name, line)


# --- a report that says what it left out -----------------------------------------------------------------

def test_points_whose_engine_record_is_missing_are_left_out_with_a_warning(run, synthetic, tmp_path, fast_pdf,
                                                                          monkeypatch):
    gone = engines_of(run)[0]
    eid = gone.stem
    orphans, kept = len(points_of(run, eid)), len(points_of(run)) - len(points_of(run, eid))
    gone.unlink()
    res = runner.invoke(app, ["report", str(run)])
    expected = (f"{run / 'points'}: {orphans} point record(s) of engine {eid} left out: its engine record "
                f"engines/{eid}.json is missing (rerun the sweep to measure that engine again)")
    assert warnings_of(res) == [f"warning: {expected}"]
    assert f"Warning: {expected}" in (run / "summary.md").read_text()  # the report says so too
    table = pd.read_parquet(run / "results.parquet")
    assert len(table) == kept and eid not in set(table["engine_id"])
    # compare reads the same directory the same way (and draws its PDF)
    monkeypatch.undo()
    assert warnings_of(runner.invoke(app, ["compare", str(run), str(synthetic), "--labels", "a,b", "--out",
                                           str(tmp_path / "c")])) == [f"warning: {expected}"]


@pytest.mark.parametrize("damage", ["truncated", "not parquet"])
def test_an_unreadable_telemetry_file_is_left_out_with_a_warning(run, tmp_path, fast_pdf, damage):
    path = sorted((run / "telemetry").glob("*.parquet"))[0]
    path.write_bytes(path.read_bytes()[:300] if damage == "truncated" else b"hello")
    res = runner.invoke(app, ["report", str(run)])
    (line,) = warnings_of(res)
    assert line.startswith(f"warning: {path}: telemetry file cannot be read (") and line.endswith(
        "); that engine's samples are left out")
    assert (run / "report.pdf").exists()
    assert warnings_of(runner.invoke(app, ["check-plan", str(plan_for(tmp_path)), str(run)])) == [line]


ENCODINGS = {
    "Latin-1": lambda text: (text[:-1] + ' "note": "Intel® Xeon® café"}' if text.rstrip().endswith("}")
                             else text + "# café\n").replace('} "note"', ', "note"').encode("latin-1"),
    "UTF-16": lambda text: text.encode("utf-16"),
}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_a_probe_in_another_encoding_is_left_out_with_a_warning(run, fast_pdf, encoding):
    probe = run / "probe.json"
    raw = ENCODINGS[encoding](probe.read_text().rstrip())
    probe.write_bytes(raw)
    first_bad = raw.index(next(b for b in raw if b >= 0x80)) if encoding == "Latin-1" else 0
    res = runner.invoke(app, ["report", str(run)])
    assert warnings_of(res) == [f"warning: {probe}: not UTF-8 text (byte {raw[first_bad]:#04x} at offset "
                                f"{first_bad}); the probe's measured ceilings are left out"]
    summary = (run / "summary.md").read_text()
    assert "probe copy —" in summary  # the ceilings line: no probe bandwidth


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_a_spec_in_another_encoding_is_left_out_with_a_warning(run, fast_pdf, encoding):
    spec = run / "spec.yaml"
    spec.write_bytes(ENCODINGS[encoding](spec.read_text()))
    (line,) = warnings_of(runner.invoke(app, ["report", str(run)]))
    assert line.startswith(f"warning: {spec}: not UTF-8 text (byte ") and line.endswith(
        "); the spec's text is left out")


@pytest.mark.parametrize("probe,says", [
    ("[1]", "(whole record): Input should be an object"),
    ('{"copy": 5, "matmul_bf16": "x"}', "copy: Input should be an object"),
    ('{"copy": {"bandwidth_Bps": {"median": 0}}}', "copy.bandwidth_Bps.median: Input should be greater than 0"),
])
def test_a_probe_of_another_shape_is_left_out_with_a_warning(run, fast_pdf, probe, says):
    (run / "probe.json").write_text(probe)
    (line,) = warnings_of(runner.invoke(app, ["report", str(run)]))
    assert line.startswith(f"warning: {run / 'probe.json'}: does not follow the ProbeResult contract: {says}")
    assert line.endswith("the probe's measured ceilings are left out")


def _zero_blocks(path: Path) -> None:
    rec = json.loads(path.read_text())
    rec["capacity"].update(num_gpu_blocks=0, kv_cache_size_tokens=0, kv_cache_max_concurrency=0.0)
    rec["block_rounding"] = []
    path.write_text(json.dumps(rec))


def test_an_engine_with_zero_kv_blocks_divides_nothing_by_zero(run, synthetic, tmp_path):
    # vLLM refuses to start without KV memory, but a record that says 0 blocks must still be read: every engine
    # here gets 0, so each ratio to a 16-bit pool (fp8 claims, compare) has nothing to divide by.
    for path in engines_of(run):
        _zero_blocks(path)
    res = runner.invoke(app, ["report", str(run)])  # the whole PDF, drawn
    assert len(warnings_of(res)) == len(engines_of(run))
    summary = (run / "summary.md").read_text()
    assert "inf" not in summary.lower().replace("info", "")
    claims = summary[summary.index("The seeds' claims"):]
    fp8 = next(line for line in claims.splitlines() if line.startswith("| fp8 KV halves KV bytes"))
    assert "not tested" in fp8 and "none with a nonzero 16-bit pool" in fp8
    cmp = runner.invoke(app, ["compare", str(synthetic), str(run), "--labels", "a,b", "--out", str(tmp_path / "c"),
                              "--json"])
    assert cmp.exit_code == 0, cmp.output
    for row in json.loads(cmp.stdout)["capacity"]:  # b's blocks ÷ a's: 0; a's ÷ b's is no number (not inf)
        assert row["num_blocks[b]"] == 0 and row["num_blocks b/a"] == 0
    back = runner.invoke(app, ["compare", str(run), str(synthetic), "--labels", "a,b", "--out", str(tmp_path / "d"),
                               "--json"])
    assert back.exit_code == 0, back.output
    for row in json.loads(back.stdout)["capacity"]:
        assert row["num_blocks[a]"] == 0 and row["num_blocks b/a"] is None and row["kv_tokens b/a"] is None
    res = runner.invoke(app, ["check-plan", str(plan_for(tmp_path)), str(run), "--json"])
    assert res.exit_code == 0, res.output
    blocks = next(r for r in json.loads(res.stdout) if r["quantity"] == "KV blocks")
    assert blocks["measured"] == 0 and blocks["rel_error"] == -1.0  # (0 − predicted) / predicted


def test_one_engine_with_zero_blocks_leaves_the_fp8_claim_untested(run, fast_pdf):
    auto = next(p for p in engines_of(run) if "-auto-" in p.name)
    _zero_blocks(auto)
    (line,) = warnings_of(runner.invoke(app, ["report", str(run)]))
    assert line == (f"warning: {auto}: vLLM reported 0 KV block(s), its null block included: no sequence fits in "
                    "that engine's pool")


# --- results read anywhere: the engine records keep the model's config.json --------------------------------

def _custom_model(where: Path) -> Path:
    """A model directory of one's own: the catalog's tiny GQA Llama under a name the catalog does not know."""
    where.mkdir(parents=True)
    shutil.copy(model_dir("tiny-llama-gqa") / "config.json", where / "config.json")
    return where


def _capacity(summary: str) -> str:
    start = summary.index("### KV capacity")
    return summary[start:summary.index("###", start + 5)]


def _column(table: str, name: str) -> list[str]:
    """One column's cells of a markdown table."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("|")]
    at = rows[0].index(name)
    return [r[at] for r in rows[2:]]


def test_results_copied_from_another_machine_keep_their_predictions(tmp_path, fast_pdf):
    model = _custom_model(tmp_path / "machine-a" / "my-model")
    here = tmp_path / "machine-a" / "run"
    make_results(here, Injected(model_dir=str(model), **SMALL))
    assert warnings_of(runner.invoke(app, ["report", str(here)])) == []
    in_place = _capacity((here / "summary.md").read_text())
    elsewhere = Path(shutil.copytree(here, tmp_path / "machine-b" / "run"))
    shutil.rmtree(tmp_path / "machine-a")  # the model directory is gone with its machine
    # Machine B is another process: nothing of machine A's analysis is remembered.
    proc = subprocess.run([sys.executable, "-m", "profiler.cli", "report", str(elsewhere)], capture_output=True,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    # The same capacity table, predictions included, from the config.json the engine records keep.
    copied = _capacity((elsewhere / "summary.md").read_text())
    assert copied == in_place and "—" not in _column(copied, "blocks (model)")
    table = pd.read_parquet(elsewhere / "results.parquet")
    assert table.loc[table["phase"] == "decode", "roofline_spec_s"].notna().all()
    # check-plan knows the run's model from the records too: a plan for that config.json is checked.
    plan = tmp_path / "plan.json"
    config = tmp_path / "config.json"
    shutil.copy(model_dir("tiny-llama-gqa") / "config.json", config)
    assert runner.invoke(app, ["plan", "--model", str(config), "--gpu", "h100-sxm", "--entry", "offline",
                               "--max-model-len", "8192", "--block-size", "16", "--save", str(plan)]).exit_code == 0
    res = runner.invoke(app, ["check-plan", str(plan), str(elsewhere), "--json"])
    assert res.exit_code == 0, res.output
    blocks = next(r for r in json.loads(res.stdout) if r["quantity"] == "KV blocks")
    vllm = json.loads(next(p for p in engines_of(elsewhere) if "-auto-" in p.name).read_text())
    assert blocks["measured"] == vllm["capacity"]["num_gpu_blocks"]


def test_old_results_without_the_config_fall_back_to_the_model_directory(tmp_path, fast_pdf):
    model = _custom_model(tmp_path / "models" / "my-model")
    run = tmp_path / "run"
    make_results(run, Injected(model_dir=str(model), store_config=False, **SMALL))
    assert warnings_of(runner.invoke(app, ["report", str(run)])) == []  # the path is there: predictions
    with_path = _capacity((run / "summary.md").read_text())
    shutil.rmtree(model.parent)
    (line,) = warnings_of(runner.invoke(app, ["report", str(run)]))
    n = len(engines_of(run))
    assert line.startswith(f"warning: {n} engine record(s) (") and line.endswith(
        f"keep no copy of the model's config.json (written before kvprof stored it) and {model} is not on this "
        "machine: their predictions are left out (copy the model directory there)")
    without = _capacity((run / "summary.md").read_text())
    assert set(_column(with_path, "blocks (model)")) != {"—"} and set(_column(without, "blocks (model)")) == {"—"}


def test_the_engine_child_stores_the_config_json_it_ran(tmp_path):
    from profiler.engine import model_config

    model = _custom_model(tmp_path / "my-model")
    expected = json.loads((model / "config.json").read_text())
    assert model_config(str(model)) == expected
    assert model_config(str(model / "config.json")) == expected
    assert model_config(str(tmp_path / "nowhere")) is None


# --- probe without torch ------------------------------------------------------------------------------------

TORCH_LINE = ("error: torch is not installed, and `kvprof probe` measures with it: install kvprof with its cpu or "
              "gpu extra (pip install -e '.[cpu]' or '.[gpu]'), which bring torch, or torch alone (pip install torch)")


def test_probe_without_torch_is_one_line_saying_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails as if it were not installed
    assert one_error_line(runner.invoke(app, ["probe", "--device", "cpu"])) == TORCH_LINE


def test_the_probe_child_without_torch_exits_2_with_the_line(tmp_path):
    # The sweep runs the probe as a child (python -m profiler.probe); here torch is blocked in that child.
    code = "import sys; sys.modules['torch'] = None; from profiler.probe import main; sys.exit(main(sys.argv[1:]))"
    out = tmp_path / "probe.json"
    proc = subprocess.run([sys.executable, "-c", code, "--out", str(out)], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and proc.stderr.strip() == TORCH_LINE and "Traceback" not in proc.stderr
    assert not out.exists()


def test_a_fifo_among_the_records_is_refused_unread(run):
    """A named pipe where a point record belongs would block a plain read until a writer appears; it is refused
    as not a regular file (the test would hang on the old code rather than fail)."""
    import os

    victim = points_of(run)[0]
    victim.unlink()
    os.mkfifo(victim)
    line = one_error_line(runner.invoke(app, ["report", str(run)]))
    assert victim.name in line and "not a regular file" in line
