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
