"""Request traces in the formats public production traces are published in, read as the replay's requests
(:func:`read_trace`):

* **Azure LLM inference traces** (github.com/Azure/AzurePublicDataset, ``data/AzureLLMInferenceTrace_*.csv``, 2023
  and 2024): a CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens``, one request a row, the timestamp a
  date and time (``2023-11-16 18:17:03.9799600``);
* **Mooncake traces** (github.com/kvcache-ai/Mooncake, ``FAST25-release/traces``; the format AIPerf and Dynamo
  replay): JSON lines of ``timestamp`` (milliseconds since the first request), ``input_length``, ``output_length``
  and ``hash_ids``, one id a block of ``hash_block_tokens`` prompt tokens (512 in the published traces), requests
  that share leading ids sharing that prefix.

Arrivals become seconds since the first request. A row that is not a request (a missing or negative length, a
timestamp out of order or unreadable) is refused with its line number and field; a file is read bounded.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analysis.results.inputs import InputFileError, read_input
from analysis.serving.arrivals import MAX_REQUESTS, Requests

MAX_TRACE_BYTES = 512 << 20
AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
MOONCAKE_BLOCK_TOKENS = 512  # the published Mooncake traces hash prompts in blocks of 512 tokens


class TraceError(ValueError):
    """A trace file that cannot be read as requests (the message names the file, the line and the field)."""


class MooncakeRow(BaseModel):
    model_config = ConfigDict(extra="ignore")

    timestamp: float = Field(ge=0, allow_inf_nan=False, description="milliseconds since the first request")
    input_length: int = Field(ge=1)
    output_length: int = Field(ge=1)
    hash_ids: list[int] = []


def read_trace(path: str | Path, limit: int | None = None, hash_block_tokens: int = MOONCAKE_BLOCK_TOKENS
               ) -> Requests:
    """The first ``limit`` requests (all where None) of an Azure CSV or a Mooncake JSONL trace."""
    text = _text(path)
    first = text.lstrip().split("\n", 1)[0].strip()
    if first.replace(" ", "").split(",") == AZURE_HEADER:
        arrival, prompt, output, hashes = _azure(path, text, limit)
    elif first.startswith("{"):
        arrival, prompt, output, hashes = _mooncake(path, text, limit)
    else:
        raise TraceError(f"{path}: neither an Azure LLM inference trace (a CSV headed {','.join(AZURE_HEADER)}) nor "
                         "a Mooncake trace (JSON lines of timestamp, input_length, output_length, hash_ids)")
    if not prompt:
        raise TraceError(f"{path}: no requests")
    return Requests(arrival_s=np.asarray(arrival, float), prompt_len=np.asarray(prompt, np.int64),
                    output_len=np.asarray(output, np.int64), prefix_len=0,
                    block_hashes=hashes if any(hashes) else None, hash_block_tokens=hash_block_tokens)


def _text(path: str | Path) -> str:
    try:
        return read_input(path, MAX_TRACE_BYTES).decode("utf-8")
    except InputFileError as exc:
        raise TraceError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _azure(path: str | Path, text: str, limit: int | None):
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    t0 = None
    reader = csv.reader(io.StringIO(text))
    next(reader)
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(prompt) >= (limit or MAX_REQUESTS):
            break
        if len(row) != 3:
            raise TraceError(f"{path} line {line}: {len(row)} fields; a row is TIMESTAMP,ContextTokens,GeneratedTokens")
        try:
            # 7 fractional digits (the Azure traces' .NET format) are more than fromisoformat reads before 3.11's
            stamp = datetime.fromisoformat(row[0].strip()[:26])
        except ValueError:
            raise TraceError(f"{path} line {line}: TIMESTAMP {row[0]!r} is not a date and time") from None
        for field, value in zip(AZURE_HEADER[1:], row[1:], strict=True):
            if not value.strip().isdigit() or int(value) < 1:
                raise TraceError(f"{path} line {line}: {field} {value!r} is not a positive whole number of tokens")
        t0 = stamp if t0 is None else t0
        s = (stamp - t0).total_seconds()
        if arrival and s < arrival[-1]:
            raise TraceError(f"{path} line {line}: TIMESTAMP {row[0]} is before the row above it")
        arrival.append(s)
        prompt.append(int(row[1]))
        output.append(int(row[2]))
    return arrival, prompt, output, [[] for _ in prompt]


def _mooncake(path: str | Path, text: str, limit: int | None):
    arrival: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    hashes: list[list[int]] = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if len(prompt) >= (limit or MAX_REQUESTS):
            break
        try:
            row = MooncakeRow.model_validate(json.loads(raw))
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path} line {line}: not JSON ({exc.msg})") from None
        except ValidationError as exc:
            e = exc.errors()[0]
            raise TraceError(f"{path} line {line}: {'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}") from None
        s = row.timestamp / 1000
        if arrival and s < arrival[-1]:
            raise TraceError(f"{path} line {line}: timestamp {row.timestamp:g} is before the line above it")
        arrival.append(s)
        prompt.append(row.input_length)
        output.append(row.output_length)
        hashes.append(row.hash_ids)
    return arrival, prompt, output, hashes
