"""Board power while an engine steps, and the energy per token it implies (issue #29).

A GPU's board draws its idle power plus a share of the headroom to its TDP that follows what the step
keeps busy. The latency model (``analysis.latency.step``) already splits a step's time into what streams
memory (the weights and the KV cache), what computes (GEMMs past the ridge point, prefill's attention) and
what waits (the per-step floor and the all-reduces), so the power model is

    P = P_idle + (TDP − P_idle) · (a_memory · f_memory + a_compute · f_compute + a_other · f_other),  ≤ TDP

with ``f_*`` the step's time fractions and ``a_*`` the fraction of the headroom each kind of work draws,
fitted on published power measurements (``catalog/power/``) by :func:`fit` and shipped in
``catalog/power.yaml`` with their leave-one-source-out interval. ``P_idle`` is the catalog's measured idle
draw, or ``IDLE_SHARE`` of the TDP where none is published. The energy of an output token in steady
decode is P · tp · step ÷ batch: every GPU of the replica draws P while the step makes one token per
sequence.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from analysis.catalog import CATALOG_DIR, GPU
from analysis.latency.step import Interval, StepWork, interval_words, step_terms

CONSTANTS_FILE = CATALOG_DIR / "power.yaml"
IDLE_SHARE = 0.12  # idle draw as a share of TDP where no measurement is catalogued (H100 SXM ~70 of 700 W)
ACTIVITIES = ("a_memory", "a_compute", "a_other")
# Priors: a memory-bound decode step draws about half the headroom (DRAM and the SMs streaming it), a
# compute-bound prefill most of it, the floor and all-reduces little (the SMs wait on the host or the link).
PRIORS = {"a_memory": (0.55, 0.4), "a_compute": (0.9, 0.3), "a_other": (0.15, 0.8)}


class PowerConstants(BaseModel):
    """``catalog/power.yaml``: the activities, what they were fitted on, and the interval of the evidence."""

    model_config = ConfigDict(extra="forbid")

    params: dict[str, float]
    fitted_on: str = ""
    interval: Interval | None = Field(None, description="measured ÷ predicted board power per record, each "
                                                        "predicted without its group")
    energy_interval: Interval | None = Field(
        None, description="measured ÷ predicted energy per output token (the power times the latency model's step) "
                          "over the records of the vLLM era the plan predicts for, each predicted without its group")

    def save(self) -> None:
        CONSTANTS_FILE.write_text(yaml.safe_dump(self.model_dump(), sort_keys=False, width=110), encoding="utf-8")


@cache
def shipped_power_constants() -> PowerConstants:
    if CONSTANTS_FILE.is_file():
        return PowerConstants.model_validate(yaml.safe_load(CONSTANTS_FILE.read_text(encoding="utf-8")))
    return PowerConstants(params={k: v[0] for k, v in PRIORS.items()}, fitted_on="priors alone (no evidence)")


def idle_w(gpu: GPU) -> float | None:
    """The board's idle draw: the catalog's measurement, or IDLE_SHARE of its TDP; None without a TDP."""
    if gpu.idle_w is not None:
        return gpu.idle_w
    return None if gpu.tdp_w is None else IDLE_SHARE * gpu.tdp_w


def fractions(w: StepWork) -> dict[str, float]:
    """The share of a step's time its memory streams, its tensor cores compute and it waits (floor, links)."""
    t = step_terms(w)
    weights, stream = t["weights_s"], t["weight_stream_s"]
    memory = min(weights, stream) + t["kv_s"]
    compute = max(weights - stream, 0.0) + t["attention_s"]
    other = t["floor_s"] + t["communication_s"]
    total = memory + compute + other
    return {"f_memory": memory / total, "f_compute": compute / total, "f_other": other / total}


def board_power_w(gpu: GPU, f: dict[str, float], params: dict[str, float]) -> float | None:
    """One GPU's draw for a step of these time fractions (None: the catalog has no TDP for it)."""
    if gpu.tdp_w is None:
        return None
    idle = idle_w(gpu)
    assert idle is not None
    activity = (params["a_memory"] * f["f_memory"] + params["a_compute"] * f["f_compute"]
                + params["a_other"] * f["f_other"])
    return min(gpu.tdp_w, idle + (gpu.tdp_w - idle) * activity)


def step_power(gpu: GPU, w: StepWork, c: PowerConstants | None = None) -> dict[str, Any]:
    """A step's predicted board power per GPU with its interval and what it was checked against."""
    c = c or shipped_power_constants()
    f = fractions(w)
    p = board_power_w(gpu, f, c.params)
    out: dict[str, Any] = {"power_w": p, "power_fractions": f, "tdp_w": gpu.tdp_w, "idle_w": idle_w(gpu)}
    if p is None:
        out["power_checked_against"] = f"{gpu.name} has no TDP in the catalog: no power predicted"
        return out
    iv = c.interval
    if iv is None:
        out["power_interval_w"] = None
        out["power_checked_against"] = f"{c.fitted_on}: unchecked"
    else:
        out["power_interval_w"] = [min(p * iv.low_ratio, gpu.tdp_w), min(p * iv.high_ratio, gpu.tdp_w)]
        out["power_checked_against"] = (
            f"{iv.n} published power or energy measurements from {iv.sources} sources, each predicted without its "
            f"source: median |error| {100 * iv.median_abs_error:.0f}%, measured/predicted {iv.low_ratio:.2f}–"
            f"{iv.high_ratio:.2f} ({interval_words(iv)})")
    return out


def energy_interval(j_per_token: float, c: PowerConstants | None = None) -> tuple[list[float] | None, str]:
    """An energy-per-token prediction's range from the corpus, and what it was checked against."""
    c = c or shipped_power_constants()
    iv = c.energy_interval
    if iv is None:
        return None, "no published energy measurement checked: unchecked"
    return [j_per_token * iv.low_ratio, j_per_token * iv.high_ratio], (
        f"{iv.n} published energy-per-token measurements from {iv.sources} groups (vLLM 0.9 on), each predicted "
        f"without its group: median |error| {100 * iv.median_abs_error:.0f}%, measured/predicted "
        f"{iv.low_ratio:.2f}–{iv.high_ratio:.2f} ({interval_words(iv)})")
