"""What the sweep's parent hands a child: an engine configuration (EngineConfig, whose llm_kwargs vLLM gets), and the
job files of the engine and serve children.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from analysis.results.schema import EngineSettings, PointSettings

# EngineSettings fields that are kvprof's own (how the model was found and identified, which weights, the
# arguments passed verbatim), not vllm.LLM arguments of the same name.
NOT_VLLM_ARGS = {"model_dir", "model_sha256", "weights", "engine_args"}


class EngineConfig(EngineSettings):
    """One engine launch (the contract's EngineSettings) and how it becomes ``vllm.LLM`` arguments."""

    def llm_kwargs(self) -> dict[str, Any]:
        """The exact keyword arguments for ``vllm.LLM`` (the spec's engine_args win, as documented).

        The engine child passes these unchanged and records them (``llm_kwargs`` in the engine
        record), so what ran is visible. Token ids go in and come out (``skip_tokenizer_init``):
        kvprof never needs a tokenizer, with dummy or real weights.
        """
        kw: dict[str, Any] = {
            "model": self.model_dir,
            "load_format": "dummy" if self.weights == "dummy" else "auto",
            "skip_tokenizer_init": True,
            "disable_log_stats": False,
        }
        # Every other setting is the vllm.LLM argument of its name, left out where None (vLLM's default): a
        # field added to EngineSettings reaches vLLM with no list to update.
        settings = self.model_dump(exclude=NOT_VLLM_ARGS)
        kw.update({k: v for k, v in settings.items() if v is not None})
        kw.update(self.engine_args)
        return kw

    def server_kwargs(self, tokenizer: str) -> dict[str, Any]:
        """The engine arguments of the serve phase's OpenAI server: ``llm_kwargs`` with ``tokenizer`` (the
        synthetic one a config-only model is served with) instead of ``skip_tokenizer_init``, so the server
        tokenizes and detokenizes text as in production."""
        kw = self.llm_kwargs()
        kw.pop("skip_tokenizer_init", None)
        kw.pop("disable_log_stats", None)  # the server logs its stats by default
        return kw | {"tokenizer": tokenizer}


Point = PointSettings


class EngineJob(BaseModel):
    """What the sweep's parent tells one engine child (``jobs/<engine id>.json``; internal)."""

    model_config = ConfigDict(extra="forbid")

    results_dir: str
    engine_id: str
    engine: EngineSettings
    seed: int
    phases: list[str]
    llm_kwargs: dict[str, Any]
    points: list[PointSettings]


class ServeJob(BaseModel):
    """What the sweep's parent tells one serve child (``jobs/<engine id>.serve.json``; internal)."""

    model_config = ConfigDict(extra="forbid")

    results_dir: str
    engine_id: str
    engine: EngineSettings
    seed: int
    host: str = "127.0.0.1"
    port: int
    tokenizer_dir: str
    server_kwargs: dict[str, Any]  # EngineConfig.server_kwargs
    ready_timeout_s: float
    slo: dict[str, float] = {}  # ServeMeasurements.slo: "ttft_s" → seconds
    points: list[PointSettings]

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"
