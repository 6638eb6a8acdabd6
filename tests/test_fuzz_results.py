"""Property-based fuzzing of what kvprof reads back: results directories, calibration files and saved plans.

A valid synthetic results directory (and the calibration and plan made from it) is corrupted at random —
files truncated, replaced by random JSON or bytes, deleted, fields given other values or types — and
`kvprof report`, `check-plan` and `plan --calibration` must either succeed or exit 2 with one error line:
never a traceback, never another exit code. In-process (CliRunner), fixed seed, few examples: the report's
PDF drawing is stubbed out (the slow part, which draws what the page code already built from the data).
"""

import json
import shutil
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure
from synthetic_results import Injected, make_results
from typer.testing import CliRunner

from profiler.cli import app


def fuzz(n: int) -> settings:
    return settings(max_examples=n, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


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


@pytest.fixture
def fast_pdf(monkeypatch):
    """Pages are built from the data as in a real report; only drawing them into the PDF is skipped."""
    monkeypatch.setattr(PdfPages, "savefig", lambda self, figure=None, **kw: None)
    monkeypatch.setattr(Figure, "tight_layout", lambda self, *a, **kw: None)


def assert_clean(result, what) -> None:
    """Success, or exit 2 with exactly one `error:` line — and never a traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        what, "".join(traceback.format_exception(*result.exc_info)))
    assert result.exit_code in (0, 2), (what, result.exit_code, result.output)
    assert "Traceback" not in result.output, what
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (what, result.stderr)


# --- corruptions -----------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, 1, -1, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1e-300, 1e308]),
    st.text(max_size=8), st.sampled_from(["", "ok", "auto", "fp8", "decode", "saturation", "NaN", "cpu", "cuda"]),
)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=6)


def _paths(obj, prefix=()):
    """Every key path into a JSON value (dict keys and list indices), depth first."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for k, v in items:
        out.append((*prefix, k))
        out.extend(_paths(v, (*prefix, k)))
    return out


# Values of a field's own type that pass a loose check and test the analysis: zero, negative, tiny, huge, empty.
EXTREMES = {bool: [True, False], int: [0, -1, 1, 2**63, 10**30, -(2**40)],
            float: [0.0, -1.0, 1e-300, 1e308, -0.0, 0.5, -1e308],
            str: ["", "x", "fp8", "CPU", "auto", "saturation", "NVIDIA H100 80GB HBM3"],
            list: [[], [None], [0], [{}], ["x"], [[]]], dict: [{}, {"x": 1}, {"x": None}, {"sources": 1}]}


def _extreme(old, choice: int):
    options = EXTREMES.get(type(old), [0, "x", 1.5, [], {}, True])
    return options[choice % len(options)]


def _set(obj, path, value, delete: bool):
    for k in path[:-1]:
        obj = obj[k]
    if delete and isinstance(obj, dict):
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


@st.composite
def corruption(draw, files: list[str]):
    """(file, how, argument): one change to one file of the directory."""
    name = draw(st.sampled_from(files))
    how = draw(st.sampled_from(["extreme", "extreme", "extreme", "field", "field", "delete-field", "truncate",
                                "json", "bytes", "delete"]))
    if how == "extreme":
        return name, how, (draw(st.integers(0, 10**6)), draw(st.integers(0, 6)))
    if how in ("field", "delete-field"):
        return name, how, (draw(st.integers(0, 10**6)), draw(json_values))
    if how == "truncate":
        return name, how, draw(st.floats(0, 1))
    if how == "json":
        return name, how, draw(json_values)
    if how == "bytes":
        return name, how, draw(st.binary(max_size=64))
    return name, how, None


def corrupt(path: Path, how: str, arg) -> None:
    if not path.exists():
        return
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * arg)])
    elif how == "json":
        path.write_text(json.dumps(arg))
    elif how == "bytes":
        path.write_bytes(arg)
    else:  # a field of a JSON file: an extreme value of its type, another value or type, or gone
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            return
        paths = _paths(doc)
        if not paths:
            return
        index, value = arg
        path_in = paths[index % len(paths)]
        if how == "extreme":
            old = doc
            for k in path_in:
                old = old[k]
            value = _extreme(old, value)
        _set(doc, path_in, value, delete=how == "delete-field")
        path.write_text(json.dumps(doc))


def _copy_corrupted(base: Path, dest: Path, changes) -> Path:
    shutil.copytree(base, dest)
    for name, how, arg in changes:
        corrupt(dest / name, how, arg)
    return dest


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def changes(root: Path):
    """One to three corruptions of any files of the directory (records, telemetry, probe.json, spec.yaml)."""
    return st.lists(corruption(_files(root)), min_size=1, max_size=3)


@seed(20261130)
@fuzz(15)
@given(data=st.data())
def test_report_on_a_corrupted_results_directory_succeeds_or_is_one_line(base, fast_pdf, tmp_path_factory, data):
    root, _, _ = base
    run = _copy_corrupted(root, tmp_path_factory.mktemp("fz") / "run", data.draw(changes(root)))
    assert_clean(CliRunner().invoke(app, ["report", str(run)]), "report")


@seed(20261131)
@fuzz(15)
@given(data=st.data())
def test_check_plan_on_a_corrupted_results_directory_succeeds_or_is_one_line(base, tmp_path_factory, data):
    root, _, plan = base
    run = _copy_corrupted(root, tmp_path_factory.mktemp("fz") / "run", data.draw(changes(root)))
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
