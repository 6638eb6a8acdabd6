"""The latency model: one vLLM engine step as the sum of the terms a real GPU pays (issue #25).

A step is the work of one scheduler iteration on one GPU of a tensor-parallel group
(:class:`analysis.latency.work.StepWork`): decoding sequences and prompt tokens, the weight bytes it
streams, the KV it reads, its FLOPs and its all-reduces. Its time is

    weights_s        smooth-max(weight bytes / (BW · η_w[generation] · κ[kernel] (· κ_moe for experts))
                                + experts called × t_expert[vLLM era]   (one GEMM per touched expert per MoE layer,
                                                                          before vLLM 0.9)
                                + GEMM kernels × t_gemm                  (a fixed time each besides its bytes:
                                                                          5.6 µs on a lent H200, gemm_kernels()),
                                GEMM FLOPs / (peak · η_f[generation] · κ_f[weight-only kernel]) · (1 + m½ / rows),
                                routed experts' grouped GEMMs at κ_moe_f)   a GEMM of few rows (tokens) runs below
                                its large-M rate: half of it at m½ rows (rows counted from a 16-row MMA tile up)
  + kv_s             KV bytes read / (BW · η_kv[generation] · κ_kv[vLLM era] · κ_fa3)   attention kernels reach a
                                                                  smaller share of peak than GEMMs; κ_fa3 where
                                                                  FlashAttention 3 reads it (Hopper, vLLM 0.7 on)
  + attention_s      attention FLOPs / (peak · η_f[generation])   prefill's quadratic term
  + communication_s  all-reduces × latency[link] · hops + their bytes / link bandwidth   (tp > 1: two a layer;
                                                                  hops: log2(tp) before vLLM 0.9, 1 from it on)
  + floor_s          per-layer launch cost (piecewise CUDA graphs; a decode step's whole graph from vLLM 0.11;
                     or eager) (+ MoE and MLA layers' extras)
                     + host[vLLM era] + per-sequence host cost × sequences; under async scheduling (vLLM 0.14 on)
                       a share host_overlap of the host's part hides behind the GPU's work (shows where it outlasts it)

Weight bytes include quantization scales and zero points (``analysis.model.quantization``); an MoE
step reads the experts its tokens touch, E·(1 − (1 − k/E)^tokens), not the top-k alone
(``analysis.model.params.expected_experts_touched``). The constants (η, κ, latencies, floors) are fitted on
the corpus of published vLLM measurements (``analysis.latency.corpus``) by ``analysis.latency.fit``
and shipped in ``catalog/latency.yaml`` with the leave-one-source-out error of every regime, which
gives each prediction its interval (:mod:`analysis.latency.intervals`). What differs between vLLM releases (eras,
graph modes, kernels, all-reduce hops) is :mod:`analysis.vllm.release`'s.

Workloads are schedules of steps (:class:`Schedule`): a decode step, a prefill in chunks of
``max_num_batched_tokens``, the time to first token of a request arriving while others decode, a
served TPOT with the prefill of arriving requests mixed into the decode steps, bursts of requests run in waves
of what the engine holds at once, and closed loops that queue beyond it. The plan, the
procurement table and the fit all use the same schedules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from analysis.catalog import CATALOG_DIR, GENERATIONS, GPU
from analysis.latency.intervals import (
    Interval,
    interval_words,
)
from analysis.latency.speculative import Speculation, speculative_host_s
from analysis.latency.work import (
    StepWork,
    kernel_family,
    step_work,
)
from analysis.model.architecture import Architecture
from analysis.vllm.release import (
    ERAS,
    EXPERT_CALL_ERAS,
    async_scheduling_default,
    chunked_prefill_default,
    known_release,
)

CONSTANTS_FILE = CATALOG_DIR / "latency.yaml"

KERNELS = ("bf16", "fp8", "int8", "int4", "fp4", "mxfp4", "nf4")
# How an all-reduce runs: vLLM's custom all-reduce over NVLink (0.3.0 on), or NCCL (before it, and on PCIe).
LINKS = ("nvlink", "pcie", "nccl")
SMOOTH_MAX_POWER = 4.0  # weight stream vs GEMM arithmetic: max() rounded at the ridge, where neither hides the other

# A tensor-core MMA tile is 16 rows: a GEMM of fewer rows (a decode of a few sequences) runs the tile's
# instructions anyway, so its rate ramp starts there (below it the weight stream binds in any case).
MMA_ROWS = 16

# Weight-only quantized kernels (Marlin, AWQ/GPTQ, MXFP4 before Blackwell, bitsandbytes): their GEMMs dequantize each
# weight tile to 16 bits in the main loop, so where they compute-bind (a prefill, a large batch) they run below the
# bf16 rate (vLLM's AWQ dequantizes and calls the bf16 GEMM from 256 tokens on for that reason:
# ``quantization/auto_awq.py`` FP16_MATMUL_HEURISTIC_CONDITION).
WEIGHT_ONLY = ("int4", "mxfp4", "nf4")

def drafter_passes(e: Engine, s: Speculation, target_step: StepWork, **kw: float) -> tuple[StepWork, ...]:
    """The drafter's k passes within a step whose target work is ``target_step`` (built from ``kw``, the
    :meth:`Engine.step` arguments): the first over the same tokens, the others over one token a decoding request.
    Each pass is a forward of the drafter's architecture, launched as the drafter launches (``s.graphs``), with no
    host cost of its own."""
    if s.drafter is None:
        return ()
    eager = e.enforce_eager or s.graphs == "eager"

    def one(extra: float, **args: float) -> StepWork:
        w = step_work(s.drafter, e.gpu, tp=e.tp, kv_cache_dtype=e.kv_cache_dtype, enforce_eager=eager,
                      vllm_version=e.vllm_version, **args)
        more = extra * s.drafter.weight_dtype_bytes / e.tp  # matrices beside the layers, split as theirs are
        return replace(w, host=False, graphs="eager" if eager else "full",
                       dense_bytes=w.dense_bytes + more,
                       gemm_flops=w.gemm_flops + 2 * extra * w.tokens / e.tp)

    first = one(s.extra_params + s.first_pass_extra_params, **kw, sampled_per_seq=1)
    seqs = target_step.decode_seqs
    if s.k == 1 or seqs <= 0:
        return (first,)
    later = one(s.extra_params, decode_seqs=seqs, decode_context=kw.get("decode_context", 0))
    return (first,) + (later,) * (s.k - 1)


# -- the constants ---------------------------------------------------------------------------------

def parameter_names() -> list[str]:
    """Every fitted constant, by name. ``eta_*`` without a generation is the pooled value the per-generation
    ones are drawn towards (and the one a GPU of an unseen generation gets)."""
    names = []
    for eta in ("eta_weights", "eta_kv", "eta_flops"):
        names += [eta] + [f"{eta}.{g}" for g in GENERATIONS]
    names += [f"kv_era.{e}" for e in ERAS[:-1]] + ["kv_kernel.fa3"]
    names += [f"kernel.{k}" for k in KERNELS if k != "bf16"] + ["moe_kernel", "moe_flops"]
    names += [f"kernel_flops.{k}" for k in WEIGHT_ONLY]
    names += [f"expert_call_s.{e}" for e in EXPERT_CALL_ERAS]
    names += [f"host_s.{e}" for e in ERAS] + ["seq_s", "gemm_call_s", "layer_s", "full_layer_s", "eager_layer_s",
                                              "moe_layer_s", "mla_layer_s"]
    names += [f"allreduce_s.{link}" for link in LINKS] + ["api_s", "gemm_half_rows", "host_overlap"]
    return names


# Priors: physically plausible values the fit starts from and is drawn towards (log-normal, sigma in log units).
# Efficiencies: decode GEMMs stream weights at 70-90 % of peak, attention's KV reads at 40-80 %; prefill GEMMs
# reach two thirds of the dense tensor peak (cuBLAS on a lent H200: 585-667 TFLOP/s of 989 from 1k to 8k rows,
# benchmarks/results/h200-2026-12-04; Argonne's offline prefills 62 % on H100 and 76 % on A100), a quarter either
# way for other GPUs and kernels. A GEMM kernel costs a fixed 5.6 µs besides its bytes (the same H200).
# Floors: a few microseconds per kernel, ~10 kernels a layer under CUDA-graph replay; eager launches cost tens
# of microseconds a layer. A decode step that replays one whole graph (vLLM 0.11 on) pays for a layer's non-GEMM
# kernels their replay alone: six a Llama layer (two fused add-RMSNorms, rotary, the KV-cache write, attention,
# SiLU-and-mul) at the 0.83 µs a graph node replayed in on the lent H200, 5 µs (the corpus does not pin it: its
# modern records cannot tell this floor from the host's). NVLink all-reduces of a few KiB take
# ~10 µs (vLLM's custom all-reduce), PCIe ones ~30 µs (NCCL). Where no such belief is worth holding, the prior is
# flat (sigma 2: a factor of 7 either way) and the corpus decides: FlashAttention 3's KV read against FA2's, and the
# fused-MoE kernels' cost per MoE layer and per expert byte (fitted, an expert byte costs less than a dense weight
# byte: on a lent H200 vLLM's fused-MoE kernel streamed experts at 83–93 % of spec where the whole-model dense GEMMs
# reached 77 %, and benchmark batches that route to fewer distinct experts than uniform routing push it the same
# way; the 0.6 prior it had held MoE steps at batch 16–64 up to twice too slow).
PRIORS: dict[str, tuple[float, float]] = {
    "eta_weights": (0.80, 0.3), "eta_kv": (0.60, 0.5), "eta_flops": (0.66, 0.25),
    "kv_era.0.5": (1.0, 0.4), "kv_era.0.6": (1.0, 0.4), "kv_kernel.fa3": (1.0, 2.0),
    "kernel.fp8": (0.90, 0.4), "kernel.int8": (0.85, 0.4), "kernel.int4": (0.70, 0.5), "kernel.fp4": (0.70, 0.5),
    "kernel.mxfp4": (0.55, 0.6), "kernel.nf4": (0.30, 0.6), "moe_kernel": (1.0, 2.0),
    "moe_flops": (0.6, 0.5), "kernel_flops": (0.7, 0.5), "expert_call_s": (2e-6, 1.0),
    "host_s.0.5": (3e-3, 1.0), "host_s.0.6": (1e-3, 1.0), "host_s.0.9": (4e-4, 1.0),
    "seq_s": (8e-6, 1.0), "gemm_call_s": (5.6e-6, 0.3), "layer_s": (8e-6, 0.8), "full_layer_s": (5e-6, 0.3),
    "eager_layer_s": (6e-5, 0.8),
    "moe_layer_s": (1.5e-5, 2.0),
    "mla_layer_s": (3e-5, 1.5),
    "allreduce_s.nvlink": (1.2e-5, 0.7), "allreduce_s.pcie": (3e-5, 0.7), "allreduce_s.nccl": (3e-5, 0.7),
    "api_s": (3e-3, 1.0),
    "gemm_half_rows": (64.0, 1.0), "host_overlap": (0.5, 1.0),
}
GENERATION_SIGMA = 0.25  # how far a generation's efficiency may sit from the pooled one without evidence


def prior(name: str) -> tuple[float, float]:
    return PRIORS.get(name) or PRIORS[name.split(".")[0]]


class LatencyConstants(BaseModel):
    """``catalog/latency.yaml``: the fitted constants, what they were fitted on, and the intervals."""

    model_config = ConfigDict(extra="forbid")

    params: dict[str, float]
    fitted_on: str = Field("", description="the corpus the constants were fitted on (records, sources)")
    intervals: dict[str, Interval] = {}

    def value(self, name: str) -> float:
        """A constant, the pooled value standing in for a generation without its own."""
        if name in self.params:
            return self.params[name]
        base = name.rpartition(".")[0]
        if base in self.params:  # eta_weights.<a generation the corpus has no record of, or a probed GPU's None>
            return self.params[base]
        return prior(name)[0]

    def save(self, path: Path = CONSTANTS_FILE) -> None:
        path.write_text(yaml.safe_dump(self.model_dump(), sort_keys=False, width=110), encoding="utf-8")


@cache
def shipped_constants() -> LatencyConstants:
    """The constants shipped with kvprof (priors alone when the file is missing, as before a first fit)."""
    if CONSTANTS_FILE.is_file():
        return LatencyConstants.model_validate(yaml.safe_load(CONSTANTS_FILE.read_text(encoding="utf-8")))
    return LatencyConstants(params={n: prior(n)[0] for n in parameter_names()})


# -- the step time -----------------------------------------------------------------------------------

TERMS = ("weights_s", "kv_s", "attention_s", "communication_s", "floor_s")


@dataclass(frozen=True)
class Overrides:
    """A calibration's measured figures in place of the shipped constants (``analysis.planning.plan``): an effective
    bandwidth for every byte, a FLOP rate and a per-step overhead, as a sweep's decode fit gives them."""

    bandwidth_Bps: float | None = None
    flops: float | None = None
    step_overhead_s: float | None = None


def step_seconds(*, dense_bytes, expert_bytes, kv_bytes, gemm_flops, expert_gemm_flops, attention_flops, allreduces,
                 allreduce_hops, allreduce_bytes, decode_seqs, tokens, gemm_half_rows, layers, gemms, moe_layers,
                 expert_calls, mla_layers,
                 bandwidth_Bps, gemm_peak_flops, peak_flops, link_Bps, eta_weights, kernel, kernel_flops, moe_kernel,
                 moe_flops, gemm_call_s,
                 expert_call_s, eta_kv, kv_era, kv_kernel, eta_flops, allreduce_s, host_s, seq_s, layer_s, moe_layer_s,
                 mla_layer_s, host_overlap):
    """The step-time formula (module docstring), term by term. Every argument may be a number or a numpy array
    of steps (the fit evaluates the whole corpus at once), so there is one formula for the plan and the fit."""
    bw_w = bandwidth_Bps * eta_weights * kernel
    stream = dense_bytes / bw_w + expert_bytes / (bw_w * moe_kernel) + expert_calls * expert_call_s \
        + gemms * gemm_call_s
    ramp = 1 + gemm_half_rows / np.maximum(tokens, MMA_ROWS)  # below its large-M rate at few rows
    gemm = (gemm_flops + expert_gemm_flops / moe_flops) / (gemm_peak_flops * eta_flops * kernel_flops) * ramp
    p = SMOOTH_MAX_POWER
    weights = (stream ** p + gemm ** p) ** (1 / p)
    kv = kv_bytes / (bandwidth_Bps * eta_kv * kv_era * kv_kernel)
    attention = attention_flops / (peak_flops * eta_flops)
    communication = allreduces * allreduce_hops * allreduce_s + allreduce_bytes / link_Bps
    launches = layer_s * layers + moe_layer_s * moe_layers + mla_layer_s * mla_layers
    host = host_s + seq_s * decode_seqs
    # Under async scheduling the host prepares the next step while the GPU runs this one: the host's time shows
    # only where it outlasts the GPU's (the same rounded max as the weight stream's).
    gpu = weights + kv + attention + communication + launches
    hidden = (gpu ** p + host ** p) ** (1 / p) - gpu
    return {
        "weights_s": weights,
        "weight_stream_s": stream,
        "gemm_compute_s": gemm,
        "kv_s": kv,
        "attention_s": attention,
        "communication_s": communication,
        "floor_s": launches + host - host_overlap * (host - hidden),  # host_overlap is 0 without async scheduling
    }


FEATURES = ("dense_bytes", "expert_bytes", "kv_bytes", "gemm_flops", "expert_gemm_flops", "attention_flops",
            "allreduces", "allreduce_hops", "allreduce_bytes", "decode_seqs", "tokens", "layers", "gemms", "moe_layers",
            "expert_calls", "mla_layers", "bandwidth_Bps", "gemm_peak_flops", "peak_flops", "link_Bps")


def weight_only(w: StepWork) -> bool:
    """Whether the step's linear layers run a weight-only quantized kernel (dequantizing to 16 bits before the MMA):
    int4 and nf4 everywhere, MXFP4 where the GPU has no FP4 units (Blackwell runs FlashInfer's native MXFP4 MoE)."""
    return w.kernel in WEIGHT_ONLY and not (w.kernel == "mxfp4" and w.generation == "blackwell")


def step_constants(w: StepWork) -> dict[str, str | float]:
    """Which constant each of the formula's coefficients is for this step (a name, or a fixed number)."""
    g = w.generation
    return {"eta_weights": f"eta_weights.{g}", "kernel": 1.0 if w.kernel == "bf16" else f"kernel.{w.kernel}",
            "kernel_flops": f"kernel_flops.{w.kernel}" if weight_only(w) else 1.0,
            "moe_kernel": "moe_kernel" if w.expert_bytes else 1.0, "eta_kv": f"eta_kv.{g}",
            "moe_flops": "moe_flops" if w.expert_gemm_flops else 1.0,
            "expert_call_s": f"expert_call_s.{w.era}" if w.expert_calls and w.era in EXPERT_CALL_ERAS else 0.0,
            "kv_era": 1.0 if w.era == ERAS[-1] else f"kv_era.{w.era}",
            "kv_kernel": f"kv_kernel.{w.attention}" if w.attention != "fa2" else 1.0,
            "eta_flops": f"eta_flops.{g}", "allreduce_s": f"allreduce_s.{w.link}" if w.allreduces else 0.0,
            "host_s": f"host_s.{w.era}" if w.host else 0.0, "gemm_half_rows": "gemm_half_rows",
            "seq_s": "seq_s" if w.host else 0.0,
            "gemm_call_s": "gemm_call_s",
            "layer_s": {"eager": "eager_layer_s", "full": "full_layer_s", "piecewise": "layer_s"}[w.graphs],
            "moe_layer_s": "moe_layer_s" if w.moe_layers else 0.0,
            "mla_layer_s": "mla_layer_s" if w.mla_layers else 0.0,
            "host_overlap": "host_overlap" if w.overlap and w.host else 0.0}


def step_terms(w: StepWork, c: LatencyConstants | None = None, overrides: Overrides | None = None
               ) -> dict[str, float]:
    """The named terms of one step (seconds) and the effective rates that set them."""
    c = c or shipped_constants()
    o = overrides or Overrides()
    features = {k: getattr(w, k) for k in FEATURES}
    coef = {k: v if isinstance(v, float) else c.value(v) for k, v in step_constants(w).items()}
    if o.bandwidth_Bps:  # one measured bandwidth for every byte, MoE kernels' share kept
        features["bandwidth_Bps"] = o.bandwidth_Bps
        coef.update(eta_weights=1.0, kernel=1.0, eta_kv=1.0, kv_era=1.0, kv_kernel=1.0, gemm_call_s=0.0)
    if o.flops:
        features.update(gemm_peak_flops=o.flops, peak_flops=o.flops)
        coef.update(eta_flops=1.0, gemm_half_rows=0.0)  # a measured rate at the sweep's batches; MoE share kept
    if o.step_overhead_s is not None:
        coef.update(host_s=o.step_overhead_s, seq_s=0.0, layer_s=0.0, moe_layer_s=0.0, mla_layer_s=0.0,
                    gemm_call_s=0.0, host_overlap=0.0)  # what the sweep's steps showed, kernels' fixed costs and all
    out = step_seconds(**features, **coef)
    out["floor_s"] = out["floor_s"] + w.speculative_host_s
    for drafted in w.drafter:  # a speculative drafter's passes run on the GPU within the step, after the target's
        for k, v in step_terms(drafted, c, overrides).items():
            if k in TERMS or k in ("weight_stream_s", "gemm_compute_s"):
                out[k] += v
    bw_w = features["bandwidth_Bps"] * coef["eta_weights"] * coef["kernel"]
    out.update(effective_weight_bandwidth_Bps=bw_w,
               effective_kv_bandwidth_Bps=features["bandwidth_Bps"] * coef["eta_kv"] * coef["kv_era"]
               * coef["kv_kernel"],
               effective_flops=features["gemm_peak_flops"] * coef["eta_flops"])
    return out


def expert_layer_terms(a: Architecture, gpu: GPU, *, tp: int, tokens: int, expert_bytes: float, expert_flops: float,
                       c: LatencyConstants | None = None) -> dict[str, float]:
    """One MoE layer's two grouped expert GEMMs alone, as the step formula prices them: ``expert_bytes`` (the
    experts the tokens touch, on one rank) at the weight efficiency × κ[kernel] × κ_moe, two GEMM kernels' fixed
    time, or ``expert_flops`` at the MoE GEMM rate where they bind; the model's kernel coefficients, nothing else
    of the step. What a timing of vLLM's fused-MoE kernel is held against (benchmarks/gpu_moe_kernel.py)."""
    c = c or shipped_constants()
    w = step_work(a, gpu, tp=tp, decode_seqs=tokens, decode_context=1)
    coef = {k: v if isinstance(v, float) else c.value(v) for k, v in step_constants(w).items()}
    coef.update(host_s=0.0, seq_s=0.0)
    features = dict.fromkeys(FEATURES, 0.0) | {
        "expert_bytes": expert_bytes, "expert_gemm_flops": expert_flops, "gemms": 2, "tokens": tokens,
        "bandwidth_Bps": gpu.bandwidth_Bps, "gemm_peak_flops": w.gemm_peak_flops, "peak_flops": w.peak_flops,
        "link_Bps": 1.0}
    return step_seconds(**features, **coef)


def step_time(w: StepWork, c: LatencyConstants | None = None, overrides: Overrides | None = None) -> float:
    t = step_terms(w, c, overrides)
    return sum(t[k] for k in TERMS)


# -- schedules: workloads as weighted steps ------------------------------------------------------------

@dataclass
class Schedule:
    """A time made of steps: Σ weight × step time + ``api`` × the serving front end's per-request cost."""

    steps: list[tuple[float, StepWork]] = field(default_factory=list)
    api: float = 0.0

    def add(self, weight: float, w: StepWork) -> Schedule:
        if weight:
            self.steps.append((weight, w))
        return self

    def extend(self, other: Schedule, weight: float = 1.0) -> Schedule:
        self.steps += [(weight * x, w) for x, w in other.steps]
        self.api += weight * other.api
        return self

    def time(self, c: LatencyConstants | None = None, overrides: Overrides | None = None) -> float:
        c = c or shipped_constants()
        return sum(x * step_time(w, c, overrides) for x, w in self.steps) + self.api * c.value("api_s")

    def terms(self, c: LatencyConstants | None = None, overrides: Overrides | None = None) -> dict[str, float]:
        """The schedule's time split into the named terms."""
        c = c or shipped_constants()
        out = dict.fromkeys(TERMS, 0.0)
        for x, w in self.steps:
            t = step_terms(w, c, overrides)
            for k in TERMS:
                out[k] += x * t[k]
        out["api_s"] = self.api * c.value("api_s")
        return out


@dataclass(frozen=True)
class Engine:
    """What every step of a workload shares: the model, the GPU, the engine settings."""

    a: Architecture
    gpu: GPU
    tp: int = 1
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    vllm_version: str | None = None
    max_num_batched_tokens: int | None = None  # None: no chunking (the whole prefill in one step)
    chunked_prefill: bool | None = None  # None: vLLM's default for the version
    async_scheduling: bool | None = None  # None: vLLM's default for the version (analysis.vllm.budget)
    speculation: Speculation | None = None  # --speculative-config (analysis.latency.speculative)

    @property
    def overlapped(self) -> bool:
        if self.async_scheduling is not None:
            return self.async_scheduling
        return async_scheduling_default(self.vllm_version, on_gpu=not self.gpu.cpu)

    @property
    def chunked(self) -> bool:
        return chunked_prefill_default(self.vllm_version) if self.chunked_prefill is None else self.chunked_prefill

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a decoding request gains a step: 1, or the acceptance length under speculative decoding."""
        return self.speculation.tokens_per_step if self.speculation else 1.0

    def step(self, **kw: float) -> StepWork:
        """One step's work; under speculative decoding every decoding request carries 1 + k tokens to verify and the
        drafter's passes run within the step (analysis.latency.speculative)."""
        s = self.speculation
        if s is not None and kw.get("decode_seqs", 0) > 0:
            kw["decode_query"] = 1 + s.k
        w = step_work(self.a, self.gpu, tp=self.tp, kv_cache_dtype=self.kv_cache_dtype,
                      enforce_eager=self.enforce_eager, vllm_version=self.vllm_version,
                      async_scheduling=self.overlapped, **kw)
        if s is not None:
            passes = drafter_passes(self, s, w, **kw)
            w = replace(w, drafter=passes, speculative_host_s=speculative_host_s(
                known_release(self.vllm_version), s, len(passes)))
        return w

    def chunks(self, tokens: float) -> list[float]:
        """Prompt tokens split into steps of at most max_num_batched_tokens."""
        budget = self.max_num_batched_tokens
        if not budget or tokens <= budget:
            return [tokens]
        full = int(tokens // budget)
        rest = tokens - full * budget
        return [float(budget)] * full + ([rest] if rest > 0 else [])


def decode_schedule(e: Engine, batch: float, context: float) -> Schedule:
    """One decode step of ``batch`` sequences at ``context`` tokens each."""
    return Schedule().add(1, e.step(decode_seqs=batch, decode_context=context))


def _chunk_steps(e: Engine, prompts: float, prompt_len: int, decoding: Callable[[int], float],
                 context: float) -> list[StepWork]:
    """The steps that prefill ``prompts`` prompts of ``prompt_len`` tokens in chunks of max_num_batched_tokens,
    chunk j also decoding ``decoding(j)`` sequences at ``context`` (chunked prefill mixes them)."""
    steps, done = [], 0.0
    for j, n in enumerate(e.chunks(prompts * prompt_len)):
        steps.append(e.step(prefill_tokens=n, prefill_prefix=(done % prompt_len) if prompts > 1 else done,
                            prefill_seqs=max(n / prompt_len, 1.0), decode_seqs=decoding(j), decode_context=context))
        done += n
    return steps


def prefill_schedule(e: Engine, prompts: float, prompt_len: int, decoding: float = 0, context: float = 0) -> Schedule:
    """``prompts`` prompts of ``prompt_len`` tokens processed in chunks of max_num_batched_tokens, with
    ``decoding`` sequences (at ``context``) decoding in every chunk's step (chunked prefill mixes them)."""
    s = Schedule()
    for w in _chunk_steps(e, prompts, prompt_len, lambda _: decoding, context):
        s.add(1, w)
    return s


def latency_schedule(e: Engine, batch: int, input_len: int, output_len: int) -> Schedule:
    """``vllm bench latency``: the batch's prompts prefilled together, then ``output_len − 1`` decode steps
    (the prefill's step samples the first token) at the mean context of the decode."""
    s = prefill_schedule(e, batch, input_len)
    if output_len > 1:  # under speculative decoding a step yields the acceptance length's tokens
        s.extend(decode_schedule(e, batch, input_len + output_len / 2), (output_len - 1) / e.tokens_per_step)
    return s


def served_step_schedule(e: Engine, concurrency: float, input_len: int, output_len: int,
                         steady: bool = True) -> Schedule:
    """A served request's time per output token at ``concurrency`` requests in flight: its steps' (below) over the
    tokens a step yields it (1; the acceptance length under speculative decoding, whose decoding requests carry
    1 + k tokens each into the token budget, and whose request finishes in output_len ÷ L steps)."""
    return Schedule().extend(_served_step(e, concurrency, input_len, output_len, steady), 1 / e.tokens_per_step)


def _served_step(e: Engine, concurrency: float, input_len: int, output_len: int, steady: bool) -> Schedule:
    """A served request's mean step at ``concurrency`` requests in flight.

    Steady state (requests keep arriving as others finish): while one request decodes, each of the other
    ``concurrency − 1`` slots takes a new prompt every ``output_len`` steps (a request's own prompt runs before its
    first token, outside its TPOT: at concurrency 1 no prompt ever interrupts it), so ``a = (concurrency − 1) /
    output_len`` prompts arrive a step.

    * Fewer than one a step: that share of the steps carries a whole prompt beside the running decodes — mixed
      into the step in chunks of what max_num_batched_tokens leaves beside them (chunked prefill), or run as a
      step of its own that stalls them (without it) — and the other steps decode alone. (Averaging the prompt's
      tokens over every step would be wrong: an MoE step of a few tokens touches few experts, one with a whole
      prompt nearly all.)
    * More than one a step (long prompts, short answers, high concurrency): every step carries ``a`` prompts'
      tokens. With chunked prefill they share the step with the decodes while they fit beside them; past that
      the token budget binds and the engine decodes only as many sequences as it can refill, ``D`` with
      ``D + D · input_len / output_len = max_num_batched_tokens``, every step full (the others wait for a prompt
      slot, outside TPOT). Without chunked prefill the ``a`` prompts run as prefill steps of their own, batched
      up to the token budget, between decode steps.

    Without arrivals (every request started together): the decode step alone."""
    ctx = input_len + output_len / 2
    decode = decode_schedule(e, concurrency, ctx)
    if not steady or output_len <= 1:
        return decode
    arriving = (concurrency - 1) * e.tokens_per_step / output_len  # other requests' prompts per step
    per_seq = 1 + (e.speculation.k if e.speculation else 0)  # budget tokens a decoding request takes a step
    if not e.chunked:
        if arriving <= 1:
            return decode.extend(prefill_schedule(e, 1, input_len), arriving)
        return decode.extend(prefill_schedule(e, arriving, input_len))
    room = None if e.max_num_batched_tokens is None else max(e.max_num_batched_tokens - concurrency * per_seq, 1)
    if arriving > 1:
        tokens = arriving * input_len
        if room is None or tokens <= room:
            return Schedule().add(1, e.step(decode_seqs=concurrency, decode_context=ctx, prefill_tokens=tokens,
                                            prefill_prefix=0, prefill_seqs=arriving))
        budget = float(e.max_num_batched_tokens or 0)
        steps = output_len / e.tokens_per_step  # a request's decode steps
        decoding = max(min(concurrency, budget * steps / (input_len + per_seq * steps)), 1.0)
        prefill = max(budget - per_seq * decoding, 1.0)
        return Schedule().add(1, e.step(decode_seqs=decoding, decode_context=ctx, prefill_tokens=prefill,
                                        prefill_prefix=0, prefill_seqs=max(prefill / input_len, 1.0)))
    chunks = replace(e, max_num_batched_tokens=room).chunks(input_len)
    s = Schedule().extend(decode, max(1.0 - arriving * len(chunks), 0.0))
    done = 0.0
    for n in chunks:
        s.add(arriving, e.step(decode_seqs=concurrency, decode_context=ctx, prefill_tokens=n,
                               prefill_prefix=done, prefill_seqs=1))
        done += n
    return s


def ttft_schedule(e: Engine, prompt_len: int, decoding: float = 0, context: float = 0,
                  served: bool = True) -> Schedule:
    """Time to first token of one request arriving while ``decoding`` others run: half a step's wait for the
    running step to finish (when any run), then its prompt in chunks mixed with their decodes (chunked prefill),
    or alone; plus the API server's per-request cost when ``served``."""
    s = Schedule(api=1.0 if served else 0.0)
    if decoding > 0:
        s.extend(decode_schedule(e, decoding, context), 0.5)
    if e.chunked:
        s.extend(prefill_schedule(e, 1, prompt_len, decoding=decoding, context=context))
    else:
        s.extend(prefill_schedule(e, 1, prompt_len))
    return s


def _wave_chunks(e: Engine, requests: int, prompt_len: int) -> tuple[list[StepWork], list[int]]:
    """The prefill steps of ``requests`` prompts arriving together, in chunks of max_num_batched_tokens, and the
    step at which each request's prompt completes (its first token). With chunked prefill the requests already
    started decode in every later chunk's step."""
    ends = np.cumsum(e.chunks(requests * prompt_len))
    done_at = [int(np.searchsorted(ends, (i + 1) * prompt_len - 1e-6)) for i in range(requests)]
    started = (lambda j: sum(1 for d in done_at if d < j)) if e.chunked else (lambda _: 0)
    return _chunk_steps(e, requests, prompt_len, started, prompt_len), done_at


def _waves(requests: int, running: int | None) -> tuple[int, float, float]:
    """Requests beyond what the engine runs at once (``running``: max_num_seqs or the KV cache) wait for a whole
    earlier wave: (requests per wave, mean waves waited, median request's waves waited)."""
    b = max(1, min(requests, running or requests))
    return b, sum(i // b for i in range(requests)) / requests, float(((requests - 1) // 2) // b)


def burst_ttft_schedule(e: Engine, requests: int, prompt_len: int, statistic: Literal["mean", "median"],
                        served: bool = True, running: int | None = None, output_len: int = 1) -> Schedule:
    """Time to first token when ``requests`` prompts arrive together: prefill chunks run one after another and
    request i's first token comes with the chunk that completes its prompt; the mean (or median) over them.
    Where the engine runs fewer at once (``running``), the others wait for the earlier waves to finish: a
    wave is its prefill and ``output_len − 1`` decode steps."""
    b, mean_waits, median_waits = _waves(requests, running)
    chunk_steps, done_at = _wave_chunks(e, b, prompt_len)
    s = Schedule(api=1.0 if served else 0.0)
    if statistic == "median":
        k = sorted(done_at)[(b - 1) // 2]
        weights = [1.0 if j <= k else 0.0 for j in range(len(chunk_steps))]
    else:
        weights = [sum(1 for d in done_at if d >= j) / b for j in range(len(chunk_steps))]
    for wt, w in zip(weights, chunk_steps, strict=True):
        s.add(wt, w)
    waits = median_waits if statistic == "median" else mean_waits
    if waits:
        for w in chunk_steps:
            s.add(waits, w)
        s.extend(decode_schedule(e, b, prompt_len + output_len / 2),
                 waits * max(output_len - 1, 0) / e.tokens_per_step)
    return s


def burst_tpot_schedule(e: Engine, requests: int, prompt_len: int, output_len: int,
                        statistic: Literal["mean", "median"], running: int | None = None) -> Schedule:
    """Time per output token of requests that arrive together (in waves of what the engine runs at once): after
    a request's first token, the prefill chunks of the prompts behind it in its wave still run, each a step that
    also yields its next token; the rest of its tokens are plain decode steps. The mean (or the median request's)
    over the wave, per output token after the first.

    Requests beyond the first wave (``requests > running``) are admitted one by one as running ones finish, into an
    engine that stays full: theirs is the steady state's TPOT (:func:`served_step_schedule` at ``running``), every
    step carrying the prompts of the requests that replace the finished ones. The mean weighs the first wave and
    the rest by their share of the requests; the median request is of the first wave only if it holds half of them."""
    b, _, _ = _waves(requests, running)
    if b < requests:
        first = burst_tpot_schedule(e, b, prompt_len, output_len, statistic)
        steady = served_step_schedule(e, b, prompt_len, output_len)
        if statistic == "median":
            return first if (requests - 1) // 2 < b else steady
        return Schedule().extend(first, b / requests).extend(steady, 1 - b / requests)
    chunk_steps, done_at = _wave_chunks(e, b, prompt_len)
    decode = decode_schedule(e, b, prompt_len + output_len / 2)
    n = max(output_len - 1, 1)
    order = sorted(range(b), key=lambda i: done_at[i])
    chosen = [order[(b - 1) // 2]] if statistic == "median" else list(range(b))
    s = Schedule()
    weights = [0.0] * len(chunk_steps)
    decode_weight = 0.0
    for i in chosen:
        later = list(range(done_at[i] + 1, len(chunk_steps)))[:n]
        for m in later:
            weights[m] += 1.0 / (len(chosen) * n)
        decode_weight += max(n - len(later), 0) / (len(chosen) * n)
    for wt, w in zip(weights, chunk_steps, strict=True):
        s.add(wt, w)
    s.extend(decode, decode_weight)
    # Under speculative decoding a step yields a request the acceptance length's tokens, not one.
    return s if e.speculation is None else Schedule().extend(s, 1 / e.tokens_per_step)


def queued_ttft_schedule(e: Engine, concurrency: int, running: int, prompt_len: int, output_len: int) -> Schedule:
    """TTFT of a closed loop that keeps ``concurrency`` requests in flight where the engine runs ``running``
    (< concurrency) at once: by Little's law each request waits (concurrency / running − 1) request lifetimes
    in the queue, then arrives at a running batch as in :func:`ttft_schedule`."""
    ctx = prompt_len + output_len / 2
    s = ttft_schedule(e, prompt_len, decoding=running - 1, context=ctx)
    life = served_step_schedule(e, running, prompt_len, output_len)
    return s.extend(life, (concurrency / running - 1) * output_len)


# -- predictions with their named terms and intervals ---------------------------------------------------

Regime = Literal["dense", "tensor_parallel", "moe", "quantized", "ttft"]


def regime(a: Architecture, tp: int, kind: Literal["decode", "ttft"] = "decode") -> Regime:
    """Which corpus regime's residuals bound a prediction (the first that applies)."""
    if kind == "ttft":
        return "ttft"
    if a.moe:
        return "moe"
    if kernel_family(a) in ("int4", "int8", "fp4", "mxfp4", "nf4"):
        return "quantized"
    if tp > 1:
        return "tensor_parallel"
    return "dense"


def interval_for(r: str, c: LatencyConstants | None = None) -> Interval | None:
    """The interval of a regime, the pooled decode one where the regime has too few records."""
    c = c or shipped_constants()
    iv = c.intervals.get(r)
    if iv is None or iv.n < 6:
        iv = c.intervals.get("decode" if r != "ttft" else "ttft")
    return iv


def describe(time_s: float, r: str, c: LatencyConstants | None = None) -> dict[str, object]:
    """A prediction's interval and what it was checked against, for the plan's JSON."""
    iv = interval_for(r, c)
    if iv is None:
        return {"interval_s": None, "checked_against": "no corpus fit shipped: the priors alone, unchecked"}
    return {"interval_s": [time_s * iv.low_ratio, time_s * iv.high_ratio],
            "checked_against": (f"{iv.n} published vLLM measurements from {iv.sources} sources ({r} regime), each "
                                f"predicted without its source: median |error| {100 * iv.median_abs_error:.0f}%, "
                                f"measured/predicted {iv.low_ratio:.2f}–{iv.high_ratio:.2f} ({interval_words(iv)})")}


def named_terms(s: Schedule, c: LatencyConstants | None = None, overrides: Overrides | None = None
                ) -> dict[str, float]:
    t = s.terms(c, overrides)
    return {k: v for k, v in t.items() if v or k in TERMS}


def dominant_term(terms: Mapping[str, float]) -> str:
    """The largest term, by name without its unit ("weights", "floor", …)."""
    return max((k for k in TERMS), key=lambda k: terms.get(k, 0.0)).removesuffix("_s")
