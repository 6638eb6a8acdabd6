"""Speculative decoding's memory as the pinned vLLM lays it out (issue #28): `--speculative-config` in a plan.

What a drafter costs, read from vLLM 0.32's source (paths under ``vllm/``):

* **Weights.** The drafter loads in the same process and the same memory-profiling block as the target, so
  "Model loading took X GiB" is target + drafter (``v1/worker/gpu_model_runner.py`` load_model,
  ``v1/worker/gpu/model_runner.py``). ``ngram`` has none (``v1/spec_decode/ngram_proposer.py``). ``mtp`` loads
  the checkpoint's own ``num_nextn_predict_layers`` layers past the decoder, each a decoder layer of the
  target with ``enorm``/``hnorm`` and an ``eh_proj`` (2h → h, replicated), sharing the target's embedding and
  LM head (``model_executor/models/deepseek_mtp.py``; ``v1/spec_decode/llm_base_proposer.py`` always shares
  for MTP). ``eagle`` (``llama_eagle.py``): the draft config's layers and an ``fc`` of 2h → h; ``eagle3``
  (``llama_eagle3.py``): the first layer's qkv takes 2h (embedding and hidden state), a ``hidden_norm``, an
  ``fc`` of 3 target hidden states → h, its own LM head of ``draft_vocab_size`` rows and the draft→target
  id map (int64) where that vocabulary is smaller (a head over the target's whole vocabulary is taken as the
  target's copy, which vLLM shares: ``eagle3_shares_lm_head``). An EAGLE head shares the target's embedding (and EAGLE-1
  its LM head) when the checkpoint holds none or an identical one (``_should_share``), as published heads
  do. ``draft_model`` is a whole second model with nothing shared (``v1/spec_decode/draft_model.py``).
* **KV cache.** The drafter's attention layers join the target's in one KV-cache group (all full attention,
  or all MLA): a block holds every layer's page, the draft's included, so bytes per token grow by the
  draft's layers (``v1/core/kv_cache_utils.py``: ``UniformTypeKVCacheSpecs``, ``bytes_per_block``). ngram
  adds none (the published ngram and baseline start-ups log the same KV tokens). A hybrid or sliding-window
  target puts draft layers into padded groups: not planned.
* **Lookahead.** The scheduler allocates a running request's slots for its verified tokens, 1 + k to
  verify and ``num_lookahead_tokens`` more (k for eagle, eagle3, mtp and draft_model; 0 for ngram), never past
  max_model_len (``v1/core/kv_cache_manager.py`` allocate_slots). vLLM's logged "Maximum concurrency" counts
  max_model_len only; a sequence that has reached T tokens holds blocks for T + 1 + k + lookahead.
* **Non-KV memory.** The profile run runs target and draft one after the other (the peak is the larger, the
  target's); Model Runner V2 keeps ngram's token history on the GPU: ``max_num_seqs × max_model_len`` int32
  (``v1/worker/gpu/states.py``). The drafter's CUDA graphs (more capture sizes) are not planned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from analysis.model.architecture import Architecture
from analysis.model.kv import kv_bytes_per_token, kv_dtype_bytes, layer_kv_bytes_per_token
from analysis.model.layers import kv_heads_per_rank
from analysis.model.params import weight_bytes
from analysis.vllm.memory import AccountingRules

Method = Literal["ngram", "eagle", "eagle3", "mtp", "draft_model"]
METHODS: tuple[str, ...] = ("ngram", "eagle", "eagle3", "mtp", "draft_model")
NEEDS_MODEL = ("eagle", "eagle3", "draft_model")
MAX_SPECULATIVE_TOKENS = 64
EAGLE3_AUX_HIDDEN_STATES = 3  # llama_eagle3.py: the fc combines three target layers' hidden states by default
TOKEN_ID_BYTES = 4  # V2's ngram token history is int32


class SpeculativeNotModelled(ValueError):
    """A speculative configuration whose memory kvprof does not plan (the reason says which part)."""


class SpeculativeConfig(BaseModel):
    """vLLM's ``--speculative-config`` (its JSON), the fields that decide memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Method = Field(description="ngram, eagle, eagle3, mtp or draft_model")
    model: str | None = Field(None, description="the draft: a catalog name, model directory or config.json")
    num_speculative_tokens: StrictInt = Field(gt=0, le=MAX_SPECULATIVE_TOKENS, description="k, tokens proposed a step")
    draft_tensor_parallel_size: StrictInt | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _model(self) -> SpeculativeConfig:
        if self.method in NEEDS_MODEL and not self.model:
            raise ValueError(f"method {self.method} needs the draft's model (a catalog name, model directory or "
                             "config.json)")
        if self.method in ("ngram", "mtp") and self.model:
            why = ("the target proposes from its own tokens" if self.method == "ngram"
                   else "the target checkpoint carries its MTP layers")
            raise ValueError(f"method {self.method} takes no model ({why})")
        return self

    @staticmethod
    def memory_fields(engine_arg: dict[str, Any]) -> dict[str, Any]:
        """Of vLLM's ``speculative_config`` as an engine was given it, the fields this model reads (the ones that
        decide memory); vLLM's others (n-gram lookup bounds, sampling) are left out."""
        return {k: v for k, v in engine_arg.items() if k in SpeculativeConfig.model_fields}

    @property
    def lookahead_tokens(self) -> int:
        """vLLM's ``num_lookahead_tokens`` (``config/vllm.py``): k for every method with a drafter, 0 for ngram."""
        return 0 if self.method == "ngram" else self.num_speculative_tokens

    @property
    def slots_beyond_context(self) -> int:
        """Tokens a running request holds blocks for past its verified length: 1 + k to verify, + lookahead."""
        return 1 + self.num_speculative_tokens + self.lookahead_tokens


def parse_speculative_config(text: str) -> SpeculativeConfig:
    """``--speculative-config`` JSON (as vLLM takes it) → the config, or one ValueError naming the field.
    vLLM's ``{"model": "ngram", ...}`` is read as method ngram."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--speculative-config is not JSON ({exc.msg} at character {exc.pos}); example: "
                         '\'{"method": "eagle3", "model": "eagle3-llama-3.1-8b", "num_speculative_tokens": 3}\'') \
            from None
    if not isinstance(raw, dict):
        raise ValueError("--speculative-config must be a JSON object with method, model and num_speculative_tokens")
    if raw.get("model") in ("ngram", "[ngram]") and "method" not in raw:
        raw = {**raw, "method": "ngram", "model": None}
    known = set(SpeculativeConfig.model_fields)
    ignored = {"prompt_lookup_min", "prompt_lookup_max", "draft_sample_method", "disable_padded_drafter_batch"}
    unknown = sorted(set(raw) - known - ignored)
    if unknown:
        raise ValueError(f"--speculative-config: {', '.join(unknown)} not planned (kvprof reads "
                         f"{', '.join(sorted(known))}; {', '.join(sorted(ignored))} leave memory unchanged)")
    try:
        return SpeculativeConfig.model_validate({k: v for k, v in raw.items() if k in known})
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(map(str, e["loc"]))
        if where == "method":
            raise ValueError(f"--speculative-config method {raw.get('method')!r} is not planned (kvprof plans "
                             f"{', '.join(METHODS)})") from None
        raise ValueError(f"--speculative-config{' ' + where if where else ''}: "
                         f"{e['msg'].removeprefix('Value error, ')}") from None


@dataclass(frozen=True)
class DrafterMemory:
    """What a drafter adds on one GPU."""

    method: str
    weight_bytes: int  # counted in vLLM's "Model loading took"
    kv_bytes_per_token: int  # the drafter's layers in every block
    draft_layers: int
    slots_beyond_context: int
    reserve_bytes: int  # non-KV memory beside the weights (ngram's token history under Model Runner V2)
    shared: str  # what it shares with the target, in words


def eagle3_shares_lm_head(d: Architecture, target: Architecture) -> bool:
    """Whether vLLM gives an EAGLE-3 head the target's LM head: it shares unless the checkpoint holds a head of
    its own that differs (``v1/worker/gpu/spec_decode/eagle/utils.py`` ``_should_share``; the V1 runner logs
    "Detected EAGLE model with lm_head identical to the target model. Sharing target model lm_head weights").
    A reduced draft vocabulary is a head of its own; one of the target's whole vocabulary is taken as the
    target's copy, as vLLM's speculators trains it (the published H100 start-up in tests/analysis/vllm/
    test_speculative.py logs exactly that, 0.50 GiB of head beside the target's 15.27)."""
    return (d.draft_vocab_size or d.vocab_size) == target.vocab_size


def _linear(n_in: int, n_out: int) -> int:
    return n_in * n_out


def _eagle_head_params(d: Architecture, target: Architecture, tp: int, eagle3: bool) -> tuple[float, float]:
    """(parameters split over tp, parameters replicated on every GPU) of an EAGLE / EAGLE-3 head."""
    h, hd = d.hidden_size, d.head_dim
    q, kv = d.num_heads * hd, d.num_kv_heads * hd
    split = 0.0
    for i in range(d.num_layers):
        qkv_in = 2 * h if eagle3 and i == 0 else h
        mlp = (3 if d.mlp_gated else 2) * _linear(h, d.intermediate_size)
        split += _linear(qkv_in, q + 2 * kv) + _linear(q, h) + mlp
    norms = d.num_layers * (2 + (1 if eagle3 else 0)) * h + h  # input/post-attention (+ hidden) norms, final norm
    if eagle3:
        fc = _linear(EAGLE3_AUX_HIDDEN_STATES * target.hidden_size, h)
        vocab = d.draft_vocab_size or d.vocab_size
        if not eagle3_shares_lm_head(d, target):
            split += _linear(h, vocab)  # its own LM head (ParallelLMHead over the draft vocabulary)
    else:
        fc = _linear(2 * h, h)
    return split / tp, float(fc + norms)


def drafter_memory(target: Architecture, spec: SpeculativeConfig, draft: Architecture | None, *, tp: int,
                   kv_cache_dtype: str, max_num_seqs: int, max_model_len: int) -> DrafterMemory:
    """The drafter's weights, KV bytes per token and slots on one GPU of tensor-parallel size ``tp`` (module doc).
    ``draft``: the draft's architecture for eagle, eagle3 and draft_model."""
    m = spec.method
    dtp = spec.draft_tensor_parallel_size or tp
    if dtp not in (1, tp):
        raise SpeculativeNotModelled(f"draft_tensor_parallel_size {dtp}: vLLM takes 1 or the target's "
                                     f"tensor-parallel size {tp}")
    if dtp != tp:
        raise SpeculativeNotModelled("a draft on one GPU of a tensor-parallel target is not planned yet "
                                     "(draft_tensor_parallel_size 1 with tp > 1)")
    if m != "ngram" and len({layer.kind for layer in target.attention_layers}) > 1:
        raise SpeculativeNotModelled(f"{target.name} mixes attention kinds (sliding window or hybrid): vLLM pads "
                                     "the draft's layers into its KV-cache groups, which kvprof does not plan")
    if m == "ngram":
        return DrafterMemory(m, 0, 0, 0, spec.slots_beyond_context, max_num_seqs * max_model_len * TOKEN_ID_BYTES,
                             "no drafter: proposals come from the request's own tokens")
    if m == "mtp":
        if target.mtp_layers < 1:
            raise SpeculativeNotModelled(f"{target.name}: its config.json has no multi-token-prediction layers "
                                         "(num_nextn_predict_layers), which method mtp needs")
        n = target.mtp_layers
        longer = target.model_copy(update={"num_layers": target.num_layers + n,
                                           "layer_types": target.layer_types + (target.layer_types[-1],) * n})
        layers = weight_bytes(longer, tp) - weight_bytes(target, tp)  # n more decoder layers, sharded as the target's
        h, d = target.hidden_size, target.weight_dtype_bytes
        extra = n * (_linear(2 * h, h) + 3 * h) * d  # eh_proj (replicated), enorm, hnorm, shared_head.norm
        return DrafterMemory(m, round(layers + extra), n * layer_kv_bytes_per_token(target, kv_cache_dtype, tp), n,
                             spec.slots_beyond_context, 0, "the target's embedding and LM head (always, for MTP)")
    assert draft is not None
    if m == "draft_model":
        if draft.vocab_size != target.vocab_size:
            raise SpeculativeNotModelled(f"draft {draft.name} has {draft.vocab_size:,} tokens, {target.name} "
                                         f"{target.vocab_size:,}: vLLM needs one vocabulary")
        if len({layer.kind for layer in draft.attention_layers}) > 1:
            raise SpeculativeNotModelled(f"draft {draft.name} mixes attention kinds: not planned")
        return DrafterMemory(m, weight_bytes(draft, tp), kv_bytes_per_token(draft, kv_cache_dtype, tp),
                             draft.num_layers, spec.slots_beyond_context, 0, "nothing (a whole second model)")
    if draft.hidden_size != target.hidden_size and m == "eagle":
        raise SpeculativeNotModelled(f"EAGLE head {draft.name}: hidden size {draft.hidden_size} is not the "
                                     f"target's {target.hidden_size}")
    split, replicated = _eagle_head_params(draft, target, tp, eagle3=m == "eagle3")
    d = target.weight_dtype_bytes  # the draft runs in the target's dtype
    id_map = 0
    vocab = draft.draft_vocab_size or draft.vocab_size
    if m == "eagle3" and vocab != target.vocab_size:
        id_map = vocab * 8  # draft_id_to_target_id, int64
    per_token = (draft.num_layers * 2 * kv_heads_per_rank(draft.num_kv_heads, tp) * draft.head_dim
                 * kv_dtype_bytes(kv_cache_dtype, target.torch_dtype))
    shared = ("the target's embedding and LM head (a draft vocabulary of the target's: vLLM shares an identical "
              "copy)" if m == "eagle3" and eagle3_shares_lm_head(draft, target) else
              "the target's embedding (its own LM head of the draft vocabulary)" if m == "eagle3"
              else "the target's embedding and LM head")
    return DrafterMemory(m, round((split + replicated) * d) + id_map, per_token, draft.num_layers,
                         spec.slots_beyond_context, 0, shared)


def rejection_warmup_bytes(rules: AccountingRules, target: Architecture, *, max_num_seqs: int,
                           max_num_batched_tokens: int) -> int:
    """What the profile run of ``rules``' vLLM adds beside its peak for a speculative config: the V1 runner's
    rejection-sampler warm-up, ``spec_rejection_warmup_bytes`` a logit of min(max_num_seqs, max_num_batched_tokens)
    rows × the vocabulary (analysis.vllm.memory); none under Model Runner V2."""
    if not rules.spec_rejection_warmup_bytes or rules.uses_v2_runner(target):
        return 0
    return rules.spec_rejection_warmup_bytes * min(max_num_seqs, max_num_batched_tokens) * target.vocab_size
