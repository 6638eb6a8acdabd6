"""A serve axis is two fields (issue #48): a `ServeAxes` field in profiler/spec/sweep_spec.py and the serve-only
`PointSettings` field of the same name, declared with `serve_field(client_flag=…)` in analysis/results/settings.py.
The grid (`passed_through`), the point id and vLLM's benchmark client (`client_args`) read them from there; these
tests hold each of those to the declarations, and vLLM's own parser to what reaches it."""

import pytest
from pydantic import Field
from records import SETTINGS

from analysis.results.schema import CLIENT_FLAGS, SERVE_ONLY_FIELDS, PointSettings
from profiler.spec import ServeAxes
from profiler.spec.grid import SHAPED_BY_THE_GRID, passed_through

# ServeAxes fields that shape the serve phase itself rather than set a point field of their own name: the levels, the
# lengths and shared prefix (a fraction, made prefix_len), how many requests at a rate, warm-up, SLOs, the server's
# port, which engines are served.
PHASE_OWN = {"concurrency", "max_concurrency", "prompt_len", "output_len", "prefix_fraction", "duration_s",
             "warmup_requests", "slo", "port", "engines"}


def test_every_serve_axis_is_a_point_field_or_the_phases_own():
    """A ServeAxes field added without its PointSettings field (or a place in PHASE_OWN) would be read from the spec
    and reach no point: refused here."""
    stray = set(ServeAxes.model_fields) - PHASE_OWN - set(CLIENT_FLAGS)
    assert not stray, (f"ServeAxes fields {sorted(stray)} reach no point: declare each on PointSettings with "
                       "serve_field(client_flag=...) (analysis/results/settings.py)")


def test_the_serve_only_fields_are_those_declared_with_their_flags():
    assert tuple(CLIENT_FLAGS) == SERVE_ONLY_FIELDS
    assert CLIENT_FLAGS == {"request_rate": "--request-rate", "burstiness": "--burstiness",
                            "num_requests": "--num-prompts", "prefix_len": "--random-prefix-len",
                            "range_ratio": "--random-range-ratio"}
    assert set(SHAPED_BY_THE_GRID) <= set(CLIENT_FLAGS)


def test_a_new_serve_axis_is_swept_or_set_by_the_grid_unchanged():
    """What a new pair of fields gets from the grid with no edit to it: a list is one point per value (a product over
    several), a single value is set on every point, None leaves the client's default."""

    class Axes(ServeAxes):
        top_k: list[int] = Field([1, 50])
        ignore_eos: bool | None = True
        min_tokens: int | None = None

    flags = {**CLIENT_FLAGS, "top_k": "--top-k", "ignore_eos": "--ignore-eos", "min_tokens": "--min-tokens"}
    assert passed_through(Axes(), flags) == [{"top_k": 1, "ignore_eos": True, "min_tokens": None},
                                             {"top_k": 50, "ignore_eos": True, "min_tokens": None}]
    assert passed_through(ServeAxes()) == [{}]  # today's fields are all shaped by the grid itself


def _client(point: PointSettings):
    """vLLM's benchmark client arguments for ``point``, and vLLM's parser (to read a flag's destination)."""
    from vllm.benchmarks import serve as vllm_serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from profiler.serve import client_args
    from profiler.spec import ServeJob

    job = ServeJob(results_dir="r", engine_id="e", engine=SETTINGS, seed=0,
                   port=8000, tokenizer_dir="/m", server_kwargs={"model": "/m"}, ready_timeout_s=1.0,
                   points=[point])
    parser = FlexibleArgumentParser()
    vllm_serve.add_cli_args(parser)
    return client_args(job, point), parser


SERVE = dict(engine_id="e", phase="serve", concurrency=4, prompt_len=64, output_len=16, repeats=1, warmup=1)


def test_every_serve_field_reaches_vllms_benchmark_client_by_its_flag():
    examples = {name: PointSettings.model_fields[name].examples[0] for name in CLIENT_FLAGS}
    point = PointSettings(**SERVE, **examples)
    args, parser = _client(point)
    for name, flag in CLIENT_FLAGS.items():
        dest = parser._option_string_actions[flag].dest
        value = getattr(args, dest)
        if flag == "--random-range-ratio":  # vLLM's parser keeps it as text, read later by its own function
            from vllm.benchmarks.datasets.datasets import _parse_range_ratio

            value = _parse_range_ratio(value)
        assert value == examples[name], (name, flag, value)
    assert args.random_input_len == 64 - examples["prefix_len"]  # prompt_len counts the shared prefix
    assert args.max_concurrency == 4 and args.random_output_len == 16 and args.num_warmups == 1


def test_a_serve_field_left_unset_is_the_clients_own_default():
    args, parser = _client(PointSettings(**SERVE, num_requests=8))
    defaults = parser.parse_args(["--model", "m"])
    for name, flag in CLIENT_FLAGS.items():
        if name != "num_requests":
            dest = parser._option_string_actions[flag].dest
            assert getattr(args, dest) == getattr(defaults, dest), (name, getattr(args, dest))
    assert args.request_rate == float("inf") and args.burstiness == 1.0 and args.random_prefix_len == 0
    assert args.random_input_len == 64 and args.num_prompts == 8


@pytest.mark.parametrize("phase", ["decode", "saturation"])
def test_serve_fields_stay_off_other_points(phase):
    with pytest.raises(ValueError, match="apply to serve points only"):
        PointSettings(engine_id="e", phase=phase, concurrency=4, prompt_len=64, output_len=16, repeats=1, warmup=0,
                      range_ratio=0.5)
