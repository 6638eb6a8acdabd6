"""Corrupting a results directory at random, for the fuzz tests of what kvprof reads back: one to three changes
to any files (a field given an extreme value of its type, another value or type, or deleted; a file truncated,
replaced by random JSON or bytes, or deleted), and what a command must do with the result (assert_clean)."""

import json
import shutil
import traceback
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def fuzz(n: int) -> settings:
    return settings(max_examples=n, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


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


def copy_corrupted(base: Path, dest: Path, changes) -> Path:
    shutil.copytree(base, dest)
    for name, how, arg in changes:
        corrupt(dest / name, how, arg)
    return dest


def files_of(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def changes(root: Path):
    """One to three corruptions of any files of the directory (records, telemetry, probe.json, spec.yaml)."""
    return st.lists(corruption(files_of(root)), min_size=1, max_size=3)
