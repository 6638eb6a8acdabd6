"""The results directory on disk: atomic writes, lock, resume.

What each file holds is defined once, in :mod:`analysis.results_schema`; every
record is written through those models here, so nothing off-contract reaches
disk. Every file goes to a temporary name in the same directory, is fsynced,
then renamed into place, so a crash never leaves a half-written record. A point
whose record exists, follows the contract and says "ok" is done; anything else
is rerun.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from analysis.results_schema import (
    SCHEMA_VERSION,
    EngineRecord,
    FailedPoint,
    Manifest,
    ResultsError,
    atomic_write_bytes,
    load_point,
)

__all__ = ["SCHEMA_VERSION", "ResultsDir", "StoreError", "atomic_write_bytes", "atomic_write_json",
           "atomic_write_text", "read_json"]

LOCK_NAME = ".kvprof.lock"


class StoreError(RuntimeError):
    """The results directory cannot be used (locked, not writable)."""


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any | None:
    """The parsed file, or None when it is missing or corrupt (a truncated write)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class ResultsDir:
    """One results directory: its layout (analysis.results_schema), records in and out, the lock."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.points = self.root / "points"
        self.engines = self.root / "engines"
        self.logs = self.root / "logs"
        self.telemetry = self.root / "telemetry"
        self.jobs = self.root / "jobs"  # the engine children's instructions: kept apart from the records
        self.manifest = self.root / "manifest.json"
        self._locked = False

    def prepare(self) -> None:
        """Create the layout; fail early and clearly when the directory is not writable."""
        try:
            for d in (self.root, self.points, self.engines, self.logs, self.telemetry, self.jobs):
                d.mkdir(parents=True, exist_ok=True)
            probe = self.root / ".kvprof-write-probe"
            atomic_write_text(probe, "ok\n")
            probe.unlink()
        except OSError as exc:
            raise StoreError(f"results directory {self.root} is not writable: {exc.strerror or exc}") from None

    # -- lock ------------------------------------------------------------------
    def lock(self) -> None:
        """Take the directory for this process; refuse if a live sweep holds it."""
        path = self.root / LOCK_NAME
        while True:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = read_json(path) or {}
                pid = holder.get("pid")
                if isinstance(pid, int) and holder.get("host") == socket.gethostname() and _alive(pid):
                    raise StoreError(f"{self.root} is in use by a running sweep (pid {pid}); "
                                     "wait for it or choose another --out") from None
                path.unlink(missing_ok=True)  # stale: its holder is gone
                continue
            os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
            os.close(fd)
            self._locked = True
            return

    def unlock(self) -> None:
        if self._locked:
            (self.root / LOCK_NAME).unlink(missing_ok=True)
            self._locked = False

    # -- records ---------------------------------------------------------------
    def point_path(self, point_id: str) -> Path:
        return self.points / f"{point_id}.json"

    def engine_path(self, engine_id: str) -> Path:
        return self.engines / f"{engine_id}.json"

    def job_path(self, engine_id: str) -> Path:
        return self.jobs / f"{engine_id}.json"

    def read_point(self, point_id: str) -> Any | None:
        """The point's record, or None when missing or off-contract (a truncated write: rerun it)."""
        path = self.point_path(point_id)
        try:
            return load_point(path)
        except ResultsError:
            return None

    def point_status(self, point_id: str) -> str | None:
        """'ok', a failure status, 'corrupt' (unreadable or off-contract), or None when never run."""
        path = self.point_path(point_id)
        if not path.exists():
            return None
        rec = self.read_point(point_id)
        return "corrupt" if rec is None else rec.status

    def read_engine(self, engine_id: str) -> EngineRecord | None:
        """The engine's record, or None when missing or off-contract."""
        path = self.engine_path(engine_id)
        if not path.exists():
            return None
        try:
            return EngineRecord.load_file(path)
        except ResultsError:
            return None

    def write_point(self, record: Any) -> None:
        """A DecodePoint, SaturationPoint or FailedPoint, validated again (fields may have been
        assigned since it was built): nothing off-contract reaches disk."""
        record = type(record).model_validate(record.model_dump(warnings=False))
        record.save_file(self.point_path(record.id))

    def write_failure(self, base: dict[str, Any], status: str, message: str, **extra: Any) -> FailedPoint:
        rec = FailedPoint(**base, status=status, error_class=status, message=message, **extra)
        self.write_point(rec)
        return rec

    def write_engine(self, record: EngineRecord) -> None:
        record = EngineRecord.model_validate(record.model_dump(warnings=False))
        record.save_file(self.engine_path(record.id))

    def read_manifest(self) -> Manifest | None:
        if not self.manifest.exists():
            return None
        return Manifest.load_file(self.manifest)

    def update_manifest(self, **fields: Any) -> Manifest:
        """Merge `fields` into manifest.json (created on the first call, which must name the sweep)."""
        current = self.read_manifest()
        data = (current.model_dump() if current else {"schema_version": SCHEMA_VERSION}) | fields
        manifest = Manifest.model_validate(data)
        manifest.save_file(self.manifest)
        return manifest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
