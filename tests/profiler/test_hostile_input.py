"""Hostile and careless input (issue #15): refused with one clear line before anything runs, in bounded
time and memory, and no command writes over its own inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from profiler.cli import app
from profiler.spec import MAX_SPEC_VALUES, SpecError, load_spec

runner = CliRunner()

SPEC = """name: t
model: tiny-llama-gqa
engine:
  max_model_len: 1024
  block_size: 32
  kv_cache_memory_bytes: 16MiB
workload:
  concurrency: [1]
  prompt_len: [64]
  output_len: 8
phases: [capacity]
"""


def test_a_duplicate_key_is_refused_with_both_lines(tmp_path):
    # the second `engine:` (line 12) would silently replace the first (line 3)
    p = tmp_path / "dup.yaml"
    p.write_text(SPEC + "engine:\n  max_model_len: 2048\n")
    with pytest.raises(SpecError, match=r"dup.yaml:12: duplicate key 'engine' \(first at line 3\)"):
        load_spec(p)


def test_a_duplicate_key_inside_engine_args_is_refused(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text(SPEC + "engine_args:\n  enforce_eager: true\n  enforce_eager: false\n")
    with pytest.raises(SpecError, match="duplicate key 'enforce_eager'"):
        load_spec(p)


def test_billion_laughs_is_refused_before_it_expands(tmp_path):
    # ten levels of ten aliases each: 10**10 values once expanded; refused from the node graph
    lines = ["name: lol", "model: tiny-llama-gqa", "engine_args:", "  a: &a [x, x, x, x, x, x, x, x, x, x]"]
    prev = "a"
    for c in "bcdefghij":
        lines.append(f"  {c}: &{c} [" + ", ".join([f"*{prev}"] * 10) + "]")
        prev = c
    p = tmp_path / "lol.yaml"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match=f"expands to more than {MAX_SPEC_VALUES:,} values"):
        load_spec(p)


def test_a_few_aliases_are_still_fine(tmp_path):
    p = tmp_path / "alias.yaml"
    p.write_text(SPEC.replace("  prompt_len: [64]", "  prompt_len: &lens [64, 128]") + "saturation:\n"
                 "  prompt_len: 448\n  output_len: 65\n  factors: [1.0]\n")
    assert load_spec(p).workload.prompt_len == [64, 128]


def test_a_spec_that_is_not_utf8_or_too_large_is_one_line(tmp_path):
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("name: caf\xe9\nmodel: tiny-llama-gqa\n".encode("latin-1"))
    res = runner.invoke(app, ["validate", str(latin)])
    assert res.exit_code == 2 and "not UTF-8 text" in res.output and "Traceback" not in res.output
    big = tmp_path / "big.yaml"
    big.write_text("name: big\n# " + "x" * (1 << 20) + "\n")
    with pytest.raises(SpecError, match="a sweep spec is at most 1,048,576 bytes"):
        load_spec(big)


def _results_dir(tmp_path: Path) -> Path:
    from synthetic_results import make_results

    d = tmp_path / "run"
    make_results(d)
    return d


def test_report_refuses_to_write_its_pdf_over_a_record(tmp_path):
    d = _results_dir(tmp_path)
    manifest = (d / "manifest.json").read_bytes()
    res = runner.invoke(app, ["report", str(d), "--pdf", str(d / "manifest.json")])
    assert res.exit_code == 2 and "would overwrite" in res.output, res.output
    assert (d / "manifest.json").read_bytes() == manifest
    point = next((d / "points").glob("*.json"))
    res = runner.invoke(app, ["report", str(d), "--pdf", str(point)])
    assert res.exit_code == 2 and "would overwrite" in res.output


def test_report_pdf_path_that_is_a_directory_or_has_no_parent(tmp_path):
    d = _results_dir(tmp_path)
    res = runner.invoke(app, ["report", str(d), "--pdf", str(tmp_path)])
    assert res.exit_code == 2 and "is a directory" in res.output
    res = runner.invoke(app, ["report", str(d), "--pdf", str(tmp_path / "missing" / "r.pdf")])
    assert res.exit_code == 2 and "does not exist" in res.output


def test_plan_save_refuses_to_overwrite_its_calibration(tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text('{"effective_bandwidth_Bps": 1e12, "source": "t"}')
    before = cal.read_text()
    res = runner.invoke(app, ["plan", "--model", "tiny-llama-gqa", "--gpu", "h100-sxm", "--calibration", str(cal),
                              "--save", str(cal)])
    assert res.exit_code == 2 and "would overwrite" in res.output, res.output
    assert cal.read_text() == before


def test_an_interrupted_report_leaves_no_truncated_pdf(tmp_path, monkeypatch):
    """A report that fails (or is interrupted) half-way through its pages leaves the previous PDF untouched
    and no partial file, instead of a 5-of-23-page PDF that opens as if complete."""
    from analysis.report import run as report
    d = _results_dir(tmp_path)
    (d / "report.pdf").write_bytes(b"%PDF-old")
    pages = list(report.PAGES)

    def interrupted(pdf, a):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "PAGES", [pages[0], report.ReportPage(pages[1].name, interrupted,
                                                                       pages[1].markdown)])
    with pytest.raises(KeyboardInterrupt):
        report.build_report(d)
    assert (d / "report.pdf").read_bytes() == b"%PDF-old"
    assert not list(d.glob(".*.partial"))


@pytest.mark.parametrize("args, message", [
    (["--gpu", ""], "--gpu is empty"),
    (["--gpu", "h100-sxm", "--calibration", "BINARY"], "not a JSON calibration"),
    (["--save", "DIR"], "is a directory: give a file path"),
])
def test_plan_bad_paths_and_names_are_one_line(tmp_path, args, message):
    binary = tmp_path / "cal.bin"
    binary.write_bytes(b"\x00\xd0\xff" * 10)
    args = [str(binary) if a == "BINARY" else str(tmp_path) if a == "DIR" else a for a in args]
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", *args])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output


def test_kvprof_log_prediction_runs_a_float32_checkpoint_in_16_bits():
    """gemma-2-9b's config says float32; vLLM 0.19 logged 17.22 GiB for it on an H100 (llmdplanner_gemma2_9b_h100
    in tests/fixtures/gpu_corpus): `kvprof log`'s prediction must be the 16-bit weights, not twice them."""
    from analysis.planning.startup_log_check import predict

    p = predict({"model": "google/gemma-2-9b-it", "dtype": "bfloat16"}, model_ref="gemma-2-9b")
    assert p["weights_bytes"] == pytest.approx(17.22 * 2**30, rel=0.02)
    assert predict({"model": "google/gemma-2-9b-it"}, model_ref="gemma-2-9b")["weights_bytes"] == p["weights_bytes"]
