"""Board power and energy per token (issue #29): the power model's arithmetic written out, and the model held
against every published power measurement in analysis/catalog/power/ (leave one group out)."""

from __future__ import annotations

import pytest
from helpers import assert_reported_in_excerpt

from analysis import catalog
from analysis.latency.power import ACTIVITIES, IDLE_SHARE, board_power_w, idle_w, shipped_power_constants
from analysis.latency.power_fit import evaluate, load_power_corpus
from analysis.planning.plan import PlanInputs, make_plan

CORPUS = load_power_corpus()


@pytest.fixture(scope="module")
def fitted():
    return evaluate(CORPUS)


def test_board_power_written_out():
    h100, _ = catalog.resolve_gpu("h100-sxm")
    assert h100.tdp_w == 700 and h100.idle_w is None and idle_w(h100) == IDLE_SHARE * 700 == 84.0
    f = {"f_memory": 0.6, "f_compute": 0.2, "f_other": 0.2}
    params = {"a_memory": 0.8, "a_compute": 1.0, "a_other": 0.1}
    # 84 + (700 − 84) · (0.8·0.6 + 1.0·0.2 + 0.1·0.2) = 84 + 616 · 0.70 = 515.2 W
    assert board_power_w(h100, f, params) == pytest.approx(515.2)
    # never past the TDP
    assert board_power_w(h100, {"f_memory": 0, "f_compute": 1, "f_other": 0}, {**params, "a_compute": 1.5}) == 700
    a100, _ = catalog.resolve_gpu("a100-80gb-sxm")
    assert idle_w(a100) == 62  # the catalog's published idle draw


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_power_record_names_what_kvprof_can_plan_and_quotes_its_numbers(name):
    rec = CORPUS[name]
    catalog.model_dir(rec.settings.catalog_model)
    assert catalog.resolve_gpu(rec.settings.gpu)[0].tdp_w
    assert str(rec.source).startswith("https://") and rec.settings.version
    assert_reported_in_excerpt(rec.reported.model_dump(exclude_none=True), rec.excerpt)


def test_held_out_the_power_model_is_within_a_fifth_of_the_measured_draw(fitted):
    constants, rows = fitted
    iv = constants.interval
    assert iv.n == len(CORPUS) >= 20 and iv.sources >= 5
    assert iv.median_abs_error < 0.2
    inside = sum(iv.low_ratio <= r.ratio <= iv.high_ratio for r in rows)
    assert inside >= 0.7 * len(rows)
    # a memory-bound decode draws more than waiting, less than a compute-bound prefill (physical order)
    p = constants.params
    assert p["a_other"] < p["a_memory"] < p["a_compute"]


def test_the_shipped_power_constants_are_the_fit(fitted):
    constants, _ = fitted
    shipped = shipped_power_constants()
    for k in ACTIVITIES:
        assert shipped.params[k] == pytest.approx(constants.params[k], rel=1e-6), \
            "rerun python -m analysis.latency.power_fit --write"
    # as the constants: a fit's last digits differ between BLAS builds
    for got, fitted_now in ((shipped.interval, constants.interval),
                            (shipped.energy_interval, constants.energy_interval)):
        assert got.model_dump() == pytest.approx(fitted_now.model_dump(), rel=1e-6)


def test_the_plans_energy_per_token_is_its_power_over_its_tokens():
    a, _ = catalog.resolve_model("llama-3.1-70b")
    h100, _ = catalog.resolve_gpu("h100-sxm")
    p = make_plan(a, PlanInputs(tensor_parallel_size=4, batch=64, context=2048), h100)
    assert h100.tdp_w > p.decode_power_w > idle_w(h100)
    # four GPUs each drawing P for a step that gives 64 tokens
    assert p.decode_j_per_output_token == pytest.approx(p.decode_power_w * 4 * p.decode_step_s / 64)
    lo, hi = p.decode_j_per_output_token_interval
    assert lo < p.decode_j_per_output_token < hi
    assert "published energy-per-token measurements" in p.decode_energy_checked_against
    assert "published power or energy measurements" in p.decode_power_checked_against
