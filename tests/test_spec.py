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
