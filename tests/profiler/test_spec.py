"""Sweep spec validation and expansion (no engines started)."""

import json

import pytest
import yaml
from helpers import ROOT

from profiler.spec import SpecError, expand, load_spec, parse_spec

BASE = {"name": "t", "model": "tiny-llama-gqa",
        "engine": {"max_model_len": [1024, 2048], "block_size": [32, 64], "kv_cache_memory_bytes": "16MiB"},
        "workload": {"concurrency": [1, 4], "prompt_len": [64, 1000], "output_len": 32}}


def test_points_that_differ_only_in_workload_share_an_engine():
    plan = expand(parse_spec(BASE))
    assert len(plan.engines) == 4  # 2 lengths × 2 block sizes
    assert len({e.id for e in plan.engines}) == 4
    assert plan.engines[0].kv_cache_memory_bytes == 16 * 2**20
    # prompt 1000 + output 32 does not fit max_model_len 1024: dropped with the reason
    assert plan.num_points == 2 * 2 + 2 * 4
    assert len(plan.dropped) == 4
    assert all("1032 > max_model_len 1024" in d.reason for d in plan.dropped)


def test_ids_are_stable_and_distinct():
    a, b = expand(parse_spec(BASE)), expand(parse_spec(BASE))
    assert [e.id for e in a.engines] == [e.id for e in b.engines]
    ids = [p.id for pts in a.points.values() for p in pts]
    assert len(ids) == len(set(ids))


def test_engine_args_pass_through_and_dummy_weights():
    spec = parse_spec(BASE | {"engine_args": {"enforce_eager": True}})
    kw = expand(spec).engines[0].llm_kwargs()
    assert kw["load_format"] == "dummy" and kw["skip_tokenizer_init"] is True
    assert kw["enforce_eager"] is True and kw["kv_cache_memory_bytes"] == 16 * 2**20


def test_every_engine_setting_reaches_vllm_by_its_name():
    """A setting added to EngineSettings (as ARCHITECTURE says an engine axis is added) is a vllm.LLM argument of
    the same name, with no hand-kept list for it to be missing from."""
    from profiler.spec import EngineConfig

    class WithNewAxis(EngineConfig):
        enforce_eager: bool | None = None

    base = expand(parse_spec(BASE)).engines[0]
    new = WithNewAxis(**base.model_dump(), enforce_eager=True)
    assert new.llm_kwargs() == base.llm_kwargs() | {"enforce_eager": True}
    assert "enforce_eager" not in WithNewAxis(**base.model_dump()).llm_kwargs()  # None: vLLM's own default
    # and the settings kvprof sets itself are what vLLM is given: the path, the weights, no tokenizer
    kw = base.llm_kwargs()
    assert {k: kw[k] for k in ("model", "load_format", "max_model_len", "block_size", "kv_cache_memory_bytes")} == {
        "model": base.model_dir, "load_format": "dummy", "max_model_len": 1024, "block_size": 32,
        "kv_cache_memory_bytes": 16 * 2**20}
    assert not {"model_dir", "model_sha256", "weights", "engine_args"} & kw.keys()


@pytest.mark.parametrize("mutate, message", [
    (lambda s: s.update(modle="x"), "modle: unknown key"),
    (lambda s: s["engine"].update(block_size=[0]), "engine.block_size"),
    (lambda s: s["engine"].update(kv_cache_dtype="int4"), "kv_cache_dtype"),
    (lambda s: s["workload"].update(concurrency=[]), "at least one value"),
    (lambda s: s.update(phases=["decode", "warp"]), "phases"),
    (lambda s: s.update(name="bad name/"), "name"),
])
def test_bad_specs_name_the_field(mutate, message):
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    mutate(raw)
    with pytest.raises(SpecError, match=message):
        parse_spec(raw)


def test_all_problems_are_reported_at_once():
    raw = dict(BASE, modle="x", weights="maybe")
    with pytest.raises(SpecError) as exc:
        parse_spec(raw)
    assert "modle" in str(exc.value) and "weights" in str(exc.value)


def test_load_spec_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: tiny-llama-gqa\nname: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML") as err:
        load_spec(bad)
    # One line: the file, the line the parser stopped at (the end of line 2, i.e. line 3), what it says.
    assert str(err.value) == f"{bad}:3: not valid YAML: expected ',' or ']', but got '<stream end>'"
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(BASE))
    assert load_spec(good).name == "t"


def test_shipped_sweeps_expand():

    root = ROOT / "sweeps"
    tiny = expand(load_spec(root / "tiny-cpu.yaml"))
    assert len(tiny.engines) >= 4 and tiny.num_points > 0
    big = expand(load_spec(root / "llama8b.yaml"))
    assert {e.kv_cache_dtype for e in big.engines} == {"auto", "fp8"}
    assert {e.block_size for e in big.engines} == {16, 32}
    for path in root.glob("*.yaml"):  # every shipped spec is valid and runs something on each engine
        plan = expand(load_spec(path))
        assert plan.engines and all(plan.points[e.id] for e in plan.engines), path.name


def test_saturation_points_by_factor_and_by_explicit_level():
    spec = parse_spec(BASE | {"phases": ["saturation"], "saturation": {"prompt_len": 448, "output_len": 65}})
    plan = expand(spec)
    pts = plan.points[plan.engines[0].id]
    assert [p.factor for p in pts] == [0.5, 1.0, 1.25, 2.0]
    assert all(p.concurrency is None and p.phase == "saturation" for p in pts)
    assert pts[2].label == "saturation-x1.25-p448-o65"
    explicit = expand(parse_spec(BASE | {"phases": ["saturation"], "saturation": {"concurrency": [8, 40]}}))
    pts = explicit.points[explicit.engines[0].id]
    assert [p.concurrency for p in pts] == [8, 40]
    assert pts[0].prompt_len == 512  # default: half of max_model_len 1024


def test_saturation_that_does_not_fit_is_dropped_with_reason():
    spec = parse_spec(BASE | {"phases": ["saturation"], "saturation": {"prompt_len": 1000, "output_len": 64}})
    plan = expand(spec)
    assert plan.num_points == 2 * 4  # four factors on each of the two max_model_len 2048 engines
    assert any("1064 > max_model_len 1024" in d.reason for d in plan.dropped)


def test_saturation_factors_must_be_positive():
    with pytest.raises(SpecError, match=r"saturation\.factors"):
        parse_spec(BASE | {"saturation": {"factors": [1.0, -2]}})


# --- full validation: YAML lines, did-you-mean, platform rules, budgets ------------------

BAD_YAML = """\
name: bad
model: tiny-llama-gqa
engine:
  max_model_len: [1024, -5]
  blok_size: 32
  kv_cache_dtype: fp7
workload:
  concurrency: abc
  prompt_len: []
phases: [decode, warmup]
telemetri: {}
"""


def test_every_problem_at_once_with_line_field_and_what_is_allowed(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_YAML)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    lines = str(info.value).splitlines()
    assert len(lines) == 7
    expect = [
        (4, "engine.max_model_len: values must be positive, got [1024, -5]"),
        (5, "engine.blok_size: unknown key; did you mean 'block_size'?"),
        (6, "engine.kv_cache_dtype: ['fp7'] not allowed; use one of auto,"),
        (8, "workload.concurrency.0: Input should be a valid integer"),
        (9, "workload.prompt_len: must list at least one value"),
        (10, "phases.1: Input should be 'capacity', 'decode', 'saturation' or 'serve', got 'warmup'"),
        (11, "telemetri: unknown key; did you mean 'telemetry'?"),
    ]
    for line_no, text in expect:
        assert any(line.startswith(f"{path}:{line_no}: {text}") for line in lines), (line_no, text, lines)


def _write(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_platform_rules_for_the_cpu_backend(tmp_path, monkeypatch):
    from profiler import machine, preflight

    path = _write(tmp_path, "name: s\nmodel: tiny-llama-gqa\nengine:\n  block_size: [16, 32]\n"
                            "  kv_cache_dtype: [auto, fp8]\n  kv_cache_memory_bytes: 16MiB\n")
    monkeypatch.setattr(machine, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    with pytest.raises(SpecError) as info:
        preflight.validate(path, platform="cpu")
    msg = str(info.value)
    assert f"{path}:4: engine.block_size: [16] cannot run on the CPU backend" in msg
    assert "allowed: multiples of 32" in msg
    # fp8 KV on a CPU without AVX-512 is no problem with the spec: its engines are skipped
    # (tests/engines/test_fp8_kv.py), so the block size is the only thing said.
    assert "kv_cache_dtype" not in msg
    # The same spec is fine for a GPU box.
    _spec, plan = preflight.validate(path, platform="cuda")
    assert len(plan.engines) == 4
    monkeypatch.setattr(machine, "cpu_flags", lambda: frozenset({"avx512f"}))
    with pytest.raises(SpecError, match="block_size") as info:
        preflight.validate(path, platform="cpu")
    assert "kv_cache_dtype" not in str(info.value)  # AVX-512 runs fp8


def test_kv_budget_below_one_sequence_is_caught_before_vllm(tmp_path):
    from profiler.preflight import validate

    path = _write(tmp_path, "name: s\nmodel: tiny-llama-gqa\nengine:\n  max_model_len: 2048\n  block_size: 32\n"
                            "  kv_cache_memory_bytes: 1MiB\nworkload: {prompt_len: 64, output_len: 8}\n")
    with pytest.raises(SpecError) as info:
        validate(path, platform="cpu")
    assert str(info.value) == (
        f"{path}:6: engine.kv_cache_memory_bytes: 1,048,576 B holds 0.50 sequences of max_model_len 2048 "
        f"(block 32, kv auto); vLLM will refuse it. Allowed: at least 2,097,152 B (64 blocks of 32,768 B), "
        f"or a shorter max_model_len")


def test_an_unset_default_the_platform_cannot_run_is_named_as_such(tmp_path):
    from profiler.preflight import validate

    path = _write(tmp_path, "name: s\nmodel: tiny-llama-gqa\n")
    with pytest.raises(SpecError, match=r"\[16\] \(the default\) cannot run on the CPU .*; set engine\.block_size"):
        validate(path, platform="cpu")


def test_engine_without_a_runnable_point_and_bad_model(tmp_path):
    from profiler.preflight import validate

    path = _write(tmp_path, "name: s\nmodel: tiny-llama-gqa\nengine: {max_model_len: 512, block_size: 32}\n"
                            "workload: {prompt_len: 600}\n")
    with pytest.raises(SpecError, match="has no runnable point: prompt_len"):
        validate(path, platform="cpu")
    path = _write(tmp_path, "name: s\nmodel: no-such-model\n")
    with pytest.raises(SpecError, match=r"s\.yaml:2: model: .*no-such-model"):
        validate(path, platform="cpu")


def test_validate_command(tmp_path):
    from typer.testing import CliRunner

    from profiler.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["validate", "sweeps/tiny-cpu.yaml", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["engines"] == 4
    bad = runner.invoke(app, ["validate", str(_write(tmp_path, BAD_YAML))])
    assert bad.exit_code == 2 and bad.output.count("error:") == 7 and "Traceback" not in bad.output
    gpu = runner.invoke(app, ["validate", "--platform", "cuda", "sweeps/llama8b.yaml"])
    assert gpu.exit_code == 0, gpu.output


def test_yaml_is_loaded_safely(tmp_path):
    path = _write(tmp_path, "name: !!python/object/apply:os.system ['echo pwned']\nmodel: tiny-llama-gqa\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(path)


@pytest.mark.parametrize("engine, message", [
    ({"max_num_seqs": 0}, "engine.max_num_seqs: values must be positive (or null for vLLM's default), got [0]"),
    ({"gpu_memory_utilization": 1.5}, "engine.gpu_memory_utilization: values must be fractions in (0, 1], got [1.5]"),
    ({"kv_cache_memory_bytes": "-1KiB"}, "engine.kv_cache_memory_bytes"),
])
def test_engine_values_out_of_range(engine, message):
    with pytest.raises(SpecError) as info:
        parse_spec({"name": "t", "model": "tiny-llama-gqa", "engine": engine})
    assert message in str(info.value)
