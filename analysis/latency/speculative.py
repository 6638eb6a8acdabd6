"""A speculative decoding step as the step model prices it (issue #28's speculators, the latency side).

With ``--speculative-config`` every engine step of the pinned vLLM (0.32; its Model Runner V2, the default for
ngram, eagle, eagle3, mtp and draft_model: ``config/vllm.py``) does, on the GPU, in this order
(paths under ``vllm/v1/worker/gpu/``):

* **Verify.** The target runs each running request's last token and its k draft tokens, 1 + k query tokens a
  request (``uniform_decode_query_len``), its LM head over all of them (the rejection sampler compares every
  position) and reads each request's KV once (``model_runner.py``, ``spec_decode/rejection_sampler.py``): the
  step model's :func:`~analysis.latency.step.step_work` with ``decode_query = 1 + k``.
* **Draft** (``spec_decode/eagle/``, ``standalone_ar/``): k forward passes of the drafter. The first runs over the
  same tokens as the target's step (``B(1 + k)`` for B decoding requests, and any prompt tokens, whose KV the
  drafter needs too); each later one over one token a request, sampling its LM head's B rows. EAGLE, EAGLE-3 and
  MTP passes replay CUDA graphs with no host work between them; a separate draft model (``draft_model``) runs
  eagerly ("CUDA graph not yet supported for standalone AR speculator"). ``ngram`` proposes with two small GPU
  kernels: no drafter pass.

A step then yields, per request, the mean acceptance length L tokens (vLLM's "Mean acceptance length": 1 +
accepted ÷ drafts, the bonus token included, ``v1/spec_decode/metrics.py``): it depends on the text, not on
the hardware, so the plan takes it as an input (``--acceptance-length``). Time per output token is the step's
time ÷ L.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from packaging.version import Version

from analysis.model.architecture import Architecture
from analysis.vllm.speculative import EAGLE3_AUX_HIDDEN_STATES, SpeculativeConfig


@dataclass(frozen=True)
class Speculation:
    """What a speculative step adds to the step model: k draft tokens a request, the drafter's pass (as an
    architecture the step model prices: what one pass streams and computes), and the acceptance length."""

    method: str
    k: int
    drafter: Architecture | None  # one pass's layers and LM head; None: no forward pass (ngram)
    graphs: Literal["full", "eager"]  # how the drafter's passes launch in the pinned vLLM
    acceptance_length: float | None = None  # mean tokens a request gains a step, 1 to 1 + k; None: not given
    first_pass_extra_params: float = 0.0  # matrices only the first pass runs (EAGLE-3's fc over 3 hidden states)
    extra_params: float = 0.0  # matrices every pass runs beside the layers and LM head (EAGLE's fc, MTP's eh_proj)

    @property
    def tokens_per_step(self) -> float:
        """Output tokens a request gains a step: the acceptance length, 1 (none accepted) where not given."""
        return self.acceptance_length or 1.0


def drafter_pass_architecture(target: Architecture, spec: SpeculativeConfig,
                              draft: Architecture | None) -> tuple[Architecture | None, float, float]:
    """(what one drafter pass runs, as an architecture; parameters only its first pass adds; parameters every pass
    adds) for ``spec`` on ``target``. The embedding is a lookup (the step model streams none of it); the LM head
    is the drafter's own (EAGLE-3: ``draft_vocab_size`` rows) or the target's it shares (EAGLE, MTP)."""
    m = spec.method
    h = target.hidden_size
    if m == "ngram":
        return None, 0.0, 0.0
    if m == "mtp":
        moe = target.moe.model_copy(update={"dense_layers": ()}) if target.moe else None
        n = target.mtp_layers
        layers = replace_layers(target, n, moe)
        return layers, 0.0, float(n * 2 * h * h)  # eh_proj: [embedding; hidden] → h
    assert draft is not None
    if m == "draft_model":
        return draft, 0.0, 0.0
    dtype = {"torch_dtype": target.torch_dtype, "quantization": None}
    if m == "eagle3":
        vocab = draft.draft_vocab_size or draft.vocab_size
        qkv = (draft.num_heads + 2 * draft.num_kv_heads) * draft.head_dim
        head = draft.model_copy(update={"vocab_size": vocab, "tie_word_embeddings": False, **dtype})
        # Its first layer's qkv takes [embedding; hidden] (2h in, h more than a plain layer's) on every pass; the fc
        # folds the target's three hidden states into one on the first pass only.
        return head, float(EAGLE3_AUX_HIDDEN_STATES * target.hidden_size * h), float(h * qkv)
    head = draft.model_copy(update={"vocab_size": target.vocab_size, "tie_word_embeddings": False, **dtype})
    return head, 0.0, float(2 * h * h)  # EAGLE: its fc folds [embedding; hidden] → h every pass


def replace_layers(target: Architecture, n: int, moe) -> Architecture:
    """``n`` decoder layers of the target's last kind (an MTP module's), with its embedding and LM head."""
    return target.model_copy(update={"num_layers": n, "layer_types": target.layer_types[-1:] * n if
                                     target.layer_types else (), "moe": moe, "mtp_layers": 0})


def speculation(target: Architecture, spec: SpeculativeConfig, draft: Architecture | None,
                acceptance_length: float | None = None) -> Speculation:
    """The step model's view of ``--speculative-config`` (the drafter's memory is analysis.vllm.speculative's)."""
    k = spec.num_speculative_tokens
    if acceptance_length is not None and not 1.0 <= acceptance_length <= 1 + k:
        raise ValueError(f"acceptance length {acceptance_length:g} is outside 1 to 1 + k = {1 + k} (vLLM's 'Mean "
                         "acceptance length' counts the bonus token: 1 when no draft is accepted, 1 + k when all are)")
    drafter, first, extra = drafter_pass_architecture(target, spec, draft)
    return Speculation(method=spec.method, k=k, drafter=drafter, graphs="eager" if spec.method == "draft_model"
                       else "full", acceptance_length=acceptance_length, first_pass_extra_params=first,
                       extra_params=extra)


# -- the host's part before vLLM 0.11, and the published evidence ----------------------------------------------

# Until vLLM 0.11 the V1 engine's EAGLE drafter synced the step's sampled tokens to the host and built each pass's
# inputs there (Python lists and NumPy), so a speculative step paid host time no CUDA graph or async scheduling hid:
# once a step, and again for every later pass. vLLM PR 24539 ("Efficient padded speculation", 0.11.0) made the
# drafter's bookkeeping GPU-only ("free of GPU->CPU sync during the EAGLE drafting phase"), and Model Runner V2,
# the pinned vLLM's, has none: from 0.11 on the step model prices the passes' kernels alone.
PADDED_DRAFTER_BATCH = Version("0.11")
# Fitted on the published runs of analysis/catalog/speculative_latency (speculative_evidence.fit_host_costs; a test
# holds these to the fit): seconds a speculative step, and a later drafter pass, cost the host before vLLM 0.11.
V1_STEP_S = 1.19e-3
V1_PASS_S = 0.43e-3


def speculative_host_s(v: Version | None, s: Speculation, passes: int,
                       costs: tuple[float, float] | None = None) -> float:
    """The host time a speculative step of vLLM release ``v`` (analysis.vllm.release; None: the pinned) adds before 0.11
    (``V1_STEP_S`` + ``V1_PASS_S`` a later pass), 0 from 0.11 on and for ngram (its proposals were host work in
    any version, priced with the step's host time)."""
    if s.drafter is None or v is None or v >= PADDED_DRAFTER_BATCH:
        return 0.0
    step_s, pass_s = costs or (V1_STEP_S, V1_PASS_S)
    return step_s + pass_s * max(passes - 1, 0)

