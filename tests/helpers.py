"""What every test file shares: where the repository, the tests and their fixtures are, and the kvprof command as
a subprocess (what a user types, in its own process, from the repository's root)."""

from __future__ import annotations

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
