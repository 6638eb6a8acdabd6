"""The published runs of vLLM with speculative decoding on real GPUs (``analysis/catalog/speculative_latency/``), the
step model's predictions of them (analysis.latency.speculative), the pre-0.11 host costs fitted on them and the
interval a speculative prediction carries."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from analysis.catalog import CATALOG_DIR
from analysis.catalog.evidence import PublishedRecord
from analysis.latency.speculative import V1_PASS_S, V1_STEP_S, speculation
from analysis.latency.step import Engine, Schedule, decode_schedule, prefill_schedule, served_step_schedule
from analysis.vllm.speculative import MAX_SPECULATIVE_TOKENS, Method, SpeculativeConfig

EVIDENCE_DIR = CATALOG_DIR / "speculative_latency"


class SpeculativeSettings(BaseModel):
    """What the author ran (as the record's notes say where the source is silent)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    catalog_model: str = Field(description="analysis/catalog/models/<name>: the target's config")
    gpu: str = Field(description="analysis/catalog/gpus.yaml name")
    tensor_parallel_size: int = Field(1, ge=1)
    vllm_version: str
    quantization: str | None = Field(None, description="how kvprof quantizes the target for it (a vLLM --quantization "
                                                       "name): fp8 for an FP8-dynamic checkpoint")
    drafter_model: str | None = Field(None, description="the drafter's config: a catalog name, or a folder under "
                                                        "analysis/catalog/speculative_latency/")
    speculative_async_scheduling: bool | None = Field(
        None, description="async scheduling in the speculative runs where their log says it differed from the "
                          "baseline's (None: the version's default for each)")


class SpeculativeWorkload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    derive: Literal["tpot", "served_tpot", "throughput"] = Field(
        description="tpot: measured is the time per output token (ms) of `batch` requests decoding together; "
                    "served_tpot: vllm bench serve's mean TPOT (ms) at max_concurrency `batch`, requests arriving as "
                    "others finish; throughput: output tokens/s of requests run `batch` at a time, each its prefill "
                    "then its decode")
    batch: int = Field(ge=1)
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=2)


class SpeculativePoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: Method
    k: int = Field(ge=1, le=MAX_SPECULATIVE_TOKENS)
    acceptance_length: float = Field(ge=1)
    measured: float = Field(gt=0)


class SpeculativeRecord(PublishedRecord):
    """Published runs of one model with speculative decoding at several settings, beside its run without."""

    campaign: str = Field(min_length=1, description="who ran it, for holding out: one author's runs, one project's")
    settings: SpeculativeSettings
    workload: SpeculativeWorkload
    baseline: float = Field(gt=0, description="the same measure without speculative decoding")
    points: list[SpeculativePoint] = Field(min_length=1)


@cache
def evidence() -> tuple[SpeculativeRecord, ...]:
    """The published speculative-decoding runs (``analysis/catalog/speculative_latency/*.yaml``)."""
    return tuple(SpeculativeRecord.model_validate(yaml.safe_load(f.read_text(encoding="utf-8")))
                 for f in sorted(EVIDENCE_DIR.glob("*.yaml")))


@dataclass(frozen=True)
class Figure:
    """A published figure beside what the step model predicts for it (the host costs apart, to fit them)."""

    source: str
    label: str
    measured: float  # seconds: a time per output token, or a request's time at the measured throughput
    kernels_s: float  # predicted without the pre-0.11 host costs
    steps: float  # speculative steps it takes (the host costs' weight)
    passes: float  # later drafter passes it takes

    def predicted(self, costs: tuple[float, float] = (V1_STEP_S, V1_PASS_S)) -> float:
        return self.kernels_s + self.steps * costs[0] + self.passes * costs[1]


def _record_engine(r: SpeculativeRecord, point: SpeculativePoint | None) -> Engine:
    from analysis.catalog import gpu as catalog_gpu
    from analysis.catalog import resolve_model

    gpu = catalog_gpu(r.settings.gpu)
    target = resolve_model(r.settings.catalog_model)[0]
    if r.settings.quantization:
        target = target.with_quantization(r.settings.quantization, gpu.generation)
    spec = None
    if point is not None:
        draft = resolve_model(r.settings.drafter_model, base=EVIDENCE_DIR)[0] if r.settings.drafter_model else None
        config = SpeculativeConfig(method=point.method, model=r.settings.drafter_model, num_speculative_tokens=point.k)
        spec = speculation(target, config, draft, point.acceptance_length)
    return Engine(target, gpu, tp=r.settings.tensor_parallel_size,
                  async_scheduling=r.settings.speculative_async_scheduling if point is not None else None,
                  vllm_version=r.settings.vllm_version, speculation=spec)


def _split(s: Schedule) -> tuple[float, float, float]:
    """A schedule's time without the pre-0.11 host costs, and the steps and later drafter passes that pay them: its
    time is linear in the two costs."""
    paying = [(x, w) for x, w in s.steps if w.speculative_host_s]
    return (s.time() - sum(x * w.speculative_host_s for x, w in paying), sum(x for x, _ in paying),
            sum(x * max(len(w.drafter) - 1, 0) for x, w in paying))


def figures(r: SpeculativeRecord, baseline: bool = False) -> list[Figure]:
    """The record's figures (its baseline alone with ``baseline``) with their predictions: a ``tpot`` is a decode step
    at the mean context over the acceptance length; a ``served_tpot`` the steady state's time per output token at
    the concurrency (``served_step_schedule``, prompts arriving into the steps); a ``throughput`` figure a request's
    time, its prefill and its output_len − 1 tokens' steps (the figure's reciprocal times output_len)."""
    wl = r.workload
    out = []
    for point in [None] if baseline else r.points:
        e = _record_engine(r, point)
        label = "baseline" if point is None else f"{point.method} k={point.k}"
        figure = r.baseline if point is None else point.measured
        if wl.derive == "tpot":
            s = Schedule().extend(decode_schedule(e, wl.batch, wl.input_len + wl.output_len / 2),
                                  1 / e.tokens_per_step)
            measured = figure / 1e3
        elif wl.derive == "served_tpot":
            s = served_step_schedule(e, wl.batch, wl.input_len, wl.output_len)
            measured = figure / 1e3
        else:
            s = prefill_schedule(e, wl.batch, wl.input_len).extend(
                decode_schedule(e, wl.batch, wl.input_len + wl.output_len / 2),
                (wl.output_len - 1) / e.tokens_per_step)
            measured = wl.output_len * wl.batch / figure
        out.append(Figure(r.campaign, label, measured, *_split(s)))
    return out


def fit_host_costs(figs: list[Figure]) -> tuple[float, float]:
    """The pre-0.11 host costs (a step's, a later pass's) that best explain ``figs`` (least squares in log
    measured ÷ predicted, both at least 0)."""
    from scipy.optimize import least_squares

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.array([np.log(f.measured / f.predicted((x[0], x[1]))) for f in figs])

    fit = least_squares(residuals, x0=[5e-4, 1e-4], bounds=([0, 0], [1e-2, 1e-2]), x_scale=[1e-3, 1e-3])
    return float(fit.x[0]), float(fit.x[1])


@cache
def held_out_ratios() -> tuple[tuple[str, str, float], ...]:
    """(campaign, figure, measured ÷ predicted) for every published speculative figure, the host costs fitted
    without its campaign (with one campaign, the shipped costs)."""
    by_source: dict[str, list[Figure]] = {}
    for r in evidence():
        by_source.setdefault(r.campaign, []).extend(figures(r))
    out = []
    for source, figs in by_source.items():
        others = [f for s, fs in by_source.items() if s != source for f in fs]
        costs = fit_host_costs(others) if others else (V1_STEP_S, V1_PASS_S)
        out += [(source, f.label, f.measured / f.predicted(costs)) for f in figs]
    return tuple(out)


def widened(interval_s: list[float] | None, time_s: float) -> tuple[list[float] | None, str]:
    """A speculative prediction's interval: its regime's, widened to hold every published speculative figure held
    out (too few campaigns for percentiles to mean much), and what it was checked against."""
    ratios = np.array([x for *_, x in held_out_ratios()])
    if not len(ratios) or interval_s is None:
        return interval_s, "no published speculative-decoding figure"
    lo, hi = float(ratios.min()), float(ratios.max())
    campaigns = len({r.campaign for r in evidence()})
    words = (f"{len(ratios)} published speculative-decoding figures of {campaigns} campaigns "
             "(analysis/catalog/speculative_latency: EAGLE, EAGLE-3 and a draft model on H100s at 1 and 8 requests, "
             "vLLM 0.8–0.20), "
             "each predicted with the pre-0.11 host costs fitted without its campaign: measured/predicted "
             f"{lo:.2f}–{hi:.2f} (all of them)")
    return [min(interval_s[0], time_s * lo), max(interval_s[1], time_s * hi)], words
