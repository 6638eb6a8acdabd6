"""Sweep spec validation and expansion (no engines started)."""

import pytest
import yaml

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
    bad.write_text("name: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad)
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(BASE))
    assert load_spec(good).name == "t"


def test_shipped_sweeps_expand():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "sweeps"
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
    assert pts[2].id.endswith("--saturation-x1.25-p448-o65")
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
