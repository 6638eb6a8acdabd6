"""The results directory on disk: atomic writes, lock, resume.

What each file holds is defined once, in :mod:`analysis.results.schema`; every
record is written through those models here, so nothing off-contract reaches
disk. Every file goes to a temporary name in the same directory, is fsynced,
then renamed into place, so a crash never leaves a half-written record. A point
whose record exists, follows the contract and says "ok" is done; anything else
is rerun.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from analysis.results.schema import (
    SCHEMA_VERSION,
    EngineRecord,
    FailedPoint,
    Manifest,
    PointSettings,
    ResultsError,
    ServerRecord,
    atomic_write_bytes,
    load_point,
)

__all__ = ["SCHEMA_VERSION", "ResultsDir", "StoreError", "atomic_write_bytes", "atomic_write_json",
           "atomic_write_text", "read_json"]

LOCK_NAME = ".kvprof.lock"
SUPERSEDED = "superseded"  # where `sweep --force` keeps the spec and manifest of the sweep it replaced
READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)


class StoreError(RuntimeError):
    """The results directory cannot be used (locked, not writable)."""


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


LOG_TAIL_CHARS = 4000


def log_tail(path: Path, n: int = LOG_TAIL_CHARS) -> str:
    """The last ``n`` bytes of a child's log as text ("" when it cannot be read): what a failure record keeps."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def read_json(path: Path) -> Any | None:
    """The parsed file, or None when it is missing or corrupt (a truncated write)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class ResultsDir:
    """One results directory: its layout (analysis.results.schema), records in and out, the lock."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.points = self.root / "points"
        self.engines = self.root / "engines"
        self.servers = self.root / "servers"  # the serve phase's OpenAI servers, one per engine configuration
        self.tokenizers = self.root / "tokenizers"  # synthetic tokenizers the servers load
        self.logs = self.root / "logs"
        self.telemetry = self.root / "telemetry"
        self.jobs = self.root / "jobs"  # the engine children's instructions: kept apart from the records
        self.manifest = self.root / "manifest.json"
        self.spec = self.root / "spec.yaml"
        self.superseded = self.root / SUPERSEDED
        self._lock_fd: int | None = None

    def is_record(self, path: str | Path) -> bool:
        """Whether ``path`` is one of this directory's measured records or inputs (manifest, spec, probe,
        engine/point records, telemetry, jobs, logs, a superseded sweep's spec and manifest): what no command
        may write over."""
        p, root = Path(path).resolve(), self.root.resolve()
        if p in (self.manifest.resolve(), root / "spec.yaml", root / "probe.json", root / LOCK_NAME):
            return True
        return any(p.is_relative_to(d.resolve()) for d in (self.points, self.engines, self.servers, self.telemetry,
                                                             self.jobs, self.logs, self.superseded, self.tokenizers))

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
    def lock(self, command: str = "sweep") -> None:
        """Take the directory for this process (a sweep writing it, or ``command``); refuse if another holds it.

        The lock is the kernel's (flock on LOCK_NAME), held until `unlock` or this
        process's death, so a sweep killed by anything frees the directory and no
        "stale" judgement is ever made. The file's content, this holder's pid, host and
        command, only words the refusal; the file is never deleted or replaced, since
        a lock on a deleted inode would no longer exclude a sweep that opens the path.
        """
        path = self.root / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot create the lock file {path}: {exc.strerror or exc}") from None
        self._take(fd, command, "wait for it or choose another --out" if command == "sweep" else
                   "wait for it to finish and run this again")
        try:
            os.ftruncate(fd, 0)
            holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": command}
            os.pwrite(fd, json.dumps(holder).encode(), 0)
        except OSError as exc:
            self.unlock()
            raise StoreError(f"cannot write the lock file {path}: {exc.strerror or exc}") from None

    def lock_to_read(self, command: str = "report") -> bool:
        """Take the lock to read the directory (a report): refused while a sweep (or another report) holds it.

        Returns False, holding nothing, where the directory cannot be written and has no lock file:
        every sweep creates that file before it writes anything, so a directory without one that this
        process cannot write (a read-only archive or file system) is not being written by a sweep. Where
        the file exists but cannot be written, it is locked through a read-only descriptor (flock needs
        none other) and left as it is.
        """
        path = self.root / LOCK_NAME
        try:
            self.lock(command)
            return True
        except StoreError:
            if not _unwritable(path):
                raise
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(f"cannot open the lock file {path}: {exc.strerror or exc}") from None
        self._take(fd, command, "wait for it to finish and run this again")
        return True

    def _take(self, fd: int, command: str, advice: str) -> None:
        """flock ``fd`` without waiting, or close it and refuse naming the holder."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = _holder(fd)
            os.close(fd)
            raise StoreError(f"{self.root} is in use by {who}; {advice}") from None
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    def supersede(self, old_hash: str | None) -> Path:
        """Move this directory's spec.yaml and manifest.json (an earlier sweep's) into
        superseded/<time>-<spec hash>/, leaving every record where it is; return that folder."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest = self.superseded / f"{stamp}-{old_hash or 'unknown'}"
        n = 1
        while dest.exists():
            n += 1
            dest = self.superseded / f"{stamp}-{old_hash or 'unknown'}-{n}"
        dest.mkdir(parents=True)
        for f in (self.spec, self.manifest):  # the manifest last: until it moves, the old sweep is still named
            if f.exists():
                os.replace(f, dest / f.name)
        return dest

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

    def server_path(self, engine_id: str) -> Path:
        return self.servers / f"{engine_id}.json"

    def serve_job_path(self, engine_id: str) -> Path:
        return self.jobs / f"{engine_id}.serve.json"

    def read_server(self, engine_id: str) -> ServerRecord | None:
        """The engine's server record (serve phase), or None when missing or off-contract."""
        path = self.server_path(engine_id)
        if not path.exists():
            return None
        try:
            return ServerRecord.load_file(path)
        except ResultsError:
            return None

    def write_server(self, record: ServerRecord) -> None:
        self.servers.mkdir(parents=True, exist_ok=True)
        record = ServerRecord.model_validate(record.model_dump(warnings=False))
        record.save_file(self.server_path(record.id))

    def point_file(self, point: PointSettings) -> Path:
        """Where the point's record is: under its id, or under the id kvprof gave it before ids hashed every field
        (``PointSettings.legacy_id``) where only that file exists, so a run started by an older kvprof resumes."""
        path = self.point_path(point.id)
        legacy = self.point_path(point.legacy_id)
        return legacy if not path.exists() and legacy.exists() else path

    def read_point(self, point: PointSettings) -> Any | None:
        """The point's record, or None when missing or off-contract (a truncated write: rerun it)."""
        try:
            return load_point(self.point_file(point))
        except ResultsError:
            return None

    def point_status(self, point: PointSettings) -> str | None:
        """'ok', a failure status, 'corrupt' (unreadable or off-contract), or None when never run."""
        if not self.point_file(point).exists():
            return None
        rec = self.read_point(point)
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
        legacy = self.point_path(record.point.legacy_id)
        if record.id != record.point.legacy_id and legacy.exists():
            legacy.unlink()  # the rerun's record replaces the one an older kvprof kept, as a rerun overwrites

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


def _unwritable(path: Path) -> bool:
    """Whether ``path`` (the lock file) cannot be created or opened for writing here: permission or a
    read-only file system."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644))
    except OSError as exc:
        return exc.errno in READ_ONLY_ERRNOS
    return False


def _holder(fd: int) -> str:
    """Who holds the lock on fd's file: "a running sweep (pid N on HOST)" from the file (a report
    names itself), or from /proc/locks while the holder has not written the file yet."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0))
    except (OSError, ValueError):
        holder = None
    if isinstance(holder, dict) and isinstance(holder.get("pid"), int):
        command = holder.get("command") if isinstance(holder.get("command"), str) else "sweep"
        what = "a running sweep" if command == "sweep" else f"a running `kvprof {command}`"
        return f"{what} (pid {holder['pid']} on {holder.get('host') or 'an unknown host'})"
    pid = _flock_owner(fd)
    return f"a running sweep (pid {pid} on {socket.gethostname()})" if pid else "a running sweep (pid unknown)"


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
