"""What a token costs (issue #29): the arithmetic of analysis.planning.cost written out, and the procurement
table ranked by it."""

from __future__ import annotations

import pytest

from analysis import catalog
from analysis.planning.cost import Pricing, parse_power_price, parse_prices, usd_per_million_tokens
from analysis.planning.plan import PlanInputs
from analysis.planning.procurement import procurement


def test_dollars_per_million_tokens_written_out():
    # 3.60 USD an hour for a GPU making 500 tokens/s: 1.8 M tokens an hour, 2.00 USD per million
    assert usd_per_million_tokens(3.60, 500.0, None, None) == pytest.approx(2.0)
    # its board at 600 W and power at 0.15 USD/kWh adds 0.09 USD an hour: 3.69 / 1.8 = 2.05
    assert usd_per_million_tokens(3.60, 500.0, 600.0, 0.15) == pytest.approx(2.05)
    # a power price without a predicted power adds nothing (the boards' draw is unknown)
    assert usd_per_million_tokens(3.60, 500.0, None, 0.15) == pytest.approx(2.0)


def test_prices_are_parsed_by_catalog_name_and_bad_ones_refused():
    assert parse_prices("h100-sxm=2.99, h200=3.8") == {"h100-sxm": 2.99, "h200": 3.8}
    assert parse_prices("h100=2.5") == {"h100-sxm": 2.5}  # a short name as --gpu takes it
    for bad, why in (("h100-sxm", "GPU=USD_PER_HOUR pairs"), ("h100-sxm=cheap", "is not a number"),
                     ("h100-sxm=-1", "must be positive"), ("h100-sxm=1e300", "at most"),
                     ("=2", "GPU=USD_PER_HOUR pairs"), ("h100-sxm=2,h100=3", "priced twice"),
                     ("h100-sxm=nan", "must be positive"), ("h100-sxm=inf", "must be positive")):
        with pytest.raises(ValueError, match=why):
            parse_prices(bad)
    with pytest.raises(catalog.UnknownName):
        parse_prices("h900=2")
    assert parse_power_price("0.12") == 0.12
    with pytest.raises(ValueError, match="is not a number"):
        parse_power_price("nan-ish")


def test_a_price_given_replaces_the_catalogs_and_says_so():
    h100, _ = catalog.resolve_gpu("h100-sxm")
    assert Pricing(gpu_usd_per_hour={"h100-sxm": 1.0}).price(h100) == (1.0, "--price")
    assert Pricing().price(h100) == (h100.price_usd_per_hour, h100.price_source)


def _table(rank_by, prices):
    arch, _ = catalog.resolve_model("llama-3.1-8b")
    gpus = [catalog.resolve_gpu(g)[0] for g in ("h100-sxm", "a100-80gb-sxm")]
    return procurement(arch, PlanInputs(), gpus, [1, 2], concurrency=64, context=4096,
                       pricing=Pricing(gpu_usd_per_hour=prices), rank_by=rank_by)


def test_rank_by_cost_orders_by_dollars_per_million_tokens_each_from_its_own_tokens_per_second():
    rows = _table("cost", {"h100-sxm": 4.0, "a100-80gb-sxm": 0.5})
    fitting = [r for r in rows if r.fits]
    costs = [r.usd_per_million_tokens for r in fitting]
    assert costs == sorted(costs) and [r.rank for r in fitting] == list(range(1, len(fitting) + 1))
    for r in fitting:
        assert r.usd_per_million_tokens == pytest.approx(r.usd_per_gpu_hour / (r.tokens_per_s_per_gpu * 3600) * 1e6)
        assert r.price_source == "--price"
    # the cheap A100s win on cost where the fewest-GPUs order puts the H100s first
    assert fitting[0].gpu == "a100-80gb-sxm"
    by_gpus = [r for r in _table("gpus", {"h100-sxm": 4.0, "a100-80gb-sxm": 0.5}) if r.fits]
    assert [(r.gpus_needed, -r.tokens_per_s_per_gpu) for r in by_gpus] == sorted(
        (r.gpus_needed, -r.tokens_per_s_per_gpu) for r in by_gpus)
    by_tokens = [r.tokens_per_s_per_gpu for r in _table("tokens", {}) if r.fits]
    assert by_tokens == sorted(by_tokens, reverse=True)
