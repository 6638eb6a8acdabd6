import ctypes
import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# A suite started as a background job (`make test &` in a script) inherits SIGINT ignored, and an ignored
# signal stays ignored across exec: every kvprof the tests start would ignore the Ctrl-C the interrupt tests
# send it and each would wait out its timeout. Python's own handler here is reset to the default in every
# child at exec, so the children handle Ctrl-C as they would from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A pytest-xdist worker is given COLUMNS=80 and LINES=24 for its own output. The CLI's rich consoles read them when
# they are made (at import) and would keep 80 columns whatever a test asks for; without them a worker's CLI sizes
# its tables as in a one-process run.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


@pytest.fixture
def fast_pdf(monkeypatch):
    """Pages are built from the data as in a real report; only drawing them into the PDF is skipped."""
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    monkeypatch.setattr(PdfPages, "savefig", lambda self, figure=None, **kw: None)
    monkeypatch.setattr(Figure, "tight_layout", lambda self, *a, **kw: None)


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
    """The fault-injection table: each fault, what the test observed, and whether the sweep survived it."""
    try:
        from fault_log import FAULTS, _n
    except ImportError:
        return
    if not FAULTS:
        return
    tr = terminalreporter
    tr.section("fault injection")
    rows = [(f.fault, f"{','.join(map(str, f.exits)) or '-'} ({','.join(map(str, f.want_exits))})", _n(f.ok_before),
             f"{_n(f.ok_after)} ({f.want_ok_after})", "?" if f.orphans is None else str(len(f.orphans)),
             "?" if f.lost is None else str(f.lost), "yes" if f.survived else "NO", f.detail) for f in FAULTS]
    head = ("fault", "exits (want)", "ok before", "ok after (want)", "orphans", "lost", "survived", "detail")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    for r in [head, *rows]:
        cells = [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:-1], widths[1:], strict=True))]
        tr.write_line("  ".join([*cells, r[-1]]))
    lost = sum(f.lost or 0 for f in FAULTS)
    unknown = sum(f.lost is None for f in FAULTS)
    tr.write_line(f"{len(FAULTS)} faults injected, {sum(f.survived for f in FAULTS)} survived, {lost} points lost"
                  + (f" ({unknown} not observed to the end)" if unknown else ""))
