"""Where a command may write: every output option's path checked in one place before anything is computed, and
every write error turned into one line naming the path (issue #26).

A command's outputs must not replace what it reads or what a sweep recorded, must land where the message says
(inside the directory they belong to, whatever a label or name contains), and must fail before the work, not
after it, when the place cannot be written. :func:`output_file` and :func:`output_dir` check a path for each of
those cases; :func:`writing` turns an ``OSError`` raised while writing (a disk that fills, a file system that
turns read-only) into an :class:`OutputPathError` naming the path. The CLI prints the error's message as its one
line and exits 2.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path


class OutputPathError(ValueError):
    """A path a command cannot write to (the message says which and why)."""


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def unwritable_reason(directory: Path) -> str | None:
    """Why a file cannot be created in ``directory`` (None: it can): created and removed, so a read-only file
    system, missing permissions or a full inode table show here, before the work."""
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".kvprof-write-probe.")
    except OSError as exc:
        return _why(exc)
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return None


def _is_record(path: Path, results_dirs: Iterable[Path]) -> Path | None:
    from profiler.store import ResultsDir

    for d in results_dirs:
        if Path(d).is_dir() and ResultsDir(d).is_record(path):
            return Path(d)
    return None


def _common_checks(path: Path, option: str, results_dirs: Iterable[Path], inputs: Iterable[Path | None],
                   within: Path | None) -> None:
    if within is not None:
        base = within.resolve()
        if path.resolve() != base and base not in path.resolve().parents:
            raise OutputPathError(f"{option} {path} is outside {within}, where it belongs")
    d = _is_record(path, results_dirs)
    if d is not None:
        raise OutputPathError(f"{option} {path} would overwrite a record of the results directory {d}; "
                              "write it elsewhere")
    for src in inputs:
        if src is not None and src.exists() and path.resolve() == src.resolve():
            raise OutputPathError(f"{option} {path} would overwrite this command's own input; write it elsewhere")


def output_file(path: Path, option: str, *, results_dirs: Iterable[Path] = (), inputs: Iterable[Path | None] = (),
                example: str = "report.pdf", within: Path | None = None) -> Path:
    """``path`` as a file the command may write (replacing an older one of its own), or the error saying why not:
    a directory, not a regular file (a device, FIFO or socket), outside ``within``, one of a results directory's
    records, one of the command's inputs, a missing parent, or a parent that cannot be written."""
    if path.is_dir():
        raise OutputPathError(f"{option} {path} is a directory: give a file path (e.g. {path / example})")
    if path.exists() and not path.is_file():  # the atomic rename would replace it
        raise OutputPathError(f"{option} {path} is not a regular file (a device, FIFO or socket); give a file path")
    _common_checks(path, option, results_dirs, inputs, within)
    parent = path.resolve().parent
    if not parent.is_dir():
        raise OutputPathError(f"{option} {path}: directory {parent} does not exist")
    why = unwritable_reason(parent)
    if why:
        raise OutputPathError(f"{option} {path}: cannot write in {parent} ({why})")
    return path


def output_dir(path: Path, option: str, *, results_dirs: Iterable[Path] = (), inputs: Iterable[Path | None] = (),
               within: Path | None = None) -> Path:
    """``path`` as a directory the command may write into, made (with its parents) if missing, or the error
    saying why not: a file or something else that is not a directory, outside ``within``, inside a results
    directory's records, one of the command's inputs, or a place where nothing can be created or written."""
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{option} {path} is a file: give a directory")
    d = _is_record(path / "report.pdf", results_dirs)
    if d is not None:
        raise OutputPathError(f"{option} {path} is inside the records of {d}; write it elsewhere")
    _common_checks(path, option, (), inputs, within)
    if not path.exists():
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputPathError(f"{option} {path}: cannot create it: {_why(exc)}") from None
    why = unwritable_reason(path)
    if why:
        raise OutputPathError(f"{option} {path} is not writable ({why})")
    return path


def safe_name(name: str, option: str) -> str:
    """A name that becomes part of a path (a run label): one path component, no separators, no '.'/'..', no
    control characters, at most 64 characters; the error names what is wrong."""
    if not name:
        raise OutputPathError(f"{option}: a name is empty")
    bad = sorted({c for c in name if c in "/\\" or not c.isprintable()})
    if bad:
        raise OutputPathError(f"{option} {name[:64]!r}: a name cannot contain {', '.join(map(repr, bad))} "
                              "(names become part of the output path)")
    if name in (".", "..") or name.startswith("-"):
        raise OutputPathError(f"{option} {name!r}: not a name (names become part of the output path)")
    if len(name) > 64:
        raise OutputPathError(f"{option}: a name is {len(name)} characters long; 64 at most")
    return name


@contextlib.contextmanager
def writing(path: Path, option: str = "") -> Iterator[None]:
    """Turn an OSError raised while writing ``path`` (a full disk, a file system that turned read-only, a
    directory removed meanwhile) into one OutputPathError line naming it."""
    try:
        yield
    except OSError as exc:
        where = f"{option} {path}" if option else str(path)
        raise OutputPathError(f"{where}: cannot write it ({_why(exc)})") from None
