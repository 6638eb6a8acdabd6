"""The power model's constants from published measurements (issue #29): ``python -m analysis.latency.power_fit``.

The corpus (``analysis/catalog/power/``) holds GPU power measured while vLLM served, one YAML file per
figure with its source, the settings it states and a verbatim excerpt, like the latency corpus. Each
record's step is the latency model's served step at the record's running batch
(``analysis.latency.step.served_step_schedule``): its time fractions (memory, compute, waiting) set the
predicted board power (``analysis.latency.power``), whose activities are fitted here on every record and
reported leave-one-group-out (a group: one publication's runs of one model, e.g. one leaderboard data
file), so the error quoted is the error on evidence the fit did not see. The energy per output token the
plan gives (power × tp × time per output token ÷ batch) is held against the reported one beside it.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.optimize import least_squares

from analysis import catalog
from analysis.catalog import CATALOG_DIR
from analysis.catalog.evidence import PublishedRecord
from analysis.latency.intervals import held_out_interval
from analysis.latency.power import ACTIVITIES, PRIORS, PowerConstants, board_power_w, fractions
from analysis.latency.step import Engine, served_step_schedule, step_time
from analysis.vllm.release import ERAS, era

POWER_DIR = CATALOG_DIR / "power"
# Chat datasets (LMArena, ShareGPT) state no prompt length per configuration; their prompts average a few hundred
# tokens. The predicted power hardly moves with it: weights and KV both stream memory.
ASSUMED_PROMPT = 256


class PowerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    catalog_model: str
    gpu: str
    tensor_parallel_size: int = Field(1, ge=1)
    vllm_version: str | None = None
    vllm_version_inferred: str | None = None

    @property
    def version(self) -> str | None:
        return self.vllm_version or self.vllm_version_inferred


class PowerWorkload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_num_seqs: int = Field(ge=1)
    avg_running_batch: float = Field(gt=0, description="the mean of vLLM's running requests in the window")
    avg_output_len: float = Field(gt=0)
    dataset: str | None = None


class PowerReported(BaseModel):
    """As printed: ML.ENERGY v3 gives power (all GPUs) and energy per token; v2 gives energy per request,
    output tokens per request and token throughput, whose product over the tokens is the power."""

    model_config = ConfigDict(extra="forbid")

    avg_power_watts_all_gpus: float | None = Field(None, gt=0)
    energy_per_token_joules: float | None = Field(None, gt=0)
    median_itl_ms: float | None = Field(None, gt=0)
    energy_per_request_j: float | None = Field(None, gt=0)
    token_tput_tok_per_s: float | None = Field(None, gt=0)
    avg_output_tokens: float | None = Field(None, gt=0)
    avg_tpot_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _power(self) -> PowerReported:
        if self.avg_power_watts_all_gpus is None and None in (self.energy_per_request_j, self.token_tput_tok_per_s,
                                                              self.avg_output_tokens):
            raise ValueError("a power record states its power, or its energy per request, output tokens per "
                             "request and token throughput")
        return self

    @property
    def j_per_output_token(self) -> float:
        if self.energy_per_token_joules is not None:
            return self.energy_per_token_joules
        assert self.energy_per_request_j and self.avg_output_tokens
        return self.energy_per_request_j / self.avg_output_tokens

    @property
    def measured_step_s(self) -> float | None:
        """The time per output token the source measured (median ITL, or mean TPOT), where it gives one."""
        if self.median_itl_ms is not None:
            return self.median_itl_ms / 1e3
        return self.avg_tpot_s

    @property
    def power_w_all_gpus(self) -> float:
        if self.avg_power_watts_all_gpus is not None:
            return self.avg_power_watts_all_gpus
        assert self.token_tput_tok_per_s
        return self.j_per_output_token * self.token_tput_tok_per_s


class PowerRecord(PublishedRecord):
    """One published measurement of GPU power while vLLM served."""

    group: str = Field(description="the publication and model it belongs to: records held out together")
    settings: PowerSettings
    workload: PowerWorkload
    reported: PowerReported

    @property
    def power_w_per_gpu(self) -> float:
        return self.reported.power_w_all_gpus / self.settings.tensor_parallel_size


@cache
def load_power_corpus(directory: Path = POWER_DIR) -> dict[str, PowerRecord]:
    return {p.stem: PowerRecord.model_validate(yaml.safe_load(p.read_text(encoding="utf-8")))
            for p in sorted(directory.glob("*.yaml"))}


@dataclass
class Case:
    """A record's step as the model sees it: the GPU, the time fractions and the time per output token."""

    name: str
    rec: PowerRecord
    gpu: catalog.GPU
    f: dict[str, float]
    tpot_s: float

    def power(self, params: dict[str, float]) -> float:
        p = board_power_w(self.gpu, self.f, params)
        assert p is not None, f"{self.gpu.name} has no TDP in the catalog"
        return p

    def j_per_token(self, params: dict[str, float]) -> float:
        s = self.rec.settings
        return self.power(params) * s.tensor_parallel_size * self.tpot_s / self.rec.workload.avg_running_batch


def case(name: str, rec: PowerRecord) -> Case:
    s, w = rec.settings, rec.workload
    a, _ = catalog.resolve_model(s.catalog_model)
    gpu, _ = catalog.resolve_gpu(s.gpu)
    e = Engine(a=a, gpu=gpu, tp=s.tensor_parallel_size, vllm_version=s.version)
    sched = served_step_schedule(e, w.avg_running_batch, ASSUMED_PROMPT, max(round(w.avg_output_len), 2))
    total = sched.time()
    f = dict.fromkeys(("f_memory", "f_compute", "f_other"), 0.0)
    for x, step in sched.steps:  # the schedule's time-weighted fractions
        t = step_time(step)
        for k, v in fractions(step).items():
            f[k] += x * t * v / total
    measured = rec.reported.measured_step_s
    if measured is not None:
        # The power model is fitted on what the GPU did in the measured time: its predicted busy time (memory,
        # compute) is spread over the measured step, the rest waited. An engine whose host kept the GPU waiting
        # (vLLM 0.5's measured steps are 3-4x the model's) draws less, as its boards did.
        busy = (f["f_memory"] + f["f_compute"]) * total
        scale = min(1.0, busy / measured) / max(f["f_memory"] + f["f_compute"], 1e-12)
        f = {"f_memory": f["f_memory"] * scale, "f_compute": f["f_compute"] * scale}
        f["f_other"] = 1.0 - f["f_memory"] - f["f_compute"]
    return Case(name, rec, gpu, f, total)


def _fit(cases: list[Case]) -> dict[str, float]:
    mu = np.log([PRIORS[k][0] for k in ACTIVITIES])
    sigma = np.array([PRIORS[k][1] for k in ACTIVITIES])

    def residuals(z: np.ndarray) -> np.ndarray:
        params = dict(zip(ACTIVITIES, np.exp(z), strict=True))
        data = [math.log(c.rec.power_w_per_gpu / c.power(params)) for c in cases]
        return np.concatenate([data, 0.3 * (z - mu) / sigma])

    res = least_squares(residuals, mu, method="trf", loss="soft_l1", f_scale=0.1)
    return dict(zip(ACTIVITIES, (float(x) for x in np.exp(res.x)), strict=True))


@dataclass
class Row:
    name: str
    group: str
    measured_w: float
    predicted_w: float  # by the fit without its group
    measured_j: float
    predicted_j: float
    measured_itl_s: float | None
    predicted_tpot_s: float

    @property
    def ratio(self) -> float:
        return self.measured_w / self.predicted_w


def evaluate(records: dict[str, PowerRecord] | None = None) -> tuple[PowerConstants, list[Row]]:
    """The constants fitted on every record, and each record predicted leave-one-group-out."""
    records = load_power_corpus() if records is None else records
    cases = [case(n, r) for n, r in records.items()]
    params = _fit(cases)
    rows = []
    for g in sorted({c.rec.group for c in cases}):
        held = _fit([c for c in cases if c.rec.group != g])
        for c in (c for c in cases if c.rec.group == g):
            itl = c.rec.reported.median_itl_ms
            rows.append(Row(c.name, g, c.rec.power_w_per_gpu, c.power(held), c.rec.reported.j_per_output_token,
                            c.j_per_token(held), None if itl is None else itl / 1e3, c.tpot_s))
    iv = held_out_interval([r.ratio for r in rows], [r.group for r in rows])
    fitted_on = (f"{len(rows)} published power measurements in {iv.sources} groups (analysis/catalog/power/), GPUs "
                 f"{', '.join(sorted({r.settings.gpu for r in records.values()}))}")
    # The energy per token a plan gives is for the vLLM it plans (the newest era): held against those records.
    newest = [r for r in rows if era(records[r.name].settings.version) == ERAS[-1]] or rows
    eiv = held_out_interval([r.measured_j / r.predicted_j for r in newest], [r.group for r in newest])
    return PowerConstants(params=params, fitted_on=fitted_on, interval=iv, energy_interval=eiv), rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write analysis/catalog/power.yaml")
    args = ap.parse_args(argv)
    constants, rows = evaluate()
    print(f"{'record':44s} {'W meas':>7s} {'W pred':>7s} {'ratio':>6s} {'J/tok meas':>10s} {'J/tok pred':>10s} "
          f"{'ratio':>6s}")
    for r in rows:
        print(f"{r.name:44s} {r.measured_w:7.0f} {r.predicted_w:7.0f} {r.ratio:6.2f} {r.measured_j:10.3f} "
              f"{r.predicted_j:10.3f} {r.measured_j / r.predicted_j:6.2f}")
    iv = constants.interval
    assert iv is not None
    j = np.array([r.measured_j / r.predicted_j for r in rows])
    print(f"power, leave-one-group-out: median |measured/predicted - 1| = {100 * iv.median_abs_error:.1f}% over "
          f"{iv.n} records in {iv.sources} groups; measured/predicted {iv.low_ratio:.2f}-{iv.high_ratio:.2f} "
          f"(10th-90th pct {iv.p10_ratio:.2f}-{iv.p90_ratio:.2f} x{iv.widening:g}: built without a group, it held "
          f"{100 * (iv.held_out_coverage or 0):.0f}% of its records)")
    print(f"energy per output token (power x the latency model's step), leave-one-group-out: median |error| = "
          f"{100 * float(np.median(np.abs(j - 1))):.1f}%; measured/predicted {np.percentile(j, 10):.2f}-"
          f"{np.percentile(j, 90):.2f}")
    e = constants.energy_interval
    assert e is not None
    print(f"  of vLLM 0.9 on (what a plan predicts for; its interval): {e.n} records, median |error| "
          f"{100 * e.median_abs_error:.1f}%, measured/predicted {e.low_ratio:.2f}-{e.high_ratio:.2f} (10th-90th pct "
          f"{e.p10_ratio:.2f}-{e.p90_ratio:.2f} x{e.widening:g}: built without a group, it held "
          f"{100 * (e.held_out_coverage or 0):.0f}% of its records)")
    print("constants: " + ", ".join(f"{k} {v:.3f}" for k, v in constants.params.items()))
    if args.write:
        constants.save()
        print(f"wrote {constants.fitted_on}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
