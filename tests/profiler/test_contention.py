"""Measurements fit to be fitted (issue #25 item 7): what competed for the machine during a point, which points
are flagged and left out of the fit, and the decode page's 25th–75th percentile bars."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

from analysis.measured.pipeline import analyse
from analysis.measured.theory_vs_measured import flag_reason
from analysis.report.pages.common import spread_bars
from analysis.results.load import load
from profiler.contention import Snapshot, other_cpu_cores, snapshot
from tests.synthetic_results import make_results


def test_other_cores_are_the_hosts_busy_time_less_our_own_over_the_wall_time():
    # 2 s of wall time; the host's busy CPU time grew by 3.0 s, ours by 1.0 s: others kept 1.0 core busy
    start, end = Snapshot(10.0, 100.0, 40.0), Snapshot(12.0, 103.0, 41.0)
    assert other_cpu_cores(start, end) == pytest.approx(1.0)
    # our own time is never counted as another's; a window of no time says nothing
    assert other_cpu_cores(Snapshot(0.0, 5.0, 5.0), Snapshot(1.0, 6.0, 6.0)) == 0.0
    assert other_cpu_cores(start, start) is None


def test_a_busy_loop_beside_the_window_is_seen():
    # Started through a shell that exits at once, so the loop is not our child: another process, as a job
    # beside a sweep is (our own children count as ours: vLLM's workers).
    pid = int(subprocess.run(["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True).stdout)
    try:
        child = psutil.Process(pid)
        assert child.pid not in {c.pid for c in psutil.Process().children(recursive=True)}
        deadline = time.monotonic() + 30
        while sum(child.cpu_times()[:2]) < 0.2 and time.monotonic() < deadline:  # it is running before we look
            time.sleep(0.05)
        start = snapshot()
        time.sleep(1.0)
        # the loop holds about one core (anything else on the machine only adds to what others used)
        assert other_cpu_cores(start, snapshot()) > 0.5
    finally:
        psutil.Process(pid).kill()


@pytest.mark.parametrize("row, reason", [
    ({"decode_step_s": 2.4e-3, "decode_step_p25_s": 2.35e-3, "decode_step_p75_s": 2.45e-3}, None),
    # the demo sweep beside another job: a 19 ms median with steps from 2.4 to 30 ms
    ({"decode_step_s": 19e-3, "decode_step_p25_s": 2.4e-3, "decode_step_p75_s": 30e-3},
     "steps spread 145% of their median (IQR)"),
    # half the median is the line: a tiny model's steps on a shared CPU spread 10-40 % unloaded
    ({"decode_step_s": 10e-3, "decode_step_spread_s": 4e-3}, None),
    ({"decode_step_s": 10e-3, "decode_step_spread_s": 6e-3}, "steps spread 60% of their median (IQR)"),
    ({"decode_step_s": 10e-3, "decode_step_spread_s": 1e-3, "other_cpu_cores": 0.96},
     "other processes kept 1.0 CPU cores busy"),
    ({"decode_step_s": 10e-3, "other_cpu_cores": 0.2, "gpu_other_processes": 2}, "2 other process(es) on the GPU"),
])
def test_noisy_or_contended_points_are_flagged_with_the_reason(row, reason):
    assert flag_reason(row) == reason


def test_bars_run_from_the_25th_to_the_75th_percentile_and_never_below_zero():
    e = pd.DataFrame({"decode_step_s": [19e-3, 10e-3], "decode_step_p25_s": [2.4e-3, None],
                      "decode_step_p75_s": [30e-3, None], "decode_step_spread_s": [27.6e-3, 200e-3]})
    lo, hi = spread_bars(e)
    assert lo[0] == pytest.approx(16.6e-3) and hi[0] == pytest.approx(11e-3)
    # a record without percentiles: half its IQR each way, the lower bar stopped at zero
    assert lo[1] == pytest.approx(10e-3) and hi[1] == pytest.approx(100e-3)


def test_a_contended_point_is_left_out_of_the_fit_unless_asked(tmp_path):
    make_results(tmp_path)
    points = sorted((tmp_path / "points").glob("*.json"))
    decode = [p for p in points if json.loads(p.read_text()).get("point", {}).get("phase") == "decode"]
    rec = json.loads(decode[0].read_text())
    rec["measurements"]["other_cpu_cores"] = 1.2
    decode[0].write_text(json.dumps(rec))
    a = analyse(load(tmp_path))
    flagged = a.decode[a.decode["flagged"].notna()]
    assert list(flagged["point_id"]) == [rec["id"]]
    assert a.fit.n == len(a.decode) - 1
    assert analyse(load(tmp_path), include_flagged=True).fit.n == len(a.decode)
