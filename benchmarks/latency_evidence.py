"""The latency model against every published measurement in the corpus (issue #25).

    python benchmarks/latency_evidence.py [--json]

Prints each record's measured per-step figure beside the prediction of a fit that did not see its source
(leave-one-source-out) and the bare roofline's ratio, then the median errors, the per-source medians, the
records beyond 25 %, the one-point calibration check and the intervals the plan quotes. The same as
``python -m analysis.latency.fit``; ``--write`` there refits analysis/catalog/latency.yaml.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.latency.fit import main

if __name__ == "__main__":
    raise SystemExit(main([a for a in sys.argv[1:] if a != "--write"]))
