"""The config.json keys kvprof reads, family by family, and the refusal of every other one.

A key that kvprof does not read may change the layer mix, the weights or the cache (Llama 4's
``interleave_moe_layer_step``, DeepSeek-V3.2's ``index_topk``, Nemotron-H's ``hybrid_override_pattern``). Planned
without it, the model would be planned as something else: a silently wrong answer. So each family (a
``model_type``) lists the keys its reading understands, a config.json with any other key is refused with that key's
name, and a ``model_type`` without a family here is refused the same way.

What a family lists is of three kinds, kept apart so that a reader of this file can tell them:

* keys the reading turns into the architecture (:data:`DECODER`, the family's own blocks);
* keys that change nothing kvprof plans, for that family: an activation vLLM's model file fixes anyway, a router's
  loss or scoring (the weights are the same), a norm's epsilon (:data:`INERT` holds those every family shares);
* Hugging Face's generic ``PretrainedConfig`` keys (token ids, generation defaults, dropout): :data:`INERT`.

A new family is one entry of :data:`FAMILIES` (and its reading, an entry of ``FAMILY_READERS`` in
``analysis.model.families``, where its keys are new). Keys nested in a ``text_config`` are checked against the
decoder's family, the wrapper's own keys against the wrapper's.
"""

from __future__ import annotations

import re
from typing import Any

# Hugging Face PretrainedConfig's generic attributes (transformers 4.x and 5.x to_dict()) and generation defaults:
# ids, labels, beam-search settings. None changes a layer, a weight or the KV cache.
INERT = frozenset({
    "_name_or_path", "_commit_hash", "_attn_implementation_autoset", "_note", "architectures", "auto_map",
    "transformers_version", "model_type", "add_cross_attention", "bad_words_ids", "begin_suppress_tokens",
    "chunk_size_feed_forward", "cross_attention_hidden_size", "decoder_start_token_id", "diversity_penalty",
    "do_sample", "early_stopping", "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty",
    "finetuning_task", "forced_bos_token_id", "forced_eos_token_id", "id2label", "is_decoder", "label2id",
    "length_penalty", "max_length", "min_length", "no_repeat_ngram_size", "num_beam_groups", "num_beams",
    "num_return_sequences", "output_attentions", "output_hidden_states", "output_scores", "prefix", "problem_type",
    "pruned_heads", "remove_invalid_values", "repetition_penalty", "return_dict", "return_dict_in_generate",
    "suppress_tokens", "task_specific_params", "temperature", "tf_legacy_loss", "tie_encoder_decoder",
    "tokenizer_class", "top_k", "top_p", "torchscript", "typical_p", "use_bfloat16", "use_cache",
    "initializer_range", "pretraining_tp", "gradient_checkpointing", "torch_dtype", "dtype",
    "is_encoder_decoder",  # read: true is refused (architecture._from_dict)
    # a MoE router's training-time loss, noise and logits output (transformers 5 writes them into every MoE config)
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
    # read: true (a bidirectional encoder, Gemma's embedding variants) is refused (architecture._from_dict)
    "use_bidirectional_attention",
})
# Token ids (bos_token_id, image_token_id …), dropout rates and norm epsilons, by name.
INERT_PATTERNS = (re.compile(r".*_token_ids?$"), re.compile(r".*_token_index$"), re.compile(r".*dropout.*"),
                  re.compile(r".*_pdrop$"), re.compile(r".*_eps$"), re.compile(r".*_epsilon$"))

# What every decoder's reading turns into the architecture (analysis.model.architecture._from_dict), and the
# RoPE and activation keys a vLLM model file of these families reads without changing a weight's shape.
DECODER = frozenset({
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "tie_word_embeddings", "max_position_embeddings", "rope_theta",
    "rope_scaling", "rope_parameters", "hidden_act", "attention_bias", "quantization_config",
    # vLLM's length keys (architecture._MAX_LEN_KEYS): the smallest one present is the longest max_model_len
    "n_positions", "max_seq_len", "seq_length", "model_max_length", "max_target_positions", "max_sequence_length",
    "max_seq_length", "seq_len",
})
# Qwen2's sliding window: layers from max_window_layers on, when use_sliding_window is true.
QWEN_WINDOW = frozenset({"sliding_window", "use_sliding_window", "max_window_layers", "layer_types"})
# Mixtral-style routed experts (a router and num_local_experts gated experts a layer).
MIXTRAL_MOE = frozenset({"num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
                         "output_router_logits", "router_jitter_noise"})
# Qwen's MoE: num_experts of moe_intermediate_size, a MoE layer every decoder_sparse_step, mlp_only_layers dense,
# Qwen2-MoE's gated shared expert.
QWEN_MOE = frozenset({"num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                      "mlp_only_layers", "norm_topk_prob", "router_aux_loss_coef", "output_router_logits",
                      "shared_expert_intermediate_size",
                      # transformers 5 writes num_experts as num_local_experts (Qwen3MoeConfig.attribute_map)
                      "num_local_experts"})
# Granite's muP-style scales: activations, residuals, attention scores and logits, no weight
GRANITE_SCALES = frozenset({"embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"})
# Granite's sliding-window builds (families.dense._granite): sliding layers, a sink a head, a RoPE base a layer
GRANITE_SWA = frozenset({"layer_types", "sliding_window", "attention_sinks", "layer_rope_theta"})
# DeepSeek's multi-head latent attention and its MoE (routed and shared experts, the first k layers dense, a MoE
# layer every moe_layer_freq), its grouped routing (same weights) and the MTP layers past the decoder.
DEEPSEEK = frozenset({"kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                      "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                      "first_k_dense_replace", "moe_layer_freq", "n_group", "topk_group", "topk_method",
                      "routed_scaling_factor", "scoring_func", "norm_topk_prob", "aux_loss_alpha", "seq_aux",
                      "num_nextn_predict_layers", "ep_size",
                      # transformers 5's: qk_head_dim (nope + rope: vLLM derives it, whatever is written),
                      # rope_interleave (a RoPE layout),
                      # mlp_bias (read: vLLM's DeepSeek MLPs have none, so true is refused)
                      "qk_head_dim", "rope_interleave", "mlp_bias"})
# DeepSeek Sparse Attention's indexer (families.attention._sparse_indexer): its heads, top-k and which layers have one;
# indexer_rope_interleave and index_share_for_mtp_iteration choose a RoPE style and an MTP behaviour, no weight.
DSA = frozenset({"index_n_heads", "index_head_dim", "index_topk", "index_topk_freq", "index_skip_topk_offset",
                 "index_topk_pattern", "indexer_rope_interleave", "index_share_for_mtp_iteration"})
# Qwen3-Next's gated DeltaNet and gated attention (families.hybrid._qwen3_next).
QWEN3_NEXT = frozenset({"layer_types", "full_attention_interval", "linear_conv_kernel_dim", "linear_key_head_dim",
                        "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
                        "partial_rotary_factor", "attn_output_gate", "use_sliding_window",
                        # the DeltaNet output gate's activation (silu, swish or sigmoid): no weights of its own
                        "output_gate_type"})
# A multimodal wrapper: the decoder in text_config, the towers beside it (analysis.model.vision).
WRAPPER = frozenset({"text_config", "vision_config", "audio_config", "mm_tokens_per_image", "vision_feature_layer",
                     "vision_feature_select_strategy", "projector_hidden_act", "multimodal_projector_bias",
                     "image_seq_length", "boi_token_index", "eoi_token_index", "quantization_config"})
# GPT-2 lineage names (non-gated MLP, biases, learned positions where the family has them).
GPT2 = frozenset({"n_layer", "n_embd", "n_head", "n_inner", "n_positions", "n_ctx", "activation_function",
                  "vocab_size", "tie_word_embeddings", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                  "reorder_and_upcast_attn", "summary_type", "summary_use_proj", "summary_activation",
                  "summary_proj_to_labels", "summary_first_dropout", "quantization_config"})

FAMILIES: dict[str, frozenset[str]] = {
    "llama": DECODER | {"mlp_bias", "draft_vocab_size", "layer_types", "sliding_window"},
    "llava": DECODER | WRAPPER,
    "mistral": DECODER | {"sliding_window"},
    "mixtral": DECODER | MIXTRAL_MOE | {"sliding_window"},
    "qwen2": DECODER | QWEN_WINDOW | {"use_mrope"},
    # MiMo-7B: Qwen2's decoder (vLLM's mimo.py subclasses it) and MTP layers its mapper drops ("model.mtp_layers.")
    "mimo": DECODER | QWEN_WINDOW | {"use_mrope", "num_nextn_predict_layers"},
    "qwen2_moe": DECODER | QWEN_WINDOW | QWEN_MOE | {"qkv_bias"},  # read: vLLM always biases q, k, v
    "qwen3": DECODER | QWEN_WINDOW,
    # Qwen3-Coder's qkv_bias and use_qk_norm: vLLM's qwen3_moe.py reads neither (its q/k norms always, the QKV bias
    # from attention_bias)
    "qwen3_moe": DECODER | QWEN_WINDOW | QWEN_MOE | {"qkv_bias", "use_qk_norm"},
    "qwen2_vl": DECODER | QWEN_WINDOW | WRAPPER | {"use_mrope", "vision_start_token_id", "vision_end_token_id"},
    "qwen2_5_vl": DECODER | QWEN_WINDOW | WRAPPER | {"use_mrope"},
    "qwen3_vl": WRAPPER | {"tie_word_embeddings"},
    "qwen3_vl_moe": WRAPPER | {"tie_word_embeddings"},
    "qwen3_vl_text": DECODER,
    "qwen3_vl_moe_text": DECODER | QWEN_MOE,
    "gemma2": DECODER | {"sliding_window", "hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping",
                         "final_logit_softcapping", "cache_implementation", "layer_types"},
    "gemma3": WRAPPER | {"tie_word_embeddings", "initializer_range"},
    "gemma3_text": DECODER | {"sliding_window", "sliding_window_pattern", "layer_types", "hidden_activation",
                              "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                              "rope_local_base_freq", "cache_implementation", "_sliding_window_pattern"},
    "deepseek_v2": DECODER | DEEPSEEK,
    "deepseek_v3": DECODER | DEEPSEEK,
    # DeepSeek-V4 (families.attention._deepseek_v4): compressed and sparse attention layer by layer, the grouped output
    # projection, hyper-connections, hash-routed first layers; swiglu_limit clamps an activation, compress_rope_theta
    # and hc_sinkhorn_iters set values and iterations, not shapes; expert_dtype names the experts' checkpoint format
    "deepseek_v4": DECODER | DEEPSEEK | {"index_n_heads", "index_head_dim", "index_topk", "compress_ratios",
                                         "compress_rope_theta", "sliding_window", "o_groups", "o_lora_rank",
                                         "hc_mult", "hc_sinkhorn_iters", "num_hash_layers", "swiglu_limit",
                                         "expert_dtype", "vision_n_layers"},
    # DeepSeek-V3.2: V3 with a sparse-attention indexer on every layer
    "deepseek_v32": DECODER | DEEPSEEK | DSA | {"layer_types", "mlp_layer_types"},
    # GLM-5: DeepSeek-V3.2's layers (vLLM's GlmMoeDsaForCausalLM is the same class); qk_head_dim is qk_nope + qk_rope
    # and head_dim unused by MLA, rope_interleave a RoPE style, moe_router_dtype float32 routing (vLLM forces it);
    # indexer_types and mlp_layer_types (GLM-5.2) are checked against what vLLM builds
    "glm_moe_dsa": DECODER | DEEPSEEK | DSA | {"qk_head_dim", "rope_interleave", "moe_router_dtype",
                                               "indexer_types", "mlp_layer_types", "layer_types", "num_experts",
                                               "mlp_bias"},
    # Falcon-H1 (families.hybrid._falcon_h1): attention and Mamba2 side by side in every layer; the muP multipliers
    # scale activations, mamba_chunk_size, mamba_norm_before_gate and time_step_limit shape no weight
    "falcon_h1": DECODER | {"mamba_d_ssm", "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state",
                            "mamba_d_conv", "mamba_expand", "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias",
                            "mamba_norm_before_gate", "mamba_rms_norm", "time_step_limit", "time_step_min",
                            "time_step_max", "time_step_floor", "projectors_bias", "mlp_bias", "attn_rotary_emb",
                            "lm_head_multiplier", "embedding_multiplier", "mlp_multipliers", "key_multiplier",
                            "attention_out_multiplier", "attention_in_multiplier", "ssm_multipliers",
                            "ssm_in_multiplier", "ssm_out_multiplier", "num_logits_to_keep", "attn_layer_indices"},
    # Jamba (families.hybrid._jamba): attention every attn_layer_period-th layer, experts every expert_layer_period-th;
    # use_mamba_kernels picks kernels, num_logits_to_keep an output, no weight
    "jamba": DECODER | {"attn_layer_period", "attn_layer_offset", "expert_layer_period", "expert_layer_offset",
                        "num_experts", "num_experts_per_tok", "mamba_d_state", "mamba_d_conv", "mamba_expand",
                        "mamba_dt_rank", "mamba_conv_bias", "mamba_proj_bias", "use_mamba_kernels",
                        "num_logits_to_keep", "output_router_logits", "router_aux_loss_coef", "sliding_window",
                        "use_associative_scan", "use_mambapy"},  # kernel choices
    # LFM2 (families.hybrid._lfm2): gated short convolutions and attention; the *_init_* and use_* keys describe
    # training-time choices, norm_eps and theta the norms and RoPE
    "lfm2": DECODER | {"layer_types", "full_attn_idxs", "block_dim", "block_ff_dim", "block_multiple_of",
                       "block_ffn_dim_multiplier", "block_auto_adjust_ff_dim", "block_norm_eps", "block_mlp_init_scale",
                       "block_out_init_scale", "block_use_swiglu", "block_use_xavier_init", "conv_L_cache",
                       "conv_bias", "conv_dim", "conv_dim_out", "conv_use_xavier_init", "norm_eps", "num_heads",
                       "theta", "tie_embedding", "use_pos_enc"},
    # LFM2-MoE (families.hybrid._lfm2_moe): LFM2's layers, experts past the first num_dense_layers; the routing keys
    # (top-k renormalising, scaling) change no weight
    "lfm2_moe": DECODER | {"layer_types", "conv_L_cache", "conv_bias", "norm_eps", "num_dense_layers",
                           "num_experts", "num_experts_per_tok", "moe_intermediate_size", "use_expert_bias",
                           "routed_scaling_factor", "norm_topk_prob", "output_router_logits"},
    # MiniMax-M2 (families.attention._minimax_m2): the MTP modules' keys describe layers vLLM does not load;
    # attn_type_list and sliding_window are checked against the full attention vLLM builds
    "minimax_m2": DECODER | {"num_local_experts", "num_experts_per_tok", "rotary_dim", "partial_rotary_factor",
                             "use_qk_norm", "qk_norm_type", "use_routing_bias", "scoring_func", "use_mtp",
                             "mtp_transformer_layers", "num_mtp_modules", "shared_intermediate_size",
                             "attn_type_list", "sliding_window", "output_router_logits", "router_aux_loss_coef",
                             "router_jitter_noise"},
    # Kimi-K2: DeepSeek-V3's architecture (its config's architectures: DeepseekV3ForCausalLM, vLLM's deepseek_v2.py)
    "kimi_k2": DECODER | DEEPSEEK,
    # initial_context_length: the pre-YaRN length, which vLLM's gpt_oss.py takes from rope_scaling instead
    "gpt_oss": DECODER | {"num_local_experts", "num_experts_per_tok", "sliding_window", "layer_types",
                          "swiglu_limit", "router_aux_loss_coef", "output_router_logits", "experts_per_token",
                          "initial_context_length", "swiglu_alpha"},  # the activation's constant
    "phi3": DECODER | {"sliding_window", "original_max_position_embeddings", "partial_rotary_factor"},
    "olmo2": DECODER,
    # IBM Granite 3.x (vLLM's granite.py, granitemoe.py, granitemoeshared.py): Llama's layers, Mixtral-style experts,
    # a shared MLP; the multipliers scale activations and logits only (a sliding layer_types is not read: refused)
    "granite": DECODER | GRANITE_SWA | {"mlp_bias", *GRANITE_SCALES},
    "granitemoe": DECODER | MIXTRAL_MOE | GRANITE_SCALES | GRANITE_SWA,
    "granitemoeshared": DECODER | MIXTRAL_MOE | GRANITE_SCALES | GRANITE_SWA | {"shared_intermediate_size"},
    "granite_swa": DECODER | GRANITE_SWA | {"mlp_bias", *GRANITE_SCALES},
    "granitemoe_swa": DECODER | MIXTRAL_MOE | GRANITE_SCALES | GRANITE_SWA | {"shared_intermediate_size"},
    # OLMoE (families.attention._full_width_qk_norm): clip_qkv clamps activations, norm_topk_prob routes;
    # neither is a weight
    "olmoe": DECODER | {"num_experts", "num_experts_per_tok", "norm_topk_prob", "clip_qkv", "router_aux_loss_coef",
                        "output_router_logits"},
    # EXAONE 4.0 and Command R / R7B / A (families.attention._exaone4, _cohere): layer_types or the
    # sliding_window_pattern
    # transformers derives them from; logit_scale scales the logits only
    "exaone4": DECODER | {"layer_types", "sliding_window", "sliding_window_pattern", "mlp_bias"},
    "cohere": DECODER | {"logit_scale", "use_qk_norm"},
    "cohere2": DECODER | {"layer_types", "sliding_window", "sliding_window_pattern", "logit_scale"},
    "glm4": DECODER | {"partial_rotary_factor"},
    # ERNIE 4.5 dense (families.attention._ernie4_5): Llama's keys and transformers' use_bias
    "ernie4_5": DECODER | {"use_bias", "mlp_bias"},
    # Zamba2 (families.hybrid._zamba2): kv_channels and num_query_groups are transformers' derived widths, the rest
    # of what vLLM does not read picks kernels (use_mamba_kernels, use_mem_eff_path) or a time-step initialisation
    "zamba2": DECODER | {"layers_block_type", "hybrid_layer_ids", "num_mem_blocks", "adapter_rank",
                         "use_shared_attention_adapter", "attention_hidden_size", "attention_head_dim",
                         "mamba_expand", "n_mamba_heads", "mamba_headdim", "mamba_ngroups", "mamba_d_state",
                         "mamba_d_conv", "use_conv_bias", "add_bias_linear", "use_mem_rope", "kv_channels",
                         "num_query_groups", "chunk_size", "use_mamba_kernels", "use_mem_eff_path", "time_step_min",
                         "time_step_max", "time_step_floor", "time_step_limit", "num_logits_to_keep",
                         "use_long_context"},
    # ERNIE 4.5 MoE (families.attention._ernie4_5_moe): moe_norm_min and the router's loss shape no weight
    "ernie4_5_moe": DECODER | {"use_bias", "use_moe", "moe_num_experts", "moe_k", "moe_intermediate_size",
                               "moe_num_shared_experts", "moe_layer_start_index", "moe_layer_end_index",
                               "moe_layer_interval", "moe_norm_min", "output_router_logits", "router_aux_loss_coef"},
    # Ministral 3 (vLLM's MistralForCausalLM): Mistral's keys
    "ministral3": DECODER | {"sliding_window"},
    # GLM-4.7-Flash (families.attention._glm4_moe_lite): MLA and GLM's MoE; mlp_layer_types checked against vLLM's
    # first_k_dense_replace, qk_head_dim is nope + rope again, rope_interleave a RoPE layout
    "glm4_moe_lite": DECODER | DEEPSEEK | {"qk_head_dim", "rope_interleave", "mlp_layer_types", "output_router_logits"},
    # OLMo Hybrid (families.hybrid._olmo_hybrid): the DeltaNet's A and dt initialisation ranges and its negative
    # eigenvalues change no shape
    "olmo_hybrid": DECODER | {"layer_types", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                              "linear_value_head_dim", "linear_conv_kernel_dim", "linear_a_log_min",
                              "linear_a_log_max", "linear_dt_min", "linear_dt_max", "linear_dt_init_floor",
                              "linear_allow_neg_eigval"},
    # Gemma (v1): hidden_activation picks GELU's approximation
    "gemma": DECODER | {"hidden_activation"},
    # Llama's layer with a twist (families.dense): OLMo 3's and CWM's sliding layers, SmolLM3's NoPE layers (the
    # sliding ones where use_sliding_window), Seed-OSS's o_proj bias, GLM-4 v1's partial RoPE, the ungated MLPs of
    # Arcee, Jais 2 and Apertus
    "olmo3": DECODER | {"layer_types", "sliding_window"},
    "cwm": DECODER | {"layer_types", "sliding_window", "mlp_bias"},
    "smollm3": DECODER | {"layer_types", "sliding_window", "use_sliding_window", "no_rope_layers",
                          "no_rope_layer_interval", "mlp_bias"},
    "seed_oss": DECODER | {"attention_out_bias", "mlp_bias"},
    "glm": DECODER | {"partial_rotary_factor"},
    **dict.fromkeys(("arcee", "jais2"), DECODER | {"mlp_bias"}),
    "nemotron": DECODER | {"mlp_bias", "partial_rotary_factor"},  # the RoPE share changes no weight
    "apertus": DECODER,
    "hunyuan_v1_dense": DECODER,
    # VaultGemma (families.dense._vaultgemma): Gemma 2's activation, query scaling and soft-capping, which shape no
    # weight and no cache
    "starcoder2": DECODER | {"use_bias", "sliding_window"},
    # OPT (families.dense._opt): multi-head attention whose MLP is ffn_dim wide (vLLM's opt.py reads neither KV heads,
    # head_dim nor intermediate_size); the activation (relu) shapes no weight
    "opt": (DECODER - {"num_key_value_heads", "head_dim", "intermediate_size"}) | {
        "ffn_dim", "do_layer_norm_before", "_remove_final_layer_norm", "word_embed_proj_dim",
                      "enable_bias", "layer_norm_elementwise_affine", "activation_function", "layerdrop", "init_std"},
    # Phi (families.dense._phi): the dropouts, the LayerNorm's eps and the activation shape no weight
    "phi": DECODER | {"partial_rotary_factor", "qk_layernorm", "resid_pdrop", "embd_pdrop", "attention_dropout",
                      "layer_norm_eps"},
    # GPT-NeoX (families.dense._gpt_neox): its RoPE keys (old and new names), the residual's wiring and dropouts
    "gpt_neox": DECODER | {"rotary_pct", "rotary_emb_base", "partial_rotary_factor", "use_parallel_residual",
                           "attention_dropout", "hidden_dropout", "classifier_dropout", "layer_norm_eps"},
    "olmo": DECODER | {"clip_qkv", "attention_dropout"},
    "stablelm": DECODER | {"partial_rotary_factor", "use_qkv_bias", "qk_layernorm", "use_parallel_residual",
                           "hidden_dropout", "attention_dropout", "layer_norm_eps"},
    # BLOOM (families.dense._bloom): GPT-2-like names, Megatron's training switches and ALiBi's offset, which shape
    # no weight and no cache
    "bloom": DECODER | {"n_layer", "n_head", "n_embed", "n_inner", "layer_norm_epsilon", "hidden_dropout",
                        "attention_dropout", "apply_residual_connection_post_layernorm", "pretraining_tp",
                        "slow_but_exact", "attention_softmax_in_fp32", "masked_softmax_fusion", "offset_alibi",
                        "skip_bias_add", "skip_bias_add_qkv", "bias_dropout_fusion", "unk_token_id"},
    # Falcon (families.dense._falcon): its attention and block layout keys; the activation (vLLM: gelu) and dropouts
    # shape no weight
    "falcon": DECODER | {"num_kv_heads", "alibi", "new_decoder_architecture", "multi_query", "parallel_attn", "bias",
                         "num_ln_in_parallel_attn", "ffn_hidden_size", "activation", "layer_norm_epsilon",
                         "hidden_dropout", "attention_dropout"},
    # MiniCPM3 (families.dense._minicpm3): the latent projections' widths; the scales weigh nothing, head_dim is the
    # class's qk_rope_head_dim (the cache's width is qk_nope + qk_rope)
    "minicpm3": DECODER | {"mlp_bias", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                           "v_head_dim", "qk_head_dim", "scale_emb", "scale_depth", "dim_model_base", "rms_norm_eps",
                           "pretraining_tp", "attention_dropout"},
    "hyperclovax": DECODER | {"mlp_bias", "use_post_norm", "embedding_multiplier", "logits_scaling",
                              "residual_multiplier", "attention_multiplier", "rms_norm_eps", "pretraining_tp",
                              "attention_dropout"},
    # Hunyuan MoE (families.dense._hunyuan_moe): transformers' HunYuanMoEV1Config, whose extra token ids weigh nothing
    "hunyuan_v1_moe": DECODER | {"num_experts", "moe_topk", "eod_token_id", "sep_token_id", "rms_norm_eps",
                                 "pretraining_tp", "attention_dropout"},
    # GPT-J (families.dense._gptj): GPT-2's key names
    "gptj": DECODER | {"n_embd", "n_layer", "n_head", "n_inner", "rotary_dim", "activation_function",
                       "resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon"},
    "vaultgemma": DECODER | {"layer_types", "sliding_window", "hidden_activation", "query_pre_attn_scalar",
                             "attn_logit_softcapping", "final_logit_softcapping"},
    "flex_olmo": DECODER | {"num_experts", "num_experts_per_tok", "norm_topk_prob"},
    # K-EXAONE (families.moe._exaone_moe): layer_types and mlp_layer_types, or what transformers derives them from;
    # the router's grouping and scaling change no weight
    "exaone_moe": DECODER | {"layer_types", "sliding_window", "sliding_window_pattern", "mlp_layer_types",
                             "first_k_dense_replace", "moe_intermediate_size", "num_experts", "num_experts_per_tok",
                             "num_shared_experts", "norm_topk_prob", "routed_scaling_factor", "n_group", "topk_group"},
    # Arcee Trinity (families.moe._afmoe): layer_types or global_attn_every_n_layers; route_scale and muP scale
    # activations only
    "afmoe": DECODER | {"layer_types", "sliding_window", "global_attn_every_n_layers", "num_dense_layers",
                        "moe_intermediate_size", "num_experts", "num_experts_per_tok", "num_shared_experts",
                        "route_scale", "mup_enabled", "score_func", "route_norm", "n_group", "topk_group"},
    # Cohere's MoE (families.moe._cohere2_moe): the routing function, the shared expert's averaging and logit_scale
    # scale activations only
    "cohere2_moe": DECODER | {"layer_types", "mlp_layer_types", "sliding_window", "sliding_window_pattern",
                              "prefix_dense_sliding_window_pattern", "prefix_dense_intermediate_size",
                              "first_k_dense_replace", "num_experts", "num_experts_per_tok", "num_shared_experts",
                              "shared_expert_combination_strategy", "expert_selection_fn", "norm_topk_prob",
                              "logit_scale"},
    "mellum": DECODER | {"layer_types", "sliding_window", "mlp_layer_types", "num_experts", "num_local_experts",
                         "num_experts_per_tok",
                         "moe_intermediate_size", "norm_topk_prob"},
    # Mamba, Falcon-Mamba and Mamba2 (families.hybrid._mamba, _mamba2): attention-free, a mixer a layer; expand sets the
    # mixer's width where intermediate_size is absent (Mamba2's is checked against it); the time-step initialisation,
    # the residual's precision, chunk_size and the kernel choices (use_mambapy …) shape no weight
    **dict.fromkeys(("mamba", "falcon_mamba"), frozenset({
        "num_hidden_layers", "hidden_size", "vocab_size", "tie_word_embeddings", "hidden_act", "quantization_config",
        "state_size", "expand", "conv_kernel", "intermediate_size", "time_step_rank", "use_bias", "use_conv_bias",
        "residual_in_fp32", "time_step_scale", "time_step_min", "time_step_max", "time_step_init_scheme",
        "time_step_floor", "rescale_prenorm_residual", "use_mambapy", "use_associative_scan", "use_falcon_mambapy",
        "mixer_rms_eps"})),
    "mamba2": frozenset({
        "num_hidden_layers", "hidden_size", "vocab_size", "tie_word_embeddings", "hidden_act", "quantization_config",
        "num_heads", "head_dim", "n_groups", "state_size", "expand", "conv_kernel", "intermediate_size", "use_bias",
        "use_conv_bias", "residual_in_fp32", "time_step_rank", "time_step_min", "time_step_max", "time_step_floor",
        "time_step_limit", "rescale_prenorm_residual", "chunk_size", "norm_before_gate"}),
    "dbrx": frozenset({"d_model", "n_heads", "n_layers", "max_seq_len", "vocab_size", "attn_config", "ffn_config",
                       "tie_word_embeddings", "quantization_config", "output_router_logits", "router_aux_loss_coef"}),
    # Nemotron-H: the layer pattern, Mamba2 mixers, relu² MLPs (families.hybrid._nemotron_h); the mixers' time-step
    # initialisation and kernel choice change no shape; MoE (E) layers' routing neither (a latent MoE is refused).
    "nemotron_h": DECODER | {"hybrid_override_pattern", "layers_block_type", "attention_head_dim", "mamba_num_heads",
                             "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel", "expand",
                             "use_conv_bias", "use_bias", "mamba_proj_bias", "mamba_hidden_act",
                             "mamba_ssm_cache_dtype", "chunk_size", "time_step_min", "time_step_max",
                             "time_step_limit", "time_step_floor", "time_step_rank", "use_mamba_kernels",
                             "mlp_hidden_act", "mlp_bias", "residual_in_fp32", "rescale_prenorm_residual",
                             "num_logits_to_keep", "sliding_window", "num_hidden_layers", "n_routed_experts",
                             "n_shared_experts", "moe_intermediate_size", "moe_shared_expert_intermediate_size",
                             "num_experts_per_tok", "routed_scaling_factor", "n_group", "topk_group",
                             "norm_topk_prob", "moe_latent_size", "moe_shared_expert_overlap", "output_router_logits",
                             "partial_rotary_factor",
                             # the MTP layers past the decoder: vLLM's mapper drops them ("mtp": None)
                             "mtp_layers_block_type", "num_nextn_predict_layers", "mtp_hybrid_override_pattern"},
    # Granite-4.0-H (families.hybrid._granite_hybrid): Mamba2 or attention, then experts and a shared MLP on every
    # layer; the multipliers scale activations only, time_step_* and mamba_chunk_size shape no weight
    "granitemoehybrid": DECODER | {"layer_types", "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups",
                                   "mamba_d_conv", "mamba_expand", "mamba_conv_bias", "mamba_proj_bias",
                                   "mamba_chunk_size", "num_local_experts", "num_experts_per_tok",
                                   "shared_intermediate_size", "position_embedding_type", "normalization_function",
                                   "embedding_multiplier", "attention_multiplier", "residual_multiplier",
                                   "logits_scaling", "router_aux_loss_coef", "output_router_logits", "init_method",
                                   "time_step_limit", "time_step_min", "time_step_max", "time_step_floor"},
    # Qwen3-Next: gated DeltaNet and gated attention layers (families.hybrid._qwen3_next), Qwen's MoE with a gated
    # shared expert.
    "qwen3_next": DECODER | QWEN_MOE | QWEN3_NEXT,
    # Qwen3.5 and 3.6: Qwen3-Next's layers in a Qwen3-VL wrapper (its vision tower), the SSM state's dtype in
    # mamba_ssm_dtype; the MTP layers past the decoder load only for speculative decoding (vLLM drops "mtp.")
    # language_model_only: written by NVIDIA's builds; neither vLLM 0.32 nor transformers reads it from config.json
    # (vLLM's --language-model-only is an engine argument), so the tower is still built and counted
    "qwen3_5": WRAPPER | {"tie_word_embeddings", "language_model_only"},
    "qwen3_5_moe": WRAPPER | {"tie_word_embeddings"},
    "qwen3_5_text": DECODER | QWEN3_NEXT | {"mamba_ssm_dtype", "mtp_num_hidden_layers",
                                            "mtp_use_dedicated_embeddings", "mlp_only_layers", "decoder_sparse_step"},
    "qwen3_5_moe_text": DECODER | QWEN3_NEXT | QWEN_MOE | {"mamba_ssm_dtype", "mtp_num_hidden_layers",
                                                           "mtp_use_dedicated_embeddings"},
    # Llama 4 (families.attention._llama4): chunked local attention on its RoPE layers, interleaved MoE with a
    # shared expert, the NoPE layers' attention temperature (no weights)
    "llama4": WRAPPER | {"tie_word_embeddings"},
    # Llama-Nemotron NAS models (families.attention._nemotron_nas): Llama layers reshaped by block_configs
    "nemotron-nas": DECODER | {"block_configs", "mlp_bias"},
    # MiMo-V2-Flash (families.attention._mimo_v2): sliding-window and full attention layers of their own KV heads, K
    # wider than V, sinks on the sliding layers, DeepSeek-style experts on the layers moe_layer_freq marks; the
    # value scale, the routing keys and attention_chunk_size (the window again, which vLLM does not read) change no
    # weight or cache
    "mimo_v2_flash": DECODER | DEEPSEEK | {"v_head_dim", "swa_rope_theta", "partial_rotary_factor", "sliding_window",
                                           "sliding_window_size", "attention_chunk_size", "swa_num_attention_heads",
                                           "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim",
                                           "hybrid_layer_pattern", "layernorm_epsilon", "attention_value_scale",
                                           "add_swa_attention_sink_bias", "add_full_attention_sink_bias",
                                           "moe_router_dtype",
                                           # transformers 5's, checked against the two patterns
                                           "layer_types", "mlp_layer_types"},
    # GLM-4.5 / 4.6 / 4.7 (families.attention._glm4_moe): GQA with partial RoPE and optional q/k norms, DeepSeek-style
    # experts with a shared one; the routing keys change no weight, num_mtp_layers and num_nextn_predict_layers name
    # MTP layers vLLM loads only for speculative decoding
    "glm4_moe": DECODER | {"moe_intermediate_size", "num_experts_per_tok", "n_shared_experts", "n_routed_experts",
                           "routed_scaling_factor", "n_group", "topk_group", "first_k_dense_replace",
                           "norm_topk_prob", "use_qk_norm", "partial_rotary_factor", "num_nextn_predict_layers",
                           "num_mtp_layers", "output_router_logits", "topk_method", "scoring_func"},
    # Gemma-4 (families.attention._gemma4): sliding and global layers of their own shapes, experts beside the dense MLP;
    # the softcap and the bidirectional vision mask change no weight or cache, vocab_size_per_layer_input only
    # sizes the per-layer embeddings that a hidden_size_per_layer_input of 0 turns off (others are refused)
    "gemma4": WRAPPER | {"tie_word_embeddings", "initializer_range", "vision_soft_tokens_per_image",
                         "eoa_token_index"},
    "gemma4_text": DECODER | {"sliding_window", "layer_types", "hidden_activation", "final_logit_softcapping",
                              "attention_k_eq_v", "global_head_dim", "num_global_key_value_heads",
                              "hidden_size_per_layer_input", "vocab_size_per_layer_input", "num_kv_shared_layers",
                              "enable_moe_block", "num_experts", "top_k_experts", "moe_intermediate_size",
                              "expert_intermediate_size", "use_double_wide_mlp", "use_bidirectional_attention"},
    # Kimi-K2.5, K2.6, K2.7: DeepSeek-V3's decoder (text_config: kimi_k2 or deepseek_v3) beside MoonViT
    # (encoders._moonvit_params); ignore_index is a training loss's, the placeholders and
    # use_unified_vision_chunk are the processor's
    "kimi_k25": WRAPPER | {"tie_word_embeddings", "ignore_index", "video_placeholder", "image_placeholder",
                           "use_unified_vision_chunk"},
    "llama4_text": DECODER | {"intermediate_size_mlp", "num_local_experts", "num_experts_per_tok",
                              "interleave_moe_layer_step", "moe_layers", "no_rope_layers", "no_rope_layer_interval",
                              "attention_chunk_size", "use_qk_norm", "attn_temperature_tuning", "floor_scale",
                              "attn_scale", "router_aux_loss_coef", "output_router_logits", "router_jitter_noise",
                              "layer_types"},  # transformers 5's, checked against the reading's
    "gpt2": GPT2,
    # GPT-SW3: GPT-2's model (GPT2LMHeadModel in vLLM, GPT2Config in transformers) under its own model_type
    "gpt-sw3": GPT2,
    # transformers 5 writes num_key_value_heads (1 under multi_query, else n_head): checked, vLLM reads multi_query
    "gpt_bigcode": GPT2 | {"multi_query", "attention_softmax_in_fp32", "scale_attention_softmax_in_fp32",
                           "num_key_value_heads"},
}

_KIND = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list",
         dict: "an object"}
# The type each read key has in every published config (None is allowed for each: "not set").
KEY_TYPES: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                     "intermediate_size", "vocab_size", "max_position_embeddings", "num_local_experts",
                     "num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                     "max_window_layers", "sliding_window", "sliding_window_pattern", "kv_lora_rank", "q_lora_rank",
                     "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "n_routed_experts", "n_shared_experts",
                     "first_k_dense_replace", "moe_layer_freq", "num_nextn_predict_layers",
                     "shared_expert_intermediate_size", "draft_vocab_size", "n_layer", "n_embd", "n_head", "n_inner",
                     "n_positions", "d_model", "n_heads", "n_layers", "max_seq_len", "mamba_num_heads",
                     "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel",
                     "moe_shared_expert_intermediate_size", "full_attention_interval", "linear_conv_kernel_dim",
                     "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
                     "linear_num_value_heads", "intermediate_size_mlp", "interleave_moe_layer_step",
                     "no_rope_layer_interval", "attention_chunk_size", "mamba_n_heads", "mamba_d_state",
                     "mamba_n_groups", "mamba_d_conv", "mamba_expand", "shared_intermediate_size",
                     "index_n_heads", "index_head_dim", "index_topk", "index_topk_freq", "index_skip_topk_offset",
                     "qk_head_dim", "rotary_dim", "num_mtp_modules", "mtp_transformer_layers", "attn_layer_period",
                     "attn_layer_offset", "expert_layer_period", "expert_layer_offset", "conv_L_cache",
                     "block_multiple_of", "block_dim", "conv_dim", "block_ff_dim"), int),
    "mamba_dt_rank": (int, str),
    **dict.fromkeys(("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window", "multi_query",
                     "use_conv_bias", "use_bias", "mamba_conv_bias", "mamba_proj_bias"), bool),
    **dict.fromkeys(("position_embedding_type", "normalization_function"), (str, type(None))),
    "mamba_d_head": (int, str),  # transformers' GraniteMoeHybridConfig: an int or "auto"
    "mamba_d_ssm": (int, type(None)),
    "attn_rotary_emb": int,
    **dict.fromkeys(("mamba_rms_norm", "projectors_bias"), bool),
    "mamba_ssm_cache_dtype": str,
    **dict.fromkeys(("layer_types", "mlp_only_layers", "no_rope_layers", "moe_layers", "indexer_types",
                     "mlp_layer_types", "block_configs"), list),
    "index_topk_pattern": (str, list, type(None)),
    "mamba_ssm_dtype": str,
    **dict.fromkeys(("text_config", "attn_config", "ffn_config", "quantization_config", "vision_config"), dict),
    "audio_config": (dict, type(None)),
}


# What each element of a list key is.
LIST_ELEMENTS: dict[str, type] = {"layer_types": str, "mlp_only_layers": int, "no_rope_layers": int,
                                   "moe_layers": int, "indexer_types": str, "mlp_layer_types": str}


def is_inert(key: str) -> bool:
    return key in INERT or any(p.fullmatch(key) for p in INERT_PATTERNS)


def has_reader(model_type: str) -> bool:
    return model_type in FAMILIES


def families() -> list[str]:
    return sorted(FAMILIES)


def unread_keys(cfg: dict[str, Any], model_type: str) -> list[str]:
    """The keys of ``cfg`` that ``model_type``'s reading does not understand (its family has a reader)."""
    known = FAMILIES[model_type]
    return sorted(k for k in cfg if k not in known and not is_inert(k))


# A key whose type differs in one family (MiMo-V2-Flash's moe_layer_freq: a 0/1 flag a layer, not DeepSeek's period).
# K-EXAONE writes its sliding_window_pattern as a string ("LLLG") beside the layer_types it reads.
FAMILY_KEY_TYPES: dict[tuple[str, str], type | tuple[type, ...]] = {
    ("mimo_v2_flash", "moe_layer_freq"): list, ("exaone_moe", "sliding_window_pattern"): (int, str)}


def mistyped_keys(cfg: dict[str, Any], model_type: str) -> list[str]:
    """``key is <kind>, not <expected kind>`` for each read key whose value has another type than every published
    config gives it (a list where an integer belongs: MiMo-V2-Flash's per-layer ``moe_layer_freq``)."""
    out = []
    for key in sorted(FAMILIES[model_type] & KEY_TYPES.keys()):
        v, want = cfg.get(key), FAMILY_KEY_TYPES.get((model_type, key), KEY_TYPES[key])
        if v is None:
            continue
        ok = isinstance(v, want) and not (want is int and isinstance(v, bool))
        if not ok:
            got = next((name for t, name in _KIND.items() if type(v) is t), type(v).__name__)
            out.append(f"{key} is {got}, not {_KIND[want]}" if isinstance(want, type) else f"{key} is {got}")
        elif key in LIST_ELEMENTS:
            each = LIST_ELEMENTS[key]
            if not all(isinstance(e, each) and not (each is int and isinstance(e, bool)) for e in v):
                out.append(f"{key} holds something other than {_KIND[each].split(' ', 1)[1]}s")
    return out
