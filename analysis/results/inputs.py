"""Reading a file the user named, bounded: a regular file of at most a stated size, or one clear error.

A device (/dev/zero), a FIFO or a socket named where a file belongs would otherwise be read forever (or
block until a writer appears); a huge file would be read whole into memory. Every command that reads a
user-named JSON or text file (calibration, probe, saved plan, spec, log) reads it through here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_JSON_BYTES = 64 << 20  # calibrations, probes and saved plans are kilobytes


class InputFileError(ValueError):
    """A named file that cannot be read as an input (the message says which and why)."""


def read_input(path: str | Path, limit: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of ``path``, a regular file (symlinks followed) of at most ``limit`` bytes; InputFileError
    naming the path and what it is otherwise (missing, a directory, a device, FIFO or socket, too big)."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputFileError(f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputFileError(f"{path} is a directory: give a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(f"{path} is not a regular file (a device, FIFO or socket): give a file")
    if st.st_size > limit:
        raise InputFileError(f"{path}: {st.st_size:,} bytes; at most {limit:,} are read")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise InputFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise InputFileError(f"{path}: more than {limit:,} bytes; at most {limit:,} are read")
    return data


def read_json(path: str | Path, limit: int = MAX_JSON_BYTES) -> object:
    """A JSON document from a bounded regular file: InputFileError naming the path when it is not UTF-8 JSON
    (or nests too deeply to parse)."""
    import json

    data = read_input(path, limit)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:
        raise InputFileError(f"{path}: not JSON ({exc})") from None
    except RecursionError:
        raise InputFileError(f"{path}: nested too deeply to be a kvprof or model JSON file") from None
