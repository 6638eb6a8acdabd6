"""The results directory on disk: atomic writes, lock, resume.

What each file holds is defined once, in :mod:`analysis.results_schema`; every
record is written through those models here, so nothing off-contract reaches
disk. Every file goes to a temporary name in the same directory, is fsynced,
then renamed into place, so a crash never leaves a half-written record. A point
whose record exists, follows the contract and says "ok" is done; anything else
is rerun.
"""

from __future__ import annotations

import fcntl
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
        self._lock_fd: int | None = None

    def is_record(self, path: str | Path) -> bool:
        """Whether ``path`` is one of this directory's measured records or inputs (manifest, spec, probe,
        engine/point records, telemetry, jobs, logs): what no command may write over."""
        p, root = Path(path).resolve(), self.root.resolve()
        if p in (self.manifest.resolve(), root / "spec.yaml", root / "probe.json"):
            return True
        return any(p.is_relative_to(d.resolve()) for d in (self.points, self.engines, self.telemetry,
                                                             self.jobs, self.logs))

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
        """Take the directory for this process; refuse if a live sweep holds it.

        The lock is the kernel's (flock on LOCK_NAME), held until `unlock` or this
        process's death, so a sweep killed by anything frees the directory and no
        "stale" judgement is ever made. The file's content, this holder's pid and
        host, only words the refusal; the file is never deleted or replaced, since
        a lock on a deleted inode would no longer exclude a sweep that opens the path.
        """
        path = self.root / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot create the lock file {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _holder(fd)
            os.close(fd)
            raise StoreError(f"{self.root} is in use by a running sweep ({who}); "
                             "wait for it or choose another --out") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode(), 0)
        except OSError as exc:
            os.close(fd)  # releases the lock
            raise StoreError(f"cannot write the lock file {path}: {exc.strerror or exc}") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # the next holder's pid must not be read as ours meanwhile
        except OSError:
            pass
        finally:
            os.close(fd)  # releases the lock

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


def _holder(fd: int) -> str:
    """Who holds the lock on fd's file: "pid N on HOST" from the file, or from /proc/locks
    while the holder has not written the file yet."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0))
    except (OSError, ValueError):
        holder = None
    if isinstance(holder, dict) and isinstance(holder.get("pid"), int):
        return f"pid {holder['pid']} on {holder.get('host') or 'an unknown host'}"
    pid = _flock_owner(fd)
    return f"pid {pid} on {socket.gethostname()}" if pid else "pid unknown"


def _flock_owner(fd: int) -> int | None:
    """The pid holding an flock on fd's file, from Linux's /proc/locks (None elsewhere)."""
    st = os.fstat(fd)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in table.splitlines():
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 4621 fe:00:2146449 0 EOF"; "->" marks a waiter
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == ident and fields[4].isdigit():
            return int(fields[4])
    return None
