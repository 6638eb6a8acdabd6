"""Reading and writing the results directory's files: the ``Record`` base every JSON record is read and written
through, atomic writes, the checks a record's text passes before its model sees it (UTF-8, finite numbers, the right
kind of record in the right place), and the content digest ids are made of. The records themselves are in
:mod:`analysis.results.schema` (engine, server, manifest, probe, telemetry), :mod:`analysis.results.settings` (what
was asked for) and :mod:`analysis.results.points` (what each point measured).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError


class ResultsError(ValueError):
    """A results directory or record that does not follow the contract (the message names file and field)."""


# --- files ----------------------------------------------------------------------------------------

def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary name in the same directory, fsync, rename: never a half-written file."""
    path = Path(path)
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


def describe_errors(exc: ValidationError, limit: int = 5) -> str:
    """pydantic's errors as 'field.path: what is wrong (got X)', one per problem."""
    out = []
    for e in exc.errors()[:limit]:
        loc = ".".join(str(x) for x in e["loc"]) or "(whole record)"
        msg = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        if e["type"] not in ("missing",) and not isinstance(got, dict | list):
            shown = repr(got)  # a broken file's whole text is the input of a JSON error: show its start
            msg += f" (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
        out.append(f"{loc}: {msg}")
    more = len(exc.errors()) - limit
    return "; ".join(out) + (f"; and {more} more" if more > 0 else "")


def read_record_text(path: Path) -> str:
    """A record's text: UTF-8, as kvprof writes every record (ResultsError naming the file otherwise)."""
    from analysis.results.inputs import InputFileError, read_input

    try:  # a regular file of bounded size: a FIFO or device among the records must not hang the reader
        data = read_input(path)
    except InputFileError as exc:
        raise ResultsError(f"cannot read {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); kvprof "
                           "writes its records as UTF-8 JSON — the file is damaged or was re-encoded") from None


class _NonFinite(Exception):
    """A NaN or infinite number in a record (internal: check_finite turns it into a ResultsError)."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(text)
    return value


def _constant(name: str) -> float:
    raise _NonFinite(name)


def check_finite(text: str, source: str | Path) -> None:
    """ResultsError where a record's JSON holds NaN or an infinite number: kvprof writes a number it could not
    measure as null, so such a number was put there by hand or by damage (and would poison every mean)."""
    try:
        json.loads(text, parse_constant=_constant, parse_float=_finite)
    except _NonFinite as exc:
        raise ResultsError(f"{source}: holds the number {exc}, which kvprof never writes (a quantity it could not "
                           "measure is null) — the file was edited or damaged") from None
    except (ValueError, RecursionError):
        pass  # not JSON at all: the model's own error says where


# What each record model is, in words, for a record found where another kind belongs.
KIND_OF_MODEL = {"Manifest": "a manifest", "EngineRecord": "an engine record", "DecodePoint": "a point record",
                 "SaturationPoint": "a point record", "ServePoint": "a point record", "FailedPoint": "a point record",
                 "ServerRecord": "a server record"}


def record_kind(text: str) -> str | None:
    """Which kind of record a JSON text looks like (by the keys only that kind has), or None."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if "point" in data and "engine_id" in data:
        return "a point record"
    if "server_kwargs" in data:
        return "a server record"
    if "capacity" in data or ("engine" in data and "llm_kwargs" in data):
        return "an engine record"
    if "schema_version" in data and "engines" in data:
        return "a manifest"
    return None


R = TypeVar("R", bound="Record")


class Record(BaseModel):
    """A JSON file of the results directory: read and written through the same model."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def from_json_text(cls: type[R], text: str, source: str | Path) -> R:
        check_finite(text, source)
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            other = record_kind(text)
            if other is not None and other != KIND_OF_MODEL.get(cls.__name__, other):
                raise ResultsError(f"{source}: holds {other}, not {cls.__name__} — a file copied or moved into "
                                   "the wrong place; put it back or remove it") from None
            raise ResultsError(f"{source}: does not follow the {cls.__name__} contract: "
                               f"{describe_errors(exc)}") from None

    @classmethod
    def load_file(cls: type[R], path: str | Path) -> R:
        path = Path(path)
        return cls.from_json_text(read_record_text(path), path)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    def save_file(self, path: str | Path) -> None:
        atomic_write_bytes(Path(path), self.to_json().encode())


def digest(obj: Any, n: int = 8) -> str:
    """A short content hash of a JSON-able object (key order does not matter)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]
