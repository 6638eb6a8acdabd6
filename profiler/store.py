"""The results directory (DESIGN.md §4, schema v1): atomic writes, lock, resume.

Every file goes to a temporary name in the same directory, is fsynced, then
renamed into place, so a crash never leaves a half-written record. A point
whose record exists, parses and says "ok" is done; anything else is rerun.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
LOCK_NAME = ".kvprof.lock"


class StoreError(RuntimeError):
    """The results directory cannot be used (locked, not writable)."""


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any | None:
    """The parsed file, or None when it is missing or corrupt (a truncated write)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class ResultsDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.points = self.root / "points"
        self.engines = self.root / "engines"
        self.logs = self.root / "logs"
        self.telemetry = self.root / "telemetry"
        self.manifest = self.root / "manifest.json"
        self._locked = False

    def prepare(self) -> None:
        """Create the layout; fail early and clearly when the directory is not writable."""
        try:
            for d in (self.root, self.points, self.engines, self.logs, self.telemetry):
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

    def point_status(self, point_id: str) -> str | None:
        """'ok', a failure status, 'corrupt', or None when never run."""
        path = self.point_path(point_id)
        if not path.exists():
            return None
        rec = read_json(path)
        if not isinstance(rec, dict) or "status" not in rec:
            return "corrupt"
        return rec["status"]

    def write_point(self, record: dict[str, Any]) -> None:
        atomic_write_json(self.point_path(record["id"]), record)

    def write_engine(self, record: dict[str, Any]) -> None:
        atomic_write_json(self.engine_path(record["id"]), record)

    def update_manifest(self, **fields: Any) -> dict[str, Any]:
        current = read_json(self.manifest) or {"schema_version": SCHEMA_VERSION}
        current.update(fields)
        atomic_write_json(self.manifest, current)
        return current


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
