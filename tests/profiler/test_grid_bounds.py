"""Grid bounds (issue #15): a spec's size counted from its axes and refused over a cap before anything is
expanded; the caps' override; dropped combinations and the dry run summarised unless -v."""

import json
from pathlib import Path

import pytest
import yaml
from helpers import ROOT
from typer.testing import CliRunner

from profiler import preflight
from profiler.cli import app
from profiler.spec import (
    GridLimits,
    SpecError,
    check_grid,
    expand,
    grid_limits,
    grid_size,
    load_spec,
    parse_spec,
)

TINY = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
runner = CliRunner()


def write(tmp_path: Path, spec: dict) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def tiny(**sections) -> dict:
    """The demo spec with its offline phases (these tests count decode and saturation grids; serve points are
    counted in tests/profiler/test_serve_spec.py), sections replaced."""
    spec = yaml.safe_load(yaml.safe_dump(TINY))
    spec["phases"] = [p for p in spec["phases"] if p != "serve"]
    for section, changes in sections.items():
        if isinstance(changes, dict):
            spec[section].update(changes)
        else:
            spec[section] = changes
    return spec


def flat(text: str) -> str:
    return " ".join(text.split())  # the console wraps long lines


def test_the_count_is_the_product_of_the_axes():
    spec = parse_spec({
        "name": "t", "model": "tiny-llama-gqa",
        "engine": {"max_model_len": [1024, 2048], "block_size": [32, 64], "kv_cache_dtype": ["auto", "fp8"]},
        "engine_args_sweep": {"enforce_eager": [True, False], "seed": [1, 2, 3]},
        "workload": {"concurrency": [1, 2, 4], "prompt_len": [16, 32], "output_len": 8},
        "saturation": {"factors": [0.5, 1.0, 2.0, 4.0, 8.0]},
        "phases": ["capacity", "decode", "saturation"]})
    g = grid_size(spec)
    assert g.engines == (2 * 2 * 2) * (2 * 3)  # engine axes × engine_args_sweep combinations
    assert g.points_per_engine == 3 * 2 * 1 + 5  # decode concurrency × prompt × output, + saturation factors
    assert g.points == 48 * 11
    plan = expand(spec)  # every combination fits: the count is exact
    assert len(plan.engines) == 48 and plan.num_points == 528 and plan.dropped == []


def test_the_count_follows_the_phases_and_the_list_form_of_engine_args_sweep():
    spec = parse_spec({
        "name": "t", "model": "tiny-llama-gqa", "engine": {"max_model_len": [1024, 2048, 4096]},
        "engine_args_sweep": [{"enforce_eager": True}, {"enforce_eager": False}, {"max_num_seqs_pad": 1}],
        "workload": {"concurrency": [1, 2], "prompt_len": [16, 32, 64], "output_len": [8, 16]},
        "saturation": {"concurrency": [10, 20, 30]},
        "phases": ["saturation"]})
    g = grid_size(spec)
    assert g.engines == 3 * 3 and g.points_per_engine == 3 and g.points == 27  # decode is not a phase here
    assert grid_size(spec.model_copy(update={"phases": ["capacity"]})).points == 0


def test_a_grid_over_the_cap_is_refused_from_its_count_before_expand(tmp_path, monkeypatch):
    # 1,000 × 1,000 × 1,000 = 10⁹ decode points: 3,000 YAML values, a few kB of spec.
    path = write(tmp_path, tiny(engine={"block_size": 32, "kv_cache_dtype": "auto"},
                                workload={"concurrency": list(range(1, 1001)), "prompt_len": list(range(1, 1001)),
                                          "output_len": list(range(1, 1001))},
                                phases=["decode"]))

    def never(*args, **kwargs):
        raise AssertionError("expand ran")

    monkeypatch.setattr(preflight, "expand", never)
    with pytest.raises(SpecError) as info:
        preflight.validate(path, platform="cpu")
    lines = path.read_text().splitlines()
    line = lines.index("  concurrency:", lines.index("workload:")) + 1
    assert str(info.value) == (
        f"{path}:{line}: workload.concurrency: 1,000,000,000 points (1 engines × 1,000,000,000 each: "
        "workload.concurrency 1,000 × workload.prompt_len 1,000 × workload.output_len 1,000 decode; counted "
        "before combinations that do not fit are dropped), more than the 100,000 allowed; narrow an axis, or "
        "allow them with --max-points 1000000000")
    res = runner.invoke(app, ["validate", str(path), "--platform", "cpu"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert flat(res.output).startswith("error: ") and "1,000,000,000 points" in res.output


def test_expand_counts_before_it_resolves_the_model():
    # The refusal comes from the arithmetic: expand never reaches the (unknown) model.
    spec = parse_spec({"name": "t", "model": "no-such-model", "engine": {"max_model_len": list(range(1, 10_002))},
                       "phases": ["capacity"]})
    with pytest.raises(SpecError, match=r"^spec:.*engine.max_model_len: 10,001 engines \(engine.max_model_len "
                                        r"10,001\), more than the 10,000 allowed;.*--max-engines 10001$"):
        expand(spec)
    with grid_limits(GridLimits(max_engines=10_001)), pytest.raises(Exception) as info:
        expand(spec)  # admitted: now it is the model that is wrong
    assert "no-such-model" in str(info.value)


def test_the_cli_options_override_the_caps(tmp_path):
    path = write(tmp_path, tiny())  # 4 engines (2 block sizes × 2 kv dtypes) × (2 × 2 × 1 decode + 4 saturation)
    res = runner.invoke(app, ["validate", str(path), "--platform", "cuda", "--max-points", "31"])
    assert res.exit_code == 2
    assert ("32 points (4 engines × 8 each: workload.concurrency 2 × workload.prompt_len 2 decode + 4 saturation; "
            "counted before combinations that do not fit are dropped), more than the 31 allowed; narrow an axis, "
            "or allow them with --max-points 32") in flat(res.output)
    ok = runner.invoke(app, ["validate", str(path), "--platform", "cuda", "--max-points", "32", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["points"] == 32
    res = runner.invoke(app, ["sweep", str(path), "--dry-run", "--platform", "cuda", "--max-engines", "3"])
    assert res.exit_code == 2
    assert ("engine.block_size: 4 engines (engine.block_size 2 × engine.kv_cache_dtype 2), more than the 3 "
            "allowed; narrow an axis, or allow them with --max-engines 4") in flat(res.output)
    assert runner.invoke(app, ["sweep", str(path), "--dry-run", "--platform", "cuda",
                               "--max-engines", "4"]).exit_code == 0
    res = runner.invoke(app, ["validate", str(path), "--max-points", "0"])
    assert res.exit_code == 2 and "--max-points" in res.output


def test_engine_args_count_once_per_engine(tmp_path):
    # 2 keys of tiny-cpu's engine_args + 100 more: 102 keys and 102 values = 204 values in each of 4 engines.
    spec = tiny()
    spec["engine_args"].update({f"k{i}": i for i in range(100)})
    path = write(tmp_path, spec)
    res = runner.invoke(app, ["validate", str(path), "--platform", "cuda", "--max-engines", "4"])
    assert res.exit_code == 2
    assert ("engine_args: 204 values per engine × 4 engines = 816, more than the 400 allowed (100 per engine of "
            "--max-engines 4); fewer engines or engine_args, or --max-engines 9") in flat(res.output)
    assert check_grid(load_spec(path)).engine_arg_values == 204  # the default cap admits it


def _dropping_spec(tmp_path: Path) -> Path:
    # 2 engines (block 32, 64; max_model_len 1024, max_num_seqs 64), output 16:
    # prompt 2000 never fits (3 concurrencies); prompts 64 and 1000 fit but concurrency 100 and 200 exceed 64.
    return write(tmp_path, tiny(engine={"kv_cache_dtype": "auto"},
                                workload={"concurrency": [1, 100, 200], "prompt_len": [64, 1000, 2000]}))


def test_dropped_combinations_are_counted_by_reason_and_listed_with_v(tmp_path):
    path = _dropping_spec(tmp_path)
    res = runner.invoke(app, ["validate", str(path), "--platform", "cpu"])
    assert res.exit_code == 0, res.output
    out = flat(res.output)
    # 2 engines × (2 decode + 4 saturation) points; 2 × 3 dropped for length, 2 × 2 × 2 for max_num_seqs.
    assert "ok — 2 engines, 12 points, 14 dropped" in out
    assert "14 combinations dropped, by reason (-v lists each; a sweep's manifest records each):" in out
    assert "6 × prompt_len + output_len = N > max_model_len N; e.g. " in out
    assert "8 × concurrency N > max_num_seqs N; e.g. " in out
    assert out.count(" dropped len1024-") == 0  # no line per combination
    res = runner.invoke(app, ["validate", str(path), "--platform", "cpu", "-v"])
    out = flat(res.output)
    assert out.count(" dropped len1024-") == 14 and "combinations dropped, by reason" not in out
    assert out.count("prompt=2000 output=16: prompt_len + output_len = 2016 > max_model_len 1024") == 6
    assert out.count("output=16: concurrency 200 > max_num_seqs 64") == 4


def test_validate_json_counts_every_dropped_one_and_lists_them_with_v(tmp_path):
    path = _dropping_spec(tmp_path)
    out = json.loads(runner.invoke(app, ["validate", str(path), "--platform", "cpu", "--json"]).stdout)
    assert out["dropped_count"] == 14 and out["dropped_complete"] is False
    assert out["dropped_by_reason"] == {"prompt_len + output_len = N > max_model_len N": 6,
                                        "concurrency N > max_num_seqs N": 8}
    assert [d["reason"] for d in out["dropped"]] == ["prompt_len + output_len = 2016 > max_model_len 1024",
                                                     "concurrency 100 > max_num_seqs 64"]
    full = json.loads(runner.invoke(app, ["validate", str(path), "--platform", "cpu", "--json", "-v"]).stdout)
    assert full["dropped_complete"] is True and len(full["dropped"]) == 14


def test_the_dry_run_json_counts_points_and_lists_them_only_with_v(tmp_path):
    # One engine, 64 concurrencies × 16 prompts × 1 output + 4 saturation factors = 1,028 points (over 1,000).
    spec = tiny(engine={"block_size": 32, "kv_cache_dtype": "auto"},
                workload={"concurrency": list(range(1, 65)), "prompt_len": list(range(16, 272, 16))})
    del spec["engine"]["kv_cache_memory_bytes"]
    path = write(tmp_path, spec)
    res = runner.invoke(app, ["sweep", str(path), "--dry-run", "--platform", "cpu", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["detail"] == "summary" and out["points"] == 64 * 16 + 4
    (engine,) = out["engines"]
    assert engine["point_count"] == 1028 and "points" not in engine
    full = runner.invoke(app, ["sweep", str(path), "--dry-run", "--platform", "cpu", "--json", "-v"]).stdout
    assert json.loads(full)["detail"] == "complete" and len(json.loads(full)["engines"][0]["points"]) == 1028
    assert len(res.stdout) < 5_000 < 1028 * 40 < len(full)  # a point id is ~60 characters


def test_the_dry_run_table_shows_50_engines_without_v(tmp_path):
    spec = tiny(engine={"max_model_len": list(range(1024, 1024 + 60)), "block_size": 32, "kv_cache_dtype": "auto"},
                phases=["capacity"])
    path = write(tmp_path, spec)
    res = runner.invoke(app, ["sweep", str(path), "--dry-run", "--platform", "cpu"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "… and 10 more engines (-v lists each)" in res.output
    assert sum(" len10" in x for x in res.output.splitlines()) == 50
    res = runner.invoke(app, ["sweep", str(path), "--dry-run", "--platform", "cpu", "-v"], env={"COLUMNS": "300"})
    assert sum(" len10" in x for x in res.output.splitlines()) == 60 and "more engines" not in res.output


@pytest.mark.parametrize("nesting", ["[" * 100_000 + "]" * 100_000,  # libyaml stops at 1,000 flow levels
                                     "".join(f"\n{'  ' * (i + 2)}k{i}:" for i in range(70)) + " 1"])  # block style
def test_deep_nesting_is_one_line_not_a_traceback(tmp_path, nesting):
    path = tmp_path / "deep.yaml"
    path.write_text(yaml.safe_dump(TINY).replace("engine_args:\n", f"engine_args:\n  deep: {nesting}\n"))
    with pytest.raises(SpecError, match=rf"^{path}:\d+: nested more than 64 levels deep; a sweep spec nests a few$"):
        load_spec(path)
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_a_few_levels_of_engine_args_are_fine(tmp_path):
    spec = tiny()
    spec["engine_args"]["compilation_config"] = {"pass_config": {"a": {"b": [[1, 2], [3]]}}}
    assert load_spec(write(tmp_path, spec)).engine_args["compilation_config"]["pass_config"]["a"]["b"] == [[1, 2], [3]]


def test_an_alias_in_engine_args_counts_each_time_it_is_used(tmp_path):
    # Each engine's id hashes the expanded value: `b: *l` is 50 more values, not a reference.
    path = tmp_path / "alias.yaml"
    text = yaml.safe_dump(TINY).replace(
        "engine_args:\n", "engine_args:\n  a: &l [" + ", ".join(map(str, range(50))) + "]\n  b: *l\n")
    path.write_text(text)
    # tiny-cpu's 2 keys and 2 values, + keys a and b, their 2 lists and 2 × 50 numbers.
    assert check_grid(load_spec(path)).engine_arg_values == 4 + 2 + 2 + 100
