"""The energy claim (issue #29): batching amortises the weights' energy the way it amortises their read, on
tables written out by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.measured.claims import DIVERGES, HOLDS, UNTESTED, batching_amortises_energy


def _tables(j_per_token: dict[int, float], steps: dict[int, float]):
    dec = pd.DataFrame([{"point_id": f"p{c}", "engine_id": "e", "mean_context": 576.0, "concurrency": c,
                         "decode_step_s": steps[c]} for c in steps])
    energy = pd.DataFrame([{"point_id": f"p{c}", "j_per_output_token": j} for c, j in j_per_token.items()])
    return dec, energy


def test_energy_per_token_falling_with_the_step_share_holds():
    # steps 10 ms at batch 1, 12 ms at batch 16: time per token ×(12/16)/10 = ×0.075; at a constant 500 W the
    # energy per token falls the same way (0.5 J → 0.0375 J); a board drawing 1.3x more at batch 16, ×0.0975
    dec, energy = _tables({1: 0.5, 16: 0.5 * 0.075 * 1.3}, {1: 0.010, 16: 0.012})
    c = batching_amortises_energy(dec, energy)
    assert c["verdict"] == HOLDS and c["error"] == pytest.approx(0.3)
    assert "batch 1→16: J/token ×0.098, step/batch ×0.075" in c["evidence"]


def test_energy_that_does_not_fall_with_the_batch_diverges():
    dec, energy = _tables({1: 0.5, 4: 0.6}, {1: 0.010, 4: 0.011})
    assert batching_amortises_energy(dec, energy)["verdict"] == DIVERGES


def test_without_energy_the_claim_is_untested_and_says_why():
    dec, _ = _tables({}, {1: 0.010, 4: 0.011})
    c = batching_amortises_energy(dec, None)
    assert c["verdict"] == UNTESTED and c["evidence"] == "no decode point measured its energy"
