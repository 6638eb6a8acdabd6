"""Property-based fuzzing of what kvprof reads back: results directories, calibration files and saved plans.

A valid synthetic results directory (and the calibration and plan made from it) is corrupted at random —
files truncated, replaced by random JSON or bytes, deleted, fields given other values or types — and
`kvprof report`, `check-plan` and `plan --calibration` must either succeed or exit 2 with one error line:
never a traceback, never another exit code. In-process (CliRunner), fixed seed, few examples: the report's
PDF drawing is stubbed out (the slow part, which draws what the page code already built from the data).
"""

import shutil
from pathlib import Path

import pytest
from corrupt_results import assert_clean, changes, copy_corrupted, corrupt, fuzz, json_values
from hypothesis import given, seed
from hypothesis import strategies as st
from synthetic_results import Injected, make_results
from typer.testing import CliRunner

from profiler.cli import app

PLAN_ARGS = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--entry", "offline", "--max-model-len", "8192",
             "--block-size", "16", "--gpu-memory-utilization", "0.9", "--batch", "4", "--context", "2048"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A valid results directory, its calibration.json and a saved plan for it."""
    root = tmp_path_factory.mktemp("fuzz-results") / "run"
    make_results(root, Injected(max_model_lens=(8192,), telemetry_samples_per_engine=20,
                                concurrency=(1, 4), prompt_lens=(512, 2048, 6144)))
    runner = CliRunner()
    assert runner.invoke(app, ["report", str(root)]).exit_code == 0
    plan = root.parent / "plan.json"
    res = runner.invoke(app, ["plan", *PLAN_ARGS, "--save", str(plan)])
    assert res.exit_code == 0, res.output
    assert runner.invoke(app, ["check-plan", str(plan), str(root)]).exit_code == 0
    for made in ("report.pdf", "summary.md", "results.parquet"):
        (root / made).unlink()
    calibration = root.parent / "calibration.json"
    (root / "calibration.json").rename(calibration)
    return root, calibration, plan


@seed(20261130)
@fuzz(15)
@given(data=st.data())
def test_report_on_a_corrupted_results_directory_succeeds_or_is_one_line(base, fast_pdf, tmp_path_factory, data):
    root, _, _ = base
    run = copy_corrupted(root, tmp_path_factory.mktemp("fz") / "run", data.draw(changes(root)))
    assert_clean(CliRunner().invoke(app, ["report", str(run)]), "report")


@seed(20261131)
@fuzz(15)
@given(data=st.data())
def test_check_plan_on_a_corrupted_results_directory_succeeds_or_is_one_line(base, tmp_path_factory, data):
    root, _, plan = base
    run = copy_corrupted(root, tmp_path_factory.mktemp("fz") / "run", data.draw(changes(root)))
    assert_clean(CliRunner().invoke(app, ["check-plan", str(plan), str(run)]), "check-plan")


HOW = st.sampled_from(["extreme", "extreme", "field", "field", "delete-field", "truncate", "json", "bytes"])


def _corrupt_copy(src: Path, dest: Path, how: str, index: int, value, cut: float, raw: bytes) -> Path:
    shutil.copy(src, dest)
    corrupt(dest, how, {"extreme": (index, int(cut * 7)), "field": (index, value), "delete-field": (index, value),
                        "truncate": cut, "json": value, "bytes": raw}[how])
    return dest


@seed(20261132)
@fuzz(40)
@given(how=HOW, index=st.integers(0, 10**6), value=json_values, cut=st.floats(0, 1), raw=st.binary(max_size=64))
def test_plan_with_a_corrupted_calibration_succeeds_or_is_one_line(base, tmp_path_factory, how, index, value, cut,
                                                                   raw):
    _, calibration, _ = base
    path = _corrupt_copy(calibration, tmp_path_factory.mktemp("fz") / "calibration.json", how, index, value, cut, raw)
    assert_clean(CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--calibration", str(path)]),
                 "plan --calibration")


@seed(20261133)
@fuzz(25)
@given(how=HOW, index=st.integers(0, 10**6), value=json_values, cut=st.floats(0, 1), raw=st.binary(max_size=64))
def test_check_plan_with_a_corrupted_saved_plan_succeeds_or_is_one_line(base, tmp_path_factory, how, index, value,
                                                                        cut, raw):
    root, _, plan = base
    path = _corrupt_copy(plan, tmp_path_factory.mktemp("fz") / "plan.json", how, index, value, cut, raw)
    assert_clean(CliRunner().invoke(app, ["check-plan", str(path), str(root)]), "check-plan")
