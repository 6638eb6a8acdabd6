"""The results contract (analysis.results.schema): one definition for writer, loader and fixture.

Expected values are the contract's own statements (field names, the file layout) and
arithmetic on ids written out here, never values computed by the loader under test.
"""

import hashlib
import json
import shutil
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import yaml
from helpers import ROOT
from records import decode_point, engine_record
from synthetic_results import Injected, make_results
from typer.testing import CliRunner

from analysis.results.load import LoadError, load
from analysis.results.schema import (
    SCHEMA_FILE,
    TELEMETRY_COLUMNS,
    PointSettings,
    ResultsError,
    json_schema,
    json_schema_text,
)
from profiler.cli import app
from profiler.spec import expand, parse_spec
from profiler.store import ResultsDir
from profiler.telemetry.sampler import BASE_COLUMNS, SIGNAL_COLUMNS

runner = CliRunner()


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    make_results(root, Injected(max_model_lens=(8192,), telemetry_samples_per_engine=50))
    return root


def test_exported_json_schema_is_current():
    assert SCHEMA_FILE.read_text() == json_schema_text(), \
        "analysis/results/results.schema.json is stale: run `python -m analysis.results.schema`"


def _schema_for(kind: str) -> dict:
    schema = json_schema()
    return {"$ref": f"#/$defs/{kind}", "$defs": schema["$defs"]}


def test_synthetic_directory_follows_the_contract_and_the_exported_schema(synthetic):
    res = load(synthetic)  # every file through the models
    assert len(res.engines) == 2 and (res.points["status"] == "ok").all()
    # The exported JSON Schema (what other tools read) accepts the same files.
    jsonschema.validate(json.loads((synthetic / "manifest.json").read_text()), _schema_for("Manifest"))
    for path in (synthetic / "engines").glob("*.json"):
        jsonschema.validate(json.loads(path.read_text()), _schema_for("EngineRecord"))
    kinds = {"decode": "DecodePoint", "saturation": "SaturationPoint"}
    for path in (synthetic / "points").glob("*.json"):
        rec = json.loads(path.read_text())
        jsonschema.validate(rec, _schema_for(kinds[rec["point"]["phase"]]))
    # The device memory the synthetic engines report reaches the comparison ("KV share of memory").
    h100_sxm_bytes = 81_559 * 2**20  # gpus.yaml: h100-sxm, 81,559 MiB
    assert (res.engines["device_memory_bytes"] == h100_sxm_bytes).all()


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("kind,edit,field", [
    ("points", lambda r: r["measurements"].update(decode_step_s="fast") if r["point"]["phase"] == "decode"
     else r["measurements"].update(peak_running="many"), "measurements."),
    ("points", lambda r: r.pop("engine_id"), "engine_id"),
    ("engines", lambda r: r["capacity"].pop("num_gpu_blocks"), "capacity.num_gpu_blocks"),
    ("engines", lambda r: r.update(num_gpu_blocks=100), "num_gpu_blocks"),  # a field in the wrong place
    ("manifest", lambda r: r.update(status="done"), "status"),
])
def test_a_hand_corrupted_record_is_a_clear_error_naming_file_and_field(synthetic, tmp_path, kind, edit, field):
    root = _copy(synthetic, tmp_path / "run")
    path = root / "manifest.json" if kind == "manifest" else sorted((root / kind).glob("*.json"))[0]
    rec = json.loads(path.read_text())
    edit(rec)
    path.write_text(json.dumps(rec))
    with pytest.raises(LoadError) as err:
        load(root)
    assert str(path) in str(err.value) and field in str(err.value)
    res = runner.invoke(app, ["report", str(root)])
    assert res.exit_code == 2, res.output
    assert path.name in res.output and field in res.output and "Traceback" not in res.output


def test_a_truncated_point_record_is_named_with_the_way_out(synthetic, tmp_path):
    root = _copy(synthetic, tmp_path / "run")
    path = sorted((root / "points").glob("*.json"))[0]
    path.write_text(path.read_text()[:100])
    with pytest.raises(LoadError, match=r"rerun the sweep") as err:
        load(root)
    assert str(path) in str(err.value)


def test_telemetry_columns_are_the_contract(synthetic, tmp_path):
    # The sampler writes exactly the contract's columns: no drift between writer and reader.
    assert set(TELEMETRY_COLUMNS) == set(BASE_COLUMNS) | set(SIGNAL_COLUMNS)
    root = _copy(synthetic, tmp_path / "run")
    path = sorted((root / "telemetry").glob("*.parquet"))[0]
    pd.read_parquet(path).assign(gpu_temp_f=1.0).to_parquet(path)
    with pytest.raises(LoadError, match=r"unknown column\(s\) \['gpu_temp_f'\]"):
        load(root)


def test_nothing_off_contract_is_written(tmp_path):
    store = ResultsDir(tmp_path)
    store.prepare()
    rec = decode_point("e")
    rec.measurements.decode_step_s = "fast"  # assigned after it was built: caught at the write
    with pytest.raises(ValueError, match="decode_step_s"):
        store.write_point(rec)
    assert not list((tmp_path / "points").glob("*.json"))
    bad = engine_record("e")
    bad.capacity = None  # status ok without capacity facts
    with pytest.raises(ValueError, match="status ok needs the capacity facts"):
        store.write_engine(bad)
    # A point id must be the one its fields give (ids are how resume finds records).
    with pytest.raises(ValueError, match="does not match its fields"):
        PointSettings.model_validate({"id": "e--decode-c9-p64-o16", "engine_id": "e", "phase": "decode",
                                      "concurrency": 1, "prompt_len": 64, "output_len": 16, "repeats": 1,
                                      "warmup": 0})


def test_a_stored_point_reads_back_as_written(tmp_path):
    store = ResultsDir(tmp_path)
    store.prepare()
    rec = decode_point("e", concurrency=4, started_at=1.0, finished_at=2.0)
    store.write_point(rec)
    raw = json.loads(store.point_path(rec.id).read_text())
    # The file carries the id the fields give: "<engine>--<phase>-c<concurrency>-p<prompt>-o<output>-<digest>", the
    # digest the first 8 hex digits of the SHA-256 of every field but the engine's, as sorted JSON.
    fields = {"phase": "decode", "concurrency": 4, "prompt_len": 64, "output_len": 16, "repeats": 1, "warmup": 0}
    sha = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:8]
    assert raw["id"] == raw["point"]["id"] == f"e--decode-c4-p64-o16-{sha}"
    assert store.read_point(rec.point) == rec and store.point_status(rec.point) == "ok"


# --- engine ids: content, not paths (defect 2) ---------------------------------------------------------

def _spec(model: str, **over) -> dict:
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    raw["model"] = model
    raw.update(over)
    return raw


def test_the_same_spec_in_two_checkouts_gives_the_same_engine_ids(tmp_path):
    config = ROOT / "analysis" / "catalog" / "models" / "tiny-llama-gqa" / "config.json"
    ids = []
    for checkout in ("checkout-a/kvprof", "elsewhere/b"):
        model = tmp_path / checkout / "tiny-llama-gqa"
        model.mkdir(parents=True)
        # Same contents, other formatting: the config is compared as JSON, not as bytes.
        model.joinpath("config.json").write_text(json.dumps(json.loads(config.read_text()), indent=4))
        plan = expand(parse_spec(_spec(str(model))))
        ids.append([e.id for e in plan.engines])
    assert ids[0] == ids[1] and len(set(ids[0])) == 4
    # The engine records still say where the model was, and what it was.
    plan = expand(parse_spec(_spec(str(tmp_path / "elsewhere/b/tiny-llama-gqa"))))
    assert plan.engines[0].model_dir == str(tmp_path / "elsewhere/b/tiny-llama-gqa")
    # A different model (one more layer) is a different engine.
    changed = json.loads(config.read_text()) | {"num_hidden_layers": 3}
    other = tmp_path / "other" / "tiny-llama-gqa"
    other.mkdir(parents=True)
    other.joinpath("config.json").write_text(json.dumps(changed))
    assert not set(ids[0]) & {e.id for e in expand(parse_spec(_spec(str(other)))).engines}


# --- sweeping any engine argument ------------------------------------------------------------------------

def test_engine_args_sweep_as_a_mapping_of_lists_is_their_product():
    raw = _spec("tiny-llama-gqa", engine_args={"distributed_executor_backend": "uni"},
                engine_args_sweep={"enforce_eager": [True, False], "max_logprobs": [5, 20]})
    raw["engine"].update(max_model_len=1024, block_size=32, kv_cache_dtype="auto")
    plan = expand(parse_spec(raw))
    got = sorted((e.engine_args["enforce_eager"], e.engine_args["max_logprobs"]) for e in plan.engines)
    assert got == [(False, 5), (False, 20), (True, 5), (True, 20)]
    # Fixed engine_args stay on every engine; each engine's id differs; kwargs reach vllm.LLM.
    assert all(e.engine_args["distributed_executor_backend"] == "uni" for e in plan.engines)
    assert len({e.id for e in plan.engines}) == 4
    assert {e.llm_kwargs()["max_logprobs"] for e in plan.engines} == {5, 20}


def test_engine_args_sweep_as_vllm_style_combinations():
    raw = _spec("tiny-llama-gqa", engine_args={"distributed_executor_backend": "uni"},
                engine_args_sweep=[{"enforce_eager": True}, {"enforce_eager": False, "max_logprobs": 3}])
    raw["engine"].update(max_model_len=1024, block_size=32, kv_cache_dtype="auto")
    plan = expand(parse_spec(raw))
    assert [e.engine_args for e in plan.engines] == [
        {"distributed_executor_backend": "uni", "enforce_eager": True},
        {"distributed_executor_backend": "uni", "enforce_eager": False, "max_logprobs": 3}]


@pytest.mark.parametrize("sweep,message", [
    ({"block_size": [32, 64]}, "kvprof engine axes: sweep them under engine:"),
    ({"enforce_eager": True}, "give a list of combinations ([{enforce_eager: true}, …]) or a mapping of argument → "
                              "list of values ({enforce_eager: [true, false]})"),
    ([5], "got [5]; give a list of combinations"),
    ({"enforce_eager": []}, "needs at least one value"),
    ([], "at least one combination"),
])
def test_engine_args_sweep_mistakes_are_named(sweep, message):
    from profiler.spec import SpecError

    with pytest.raises(SpecError, match="engine_args_sweep") as err:
        parse_spec(_spec("tiny-llama-gqa", engine_args_sweep=sweep))
    assert message in str(err.value)
    with pytest.raises(SpecError, match="also set in engine_args"):
        parse_spec(_spec("tiny-llama-gqa", engine_args_sweep={"enforce_eager": [True, False]}))


def test_results_error_is_what_callers_catch():
    assert LoadError is ResultsError and issubclass(ResultsError, ValueError)


def test_a_sweep_refuses_to_resume_another_schemas_directory(tmp_path):
    # Version 1 hashed paths into engine ids: resuming would write a second set of engines beside the first.
    out = tmp_path / "old"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"schema_version": 1, "name": "tiny-cpu", "status": "complete"}))
    spec = tmp_path / "spec.yaml"
    spec.write_text((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    res = runner.invoke(app, ["sweep", str(spec), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "schema version 1" in res.output and "choose another --out" in res.output
    assert not list((out / "engines").glob("*.json"))  # nothing started
    (out / "manifest.json").write_text("{")  # unreadable: named, not a traceback
    res = runner.invoke(app, ["sweep", str(spec), "--out", str(out)])
    assert res.exit_code == 2 and "manifest.json" in res.output and "Traceback" not in res.output


def test_the_engine_axes_are_the_marked_engine_settings():
    # The spec's engine: section is built from EngineSettings' SweepAxis fields: one declaration per setting.
    from analysis.results.schema import EngineSettings
    from profiler.spec import EngineAxes

    assert list(EngineAxes.model_fields) == [
        "max_model_len", "block_size", "kv_cache_dtype", "max_num_seqs", "gpu_memory_utilization",
        "kv_cache_memory_bytes", "tensor_parallel_size", "pipeline_parallel_size", "enable_prefix_caching",
        "max_num_batched_tokens", "async_scheduling"]
    assert set(EngineAxes.model_fields) <= set(EngineSettings.model_fields)
    assert not {"model_dir", "model_sha256", "weights", "dtype", "seed", "engine_args"} & set(EngineAxes.model_fields)


def test_a_setting_marked_as_an_axis_is_swept_and_reaches_vllm(tmp_path):
    """Adding an engine axis is one marked field of EngineSettings: the spec reads a list of it (checked as its
    marker says), and each engine's vllm.LLM arguments carry it by its name."""
    from typing import Annotated

    from analysis.results.schema import EngineSettings, SweepAxis
    from profiler.spec import EngineConfig
    from profiler.spec.sweep_spec import engine_axes_model

    class WithNewAxis(EngineConfig):  # as if the field were added to EngineSettings
        max_num_partial_prefills: Annotated[int | None, SweepAxis("positive_or_default")] = None

    axes = engine_axes_model(WithNewAxis)
    assert axes(max_num_partial_prefills=[1, 4]).max_num_partial_prefills == [1, 4]
    assert axes().max_num_partial_prefills == [None]  # vLLM's default where a spec does not name it
    with pytest.raises(ValueError, match="values must be positive"):
        axes(max_num_partial_prefills=[0])
    with pytest.raises(ValueError, match="valid integer"):
        axes(max_num_partial_prefills=[True])  # a spec's true is not 1
    base = {"model_dir": "/m", "model_sha256": "a" * 64, "max_model_len": 1024, "block_size": 32}
    assert WithNewAxis(**base, max_num_partial_prefills=4).llm_kwargs()["max_num_partial_prefills"] == 4
    assert "max_num_partial_prefills" not in WithNewAxis(**base).llm_kwargs()
    assert "max_num_partial_prefills" not in engine_axes_model(EngineSettings).model_fields


def test_a_new_axis_left_at_its_default_keeps_existing_ids():
    from analysis.results.schema import EngineSettings

    class WithNewAxis(EngineSettings):  # as if a field were added to the contract
        some_new_vllm_setting: int | None = None

    base = {"model_dir": "/m", "model_sha256": "a" * 64, "max_model_len": 1024, "block_size": 32}
    assert WithNewAxis(**base).id == EngineSettings(**base).id
    assert WithNewAxis(**base, some_new_vllm_setting=4).id != EngineSettings(**base).id


def test_a_wrongly_shaped_sweep_is_one_error_line_with_its_brackets(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text((ROOT / "sweeps" / "tiny-cpu.yaml").read_text() + "engine_args_sweep: 5\n")
    res = runner.invoke(app, ["validate", str(spec)])
    assert res.exit_code == 2
    lines = [x for x in res.output.splitlines() if x.startswith("error:")]
    assert len(lines) == 1  # not one line per branch of the union
    # The CLI prints messages as text: square brackets in them are not taken for rich markup.
    assert "{enforce_eager: [true, false]}" in " ".join(res.output.split())
