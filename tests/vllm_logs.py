"""The published vLLM start-up logs under tests/fixtures/vllm_logs/ and what each states (EXPECTED: the numbers
as the log prints them), and a vLLM 0.32 start-up as its source writes it (V032_LINES): read by the parser's tests
and by `kvprof log`'s."""

from __future__ import annotations

from helpers import FIXTURES as _FIXTURES

FIXTURES = _FIXTURES / "vllm_logs"
G = 2**30  # vLLM prints bytes / 2**30 as "GiB" and as "GB"
M = 2**20  # ... and bytes / 2**20 as "MB" (0.5.x)

# fixture → {StartupLog field: value as the log states it}
EXPECTED: dict[str, dict] = {
    "v0.5.3_qwen7b_mb_units.log": {
        "enable_prefix_caching": False,  # the engine config line (or the non-default args) states it
        "vllm_version": "0.5.3.post1", "model": "./models/Qwen-7B-Chat", "dtype": "bfloat16",
        "max_model_len": 32768, "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "kv_cache_dtype": "auto",
        "model_loading_bytes": int(14737.2578 * M),  # "Loading model weights took 14737.2578 MB"
        "log_num_gpu_blocks": 7877,
    },
    "v0.3_opt125m_engine_line_without_version.log": {
        "model": "facebook/opt-125m", "dtype": "float16", "max_model_len": 2048, "tensor_parallel_size": 1,
        "kv_cache_dtype": "auto",
        "model_loading_bytes": int(244.61 * M),  # ">> INFO … Loading model weights took 244.61 MB"
        "log_num_gpu_blocks": 76240,
    },
    "v0.7.3_granite_k8s_namespace_args.log": {
        "vllm_version": "0.7.3", "model": "ibm-granite/granite-3.0-2b-base", "dtype": "auto",
        "kv_cache_dtype": "auto", "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
        "gpu_memory_utilization": 0.9,  # the Namespace
        "model_loading_bytes": int(4.7196 * G), "log_num_gpu_blocks": 7124,
        "log_max_concurrency_len": 4096, "log_max_concurrency": 27.83, "max_model_len": 4096,
        "cuda_graph_bytes": int(0.59 * G),  # "Graph capturing finished in 23 secs, took 0.59 GiB"
        "enable_lora": False, "max_loras": 1, "max_lora_rank": 16,  # the Namespace: LoRA off, vLLM's defaults
    },
    "v1_llama31_8b_l40s_kv_size.log": {
        "model_loading_bytes": int(14.9889 * G), "model_loading_seconds": 3.652170,
        "log_kv_cache_tokens": 158656, "log_max_concurrency_len": 32768, "log_max_concurrency": 4.84,
        "max_model_len": 32768,
    },
    "llama32_11b_vision_h100_cuda_blocks.log": {
        "total_gpu_memory_bytes": int(79.22 * G), "gpu_memory_utilization": 0.90,
        "requested_memory_bytes": int(71.29 * G), "weights_bytes_logged": int(19.86 * G),
        "non_torch_bytes": int(0.16 * G), "peak_activation_bytes": int(36.63 * G),
        "available_kv_bytes": int(14.65 * G), "log_num_gpu_blocks": 6001,
    },
    "llama405b_fp8_8xh100_ranks.log": {
        "model_loading_bytes": int(57.7520 * G),  # "Loading model weights took 57.7520 GB", every rank
    },
    "llama31_8b_tp8_ranks_gpu_blocks.log": {
        "model_loading_bytes": int(1.9028 * G), "log_num_gpu_blocks": 464716,
        "log_max_concurrency_len": 131072, "log_max_concurrency": 56.73, "max_model_len": 131072,
    },
    "torchserve_prefixed_gpu_blocks.log": {
        "model_loading_bytes": int(7.5122 * G), "log_num_gpu_blocks": 61913,
    },
    "v0.6.3.post1_phi35_vision_hard_wrapped.log": {
        "enable_prefix_caching": False,  # the engine config line (or the non-default args) states it
        "vllm_version": "0.6.3.post1", "model": "microsoft/Phi-3.5-vision-instruct", "dtype": "bfloat16",
        "max_model_len": 4096, "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "kv_cache_dtype": "auto",
        "model_loading_bytes": int(7.9324 * G), "log_num_gpu_blocks": 2153,
        "log_max_concurrency_len": 4096, "log_max_concurrency": 8.41,
        "cuda_graph_bytes": None,  # "Graph capturing finished in 10 secs." states no size
    },
    "meta_llama3_8b_profiling_table.log": {
        "total_gpu_memory_bytes": int(79.22 * G), "gpu_memory_utilization": 0.90,
        "requested_memory_bytes": int(71.29 * G), "weights_bytes_logged": int(14.96 * G),
        "non_torch_bytes": int(1.79 * G), "peak_activation_bytes": int(1.26 * G),
        "available_kv_bytes": int(53.29 * G),
    },
    "v1_llama70b_w8a8_gpu_blocks.log": {
        "model_loading_bytes": int(67.7229 * G), "log_num_gpu_blocks": 1381,
        "log_max_concurrency_len": 2048, "log_max_concurrency": 10.79, "max_model_len": 2048,
    },
    "qwen25_7b_rtx4060_negative_kv.log": {
        "model_loading_bytes": int(5.2032 * G), "total_gpu_memory_bytes": int(8.00 * G),
        "gpu_memory_utilization": 0.70, "requested_memory_bytes": int(5.60 * G),
        "weights_bytes_logged": int(5.20 * G), "non_torch_bytes": int(0.03 * G),
        "peak_activation_bytes": int(1.42 * G), "available_kv_bytes": int(-1.05 * G),
        "log_num_gpu_blocks": 0, "log_max_concurrency_len": 4096, "log_max_concurrency": 0.00,
        "max_model_len": 4096,  # vLLM's "Maximum concurrency for L tokens" states max_model_len
    },
    "llama2_7b_k8s_boxed.log": {
        "total_gpu_memory_bytes": int(79.19 * G), "gpu_memory_utilization": 0.90,
        "requested_memory_bytes": int(71.27 * G), "weights_bytes_logged": int(12.55 * G),
        "non_torch_bytes": int(0.16 * G), "peak_activation_bytes": int(2.38 * G),
        "available_kv_bytes": int(56.18 * G), "log_num_gpu_blocks": 7191,
    },
    "v0.8.3_qwen25vl72b_4xa100_ranks_differ.log": {  # rank 0 = the line without a worker prefix
        "total_gpu_memory_bytes": int(39.38 * G), "gpu_memory_utilization": 0.95,
        "requested_memory_bytes": int(37.41 * G), "weights_bytes_logged": int(34.43 * G),
        "non_torch_bytes": int(0.43 * G), "peak_activation_bytes": int(2.51 * G),
        "available_kv_bytes": int(0.04 * G),
    },
    "vllmworker_rank_boxed_model_loading.log": {
        "model_loading_bytes": int(11.4384 * G), "model_loading_seconds": 5.338305,  # rank=0's line
    },
    "dp_docker_timestamps_kv_memory_hint.log": {
        "cuda_graph_bytes": int(-9.96 * G),  # "took -9.96 GiB" and "-9.96 GiB for CUDAGraph memory"
        "initial_free_memory_bytes": int(176.17 * G), "total_gpu_memory_bytes": int(178.35 * G),
        "gpu_memory_utilization": 0.9, "requested_memory_bytes": int(160.52 * G),
        "weights_bytes_logged": int(60.79 * G), "peak_activation_bytes": int(13.33 * G),
        "non_torch_bytes": int(10.96 * G),
        "kv_cache_memory_requested_limit_bytes": 91539781222, "kv_cache_memory_gpu_limit_bytes": 108345741312,
        "available_kv_bytes": int(75.44 * G),  # "Current kv cache memory in use is 75.44 GiB"
    },
    "worker_tp0_model_loading_memory_and_seconds.log": {
        "model_loading_bytes": int(12.66 * G), "model_loading_seconds": 31.657031,
        # "Encoder cache will be initialized with a budget of 8192 tokens, and profiled with 3 video items"
        "encoder_budget_tokens": 8192, "encoder_profile_items": 3, "encoder_profile_modality": "video",
    },
    "tp2_worker_ranks_cuda_graph_estimate_differ.log": {
        "cuda_graph_estimate_bytes": int(4.38 * G),  # Worker_TP0's
        "available_kv_bytes": int(25.46 * G),
        "gpu_memory_utilization": 0.9,  # "The current --gpu-memory-utilization=0.9000 is equivalent to ..."
    },
    "docker_timestamps_cuda_graph_estimate.log": {
        "cuda_graph_estimate_bytes": int(0.44 * G), "available_kv_bytes": int(37.99 * G),
        "gpu_memory_utilization": 0.9,  # "The current --gpu-memory-utilization=0.9000 is equivalent to ..."
    },
    "v0.18.0_docker_compose_logo_qwen3_8b_gguf.log": {
        "vllm_version": "0.18.0", "model": "/models/unsloth/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf",
        "max_model_len": 16384, "gpu_memory_utilization": 0.79, "kv_cache_dtype": "fp8", "max_num_seqs": 16,
    },
    "v0.24.0_qwen36_35b_rtx5090.log": {
        "enable_prefix_caching": True,  # the engine config line (or the non-default args) states it
        "available_kv_bytes": int(5.98 * G), "log_kv_cache_tokens": 567978,
        "log_max_concurrency_len": 131072, "log_max_concurrency": 4.33,
        "vllm_version": "0.24.0", "model": "~/.cache/huggingface/qwen3.6-35b-a3b-nvfp4", "dtype": "bfloat16",
        "max_model_len": 131072, "kv_cache_dtype": "fp8", "max_num_batched_tokens": 8192, "max_num_seqs": 1,
    },
    "gb10_cuda_graph_pool_actual_estimated.log": {
        "cuda_graph_bytes": int(-0.19 * G), "cuda_graph_estimate_bytes": int(2.43 * G),
    },
    "v0.19.0_llama31_8b_pp2_h100_debug_profile.log": {  # the headline is pipeline stage 0 (Worker_PP0)
        "enable_prefix_caching": False,  # the engine config line (or the non-default args) states it
        "vllm_version": "0.19.0", "model": "meta-llama/Llama-3.1-8B-Instruct", "dtype": "bfloat16",
        "max_model_len": 8192, "tensor_parallel_size": 1, "pipeline_parallel_size": 2, "kv_cache_dtype": "auto",
        "gpu_memory_utilization": 0.95, "max_num_batched_tokens": 8192,
        # "worker init memory snapshot: … free_memory=77.76GiB, total_memory=79.19GiB, …"
        "initial_free_memory_bytes": int(77.76 * G), "total_gpu_memory_bytes": int(79.19 * G),
        "requested_memory_bytes": int(75.23 * G),  # "worker requested memory: 75.23GiB"
        "model_loading_bytes": int(7.51 * G), "model_loading_seconds": 3.992785,
        "cuda_graph_estimate_bytes": int(0.54 * G),  # "Estimated CUDA graph memory: 0.54 GiB total"
        # "Memory profiling takes 9.87 seconds. Total non KV cache memory: 8.69GiB; torch peak memory increase:
        # 1.1GiB; non-torch forward increase memory: 0.07GiB; weights memory: 7.51GiB." — not the snapshot's
        # "non_torch_memory=1.43GiB"
        "weights_bytes_logged": int(7.51 * G), "peak_activation_bytes": int(1.1 * G),
        "non_torch_bytes": int(0.07 * G), "non_kv_cache_bytes": int(8.69 * G),
        "available_kv_bytes": int(66.54 * G),  # "Available KV cache memory: 66.54 GiB"
        "log_kv_cache_tokens": 1075312, "log_max_concurrency_len": 8192, "log_max_concurrency": 131.26,
        "cuda_graph_bytes": int(0.65 * G),  # "Graph capturing finished in 3 secs, took 0.65 GiB"
        "kv_cache_memory_requested_limit_bytes": 70599139328, "kv_cache_memory_gpu_limit_bytes": 73316622336,
        "log_num_gpu_blocks": 67207,  # "… after num_gpu_blocks is: 67207"
    },
}


V032_LINES = (
    # v1/engine/core.py: "Initializing a V1 LLM engine (v%s) with config: %s" (VllmConfig.__str__)
    "(EngineCore pid=4242) INFO 11-30 10:00:00 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B-Instruct', "
    "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
    "dtype=torch.bfloat16, max_seq_len=8192, download_dir=None, load_format=auto, tensor_parallel_size=1, "
    "pipeline_parallel_size=1, data_parallel_size=1, kv_cache_dtype=auto, device_config=cuda\n"
    # v1/worker/gpu_model_runner.py: "Model loading took %s GiB memory and %.6f seconds"
    "(EngineCore pid=4242) INFO 11-30 10:00:10 [gpu_model_runner.py:5150] Model loading took 14.99 GiB memory "
    "and 9.123456 seconds\n"
    # "Estimated CUDA graph memory: %.2f GiB total"
    "(EngineCore pid=4242) INFO 11-30 10:00:20 [gpu_model_runner.py:6475] Estimated CUDA graph memory: 0.61 GiB total\n"
    # v1/worker/gpu_worker.py: "Available KV cache memory: %s GiB"
    "(EngineCore pid=4242) INFO 11-30 10:00:21 [gpu_worker.py:760] Available KV cache memory: 53.27 GiB\n"
    # v1/core/kv_cache_utils.py: "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
    "(EngineCore pid=4242) INFO 11-30 10:00:21 [kv_cache_utils.py:2328] GPU KV cache size: 436,384 tokens, "
    "Maximum concurrency for 8,192 tokens per request: 53.27x\n"
    # gpu_model_runner.py: "Graph capturing finished in %.0f secs, took %.2f GiB"
    "(EngineCore pid=4242) INFO 11-30 10:00:40 [gpu_model_runner.py:6582] Graph capturing finished in 12 secs, "
    "took 0.55 GiB\n"
    # gpu_worker.py: "CUDA graph pool memory: %s GiB (actual), %s GiB (estimated), difference: %s GiB (%.1f%%)."
    "(EngineCore pid=4242) INFO 11-30 10:00:40 [gpu_worker.py:972] CUDA graph pool memory: 0.55 GiB (actual), "
    "0.61 GiB (estimated), difference: 0.06 GiB (10.9%).\n"
    # gpu_worker.py compile_or_warm_up_model: the "Free memory on device …" message
    "(EngineCore pid=4242) INFO 11-30 10:00:40 [gpu_worker.py:1030] Free memory on device (78.52/79.19 GiB) on "
    "startup. Desired GPU memory utilization is (0.9, 71.27 GiB). Actual usage is 15.45 GiB for consumed memory "
    "(weights + non-torch), 2.55 GiB for peak activation, and 0.55 GiB for CUDAGraph memory. Replace "
    "gpu_memory_utilization config with `--kv-cache-memory=56813551616` (52.91 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=64687857664` (60.24 GiB) to fully utilize gpu memory. Current kv cache memory in use is "
    "53.27 GiB.\n"
)
