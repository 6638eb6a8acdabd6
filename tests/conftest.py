import ctypes
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _nvidia_gpu() -> bool:
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
        return True
    try:  # sandboxes may hide /dev/nvidia*; the driver's library is the other sign
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def pytest_collection_modifyitems(config, items):
    """`gpu` tests need an NVIDIA GPU; skip them cleanly elsewhere."""
    if _nvidia_gpu():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The fault-injection table: faults injected, survived, points lost."""
    try:
        from fault_log import FAULTS
    except ImportError:
        return
    if not FAULTS:
        return
    tr = terminalreporter
    tr.section("fault injection")
    tr.write_line(f"{'fault':<58} {'survived':>8} {'points lost':>11}  detail")
    for f in FAULTS:
        tr.write_line(f"{f['fault']:<58} {'yes' if f['survived'] else 'NO':>8} {f['points_lost']:>11}  {f['detail']}")
    lost = sum(f["points_lost"] for f in FAULTS)
    tr.write_line(f"{len(FAULTS)} faults injected, {sum(f['survived'] for f in FAULTS)} survived, "
                  f"{lost} points lost")
