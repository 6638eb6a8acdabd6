"""What every test file shares: where the repository, the tests and their fixtures are, and the kvprof command as
a subprocess (what a user types, in its own process, from the repository's root)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
KVPROF = [sys.executable, "-m", "profiler.cli"]


def kvprof(*args: str, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    """``kvprof ARGS`` run to its end from the repository's root, its output captured as text."""
    return subprocess.run([*KVPROF, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kw)


def assert_reported_in_excerpt(reported: dict, excerpt: str) -> None:
    """Every number a published record reports appears in its verbatim excerpt as printed (at least its leading
    digits), so a transcription can be checked against the source's own lines."""
    import re

    digits = re.sub(r"[,\s]", "", excerpt)
    for field, value in reported.items():
        lead = f"{value:.15g}"[:4].rstrip(".")
        assert lead in digits, f"{field} {value} is not in the excerpt"


def sweep(spec: str, out: Path, timeout: float = 900) -> Path:
    """``kvprof sweep sweeps/SPEC --out OUT``, which must succeed; its results directory."""
    proc = kvprof("sweep", str(ROOT / "sweeps" / spec), "--out", str(out), timeout=timeout)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return out


# Values a config.json key may hold however odd: each read, or refused by name, never a traceback.
ODD_CONFIG_VALUES = [None, -1, 0, 0.5, 1e30, True, "x", [], [1, "a"], {}]


def read_or_refuse(configs) -> None:
    """Read each config.json dict; UnsupportedArchitecture (a refusal by name) is fine, any other error fails."""
    from analysis.model.architecture import Architecture, UnsupportedArchitecture

    for cfg in configs:
        with contextlib.suppress(UnsupportedArchitecture):
            Architecture.from_config(cfg, "odd")


def transformers_build(cfg: dict):
    """transformers' own config and causal-LM parameter count for a config.json dict (built on the meta device,
    nothing allocated): the independent count a family reader is held to. A weight shared by several layers
    counts once, as ``model.parameters()`` yields it once."""
    import torch
    import transformers

    config = transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items()
                                                                     if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return config, sum(t.numel() for t in model.parameters())
