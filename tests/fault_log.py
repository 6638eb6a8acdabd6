"""Faults injected by tests/engines/test_faults.py and what each test observed; conftest prints the table.

A test opens its row (`record`) before it injects the fault and fills in what it observes as it
goes: the exit code of every run from the fault on, the points on disk with status ok when the
fault struck and after recovery, the engine children of the results directory still alive at the
end. "Points lost" and "survived" are computed from those observations only, so a regression
shows in the table, and a test that fails half-way still shows there, with what it saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FAULTS: list[Fault] = []


@dataclass
class Fault:
    fault: str
    want_exits: list[int | str]  # what each run from the fault on should end with (exit code or outcome)
    want_ok_after: int  # points that should be ok on disk after recovery
    exits: list[int | str] = field(default_factory=list)
    ok_before: dict[str, Any] | None = None  # point id → measurements, ok on disk when the fault struck
    ok_after: dict[str, Any] | None = None  # the same after recovery
    orphans: list[int] | None = None  # engine children of the results directory left alive
    detail: str = ""

    @property
    def lost(self) -> int | None:
        """Points ok when the fault struck that are missing, failed or measured anew after recovery."""
        if self.ok_before is None or self.ok_after is None:
            return None
        return sum(1 for pid, measured in self.ok_before.items() if self.ok_after.get(pid) != measured)

    @property
    def survived(self) -> bool:
        return (self.exits == self.want_exits and self.orphans == [] and self.lost == 0
                and self.ok_after is not None and len(self.ok_after) == self.want_ok_after)

    def summary(self) -> str:
        return (f"{self.fault}: exits {self.exits} (want {self.want_exits}), ok before "
                f"{_n(self.ok_before)}, ok after {_n(self.ok_after)} (want {self.want_ok_after}), "
                f"orphans {self.orphans}, lost {self.lost}")


def _n(points: dict[str, Any] | None) -> str:
    return "?" if points is None else str(len(points))


def record(fault: str, want_exits: list[int | str], want_ok_after: int) -> Fault:
    """Open the table row for one injected fault; the test fills in its observations."""
    row = Fault(fault, list(want_exits), want_ok_after)
    FAULTS.append(row)
    return row
