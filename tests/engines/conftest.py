"""What the engine tests share: the demo sweep (``sweeps/tiny-cpu.yaml``), run once for the whole session.

The demo is the suite's longest run (four engines, a served engine, every phase); the tests that only read its
records (the results directory, exact capacity, saturation, telemetry, the serve phase, the report) share it.
A test that must change a results directory runs a sweep of its own.
"""

import pytest
from helpers import ROOT, kvprof

from profiler.preflight import validate


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory):
    """(results directory, plan) of the demo sweep as a user runs it."""
    out = tmp_path_factory.mktemp("tiny-cpu")
    proc = kvprof("sweep", "sweeps/tiny-cpu.yaml", "--out", str(out), timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    # The plan as the sweep ran it: on a CPU without AVX-512 its fp8 engines are skipped.
    return out, validate(ROOT / "sweeps" / "tiny-cpu.yaml")[1]
