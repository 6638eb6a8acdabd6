"""Engine and point ids are derived from every field (issue #48): two settings that differ anywhere have different
ids, so resume never takes one for the other; records an older kvprof stored under a point's earlier id still load
and resume, and a rerun replaces them."""

import json

import pytest
from records import SETTINGS, decode_point, engine_record

from analysis.results.load import load
from analysis.results.schema import SERVE_ONLY_FIELDS, EngineSettings, FailedPoint, Manifest, PointSettings
from profiler.store import ResultsDir

DECODE = dict(engine_id="e", phase="decode", concurrency=4, prompt_len=64, output_len=16, repeats=2, warmup=1)
SERVE = dict(engine_id="e", phase="serve", concurrency=4, prompt_len=64, output_len=16, repeats=1, warmup=1,
             num_requests=20)
# For each field, a point it is set on and another valid value for it. A field PointSettings gains without an entry
# here fails test_every_point_field_reaches_the_id, so its effect on the id is decided, not forgotten.
POINT_CHANGES = {
    "engine_id": (DECODE, "f"),
    "phase": (DECODE | {"factor": None}, "saturation"),
    "concurrency": (DECODE, 8),
    "prompt_len": (DECODE, 128),
    "output_len": (DECODE, 32),
    "repeats": (DECODE, 3),
    "warmup": (DECODE, 2),
    "factor": (DECODE | {"concurrency": None, "factor": 1.0}, 1.5),
    "burstiness": (SERVE, 1.0),  # 1 is Poisson, as None is; the id still tells the two apart
    "prefix_len": (SERVE, 0),
    "range_ratio": (SERVE, 0.0),
}
# Every serve-only field (declared with serve_field) is also tried at the example it declares, on a serve point.
SERVE_EXAMPLES = {name: (SERVE, PointSettings.model_fields[name].examples[0]) for name in SERVE_ONLY_FIELDS}
ENGINE_CHANGES = {
    "model_dir": "/models/other", "model_sha256": "b" * 64, "max_model_len": 4096, "block_size": 64,
    "kv_cache_dtype": "fp8", "max_num_seqs": 64, "gpu_memory_utilization": 0.8, "kv_cache_memory_bytes": 2**30,
    "tensor_parallel_size": 2, "pipeline_parallel_size": 2, "enable_prefix_caching": False,
    "max_num_batched_tokens": 8192, "async_scheduling": True, "engine_args": {"enforce_eager": True},
    "weights": "real", "dtype": "float16", "seed": 1,
}


def test_every_point_field_has_a_change_to_try():
    assert set(POINT_CHANGES) | set(SERVE_EXAMPLES) == set(PointSettings.model_fields)


@pytest.mark.parametrize("field, change", [*POINT_CHANGES.items(), *SERVE_EXAMPLES.items()])
def test_every_point_field_reaches_the_id(field, change):
    base, value = change
    a = PointSettings(**base)
    b = PointSettings(**(base | {field: value}))
    assert getattr(a, field) != getattr(b, field)
    assert a.id != b.id


def test_every_engine_field_reaches_the_id():
    assert set(ENGINE_CHANGES) == set(EngineSettings.model_fields)
    with_sha = SETTINGS.model_copy(update={"model_sha256": "a" * 64})
    no_sha = SETTINGS.model_copy(update={"model_sha256": None})
    for field, value in ENGINE_CHANGES.items():
        base = no_sha if field == "model_dir" else with_sha  # with the contents known, the path is not hashed
        changed = EngineSettings.model_validate(base.model_dump() | {field: value})
        assert getattr(changed, field) != getattr(base, field) and changed.id != base.id, field


def test_points_that_differ_only_in_repeats_were_one_id_and_now_are_two():
    a, b = PointSettings(**DECODE), PointSettings(**(DECODE | {"repeats": 5}))
    assert a.legacy_id == b.legacy_id == "e--decode-c4-p64-o16"
    assert a.id != b.id and a.id.startswith("e--decode-c4-p64-o16-")


def _store(root) -> ResultsDir:
    store = ResultsDir(root)
    store.prepare()
    store.write_engine(engine_record("e"))
    Manifest(name="ids", status="complete", engines=["e"]).save_file(root / "manifest.json")
    return store


def _legacy_file(store: ResultsDir, rec) -> None:
    """The record as an older kvprof stored it: under <engine>--<label>, with that id in the file."""
    raw = json.loads(rec.model_dump_json())
    raw["id"] = raw["point"]["id"] = rec.point.legacy_id
    store.point_path(rec.point.legacy_id).write_text(json.dumps(raw))


def test_a_record_stored_under_the_earlier_id_loads_and_resumes(tmp_path):
    store = _store(tmp_path)
    rec = decode_point("e", concurrency=4)
    _legacy_file(store, rec)
    assert store.point_file(rec.point) == store.point_path(rec.point.legacy_id)
    assert store.point_status(rec.point) == "ok"  # resume finds it and does not run the point again
    assert store.read_point(rec.point).id == rec.point.legacy_id
    assert list(load(tmp_path).points["point_id"]) == [rec.point.legacy_id]


def test_a_rerun_replaces_the_record_stored_under_the_earlier_id(tmp_path):
    store = _store(tmp_path)
    rec = decode_point("e", concurrency=4)
    failed = FailedPoint(id=rec.point.id, engine_id="e", engine=rec.engine, point=rec.point, status="crash",
                         error_class="crash", message="died")
    _legacy_file(store, failed)
    assert store.point_status(rec.point) == "crash"
    store.write_point(rec)
    assert not store.point_path(rec.point.legacy_id).exists()
    assert store.point_status(rec.point) == "ok"
    assert list(load(tmp_path).points["point_id"]) == [rec.point.id]


def test_load_keeps_the_rerun_where_both_files_are_left(tmp_path):
    # a rerun interrupted between writing its record and removing the older one
    store = _store(tmp_path)
    rec = decode_point("e", concurrency=4)
    _legacy_file(store, rec)
    rec.save_file(store.point_path(rec.point.id))
    assert list(load(tmp_path).points["point_id"]) == [rec.point.id]


def test_an_id_that_is_neither_is_refused():
    point = PointSettings(**DECODE)
    with pytest.raises(ValueError, match="does not match its fields"):
        PointSettings.model_validate(point.model_dump() | {"id": "e--decode-c4-p64-o16-00000000"})
