"""The serve section of a sweep spec: parsing, refusals, expansion into serve points, ids, costs (no engine)."""

import socket
import textwrap

import pytest

from analysis.results.schema import PointSettings
from profiler.preflight import validate
from profiler.runner.dry_run import estimate_seconds
from profiler.spec import SpecError, expand, grid_size, parse_spec

BASE = {"name": "s", "model": "tiny-llama-gqa",
        "engine": {"max_model_len": 1024, "block_size": 32, "kv_cache_memory_bytes": "16MiB"},
        "phases": ["serve"],
        "serve": {"concurrency": [1, 4], "request_rate": 2.5, "prompt_len": 128, "output_len": 32,
                  "num_requests": 16}}


def _spec(**serve):
    return parse_spec(BASE | {"serve": BASE["serve"] | serve})


def _ids(spec):
    plan = expand(spec)
    (engine,) = plan.engines
    return [p.label for p in plan.points[engine.id]], plan


def test_one_point_per_concurrency_level_and_per_rate():
    ids, plan = _ids(_spec())
    # Written out from the label format: level, lengths, then -n<requests>.
    assert ids == ["serve-c1-p128-o32-n16", "serve-c4-p128-o32-n16", "serve-r2.5-p128-o32-n16"]
    points = plan.points[plan.engines[0].id]
    assert [(p.concurrency, p.request_rate) for p in points] == [(1, None), (4, None), (None, 2.5)]
    assert all(p.repeats == 1 and p.warmup == 2 and p.num_requests == 16 for p in points)


def test_prefix_fraction_range_ratio_burstiness_and_cap_are_in_the_label():
    ids, plan = _ids(_spec(concurrency=[], request_rate=[4], prefix_fraction=[0, 0.5], range_ratio=0.25,
                           burstiness=0.5, max_concurrency=8))
    # prefix 0.5 × 128 = 64 shared tokens; the rate point keeps the cap of 8 in flight.
    assert ids == ["serve-c8r4-p128-o32-n16-b0.5-rr0.25", "serve-c8r4-p128-o32-n16-b0.5-s64-rr0.25"]
    assert plan.points[plan.engines[0].id][1].prefix_len == 64


def test_duration_sets_the_requests_of_rate_points_only():
    ids, _ = _ids(_spec(request_rate=[2.5, 0.1], duration_s=10))
    # ceil(2.5 × 10) = 25 requests; ceil(0.1 × 10) = 1; the concurrency levels keep num_requests 16.
    assert ids == ["serve-c1-p128-o32-n16", "serve-c4-p128-o32-n16", "serve-r2.5-p128-o32-n25",
                   "serve-r0.1-p128-o32-n1"]


def test_a_request_longer_than_max_model_len_at_the_range_ratio_is_dropped():
    ids, plan = _ids(_spec(prompt_len=[128, 900], output_len=32, range_ratio=0.2))
    # 900 × 1.2 = 1080 plus 32 × 1.2 = 38.4 → 38: 1118 > 1024; 128 fits (153 + 38).
    assert all("-p128-" in i for i in ids)
    (dropped,) = plan.dropped
    assert dropped.reason == "prompt_len + output_len = 1118 at range_ratio 0.2 > max_model_len 1024"


def test_other_phases_keep_their_ids():
    spec = parse_spec(BASE | {"phases": ["decode", "serve"], "workload": {"concurrency": 4, "prompt_len": 128,
                                                                         "output_len": 32}})
    ids, _ = _ids(spec)
    assert ids[0] == "decode-c4-p128-o32"  # the id format of earlier kvprof versions


@pytest.mark.parametrize("serve, message", [
    ({"concurrency": [], "request_rate": []}, "the serve phase needs serve.concurrency"),
    ({"concurrency": [0]}, "values must be positive"),
    ({"request_rate": [float("nan")]}, "finite"),
    ({"prefix_fraction": [1.0]}, r"fractions in \[0, 1\)"),
    ({"range_ratio": 1}, "less than 1"),
    ({"num_requests": 10**9}, "less than or equal to 100000"),
    ({"request_rate": [], "duration_s": 10}, "duration_s sets the requests of request_rate points"),
    ({"burstiness": 0}, "greater than 0"),
    ({"port": 80}, "greater than or equal to 1024"),
    ({"conccurency": [1]}, "did you mean 'concurrency'"),
    ({"slo": {"ttft_ms": -1}}, "greater than 0"),
    ({"concurrency": [1] * 1001}, "at most 1,000"),
])
def test_bad_serve_sections_name_the_field(serve, message):
    with pytest.raises(SpecError, match=message):
        _spec(**serve)


def test_serve_only_fields_are_refused_on_other_points():
    with pytest.raises(ValueError, match=r"\['request_rate'\] apply to serve points only"):
        PointSettings(engine_id="e", phase="decode", concurrency=1, prompt_len=8, output_len=8, repeats=1, warmup=0,
                      request_rate=2.0)
    with pytest.raises(ValueError, match="needs num_requests"):
        PointSettings(engine_id="e", phase="serve", concurrency=1, prompt_len=8, output_len=8, repeats=1, warmup=0)


def test_slo_in_seconds():
    assert _spec(slo={"ttft_ms": 500, "tpot_ms": 50}).serve.slo.seconds() == {"ttft_s": 0.5, "tpot_s": 0.05}


def test_grid_counts_serve_points():
    g = grid_size(_spec(prefix_fraction=[0, 0.25, 0.5]))
    # (2 levels + 1 rate) × 1 prompt × 1 output × 3 prefix fractions
    assert g.points_per_engine == 9
    assert g.serve_axes == {"serve.levels": 3, "serve.prompt_len": 1, "serve.output_len": 1,
                            "serve.prefix_fraction": 3}


def test_flat_estimate_counts_the_server_start_and_the_rate():
    _, plan = _ids(_spec(concurrency=[4], request_rate=[]))
    # 25 s engine start + 25 s server start + ceil(18 / 4) = 5 waves × (32 + 2) steps × 0.02 s.
    assert estimate_seconds(plan) == pytest.approx(25 + 25 + 5 * 34 * 0.02)
    _, plan = _ids(_spec(concurrency=[], request_rate=[0.5]))
    # uncapped: one wave of 18 requests (0.68 s), but 18 requests at 0.5/s take 36 s.
    assert estimate_seconds(plan) == pytest.approx(25 + 25 + 36)


def test_a_fixed_port_in_use_is_refused_before_anything_starts(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        spec = tmp_path / "s.yaml"
        spec.write_text(textwrap.dedent(f"""\
            name: s
            model: tiny-llama-gqa
            engine: {{max_model_len: 1024, block_size: 32, kv_cache_memory_bytes: 16MiB}}
            phases: [serve]
            serve:
              concurrency: [1]
              port: {port}
            """))
        with pytest.raises(SpecError) as exc:
            validate(spec, platform="cpu")
    assert f"s.yaml:7: serve.port: {port} is in use on 127.0.0.1" in str(exc.value)


def test_serve_engines_picks_the_engines_that_are_served():
    raw = BASE | {"engine": BASE["engine"] | {"block_size": [32, 64]},
                  "serve": BASE["serve"] | {"engines": {"block_size": 32}}}
    plan = expand(parse_spec(raw))
    served = {e.block_size: len(plan.points[e.id]) for e in plan.engines}
    assert served == {32: 3, 64: 0}  # 2 levels + 1 rate on the block-32 engine only


@pytest.mark.parametrize("engines, message", [
    ({"block_sise": 32}, "'block_sise' is not an engine axis"),
    ({"block_size": 128}, r"serve.engines.block_size: \[128\] not among engine.block_size \[32\]"),
])
def test_serve_engines_must_match_an_engine(engines, message):
    with pytest.raises(SpecError, match=message):
        _spec(engines=engines)


def test_grid_counts_serve_points_on_the_served_engines_only():
    raw = BASE | {"engine": BASE["engine"] | {"block_size": [32, 64], "max_model_len": [1024, 2048]},
                  "serve": BASE["serve"] | {"engines": {"block_size": 32}}}
    g = grid_size(parse_spec(raw))
    # 4 engines; the serve phase runs on the 2 of block size 32, 3 points each.
    assert (g.engines, g.served_engines, g.points) == (4, 2, 2 * 3)
    with pytest.raises(SpecError, match=r"6 points \(2 served engines × 3 serve each: serve.levels 3; counted before"):
        from profiler.spec import GridLimits, check_grid

        check_grid(parse_spec(raw), GridLimits(max_points=5))
