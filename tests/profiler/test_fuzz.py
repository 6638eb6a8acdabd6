"""Property-based fuzzing: any spec or `kvprof plan` input ends in a result or a clean error.

Fixed seed and a bounded number of examples, so CI runs the same inputs every time.
"""

import re

import yaml
from helpers import ROOT
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from analysis.catalog import gpus, model_names
from profiler.cli import app
from profiler.preflight import validate
from profiler.spec import EngineAxes, ServeAxes, SpecError

FUZZ = settings(max_examples=150, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["16MiB", "1GiB", "-3", "0", "auto", "fp8", "1e9", "abc", "64KiB"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=8)

ENGINE_KEYS = list(EngineAxes.model_fields)  # every engine axis, a new one included
WORKLOAD_KEYS = ["concurrency", "prompt_len", "output_len", "repeats", "warmup"]


def section(keys):
    return st.dictionaries(st.one_of(st.sampled_from(keys), st.text(max_size=8)), values, max_size=5)


specs = st.fixed_dictionaries(
    {"name": st.one_of(st.just("fz"), st.text(max_size=8)),
     "model": st.one_of(st.sampled_from(["tiny-llama-gqa", "tiny-mistral-swa", "llama-3.1-8b", "nope", "/tmp"]),
                        st.text(max_size=8))},
    optional={"engine": st.one_of(section(ENGINE_KEYS), values), "workload": st.one_of(section(WORKLOAD_KEYS), values),
              "phases": st.lists(st.sampled_from(["capacity", "decode", "saturation", "serve", "warmup"]), max_size=3),
              "saturation": section(["prompt_len", "output_len", "factors", "concurrency"]),
              "serve": section(list(ServeAxes.model_fields)),
              "telemetry": section(["enabled", "interval_s", "backend"]), "timeouts": section(["engine_start_s"]),
              "probe": values, "seed": values, "weights": values, "engine_args": values},
)


@seed(20261129)
@FUZZ
@given(spec=specs)
def test_any_spec_validates_or_fails_cleanly(tmp_path_factory, spec):
    path = tmp_path_factory.mktemp("fz") / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True))
    try:
        _, plan = validate(path, platform="cpu")
    except SpecError as exc:
        assert str(exc).strip(), "an error must say something"
        return
    assert plan.engines  # a valid spec always has something to run


TINY_LINES = (ROOT / "sweeps" / "tiny-cpu.yaml").read_text().splitlines()


def _edit(lines: list[str], dropped: set[int], at: int, inserted: str) -> str:
    kept = [line for i, line in enumerate(lines) if i not in dropped]
    return "\n".join([*kept[:at], inserted, *kept[at:]])


# Random text rarely parses; the shipped spec with a few lines dropped and a fragment inserted often
# does, and often validates, so both outcomes below are exercised.
spec_texts = st.one_of(
    st.text(max_size=200),
    st.builds(_edit, st.just(TINY_LINES), st.sets(st.integers(0, len(TINY_LINES) - 1), max_size=3),
              st.integers(0, len(TINY_LINES)),
              st.one_of(st.just(""), st.text(max_size=30),
                        st.sampled_from(["  prompt_len: 10000000", "  concurrency: [100]", "phases: [saturation]",
                                         "phases: [serve]", "  request_rate: [0]", "  prefix_fraction: 1",
                                         "  max_num_seqs: 1", "  output_len: 5000", "  block_size: 48"]))),
)


@seed(20261129)
@FUZZ
@given(text=spec_texts)
def test_any_text_as_a_spec_fails_cleanly_or_validates(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fz") / "spec.yaml"
    path.write_text(text)
    try:
        spec, plan = validate(path, platform="cpu")  # any other exception fails the test
    except SpecError as exc:
        problems = str(exc).splitlines()
        assert problems, "an error must say something"
        # Each problem on one line: the file (and line), then what is wrong.
        for line in problems:
            assert re.match(rf"{re.escape(str(path))}(:\d+)?: \S", line), line
        return
    # Accepted: every point runs as documented, and every phase asked for has points.
    engines = {e.id: e for e in plan.engines}
    assert engines and all(e.block_size % 32 == 0 for e in plan.engines)  # the CPU backend's rule
    points = [p for pts in plan.points.values() for p in pts]
    assert len({p.id for p in points}) == len(points)
    for p in points:
        e = engines[p.engine_id]
        assert p.prompt_len + p.output_len <= e.max_model_len
        assert p.phase in spec.phases
        if p.phase == "decode":
            assert e.max_num_seqs is None or p.concurrency <= e.max_num_seqs
    assert {"decode", "saturation"} & set(spec.phases) <= {p.phase for p in points}
    if {"decode", "saturation"} & set(spec.phases):
        assert all(plan.points[e.id] for e in plan.engines)


def _opt(name, strategy):
    return st.one_of(st.just([]), strategy.map(lambda v: [name, str(v)]))


numbers = st.one_of(st.integers(-5, 10**7), st.floats(-1, 2), st.sampled_from(["nan", "inf", "abc", "", "1e3"]))
plan_args = st.tuples(
    st.one_of(st.sampled_from(model_names()), st.text(max_size=6)).map(lambda m: ["--model", m]),
    _opt("--gpu", st.one_of(st.sampled_from(sorted(gpus())), st.text(max_size=6))),
    _opt("--kv-cache-memory-bytes", st.one_of(numbers, st.sampled_from(["16MiB", "8GiB", "-1KiB", "1.5GiB"]))),
    _opt("--max-model-len", numbers), _opt("--block-size", numbers), _opt("--batch", numbers),
    _opt("--context", numbers), _opt("--tp", numbers), _opt("--gpu-memory-utilization", numbers),
    _opt("--kv-dtype", st.sampled_from(["auto", "fp8", "fp8_e5m2", "int4", ""])), _opt("--prompt-len", numbers),
).map(lambda parts: [x for p in parts for x in p])


@seed(20261129)
@FUZZ
@given(args=plan_args)
def test_plan_never_tracebacks(args):
    result = CliRunner().invoke(app, ["plan", *args, "--json"])
    assert result.exit_code in (0, 2), (args, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
    assert "Traceback" not in result.output
