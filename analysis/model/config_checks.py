"""What a config.json is checked for before kvprof reads it: a bounded, UTF-8 JSON object (:func:`read_config_file`),
an ``architectures`` class vLLM 0.32 has and whether vLLM runs it through its Transformers backend, keys that every
family reader knows (:func:`check_keys`), sizes within the plausibility bounds (:func:`check_bounds`), and a
ModelOpt checkpoint's ``hf_quant_config.json`` merged in as vLLM reads it (:func:`with_modelopt_sidecar`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.model import config_keys
from analysis.model.parts import (
    MAX_CONFIG_BYTES,
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN_SIZE,
    MAX_INTERMEDIATE_SIZE,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_VOCAB_SIZE,
    UnsupportedArchitecture,
)
from analysis.model.vllm_models import supported_architectures, transformers_backend_architectures


def read_json_file(path: Path, what: str) -> Any:
    """A JSON file's value, bounded in size (``MAX_CONFIG_BYTES``), or UnsupportedArchitecture saying what is wrong
    with the file; ``what`` names it in the message ("a model's config.json", "a preprocessor config" …)."""
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise UnsupportedArchitecture(f"{path}: {path.stat().st_size:,} bytes; {what} is at most "
                                      f"{MAX_CONFIG_BYTES:,} bytes")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UnsupportedArchitecture(f"{path} is not valid JSON ({what}): {exc}") from exc
    except UnicodeDecodeError as exc:
        raise UnsupportedArchitecture(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise UnsupportedArchitecture(f"{path}: nested too deeply to be {what}") from None


def read_config_file(path: Path) -> dict[str, Any]:
    """A config.json's object (:func:`read_json_file`)."""
    if not path.is_file():
        raise UnsupportedArchitecture(f"no config.json at {path}")
    cfg = read_json_file(path, "a model's config.json")
    if not isinstance(cfg, dict):
        raise UnsupportedArchitecture(f"{path} does not hold a JSON object")
    return cfg


# vLLM 0.32's keys for a model's length (ModelArchConfigConvertorBase.derive_max_model_len_and_key,
# transformers_utils/model_arch_config_convertor.py): the smallest one present counts, model_max_length wins.
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


def check_keys(raw: dict[str, Any], cfg: dict[str, Any], model_type: str, name: str) -> None:
    """Refuse a config whose family has no reader, or that has a key its reader does not understand or a read key
    of another type than published configs give it (analysis.model.config_keys), naming each."""
    checks = [(cfg, model_type)]
    if cfg is not raw:  # a multimodal wrapper: its own keys against its family, the decoder's against the decoder's
        checks.insert(0, (raw, str(raw.get("model_type") or model_type)))
    for keys, family in checks:
        if not config_keys.has_reader(family):
            raise UnsupportedArchitecture(
                f"{name}: model_type {family!r} has no reader in kvprof, so its layer mix and weights are unknown "
                f"(read: {', '.join(config_keys.families())})")
        unread = config_keys.unread_keys(keys, family)
        if unread:
            raise UnsupportedArchitecture(
                f"{name}: config.json {'key' if len(unread) == 1 else 'keys'} {', '.join(unread)} "
                f"{'is' if len(unread) == 1 else 'are'} not read by kvprof's {family} reader; such a key may change "
                "the layer mix, the weights or the KV cache, so the model is refused rather than planned as "
                "something else")
        mistyped = config_keys.mistyped_keys(keys, family)
        if mistyped:
            raise UnsupportedArchitecture(f"{name}: config.json {'; '.join(mistyped)} (as every published "
                                          f"{family} config has it)")


def check_bounds(cfg: dict[str, Any], name: str) -> None:
    """Refuse a size past its plausibility bound (MAX_*) before anything is built per layer or per expert,
    naming the config key, its value and the bound."""
    bounds = (
        (("num_hidden_layers", "n_layer", "num_layers"), MAX_LAYERS),
        (("hidden_size", "n_embd", "d_model"), MAX_HIDDEN_SIZE),
        (("num_attention_heads", "n_head", "num_key_value_heads", "n_head_kv"), MAX_HEADS),
        (("head_dim", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"), MAX_HEAD_DIM),
        (("intermediate_size", "n_inner", "ffn_dim", "moe_intermediate_size"), MAX_INTERMEDIATE_SIZE),
        (("vocab_size", "padded_vocab_size"), MAX_VOCAB_SIZE),
        (("num_local_experts", "n_routed_experts", "num_experts", "num_experts_per_tok", "moe_topk",
          "n_shared_experts"), MAX_EXPERTS),
        (("kv_lora_rank", "q_lora_rank"), MAX_HIDDEN_SIZE),
        # model_max_length is left out: tokenizer-style configs write 1e30 for "no limit"
        ((*(k for k in MAX_LEN_KEYS if k != "model_max_length"), "sliding_window"), MAX_POSITIONS),
    )
    for keys, bound in bounds:
        for key in keys:
            value = cfg.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > bound:
                raise UnsupportedArchitecture(
                    f"{name}: config.json {key} {value:,} is past kvprof's bound of {bound:,} (far above any "
                    "published model): not a real model's config")


def with_modelopt_sidecar(path: Path, cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """config.json with the quantization vLLM 0.32 reads for it (``transformers_utils/config.py``): its own
    ``quantization_config`` (or ``text_config``'s) wins; without one, a ModelOpt ``hf_quant_config.json`` beside it
    (the legacy ``{"producer", "quantization"}`` shape, ``quant_method`` set from its ``quant_algo`` as
    ``_normalize_quantization_config`` does); a config.json MIXED_PRECISION without ``quantized_layers`` takes the
    file's (``weight_utils.get_quant_config``). Where vLLM would refuse the file, so does kvprof, by name."""
    if not path.is_file():
        return cfg
    side = read_json_file(path, "a quantization config")
    quant = side.get("quantization") if isinstance(side, dict) else None
    if not isinstance(quant, dict):
        raise UnsupportedArchitecture(f"{name}: {path.name} has no \"quantization\" object, so vLLM cannot read it")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    own = cfg.get("quantization_config") or text.get("quantization_config")
    if isinstance(own, dict):
        method = str(own.get("quant_method") or "").lower()
        algo = str(own.get("quant_algo") or "").upper()
        if method.startswith("modelopt") and algo == "MIXED_PRECISION" and not own.get("quantized_layers"):
            where = "quantization_config" if cfg.get("quantization_config") else "text_config.quantization_config"
            merged = {**own, "quantized_layers": quant.get("quantized_layers")}
            if where == "quantization_config":
                return {**cfg, "quantization_config": merged}
            return {**cfg, "text_config": {**text, "quantization_config": merged}}
        return cfg
    producer = side.get("producer") if isinstance(side.get("producer"), dict) else {}
    if producer.get("name") != "modelopt" and "modelopt_quant_config" not in quant:
        raise UnsupportedArchitecture(
            f"{name}: {path.name} names no producer \"modelopt\", so vLLM 0.32 does not read it as a ModelOpt "
            f"checkpoint and would not start; kvprof cannot say which scheme it would run")
    algo = str(quant.get("quant_algo") or "").upper()
    methods = {"FP8": "modelopt", "FP8_PER_CHANNEL_PER_TOKEN": "modelopt", "FP8_PB_WO": "modelopt",
               "NVFP4": "modelopt_fp4"}
    if algo not in methods:
        raise UnsupportedArchitecture(
            f"{name}: {path.name} has quant_algo {quant.get('quant_algo')!r}; vLLM 0.32 reads only "
            f"{', '.join(methods)} from this file (\"Unknown ModelOpt quant algo\") and would not start")
    return {**cfg, "quantization_config": {**side, "quant_method": methods[algo]}}


def check_architectures(raw: dict[str, Any], name: str) -> None:
    """Refuse a config.json whose ``architectures`` names a class vLLM 0.32 has no model for (where it names any)."""
    archs = raw.get("architectures")
    if archs is None or archs == []:
        return
    if not isinstance(archs, list) or not all(isinstance(x, str) for x in archs):
        raise UnsupportedArchitecture(f"{name}: config.json architectures must be a list of class names, got "
                                      f"{archs!r}")
    unknown = [x for x in archs if x not in supported_architectures()]
    if unknown:
        raise UnsupportedArchitecture(
            f"{name}: config.json names architecture {', '.join(unknown)}, which vLLM 0.32 has no model class for "
            "(its model registry); it would refuse the model or run it through its Transformers modeling backend, "
            "whose memory kvprof does not plan")


def runs_transformers_backend(raw: dict[str, Any]) -> bool:
    """Whether the class config.json names is one vLLM 0.32 runs through its Transformers modeling backend (a
    config naming none is read as its family's reader says)."""
    archs = raw.get("architectures")
    return bool(archs) and all(x in transformers_backend_architectures() for x in archs)
