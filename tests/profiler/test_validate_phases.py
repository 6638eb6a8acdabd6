"""`kvprof validate` / `kvprof sweep` refuse a phase that has no runnable point on any engine.

A typo such as `prompt_len: 10000000` drops every decode point while the saturation phase keeps
its points, so no engine is empty; the sweep would start, measure no decode point and cost a GPU
run. The specs are sweeps/tiny-cpu.yaml with one change each; nothing here starts an engine.
"""

import os
import subprocess
from pathlib import Path

import helpers
import pytest
import yaml
from helpers import ROOT

TINY = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
ALLOWED = "(allowed: prompt_len + output_len ≤ max_model_len)"


def write_spec(tmp_path: Path, section: str, **changes) -> Path:
    spec = yaml.safe_load(yaml.safe_dump(TINY))
    spec[section].update(changes)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def line_of(path: Path, section: str, key: str) -> int:
    """1-based line of `section:`'s `key:` in the written YAML, read off the text itself."""
    lines = path.read_text().splitlines()
    start = lines.index(f"{section}:")
    return next(i for i in range(start + 1, len(lines)) if lines[i].startswith(f"  {key}:")) + 1


def kvprof(*args: str) -> subprocess.CompletedProcess:
    return helpers.kvprof(*args, timeout=300, env={**os.environ, "COLUMNS": "1000"})  # one message, one line


def errors(stderr: str) -> list[str]:
    return [line.removeprefix("error: ") for line in stderr.splitlines() if line.startswith("error: ")]


def test_the_spec_the_cases_start_from_is_valid():
    res = kvprof("validate", "--platform", "cpu", "sweeps/tiny-cpu.yaml")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("section, changes, field, message", [
    ("workload", {"prompt_len": 10000000}, "prompt_len",
     f"phase decode has no runnable point: prompt_len [10000000] + output_len [16] > max_model_len [1024] "
     f"on every engine {ALLOWED}"),
    ("workload", {"output_len": 4096}, "output_len",
     f"phase decode has no runnable point: prompt_len [64, 512] + output_len [4096] > max_model_len [1024] "
     f"on every engine {ALLOWED}"),
    ("workload", {"concurrency": [65, 128]}, "concurrency",
     "phase decode has no runnable point: concurrency [65, 128] > max_num_seqs [64] on every engine where "
     "prompt_len + output_len fit in max_model_len (allowed: concurrency ≤ max_num_seqs)"),
    ("saturation", {"prompt_len": 4000}, "prompt_len",
     f"phase saturation has no runnable point: prompt_len [4000] + output_len [65] > max_model_len [1024] "
     f"on every engine {ALLOWED}"),
    ("saturation", {"prompt_len": None, "output_len": 1100}, "output_len",
     "phase saturation has no runnable point: prompt_len [512] (max_model_len // 2, the default) + "
     f"output_len [1100] > max_model_len [1024] on every engine {ALLOWED}"),
])
def test_validate_names_the_phase_with_no_runnable_point(tmp_path, section, changes, field, message):
    path = write_spec(tmp_path, section, **changes)
    res = kvprof("validate", "--platform", "cpu", str(path))
    assert res.returncode == 2, res.stdout + res.stderr
    assert errors(res.stderr) == [f"{path}:{line_of(path, section, field)}: {section}.{field}: {message}"], res.stderr
    assert "Traceback" not in res.stderr


def test_sweep_runs_the_same_check_before_anything_starts(tmp_path):
    path = write_spec(tmp_path, "workload", prompt_len=10000000)
    # Below a file, the results directory cannot be made: a sweep the check let through stops
    # there (exit 2, "not writable") instead of running engines.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = kvprof("sweep", str(path), "--out", str(blocker / "out"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert errors(res.stderr) == [
        f"{path}:{line_of(path, 'workload', 'prompt_len')}: workload.prompt_len: phase decode has no runnable point: "
        f"prompt_len [10000000] + output_len [16] > max_model_len [1024] on every engine {ALLOWED}"]


def test_single_impossible_combinations_are_still_dropped_with_their_reason(tmp_path):
    # 2000 + 16 tokens fit the 2048 engines, not the 1024 ones: those combinations are dropped, the rest run.
    path = write_spec(tmp_path, "workload", prompt_len=[64, 2000])
    spec = yaml.safe_load(path.read_text())
    spec["engine"].update(max_model_len=[1024, 2048], kv_cache_dtype="auto")  # 2 lengths × 2 block sizes
    path.write_text(yaml.safe_dump(spec))
    res = kvprof("validate", "--platform", "cpu", str(path))
    assert res.returncode == 0, res.stderr
    dropped = [line for line in res.stdout.splitlines() if line.strip().startswith("dropped ")]
    # 2 block sizes × 2 concurrencies at max_model_len 1024, each with its reason.
    assert len(dropped) == 4, res.stdout
    assert all("len1024-" in line and "prompt=2000 output=16: prompt_len + output_len = 2016 > max_model_len 1024"
               in line for line in dropped), res.stdout
    # 4 engines × 4 saturation factors, plus decode: 2 concurrencies × 1 prompt (1024) or 2 prompts (2048) = 28,
    # plus the demo's serve phase on its 2 block-32 engines: 2 prompts × (3 levels + 1 rate) × 2 prefix fractions.
    assert f"ok — 4 engines, {28 + 2 * 16} points, 4 dropped" in res.stdout


def test_an_engine_left_empty_is_still_named_when_its_phases_run_elsewhere(tmp_path):
    spec = yaml.safe_load(yaml.safe_dump(TINY))
    spec["phases"] = ["decode"]
    spec["engine"].update(max_model_len=[1024, 2048], kv_cache_dtype="auto")  # 2 lengths × 2 block sizes
    spec["workload"]["prompt_len"] = [1500]  # fits 2048, not 1024: the two 1024 engines have nothing to run
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    res = kvprof("validate", "--platform", "cpu", str(path))
    assert res.returncode == 2
    problems = errors(res.stderr)
    assert len(problems) == 2 and all("max_model_len=1024" in p and "has no runnable point" in p for p in problems)
    assert not any("phase decode" in p for p in problems), problems
