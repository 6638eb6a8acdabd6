"""What the serving replay was checked against (:class:`ReplayEvidence`, ``analysis/catalog/replay_evidence.yaml``):
per figure (TTFT, TPOT), how far the replay landed from the latency corpus's published `vllm bench serve` runs with
the step model's constants fitted without each run's source — the count, the median error and the 10th–90th
percentile of measured ÷ replayed, which is the interval the plan quotes around a replayed figure. Written by
``benchmarks/replay_vs_corpus.py --write``, with the hashes of the constants and of the replay it was computed with,
so a change to either without a rerun is caught (tests/analysis/serving/test_replay_evidence.py)."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from analysis.latency.step import CONSTANTS_FILE

EVIDENCE_FILE = Path(__file__).resolve().parent.parent / "catalog" / "replay_evidence.yaml"
REPLAY_SOURCE = Path(__file__).resolve().parent / "replay.py"
Figure = Literal["ttft", "tpot"]


class FigureEvidence(BaseModel):
    """The replay against one published figure, held out by source."""

    model_config = ConfigDict(extra="forbid")

    runs: int = Field(ge=1, description="published figures compared")
    sources: int = Field(ge=1)
    median_abs_error: float = Field(ge=0, description="median |replayed ÷ measured − 1|")
    closed_form_median_abs_error: float = Field(ge=0, description="the same of the closed-form schedules the plan "
                                                                  "prints without a load (analysis/latency/fit.py)")
    within_25_percent: int = Field(ge=0)
    ratio_p10: float = Field(gt=0, description="10th percentile of measured ÷ replayed")
    ratio_p90: float = Field(gt=0, description="90th percentile of measured ÷ replayed")


class ReplayEvidence(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str
    constants_sha256: str = Field(description="analysis/catalog/latency.yaml the runs were replayed with")
    replay_sha256: str = Field(description="analysis/serving/replay.py the runs were replayed with")
    figures: dict[Figure, FigureEvidence]

    def checked_against(self, figure: Figure) -> str:
        f = self.figures[figure]
        return (f"{f.runs} published vllm bench serve {figure.upper()} figures ({f.sources} sources, each replayed "
                f"with "
                f"constants fitted without it): median error {100 * f.median_abs_error:.0f} %, "
                f"{f.within_25_percent} within 25 %")

    def interval(self, figure: Figure, value: float) -> tuple[float, float]:
        f = self.figures[figure]
        return value * f.ratio_p10, value * f.ratio_p90


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def replay_evidence() -> ReplayEvidence:
    return ReplayEvidence.model_validate(yaml.safe_load(EVIDENCE_FILE.read_text(encoding="utf-8")))


def current_hashes() -> tuple[str, str]:
    """The constants' and the replay's hashes now (the evidence file must carry these)."""
    return sha256(CONSTANTS_FILE), sha256(REPLAY_SOURCE)
