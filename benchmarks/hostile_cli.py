"""Hostile and careless invocations of every kvprof command, and how cleanly each is answered (issue #15).

    python benchmarks/hostile_cli.py [-k SUBSTRING] [-j JOBS] [-v]

Each case is an argv, the files it needs (written to a fresh temporary directory, the working directory of
the command), the exit codes it may end with, and a property of the answer. Every command runs in its own
process under a 30 s timeout, as a user runs it. An answer is clean when all of these hold:

  * no Python traceback on stdout or stderr;
  * the exit code is in the case's expected set (always one of 0, 1, 2, 3, 130);
  * an error (exit 2) is one line on stderr that names what the case says it must (the option or field);
  * with --json and exit 0, stdout is exactly one JSON document (warnings belong on stderr);
  * the case's own check of the answer holds (e.g. no negative capacity, no decode step of hours).

It prints one row per case (clean or the first property that failed) and the count of clean answers; it
exits 1 when any case was not answered cleanly, 0 when every one was (tests/profiler/test_hostile_cli.py holds
the regressions in the suite).
Results-directory corruption is covered elsewhere (tests/profiler/test_results_safety.py) and not repeated here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from hostile_inputs import tiny_spec  # the benchmark beside this one

ROOT = Path(__file__).resolve().parents[1]
TINY_CONFIG = json.loads((ROOT / "analysis" / "catalog" / "models" / "tiny-llama-gqa" / "config.json").read_text())
LLAMA8B = json.loads((ROOT / "analysis" / "catalog" / "models" / "llama-3.1-8b" / "config.json").read_text())
TIMEOUT_S = 30
BAD = {2}
OK = {0}

Check = Callable[[str, str], str | None]  # (stdout, stderr) → None when it holds, else what is wrong


@dataclass
class Case:
    """One hostile invocation: ``argv`` after `kvprof`, files to write first, the allowed exit codes, the
    words an error must name (any one of them), and an extra check of the answer."""

    name: str
    argv: list[str]
    expect: set[int]
    names: tuple[str, ...] = ()
    files: dict[str, str | bytes | dict | list | Callable[[Path], None]] = field(default_factory=dict)
    check: Check | None = None


def spec(**sections: object) -> str:
    """tiny-cpu.yaml with sections replaced, as YAML text."""
    return yaml.safe_dump(tiny_spec(**sections), sort_keys=False)


def cfg(**changes: object) -> dict:
    c = dict(LLAMA8B)
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    return c


def plan_sane(out: str, err: str) -> str | None:
    """A single plan's JSON: every capacity non-negative and finite, the decode step under an hour."""
    try:
        p = json.loads(out)
    except ValueError:
        return None  # the JSON property reports it
    for k in ("kv_budget_bytes", "num_blocks", "kv_cache_tokens", "kv_full_batch", "weight_bytes",
              "kv_bytes_per_token", "max_concurrency"):
        v = p.get(k)
        if isinstance(v, int | float) and (v < 0 or not math.isfinite(v)):
            return f"{k} = {v}"
    if isinstance(p.get("decode_step_s"), int | float) and not 0 < p["decode_step_s"] < 3600:
        return f"decode_step_s = {p['decode_step_s']}"
    if isinstance(p.get("kv_budget_bytes"), int) and isinstance(p.get("device_total_bytes"), int) \
            and p["kv_budget_bytes"] > p["device_total_bytes"]:
        return "KV budget larger than the device"
    return None


def rows_sane(out: str, err: str) -> str | None:
    """A procurement table's JSON: no negative or infinite count, fitting rows have a decode step < 1 h."""
    try:
        rows = json.loads(out)
    except ValueError:
        return None
    for r in rows:
        for k, v in r.items():
            if isinstance(v, int | float) and not isinstance(v, bool) and (v < 0 or not math.isfinite(v)):
                return f"{r.get('gpu')} tp{r.get('tensor_parallel_size')}: {k} = {v}"
        if r.get("fits") and not (r.get("decode_step_s") or 0) < 3600:
            return f"{r.get('gpu')}: decode step {r.get('decode_step_s')}"
    return None


def no_double_gpu(out: str, err: str) -> str | None:
    try:
        rows = json.loads(out)
    except ValueError:
        return None
    keys = [(r["gpu"], r["tensor_parallel_size"]) for r in rows]
    return None if len(keys) == len(set(keys)) else f"duplicate rows {len(keys) - len(set(keys))}"


def _fifo(d: Path) -> None:
    os.mkfifo(d / "fifo")


def _fifo_model(d: Path) -> None:
    (d / "m").mkdir()
    os.mkfifo(d / "m" / "config.json")


def _symlink_loop(d: Path) -> None:
    os.symlink(d / "loop2", d / "loop1")
    os.symlink(d / "loop1", d / "loop2")


def _symlink_model(d: Path) -> None:
    (d / "real").mkdir()
    (d / "real" / "config.json").write_text(json.dumps(TINY_CONFIG))
    os.symlink(d / "real", d / "linked")


def _results(d: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.synthetic_results import make_results

    make_results(d / "res")


def _results_and_plan(d: Path) -> None:
    _results(d)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "profiler.cli", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                    "--max-model-len", "8192", "--batch", "4", "--context", "2048", "--save", str(d / "plan.json")],
                   env=env, cwd=d, capture_output=True, check=True)


def _failed_results_and_plan(d: Path) -> None:
    """What a GPU sweep whose every engine died at start-up leaves (issue #26): engine records marked crash with
    vLLM's out-of-memory message, no capacity facts, no points; and a plan for one of its engines."""
    _results_and_plan(d)
    for p in (d / "res" / "engines").glob("*.json"):
        rec = json.loads(p.read_text())
        rec.update(status="crash", capacity=None, block_rounding=[],
                   message="CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.19 GiB total capacity)")
        p.write_text(json.dumps(rec))
    for p in (d / "res" / "points").glob("*.json"):
        p.unlink()
    m = json.loads((d / "res" / "manifest.json").read_text())
    m["status"] = "failed"
    (d / "res" / "manifest.json").write_text(json.dumps(m))
    _results(d / "other")


def _edited_plan(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        _results_and_plan(d)
        p = json.loads((d / "plan.json").read_text())
        new = edit(p)
        (d / "plan.json").write_text(json.dumps(p if new is None else None if new is _NULL else new))
    return make


def _set(path: str, value: object) -> Callable[[dict], None]:
    def edit(p: dict) -> None:
        *head, last = path.split(".")
        node = p
        for k in head:
            node = node[k]
        if value is _DEL:
            node.pop(last, None)
        else:
            node[last] = value
    return edit


_DEL = object()
_NULL = object()  # an edit that replaces the whole plan with JSON null


def cases() -> list[Case]:
    C: list[Case] = []
    add = C.append
    P = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
    PJ = [*P, "--json"]

    # --- plan: numbers -------------------------------------------------------------------------------
    for opt, vals in {
        "--gpu-memory-utilization": ["0", "-0.5", "1.5", "nan", "inf", "1e400", "", "abc"],
        "--batch": ["0", "-1", "99999999999999999999", "abc"],
        "--context": ["0", "-5", "10000000000", "1e3"],
        "--max-model-len": ["0", "-1", "99999999999"],
        "--block-size": ["0", "-16", "7"],
        "--max-num-seqs": ["0", "-3"],
        "--max-num-batched-tokens": ["0", "-1"],
        "--prompt-len": ["0", "-1", "10000000000"],
    }.items():
        for v in vals:
            add(Case(f"plan {opt} {v!r}", [*PJ, opt, v], BAD, (opt,)))
    for opt in ("--kv-cache-memory-bytes", "--reserve-bytes"):
        for v in ("-5GiB", "8XB", "", "0", "nan", "inf", "1e400", "1e400GiB", "abc", "1.5.5GiB", "5 GiB ",
                  "99999999999999999999999GiB"):
            add(Case(f"plan {opt} {v!r}", [*PJ, opt, v], BAD | ({0} if v in ("0", "5 GiB ") else set()), (opt,),
                     check=plan_sane))
    add(Case("plan --kv-cache-memory-bytes 1 (zero blocks)", [*PJ, "--kv-cache-memory-bytes", "1"], BAD,
             ("--kv-cache-memory-bytes",)))
    add(Case("plan no gpu, --kv-cache-memory-bytes 1KiB", ["plan", "--model", "llama-3.1-8b", "--kv-cache-memory-bytes",
                                                           "1KiB", "--json"], BAD, ("--kv-cache-memory-bytes",)))
    add(Case("plan --kv-cache-memory-bytes 1PiB", [*PJ, "--kv-cache-memory-bytes", "1PiB"], BAD,
             ("--kv-cache-memory-bytes",), check=plan_sane))
    add(Case("plan --reserve-bytes 1TiB (more than the GPU)", [*PJ, "--reserve-bytes", "1TiB"], BAD | OK,
             ("--reserve-bytes", "reserve"), check=plan_sane))
    add(Case("plan --gpu-memory-utilization 0.01", [*PJ, "--gpu-memory-utilization", "0.01"], BAD | OK,
             ("--gpu-memory-utilization", "weights", "budget"), check=plan_sane))
    add(Case("plan --context above max_model_len", [*PJ, "--context", "200000", "--batch", "1"], BAD,
             ("--context",)))
    add(Case("plan --batch huge", [*PJ, "--batch", "100000000", "--context", "1024"], BAD | OK,
             ("--batch",), check=plan_sane))
    add(Case("plan --tp 0", [*PJ, "--tp", "0"], BAD, ("--tp",)))
    add(Case("plan --tp -1", [*PJ, "--tp", "-1"], BAD, ("--tp",)))
    add(Case("plan --tp ''", [*PJ, "--tp", ""], BAD, ("--tp",)))
    add(Case("plan --tp abc", [*PJ, "--tp", "abc"], BAD, ("--tp",)))
    add(Case("plan --tp 3 (does not divide heads)", [*PJ, "--tp", "3"], BAD, ("--tp", "tensor")))
    add(Case("plan --tp 1024", [*PJ, "--tp", "1024"], BAD, ("--tp", "tensor")))
    add(Case("plan --tp 1e9", [*PJ, "--tp", "1000000000"], BAD, ("--tp", "tensor")))
    add(Case("plan --kv-dtype int3", [*PJ, "--kv-dtype", "int3"], BAD, ("--kv-dtype", "kv")))
    add(Case("plan --kv-dtype ''", [*PJ, "--kv-dtype", ""], BAD, ("--kv-dtype", "kv")))
    add(Case("plan --dtype int8", [*PJ, "--dtype", "int8"], BAD, ("--dtype", "dtype")))
    add(Case("plan --quantization bogus", [*PJ, "--quantization", "bogus"], BAD, ("--quantization", "quantization")))
    add(Case("plan --entry bogus", [*PJ, "--entry", "bogus"], BAD, ("--entry", "entry")))
    add(Case("plan --vllm-version 0.0.1", [*PJ, "--vllm-version", "0.0.1"], BAD | OK, ("--vllm-version", "vllm")))
    add(Case("plan --vllm-version ''", [*PJ, "--vllm-version", ""], BAD | OK, ("--vllm-version", "vllm")))
    add(Case("plan --vllm-version 99.0", [*PJ, "--vllm-version", "99.0"], BAD | OK, ("--vllm-version", "vllm")))

    # --- plan: GPUs and models ----------------------------------------------------------------------
    add(Case("plan --gpu unknown", ["plan", "--model", "llama-3.1-8b", "--gpu", "h900", "--json"], BAD, ("h900",)))
    add(Case("plan --gpu ''", ["plan", "--model", "llama-3.1-8b", "--gpu", "", "--json"], BAD, ("--gpu",)))
    add(Case("procure --gpu ' , '", ["procure", "--model", "llama-3.1-8b", "--gpu", " , ", "--concurrency", "4",
                                  "--json"], BAD, ("--gpu",)))
    add(Case("plan --model unknown", ["plan", "--model", "llama-9", "--gpu", "h100-sxm"], BAD, ("llama-9",)))
    add(Case("plan --model ''", ["plan", "--model", "", "--gpu", "h100-sxm"], BAD, ("--model", "model")))
    add(Case("plan 405b on one l4", ["plan", "--model", "llama-3.1-405b", "--gpu", "l4", "--json"], BAD,
             ("weights", "memory", "fit")))
    add(Case("plan 405b --kv-cache-memory-bytes on l4",
             ["plan", "--model", "llama-3.1-405b", "--gpu", "l4", "--kv-cache-memory-bytes", "1GiB", "--json"],
             BAD, ("weights", "memory", "fit")))
    # 4 GiB holds a quarter of one 131,072-token llama-3.1-8b sequence (16 GiB): vLLM refuses to start
    add(Case("plan no gpu, kv bytes", ["plan", "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "4GiB",
                                       "--json"], BAD, ("--kv-cache-memory-bytes",)))
    add(Case("plan no gpu, kv bytes, short max_model_len", ["plan", "--model", "llama-3.1-8b",
                                                            "--kv-cache-memory-bytes", "4GiB", "--max-model-len",
                                                            "8192", "--json"], OK, check=plan_sane))
    add(Case("plan --gpu and --probe", [*PJ, "--probe", "nonexistent.json"], BAD, ("--probe", "--gpu")))
    add(Case("plan --probe missing", ["plan", "--model", "llama-3.1-8b", "--probe", "nope.json"], BAD,
             ("--probe", "nope.json")))
    add(Case("plan --probe list", ["plan", "--model", "llama-3.1-8b", "--probe", "p.json"], BAD, ("--probe",),
             files={"p.json": [1, 2]}))
    add(Case("plan --probe empty", ["plan", "--model", "llama-3.1-8b", "--probe", "p.json"], BAD, ("--probe",),
             files={"p.json": ""}))
    add(Case("plan --probe a directory", ["plan", "--model", "llama-3.1-8b", "--probe", "."], BAD, ("--probe",)))
    add(Case("plan --probe binary", ["plan", "--model", "llama-3.1-8b", "--probe", "p.json"], BAD, ("--probe",),
             files={"p.json": b"\xff\xfe\x00garbage"}))
    add(Case("plan --probe negative numbers", ["plan", "--model", "llama-3.1-8b", "--probe", "p.json", "--json"],
             BAD, ("--probe",), files={"p.json": {"device": "x", "memory_total_bytes": -1,
                                                  "copy": {"bandwidth_Bps": {"median": -5}},
                                                  "matmul_bf16": {"flops_per_s": {"median": 0}}}}))
    add(Case("plan --calibration missing", [*PJ, "--calibration", "nope.json"], BAD, ("--calibration",)))
    add(Case("plan --calibration list", [*PJ, "--calibration", "c.json"], BAD, ("--calibration",),
             files={"c.json": [1]}))
    add(Case("plan --calibration dir", [*PJ, "--calibration", "."], BAD, ("--calibration",)))
    add(Case("plan --calibration /dev/zero", [*PJ, "--calibration", "/dev/zero"], BAD, ("--calibration",)))
    add(Case("plan --calibration negative bw", [*PJ, "--calibration", "c.json", "--batch", "4", "--context", "512"],
             BAD, ("--calibration", "bandwidth"),
             files={"c.json": {"bandwidth_Bps": -1e12, "overhead_s": -1.0}}))
    add(Case("plan --transfer-calibration alone", [*PJ, "--transfer-calibration"], BAD,
             ("--transfer-calibration",)))
    add(Case("plan --save into a dir", [*P, "--save", "."], BAD, ("--save",)))
    add(Case("plan --max-num-seqs above the default batched tokens", [*P, "--max-num-seqs", "16384"], BAD,
             ("--max-num-seqs",)))
    add(Case("plan --max-num-seqs 1e12", [*P, "--max-num-seqs", "1000000000000"], BAD, ("--max-num-seqs",)))
    add(Case("plan --save missing parent", [*P, "--save", "no/such/plan.json"], BAD, ("--save",)))
    # A device or FIFO: the atomic write's rename would replace it (as root, /dev/full became a JSON file).
    add(Case("plan --save a FIFO", [*P, "--save", "fifo"], BAD, ("--save",), files={"_": _fifo}))
    add(Case("plan --save over config.json", ["plan", "--model", "m", "--gpu", "h100-sxm", "--save",
                                              "m/config.json"], BAD, ("--save",),
             files={"m/config.json": TINY_CONFIG}))

    # --- plan: config.json shapes ---------------------------------------------------------------------
    for label, content in {
        "list": [1, 2, 3], "empty file": "", "empty object": {}, "null": "null", "a string": '"llama"',
        "strings for numbers": cfg(num_hidden_layers="32", hidden_size="4096"),
        "layers 1e9": cfg(num_hidden_layers=10**9), "layers 0": cfg(num_hidden_layers=0),
        "layers -1": cfg(num_hidden_layers=-1), "layers 1.5": cfg(num_hidden_layers=1.5),
        "layers true": cfg(num_hidden_layers=True), "layers null": cfg(num_hidden_layers=None),
        "hidden 1e12": cfg(hidden_size=10**12), "heads 0": cfg(num_attention_heads=0),
        "kv heads 0": cfg(num_key_value_heads=0), "kv heads > heads": cfg(num_key_value_heads=64),
        "kv heads not dividing": cfg(num_key_value_heads=7), "head_dim 0": cfg(head_dim=0),
        "head_dim -128": cfg(head_dim=-128), "vocab -1": cfg(vocab_size=-1), "vocab 1e15": cfg(vocab_size=10**15),
        "max_pos 0": cfg(max_position_embeddings=0), "max_pos -1": cfg(max_position_embeddings=-1),
        "max_pos 1e18": cfg(max_position_embeddings=10**18), "max_pos nan": "NaN-config",
        "torch_dtype bogus": cfg(torch_dtype="int3"), "torch_dtype 5": cfg(torch_dtype=5),

        "sliding window -1": cfg(sliding_window=-1), "sliding window huge": cfg(sliding_window=10**12),
        "quantization_config list": cfg(quantization_config=[1]),
        "intermediate -5": cfg(intermediate_size=-5), "no hidden_size": cfg(hidden_size=None),
    }.items():
        if content == "NaN-config":
            content = json.dumps(cfg()).replace('"max_position_embeddings": 131072', '"max_position_embeddings": NaN')
        add(Case(f"plan config.json: {label}", ["plan", "--model", "m", "--gpu", "h100-sxm", "--batch", "1",
                                                 "--context", "1024", "--json"],
                 BAD, ("config.json", "m"), files={"m/config.json": content}, check=plan_sane))
    for label, content in {"no model_type": cfg(model_type=None), "model_type list": cfg(model_type=["llama"]),
                           "unknown architecture": cfg(model_type="bogus", architectures=["BogusForCausalLM"]),
                           "rope_scaling a string": cfg(rope_scaling="yes"), "text_config a list": cfg(text_config=[1])
                           }.items():  # read as a generic decoder: an answer, if it is a sane one
        add(Case(f"plan config.json: {label}", ["plan", "--model", "m", "--gpu", "h100-sxm", "--batch", "1",
                                                 "--context", "1024", "--json"],
                 BAD | OK, ("config.json", "m"), files={"m/config.json": content}, check=plan_sane))
    add(Case("plan model dir without config.json", ["plan", "--model", "m", "--gpu", "h100-sxm"], BAD,
             ("config.json",), files={"m/README": "x"}))
    add(Case("plan model = config.json path", ["plan", "--model", "m/config.json", "--gpu", "h100-sxm", "--json"],
             OK, files={"m/config.json": TINY_CONFIG}, check=plan_sane))
    add(Case("plan model = a binary file", ["plan", "--model", "m.bin", "--gpu", "h100-sxm"], BAD, ("m.bin",),
             files={"m.bin": b"\x00\x01\xff" * 100}))
    add(Case("plan model = /dev/zero", ["plan", "--model", "/dev/zero", "--gpu", "h100-sxm"], BAD, ("/dev/zero",)))
    add(Case("plan model = a FIFO", ["plan", "--model", "fifo", "--gpu", "h100-sxm"], BAD, ("fifo",),
             files={"_": _fifo}))
    add(Case("plan model config.json is a FIFO", ["plan", "--model", "m", "--gpu", "h100-sxm"], BAD, ("m",),
             files={"_": _fifo_model}))
    add(Case("plan model = symlink loop", ["plan", "--model", "loop1", "--gpu", "h100-sxm"], BAD, ("loop1",),
             files={"_": _symlink_loop}))
    add(Case("plan model = symlinked dir", ["plan", "--model", "linked", "--gpu", "h100-sxm", "--json"], OK,
             files={"_": _symlink_model}, check=plan_sane))
    add(Case("plan config.json 2 MB of spaces", ["plan", "--model", "m", "--gpu", "h100-sxm"], BAD | OK,
             ("config.json",), files={"m/config.json": json.dumps(TINY_CONFIG) + " " * 2_000_000}))
    add(Case("plan config.json deeply nested", ["plan", "--model", "m", "--gpu", "h100-sxm"], BAD,
             ("config.json",), files={"m/config.json": "[" * 100_000 + "]" * 100_000}))

    # --- procure: the procurement table ----------------------------------------------------------------
    PR = ["procure", "--model", "llama-3.1-8b", "--json"]
    for tp in ("0", "1,,2", "-1", "1,1,1", "1,2,2,4", "", ",", "a,b", "1.5", "1e3", "9999999999999"):
        add(Case(f"plan --gpu all --tp {tp!r}", [*PR, "--gpu", "all", "--tp", tp, "--concurrency", "8"],
                 BAD | (OK if tp in ("1,1,1", "1,2,2,4", "9999999999999") else set()), ("--tp",),
                 check=lambda o, e: no_double_gpu(o, e) or rows_sane(o, e)))
    add(Case("plan --gpu h200,h200", [*PR, "--gpu", "h200,h200", "--concurrency", "8"], BAD | OK, ("--gpu",),
             check=no_double_gpu))
    add(Case("plan --gpu h200,,b200", [*PR, "--gpu", "h200,,b200", "--concurrency", "8"], BAD | OK, ("--gpu",)))
    add(Case("plan --gpu all,h200", [*PR, "--gpu", "all,h200", "--concurrency", "8"], BAD | OK, ("--gpu",)))
    add(Case("plan --gpu h200,nope", [*PR, "--gpu", "h200,nope", "--concurrency", "8"], BAD, ("nope",)))
    for slo in ("abc", "0s", "-1ms", "", "nan", "inf", "1e400", "5 fortnights", "0.0000001ns"):
        add(Case(f"plan --tpot-slo {slo!r}", [*PR, "--gpu", "all", "--concurrency", "8", "--tpot-slo", slo],
                 BAD, ("--tpot-slo",)))
    for conc in ("0", "-1", "abc"):
        add(Case(f"plan --concurrency {conc}", [*PR, "--gpu", "all", "--concurrency", conc], BAD,
                 ("--concurrency",)))
    add(Case("plan --concurrency 10^12", [*PR, "--gpu", "h200,b200", "--concurrency", "1000000000000"],
             OK | BAD, ("--concurrency",), check=rows_sane))
    add(Case("plan --concurrency 10^30", [*PR, "--gpu", "h200", "--concurrency", "1" + "0" * 30],
             BAD | OK, ("--concurrency",), check=rows_sane))
    add(Case("plan procurement --context 0", [*PR, "--gpu", "all", "--concurrency", "8", "--context", "0"], BAD,
             ("--context",)))
    add(Case("plan procurement --context > max", [*PR, "--gpu", "h200", "--concurrency", "8", "--context",
                                                  "10000000"], BAD, ("--context",)))
    add(Case("plan procurement without --concurrency", [*PR, "--gpu", "all"], BAD, ("--concurrency",)))
    add(Case("plan procurement --save", [*PR, "--gpu", "all", "--concurrency", "8", "--save", "x.json"], BAD,
             ("--save",)))
    add(Case("plan procurement --gpu-memory-utilization 2", [*PR, "--gpu", "all", "--concurrency", "8",
                                                             "--gpu-memory-utilization", "2"], BAD,
             ("--gpu-memory-utilization", "gpu_memory_utilization")))
    add(Case("plan procurement --kv bytes -1GiB", [*PR, "--gpu", "all", "--concurrency", "8",
                                                   "--kv-cache-memory-bytes", "-1GiB"], BAD,
             ("--kv-cache-memory-bytes",)))
    add(Case("plan procurement 405b on all", ["procure", "--model", "llama-3.1-405b", "--json", "--gpu", "all",
                                              "--tp", "1,2,4,8", "--concurrency", "64"], OK, check=rows_sane))
    add(Case("plan procurement config.json weird", ["procure", "--model", "m", "--json", "--gpu", "all",
                                                    "--concurrency", "8"], BAD, ("config.json", "m"),
             files={"m/config.json": cfg(num_hidden_layers=-3)}))

    add(Case("procure --served without lengths", [*PR, "--gpu", "h200", "--concurrency", "8", "--served"], BAD,
             ("--served", "--prompt-len")))

    # --- recommend: the inverse plan ------------------------------------------------------------------
    RC = ["recommend", "--model", "llama-3.1-8b", "--json"]
    add(Case("recommend without --concurrency", [*RC, "--gpu", "h100-sxm", "--context", "4096"], BAD,
             ("--concurrency",)))
    add(Case("recommend --gpu all", [*RC, "--gpu", "all", "--context", "4096", "--concurrency", "8"], BAD,
             ("one GPU",)))
    add(Case("recommend --context 0", [*RC, "--gpu", "h100-sxm", "--context", "0", "--concurrency", "8"], BAD,
             ("--context",)))
    add(Case("recommend --concurrency 10^12", [*RC, "--gpu", "h100-sxm", "--context", "4096", "--concurrency",
                                               "1000000000000"], BAD | OK, ("--concurrency",)))

    # --- plan: a served load replayed -----------------------------------------------------------------
    SV = [*PJ, "--prompt-len", "512", "--output-len", "64"]
    for opt, vals in {"--max-concurrency": ["0", "-1", "abc", "1000000000"],
                      "--request-rate": ["0", "nan", "inf", "-2"],
                      "--num-prompts": ["0", "1000000000"],
                      "--burstiness": ["0", "nan"]}.items():
        for v in vals:
            add(Case(f"plan {opt} {v!r}", [*SV, opt, v], BAD, (opt,)))
    add(Case("plan --max-concurrency without lengths", [*PJ, "--max-concurrency", "8"], BAD, ("--prompt-len",)))
    add(Case("plan --trace /dev/zero", [*PJ, "--trace", "/dev/zero"], BAD, ("--trace",)))
    add(Case("plan --trace missing", [*PJ, "--trace", "nope.jsonl"], BAD, ("--trace",)))
    add(Case("plan --trace not a trace", [*PJ, "--trace", "t.csv"], BAD, ("--trace",),
             files={"t.csv": "a,b\n1,2\n"}))
    add(Case("plan --trace a bad row", [*PJ, "--trace", "t.jsonl"], BAD, ("--trace", "line 2"),
             files={"t.jsonl": '{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": -1}\n'}))

    # --- validate / sweep --dry-run --------------------------------------------------------------------
    V = ["validate", "s.yaml"]
    specs: dict[str, str | bytes] = {
        "empty file": "", "a list": "[1, 2]", "a scalar": "42", "null": "null",
        "engine a list": spec(engine=[1, 2]), "engine a string": spec(engine="fast"),
        "engine_args a list": spec(engine_args=[1, 2]),
        "engine_args unknown arg": spec(engine_args={"enforce_eager": True, "frobnicate": 3}),
        "engine_args wrong type": spec(engine_args={"enforce_eager": "yes please"}),
        "engine_args max_model_len clash": spec(engine_args={"max_model_len": "big"}),
        "engine_args tensor_parallel_size -1": spec(engine_args={"tensor_parallel_size": -1}),
        "engine_args model override": spec(engine_args={"model": "/etc"}),
        "engine_args_sweep a string": spec(engine_args_sweep="x"),
        "engine_args_sweep a number": spec(engine_args_sweep=5),
        "engine_args_sweep empty list": spec(engine_args_sweep=[]),
        "engine_args_sweep empty dict": spec(engine_args_sweep={}),
        "engine_args_sweep list of lists": spec(engine_args_sweep=[[1, 2]]),
        "engine_args_sweep dict of scalars": spec(engine_args_sweep={"enable_chunked_prefill": True}),
        "engine_args_sweep dict of empty lists": spec(engine_args_sweep={"enable_chunked_prefill": []}),
        "engine_args_sweep unknown arg": spec(engine_args_sweep={"frobnicate": [1, 2]}),
        "engine_args_sweep wrong type": spec(engine_args_sweep={"enable_chunked_prefill": ["maybe", 3]}),
        "engine_args_sweep sets block_size": spec(engine_args_sweep=[{"block_size": 7}]),
        "block_size true": spec(engine={"block_size": True}),
        "block_size string": spec(engine={"block_size": "big"}),
        "block_size 0": spec(engine={"block_size": 0}),
        "block_size -32": spec(engine={"block_size": -32}),
        "block_size 1e9": spec(engine={"block_size": 10**9}),
        "max_model_len 0": spec(engine={"max_model_len": 0}),
        "max_model_len 1e12": spec(engine={"max_model_len": 10**12}),
        "max_model_len 1.5": spec(engine={"max_model_len": 1.5}),
        "max_model_len nested list": spec(engine={"max_model_len": [[1024]]}),
        "max_model_len empty list": spec(engine={"max_model_len": []}),
        "kv dtype int3": spec(engine={"kv_cache_dtype": "int3"}),
        "kv dtype 8": spec(engine={"kv_cache_dtype": 8}),
        "kv_cache_memory_bytes -5GiB": spec(engine={"kv_cache_memory_bytes": "-5GiB"}),
        "kv_cache_memory_bytes 8XB": spec(engine={"kv_cache_memory_bytes": "8XB"}),
        "kv_cache_memory_bytes 1e400": spec(engine={"kv_cache_memory_bytes": "1e400"}),
        "kv_cache_memory_bytes 1PiB": spec(engine={"kv_cache_memory_bytes": "1PiB"}),
        "kv_cache_memory_bytes 0": spec(engine={"kv_cache_memory_bytes": 0}),
        "gpu util 0": spec(engine={"gpu_memory_utilization": 0, "kv_cache_memory_bytes": None}),
        "gpu util 2": spec(engine={"gpu_memory_utilization": 2, "kv_cache_memory_bytes": None}),
        "gpu util .nan": spec(engine={"gpu_memory_utilization": float("nan"), "kv_cache_memory_bytes": None}),
        "max_num_seqs 0": spec(engine={"max_num_seqs": 0}),
        "max_num_seqs -1": spec(engine={"max_num_seqs": -1}),
        "max_num_batched_tokens 0": spec(engine={"max_num_batched_tokens": 0}),
        "tensor_parallel_size 0": spec(engine={"tensor_parallel_size": 0}),
        "tensor_parallel_size 3": spec(engine={"tensor_parallel_size": 3}),
        "enable_prefix_caching 'maybe'": spec(engine={"enable_prefix_caching": "maybe"}),
        "async_scheduling 5": spec(engine={"async_scheduling": 5}),
        "concurrency 0": spec(workload={"concurrency": 0}),
        "concurrency -1": spec(workload={"concurrency": [-1, 4]}),
        "concurrency 1e9": spec(workload={"concurrency": 10**9}),
        "prompt_len 0": spec(workload={"prompt_len": 0}),
        "prompt_len string": spec(workload={"prompt_len": "long"}),
        "output_len 0": spec(workload={"output_len": 0}),
        "output_len 1e12": spec(workload={"output_len": 10**12}),
        "repeats 1e9": spec(workload={"repeats": 10**9}),
        "repeats 0": spec(workload={"repeats": 0}),
        "repeats -1": spec(workload={"repeats": -1}),
        "warmup -1": spec(workload={"warmup": -1}),
        "warmup 1e9": spec(workload={"warmup": 10**9}),
        "workload a list": spec(workload=[1, 2]),
        "saturation factors [0]": spec(saturation={"factors": [0]}),
        "saturation factors [1e308]": spec(saturation={"factors": [1e308]}),
        "saturation factors [.inf]": spec(saturation={"factors": [float("inf")]}),
        "saturation factors [-1]": spec(saturation={"factors": [-1]}),
        "saturation factors []": spec(saturation={"factors": []}),
        "saturation factors string": spec(saturation={"factors": "many"}),
        "saturation prompt_len 0": spec(saturation={"prompt_len": 0}),
        "saturation prompt_len 1e9": spec(saturation={"prompt_len": 10**9}),
        "saturation concurrency 0": spec(saturation={"concurrency": [0], "factors": None}),
        "saturation concurrency 1e9": spec(saturation={"concurrency": [10**9], "factors": None}),
        "phases empty": spec(phases=[]), "phases unknown": spec(phases=["warp"]), "phases string": spec(phases="x"),
        "phases duplicated": spec(phases=["decode", "decode"]),
        "telemetry interval 0": spec(telemetry={"interval_s": 0}),
        "telemetry interval -1": spec(telemetry={"interval_s": -1}),
        "telemetry interval 1e-9": spec(telemetry={"interval_s": 1e-9}),
        "telemetry interval .nan": spec(telemetry={"interval_s": float("nan")}),
        "telemetry interval 1e308": spec(telemetry={"interval_s": 1e308}),
        "telemetry backend bogus": spec(telemetry={"backend": "bogus"}),
        "timeouts negative": spec(timeouts={"engine_start_s": -1, "point_s": -5}),
        "timeouts zero": spec(timeouts={"engine_start_s": 0, "point_s": 0}),
        "timeouts .inf": spec(timeouts={"engine_start_s": float("inf")}),
        "timeouts 1e308": spec(timeouts={"point_s": 1e308}),
        "timeouts string": spec(timeouts={"point_s": "forever"}),
        "timeouts a list": spec(timeouts=[1]),
        "name with slash": spec(name="a/b"), "name ..": spec(name=".."), "name ../escape": spec(name="../../etc"),
        "name empty": spec(name=""), "name 10k chars": spec(name="x" * 10_000), "name int": spec(name=5),
        "name with NUL": spec(name="a\x00b"), "name /abs": spec(name="/tmp/x"),
        "output_dir ..": spec(output_dir="../../.."), "output_dir int": spec(output_dir=5),
        "output_dir /dev/null": spec(output_dir="/dev/null"),
        "model unknown": spec(model="llama-9"), "model empty": spec(model=""), "model int": spec(model=7),
        "model ../..": spec(model="../../../../etc"), "model /dev/zero": spec(model="/dev/zero"),
        "model a list": spec(model=["a"]), "model /": spec(model="/"),
        "weights bogus": spec(weights="maybe"), "weights real, no checkpoint": spec(weights="real"),
        "dtype bogus": spec(dtype="int3"), "seed string": spec(seed="x"), "seed -1": spec(seed=-1),
        "seed 1e30": spec(seed=10**30),
        "unknown top key": spec(enigne={"block_size": 32}),
        "probe bogus": spec(probe="yes"),
        "UTF-16 spec": "UTF16", "NUL bytes": b"name: x\x00\x00\n",
        "tab-indented YAML": "name: t\nengine:\n\tblock_size: 32\n",
        "YAML !!python tag": "name: !!python/object/apply:os.system ['true']\n",
        "huge int": spec(workload={"concurrency": 10**400}),
    }
    for label, text in specs.items():
        if text == "UTF16":
            text = spec().encode("utf-16")
        add(Case(f"validate: {label}", V, BAD | (OK if label in OK_SPECS else set()), (), files={"s.yaml": text}))
    add(Case("validate: missing file", ["validate", "nope.yaml"], BAD, ("nope.yaml",)))
    add(Case("validate: a directory", ["validate", "."], BAD, (".",)))
    add(Case("validate: /dev/zero", ["validate", "/dev/zero"], BAD, ("/dev/zero",)))
    add(Case("validate: a FIFO", ["validate", "fifo"], BAD, ("fifo",), files={"_": _fifo}))
    add(Case("validate: spec model is a FIFO dir", V, BAD, ("model",),
             files={"s.yaml": spec(model="m"), "_": _fifo_model}))
    add(Case("validate: model symlink loop", V, BAD, ("model",),
             files={"s.yaml": spec(model="loop1"), "_": _symlink_loop}))
    add(Case("validate: model config.json absurd", V, BAD, ("model", "config"),
             files={"s.yaml": spec(model="m"), "m/config.json": cfg(num_hidden_layers=10**9)}))
    add(Case("validate: model config.json a list", V, BAD, ("model", "config"),
             files={"s.yaml": spec(model="m"), "m/config.json": [1]}))
    add(Case("validate --platform bogus", ["validate", "s.yaml", "--platform", "tpu"], BAD, ("--platform",),
             files={"s.yaml": spec()}))
    add(Case("validate --max-points 0", ["validate", "s.yaml", "--max-points", "0"], BAD, ("--max-points",),
             files={"s.yaml": spec()}))
    add(Case("validate --max-engines -1", ["validate", "s.yaml", "--max-engines", "-1"], BAD, ("--max-engines",),
             files={"s.yaml": spec()}))
    add(Case("validate --max-points 10^30", ["validate", "s.yaml", "--max-points", "1" + "0" * 30], BAD | OK,
             ("--max-points",), files={"s.yaml": spec()}))
    add(Case("validate --json ok", ["validate", "s.yaml", "--json"], OK, files={"s.yaml": spec()}))
    add(Case("validate --json, many dropped", ["validate", "s.yaml", "--json"], OK,
             files={"s.yaml": spec(engine={"max_num_seqs": 4}, workload={"concurrency": list(range(1, 200))})}))
    D = ["sweep", "s.yaml", "--dry-run"]
    add(Case("dry-run --json", [*D, "--json"], OK, files={"s.yaml": spec()}))
    add(Case("dry-run --gpu bogus", [*D, "--gpu", "h900"], BAD, ("--gpu",), files={"s.yaml": spec()}))
    add(Case("dry-run --gpu ''", [*D, "--gpu", ""], BAD, ("--gpu",), files={"s.yaml": spec()}))
    add(Case("dry-run --platform tpu", [*D, "--platform", "tpu"], BAD, ("--platform",), files={"s.yaml": spec()}))
    add(Case("dry-run --gpu l4 --json, 405b", [*D, "--gpu", "l4", "--json"], BAD | OK, ("model", "weights"),
             files={"s.yaml": spec(model="llama-3.1-405b", engine={"block_size": 16, "kv_cache_dtype": "auto"},
                                   serve={"engines": {"block_size": 16, "kv_cache_dtype": "auto"}},
                                   engine_args={"enforce_eager": True})}))
    add(Case("dry-run --gpu h100 --json, repeats 1e6", [*D, "--gpu", "h100-sxm", "--json"], BAD | OK,
             ("repeats",), files={"s.yaml": spec(workload={"repeats": 10**6},
                                                 engine={"block_size": 16, "kv_cache_dtype": "auto"},
                                                 serve={"engines": {"block_size": 16, "kv_cache_dtype": "auto"}})}))
    add(Case("sweep --platform without dry-run", ["sweep", "s.yaml", "--platform", "cuda"], BAD, ("--platform",),
             files={"s.yaml": spec()}))
    add(Case("sweep --out a file", ["sweep", "s.yaml", "--out", "f", "--no-report"], BAD, ("--out",),
             files={"s.yaml": spec(), "f": "x"}))
    add(Case("sweep --out /dev/null", ["sweep", "s.yaml", "--out", "/dev/null", "--no-report"], BAD, ("--out",),
             files={"s.yaml": spec()}))
    add(Case("sweep output_dir /dev/null", ["sweep", "s.yaml", "--no-report"], BAD, ("output_dir",),
             files={"s.yaml": spec(output_dir="/dev/null")}))
    add(Case("sweep bad spec", ["sweep", "s.yaml"], BAD, ("block_size",),
             files={"s.yaml": spec(engine={"block_size": 7})}))

    # --- log --------------------------------------------------------------------------------------------
    logs = ROOT / "tests" / "fixtures" / "vllm_logs"
    add(Case("log: empty file", ["log", "x.log"], BAD | OK, ("x.log",), files={"x.log": ""}))
    add(Case("log: empty file --json", ["log", "x.log", "--json"], BAD | OK, ("x.log",), files={"x.log": ""}))
    add(Case("log: binary", ["log", "x.log"], BAD | OK, ("x.log",), files={"x.log": os.urandom(200_000)}))
    add(Case("log: huge line", ["log", "x.log", "--json"], BAD | OK, ("x.log",),
             files={"x.log": "INFO " + "x" * 50_000_000 + "\n"}))
    add(Case("log: UTF-16", ["log", "x.log", "--json"], BAD | OK, ("x.log",),
             files={"x.log": (logs / "v1_llama31_8b_l40s_kv_size.log").read_text().encode("utf-16")}))
    add(Case("log: a directory", ["log", "."], BAD, (".",)))
    add(Case("log: missing", ["log", "nope.log"], BAD, ("nope.log",)))
    add(Case("log: /dev/zero", ["log", "/dev/zero"], BAD, ("/dev/zero",)))
    add(Case("log: a FIFO", ["log", "fifo"], BAD, ("fifo",), files={"_": _fifo}))
    add(Case("log: --model unknown", ["log", str(logs / "v1_llama31_8b_l40s_kv_size.log"), "--model", "nope"],
             BAD, ("nope",)))
    add(Case("log: --model config.json list", ["log", str(logs / "v1_llama31_8b_l40s_kv_size.log"), "--model", "m"],
             BAD, ("config.json", "m"), files={"m/config.json": [1]}))
    for f in sorted(logs.glob("*.log")):
        add(Case(f"log --json {f.name}", ["log", str(f), "--json"], OK | BAD))
    add(Case("log: negative numbers", ["log", "x.log", "--json"], OK | BAD, ("x.log",),
             files={"x.log": "INFO 01-01 00:00:00 [gpu_worker.py:1] Available KV cache memory: -99999.00 GiB\n"
                             "INFO [kv_cache_utils.py:1] GPU KV cache size: -5 tokens\n"
                             "INFO Maximum concurrency for 1e400 tokens per request: nanx\n"},
             check=lambda o, e: None if "-99999" not in o or '"predicted"' not in o else "negative budget used"))

    # --- check-plan --------------------------------------------------------------------------------------
    CP = ["check-plan", "plan.json", "res"]
    add(Case("check-plan: the saved plan", CP, OK, files={"_": _results_and_plan}))
    add(Case("check-plan --json", [*CP, "--json"], OK, files={"_": _results_and_plan}))
    for label, edit in {
        "missing prediction": _set("prediction", _DEL), "missing inputs": _set("inputs", _DEL),
        "missing architecture": _set("architecture", _DEL), "missing kind": _set("kind", _DEL),
        "kind other": _set("kind", "kvprof-other/v9"), "inputs a list": _set("inputs", [1]),
        "inputs.batch string": _set("inputs.batch", "eight"), "inputs.block_size 7": _set("inputs.block_size", 7),
        "inputs.context -1": _set("inputs.context", -1), "inputs.tp 0": _set("inputs.tensor_parallel_size", 0),
        "prediction.num_blocks string": _set("prediction.num_blocks", "many"),
        "prediction.num_blocks -1": _set("prediction.num_blocks", -1),
        "prediction.decode_step_s NaN": _set("prediction.decode_step_s", float("nan")),
        "prediction a list": _set("prediction", []), "architecture.num_layers 0": _set("architecture.num_layers", 0),
        "architecture a string": _set("architecture", "llama"), "gpu unknown": _set("gpu", "h900"),
        "gpu int": _set("gpu", 5), "model int": _set("model", 5),
        "whole plan a list": lambda p: [p], "whole plan null": lambda p: _NULL,
        "extra field": _set("surprise", 1),
    }.items():
        # top-level gpu is informational (prediction.gpu is checked); a plan without architecture is re-resolved
        fine = ("extra field", "missing architecture", "gpu unknown", "gpu int")
        add(Case(f"check-plan: {label}", CP, BAD | (OK if label in fine else set()),
                 ("plan.json",), files={"_": _edited_plan(edit)}))
    add(Case("check-plan: empty plan file", CP, BAD, ("plan.json",), files={"_": _results, "plan.json": ""}))
    add(Case("check-plan: binary plan", CP, BAD, ("plan.json",), files={"_": _results, "plan.json": b"\xff\x00"}))
    add(Case("check-plan: plan is a calibration", CP, BAD, ("plan.json",),
             files={"_": _results, "plan.json": {"bandwidth_Bps": 1e12}}))
    add(Case("check-plan: plan is a directory", ["check-plan", "res", "res"], BAD, ("res",), files={"_": _results}))
    add(Case("check-plan: missing plan", ["check-plan", "nope.json", "res"], BAD, ("nope.json",),
             files={"_": _results}))
    add(Case("check-plan: results missing", ["check-plan", "plan.json", "nope"], BAD, ("nope",),
             files={"_": _results_and_plan}))
    add(Case("check-plan: results a file", ["check-plan", "plan.json", "plan.json"], BAD, ("plan.json",),
             files={"_": _results_and_plan}))
    add(Case("check-plan: plan /dev/zero", ["check-plan", "/dev/zero", "res"], BAD, ("/dev/zero",),
             files={"_": _results}))

    # --- compare -----------------------------------------------------------------------------------------
    add(Case("compare: same dir twice", ["compare", "res", "res", "--out", "o"], BAD | OK, ("res",),
             files={"_": _results}))
    add(Case("compare: nonexistent", ["compare", "res", "nope", "--out", "o"], BAD, ("nope",),
             files={"_": _results}))
    add(Case("compare: a file", ["compare", "res", "f.txt", "--out", "o"], BAD, ("f.txt",),
             files={"_": _results, "f.txt": "x"}))
    add(Case("compare: one dir", ["compare", "res"], BAD, ("compare", "two", "2")))
    add(Case("compare: --labels wrong count", ["compare", "res", "res", "--labels", "a,b,c", "--out", "o"], BAD,
             ("--labels",), files={"_": _results}))
    add(Case("compare: --labels empty", ["compare", "res", "res", "--labels", ",", "--out", "o"], BAD,
             ("--labels",), files={"_": _results}))
    add(Case("compare: --labels with slash", ["compare", "res", "res", "--labels", "../x,y"], BAD,
             ("--labels",), files={"_": _results}))
    add(Case("compare: --labels ..", ["compare", "res", "res", "--labels", "..,y"], BAD, ("--labels",),
             files={"_": _results}))
    add(Case("compare: every engine of a run failed", ["compare", "other/res", "res", "--labels", "ok,failed",
                                                         "--out", "o"], OK,
             files={"_": _failed_results_and_plan}))
    add(Case("check-plan: the plan's engine failed", ["check-plan", "plan.json", "res"], BAD, ("failed",),
             files={"_": _failed_results_and_plan}))
    add(Case("compare: --out a file", ["compare", "res", "res", "--out", "f.txt"], BAD, ("--out", "labels"),
             files={"_": _results, "f.txt": "x"}))
    add(Case("compare: --pdf a dir", ["compare", "res", "res", "--out", "o", "--pdf", "."], BAD, ("--pdf",),
             files={"_": _results}))
    add(Case("compare: plan and a file", ["compare", "plan.json", "plan.json"], BAD, ("plan.json",),
             files={"_": _results_and_plan}))

    # --- gpus / models / report / global -----------------------------------------------------------------
    add(Case("gpus --json", ["gpus", "--json"], OK))
    add(Case("models --json", ["models", "--json"], OK))
    add(Case("gpus extra arg", ["gpus", "h100"], BAD, ("h100", "argument")))
    add(Case("models --bogus", ["models", "--bogus"], BAD, ("--bogus",)))
    add(Case("no such command", ["frobnicate"], BAD, ("frobnicate",)))
    add(Case("report: nonexistent", ["report", "nope"], BAD, ("nope",)))
    add(Case("report: a file", ["report", "f.txt"], BAD, ("f.txt",), files={"f.txt": "x"}))
    add(Case("report --out-dir a file", ["report", "res", "--out-dir", "f.txt"], BAD, ("--out-dir",),
             files={"_": _results, "f.txt": "x"}))
    add(Case("report --pdf missing parent", ["report", "res", "--pdf", "no/such/r.pdf"], BAD, ("--pdf",),
             files={"_": _results}))
    return C


OK_SPECS = {  # hostile-looking but meaningful: exit 0 is a right answer
    "engine_args_sweep dict of scalars", "engine_args_sweep empty dict", "output_dir ..",
    "telemetry interval 1e308", "timeouts 1e308", "timeouts .inf",
    "name 10k chars",
}


@dataclass
class Outcome:
    case: Case
    rc: int | None
    seconds: float
    problem: str | None
    stderr: str


def _write(d: Path, files: dict) -> None:
    for rel, content in files.items():
        if callable(content):
            content(d)
            continue
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        elif isinstance(content, str):
            p.write_text(content)
        else:
            p.write_text(json.dumps(content))


def judge(case: Case, rc: int | None, out: str, err: str) -> str | None:
    """The first property the answer breaks, or None when it is clean."""
    if rc is None:
        return f"no answer in {TIMEOUT_S} s"
    if "Traceback (most recent call last)" in out + err:
        last = [x for x in err.splitlines() if x.strip()][-1:] or ["?"]
        return f"traceback: {last[0][:100]}"
    if rc not in {0, 1, 2, 3, 130}:
        return f"exit {rc}"
    if rc not in case.expect:
        return f"exit {rc}, expected {sorted(case.expect)}" + (f": {err.strip().splitlines()[0][:90]}"
                                                               if err.strip() else "")
    if rc == 2:
        lines = [x for x in err.splitlines() if x.strip()]
        if not lines:
            return "exit 2 without a message"
        if case.names and not any(n.lower() in err.lower() for n in case.names):
            return f"message names none of {case.names}: {lines[0][:100]}"
    if rc == 0 and "--json" in case.argv:
        try:
            json.loads(out)
        except ValueError as exc:
            return f"stdout is not one JSON document ({exc})"
    if rc == 0 and case.check is not None and (why := case.check(out, err)):
        return f"wrong answer: {why}"
    return None


def run_one(case: Case) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="kvprof-hostile-") as tmp:
        d = Path(tmp)
        try:
            _write(d, case.files)
        except Exception as exc:  # the case's own setup failed: say so, do not count it
            return Outcome(case, None, 0.0, f"setup failed: {exc}", "")
        env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200", NO_COLOR="1")
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, "-m", "profiler.cli", *case.argv], cwd=d, env=env,
                               capture_output=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
            rc, out, err = p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            rc, out, err = None, "", ""
        return Outcome(case, rc, time.perf_counter() - t0, judge(case, rc, out, err), err)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("-j", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("-v", action="store_true", help="print the first stderr line of every case")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args()
    todo = [c for c in cases() if args.k in c.name]
    if args.list:
        for c in todo:
            print(c.name)
        return 0
    with ThreadPoolExecutor(args.j) as pool:
        outcomes = list(pool.map(run_one, todo))
    width = max(len(o.case.name) for o in outcomes)
    for o in outcomes:
        status = "clean" if o.problem is None else o.problem
        print(f"{o.case.name:<{width}}  {'-' if o.rc is None else o.rc:>3}  {o.seconds:5.1f}s  {status}")
        if args.v and o.stderr.strip():
            print(f"{'':<{width}}         {o.stderr.strip().splitlines()[0][:160]}")
    clean = sum(o.problem is None for o in outcomes)
    print(f"\n{clean} of {len(outcomes)} answered cleanly ({100 * clean / len(outcomes):.0f} %); "
          f"slowest {max(o.seconds for o in outcomes):.1f} s")
    return 0 if clean == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
