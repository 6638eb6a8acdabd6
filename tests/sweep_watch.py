"""Watching a sweep from outside, as the fault tests do: the records on disk, and the threads of an engine child's
process group (stopped, or exiting) read from /proc."""

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from profiler.spec import EngineConfig, Point


def ok_points(out: Path) -> dict[str, dict]:
    """Point id → measurements of every record on disk whose status is ok."""
    ok = {}
    for p in (out / "points").glob("*.json"):
        try:
            rec = json.loads(p.read_text())
        except ValueError:
            continue  # a truncated record is not an ok point
        if rec.get("status") == "ok":
            ok[rec["id"]] = rec["measurements"]
    return ok


def records(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (out / "points").glob("*.json")}


def group_states(pgid: int) -> list[str]:
    """The state letter of every thread of every process in the process group."""
    states = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[2]) != pgid:
                continue
            tasks = list((proc / "task").iterdir())
        except (OSError, ValueError):
            continue  # gone meanwhile
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            states.append(stat[stat.rindex(")") + 2])
    return states


def stopped(pgid: int, timeout: float = 60) -> bool:
    """True once every thread in the group is stopped, twice in a row (so none was being created);
    False if the group is exiting (a zombie or nothing left): it was caught too late."""
    deadline, stable = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        states = group_states(pgid)
        if not states or any(s in "ZX" for s in states):
            return False
        stable = stable + 1 if all(s in "Tt" for s in states) else 0
        if stable == 2:
            return True
        time.sleep(0.01)
    raise AssertionError(f"process group {pgid} did not stop within {timeout} s of SIGSTOP")


def started(out: Path, engine_id: str) -> set[str]:
    log = out / "logs" / f"{engine_id}.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return set(re.findall(r"^KVPROF_POINT_START (\S+)$", text, re.M))


@dataclass
class Frozen:
    pid: int  # the engine child; its process group is stopped
    engine: EngineConfig
    point: Point  # in flight: logged as started, no record on disk
    ok_before: dict[str, dict]  # ok on disk while the group is stopped
