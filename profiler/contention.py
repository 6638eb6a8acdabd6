"""What else competed for the machine while a point was measured (issue #25, item 7).

A decode step timed while another job holds a CPU core (vLLM's CPU kernels spin on every core; the GPU
engine's host loop shares the cores too) or while another process runs on the GPU measures that job, not the
model. Each point records it, so the analysis marks a contaminated point rather than fitting it:

* ``other_cpu_cores``: the CPU time every other process on the host used during the point, over its wall
  time: the mean number of cores they kept busy (0 on a quiet machine; 1.0 = another job held a whole core).
* ``gpu_other_processes``: processes other than this one that NVML lists as computing on the engine's GPUs
  (None where NVML cannot be read: a CPU engine, or no driver).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

import psutil


def _busy_cpu_s() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _own_cpu_s() -> float:
    """CPU seconds of this process and its children (vLLM's workers when it runs them out of process)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            continue
    return total


@dataclass(frozen=True)
class Snapshot:
    wall: float
    busy_cpu_s: float
    own_cpu_s: float


def snapshot() -> Snapshot:
    return Snapshot(time.perf_counter(), _busy_cpu_s(), _own_cpu_s())


def other_cpu_cores(start: Snapshot, end: Snapshot) -> float | None:
    """Mean cores other processes kept busy between two snapshots (None over no time)."""
    wall = end.wall - start.wall
    if wall <= 0:
        return None
    other = (end.busy_cpu_s - start.busy_cpu_s) - (end.own_cpu_s - start.own_cpu_s)
    return max(other, 0.0) / wall


def gpu_other_processes() -> int | None:
    """Processes other than this one (and its children) computing on the visible GPUs, per NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        mine = {os.getpid(), *(c.pid for c in psutil.Process().children(recursive=True))}
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        count = pynvml.nvmlDeviceGetCount()
        indices = [int(i) for i in visible.split(",") if i.strip().isdigit()] if visible else range(count)
        others = set()
        for i in indices:
            if i >= count:
                continue
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid not in mine:
                    others.add(proc.pid)
        return len(others)
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def measure(start: Snapshot, gpu: bool) -> dict[str, Any]:
    """The contention fields of a point measured since ``start``."""
    return {"other_cpu_cores": other_cpu_cores(start, snapshot()),
            "gpu_other_processes": gpu_other_processes() if gpu else None}
