"""A checkpoint's ``quantization_config`` (or a ``--quantization`` override) read into the scheme vLLM 0.32 resolves
it to (:mod:`analysis.model.quantization` has the schemes and their bytes): quant_method spellings and aliases,
ModelOpt's algorithms and excluded layers, the KV cache dtype a ModelOpt checkpoint names, and what is refused by
name where vLLM would not load it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from analysis.model.module_names import ModuleNames

# "unquantized": a matrix vLLM keeps in the model dtype whatever the scheme (DeepSeek-V3.2's indexer wk and
# weights_proj, dequantized at load)
from analysis.model.quantization import (
    MODELOPT_ALGOS,
    Awq,
    BitsAndBytes,
    CompressedTensors,
    Fp8,
    Gptq,
    ModelOpt,
    Mxfp4,
    QuantizationError,
    QuantScheme,
    WeightArgs,
)

SCHEMES: dict[str, type[QuantScheme]] = {
    cls.model_fields["method"].default: cls
    for cls in (Fp8, CompressedTensors, Awq, Gptq, Mxfp4, BitsAndBytes, ModelOpt)
}
# Names vLLM accepts for the same layout (``--quantization`` values and quant_method spellings).
_ALIASES = {"fbgemm_fp8": "fp8", "awq_marlin": "awq", "auto_awq": "awq", "gptq_marlin": "gptq", "auto_gptq": "gptq",
            "gpt_oss_mxfp4": "mxfp4", "compressed_tensors": "compressed-tensors", "bnb": "bitsandbytes",
            "modelopt_fp4": "modelopt", "modelopt_mixed": "modelopt", "modelopt_mxfp8": "modelopt"}


def _tuple(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise QuantizationError(f"quantization_config.{field} must be a list of module names, got {value!r}")
    return tuple(value)


def _int(cfg: dict[str, Any], keys: tuple[str, ...], default: int) -> int:
    for k in keys:
        if cfg.get(k) is not None:
            v = cfg[k]
            if isinstance(v, bool) or not isinstance(v, int):
                raise QuantizationError(f"quantization_config.{k} must be an integer, got {v!r}")
            return v
    return default


def _modelopt_kv_dtype(cfg: dict[str, Any]) -> str | None:
    """The KV-cache dtype vLLM resolves ``--kv-cache-dtype auto`` to (``get_kv_cache_quant_algo_string``)."""
    inner = cfg.get("quantization") if isinstance(cfg.get("quantization"), dict) else cfg
    algo = (inner.get("kv_cache_scheme") or cfg.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
            or cfg.get("kv_cache_quant_algo"))
    if isinstance(algo, dict):
        if algo.get("num_bits") == 4 and algo.get("type") == "float":
            algo = "nvfp4"
        elif algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
            algo = "fp8"
        else:
            return None  # vLLM warns and falls back to the model dtype
    if not isinstance(algo, str) or algo.lower() not in ("fp8", "nvfp4"):
        return None
    if algo.lower() == "nvfp4":
        raise QuantizationError("quantization_config's KV cache is NVFP4, which kvprof does not model; "
                                "give --kv-dtype to plan another")
    return "fp8_e4m3"


def _modelopt(cfg: dict[str, Any], names: ModuleNames | None) -> ModelOpt:
    """``ModelOptQuantConfigBase.from_config``: the legacy shape (``quantization``: quant_algo, exclude_modules,
    kv_cache_quant_algo) or config.json's (quant_algo, ignore, kv_cache_scheme at the top)."""
    legacy = isinstance(cfg.get("quantization"), dict)
    src = cfg["quantization"] if legacy else cfg
    algo = str(src.get("quant_algo") or "").upper()
    field = "quantization.quant_algo" if legacy else "quant_algo"
    if algo not in MODELOPT_ALGOS:
        raise QuantizationError(f"ModelOpt {field} {src.get('quant_algo')!r} is not one of {', '.join(MODELOPT_ALGOS)}")
    if names is None:
        raise QuantizationError("kvprof does not know how this family's checkpoint names its modules "
                                "(analysis/model/module_names.py), so ModelOpt's exclude list cannot be applied")
    exclude = []  # vLLM's apply_vllm_mapper: "X*" (not ".*") means X and X.*
    for e in _tuple(src.get("exclude_modules") if legacy else cfg.get("ignore"),
                    "exclude_modules" if legacy else "ignore"):
        exclude += [e[:-1], e[:-1] + ".*"] if len(e) >= 2 and e[-1] == "*" and e[-2] != "." else [e]
    groups = cfg.get("config_groups")
    if algo == "NVFP4" and isinstance(groups, dict) and groups and all(
            isinstance(g, dict) and g.get("input_activations") is None for g in groups.values()):
        algo = "W4A16_NVFP4"  # weight-only: the same bytes, another kernel
    layers: list[tuple[str, str]] = []
    if algo == "MIXED_PRECISION":
        raw = src.get("quantized_layers") or cfg.get("quantized_layers")
        if not isinstance(raw, dict) or not raw:
            raise QuantizationError("ModelOpt MIXED_PRECISION needs a non-empty quantized_layers")
        for k, v in raw.items():
            a = str(v.get("quant_algo") if isinstance(v, dict) else "").upper()
            if a not in MODELOPT_ALGOS[:-1]:
                raise QuantizationError(f"quantized_layers.{k}.quant_algo {v!r} is not one of "
                                        f"{', '.join(MODELOPT_ALGOS[:-1])}")
            layers.append((k, a))
    group = _int(src, ("group_size",), 16) or 16
    return ModelOpt(algo=algo, layers=tuple(layers), group_size=group, ignore=tuple(exclude), names=names,
                    kv_cache_dtype=_modelopt_kv_dtype(cfg))


def _from_hf(cfg: dict[str, Any], names: ModuleNames | None = None) -> QuantScheme:
    raw_method = cfg.get("quant_method")
    if cfg.get("load_in_4bit") or cfg.get("load_in_8bit"):
        raw_method = raw_method or "bitsandbytes"
    producer = cfg.get("producer") if isinstance(cfg.get("producer"), dict) else {}
    if not raw_method and producer.get("name") == "modelopt":
        # _normalize_quantization_config sets quant_method only from a "quantization" object; without one vLLM 0.32
        # finds no method and loads the checkpoint as unquantized
        raise QuantizationError(
            f"quantization_config was written by ModelOpt {producer.get('version', '')} without quant_method or a "
            "\"quantization\" object; vLLM 0.32 finds no quantization method in it and would load the quantized "
            "weights as unquantized ones, so what that engine holds is not planned")
    if not isinstance(raw_method, str):
        raise QuantizationError(f"quantization_config.quant_method is missing or not a string ({raw_method!r}); "
                                f"known: {', '.join(SCHEMES)}")
    method = _ALIASES.get(raw_method.lower(), raw_method.lower())
    if method not in SCHEMES:
        raise QuantizationError(f"quantization_config.quant_method {raw_method!r} is not modelled; "
                                f"known: {', '.join(SCHEMES)}")
    if method == "modelopt":
        return _modelopt(cfg, names)
    if raw_method.lower() == "fbgemm_fp8":
        return Fp8(strategy="channel",
                   ignore=_tuple(cfg.get("modules_to_not_convert"), "modules_to_not_convert"))
    if method == "fp8":
        block = cfg.get("weight_block_size")
        if block is not None and (not isinstance(block, list) or len(block) != 2):
            raise QuantizationError(f"quantization_config.weight_block_size must be two integers, got {block!r}")
        return Fp8(strategy="block" if block else "tensor",
                   weight_block_size=tuple(block) if block else None,
                   static_activations=cfg.get("activation_scheme") == "static",
                   ignore=_tuple(cfg.get("ignored_layers") or cfg.get("modules_to_not_convert"), "ignored_layers"))
    if method == "compressed-tensors":
        groups_raw = cfg.get("config_groups")
        if not isinstance(groups_raw, dict) or not groups_raw:
            raise QuantizationError("quantization_config.config_groups must map group names to "
                                    "{targets, weights}; it is missing or empty")
        groups = []
        for gname, g in groups_raw.items():
            if not isinstance(g, dict) or not isinstance(g.get("weights"), dict):
                raise QuantizationError(f"quantization_config.config_groups.{gname}.weights is missing")
            try:
                args = WeightArgs.model_validate(g["weights"])
            except ValidationError as exc:
                e = exc.errors()[0]
                raise QuantizationError(f"quantization_config.config_groups.{gname}.weights."
                                        f"{'.'.join(map(str, e['loc']))}: {e['msg']}") from None
            groups.append((_tuple(g.get("targets") or ["Linear"], f"config_groups.{gname}.targets"), args))
        # attention.py: a kv_cache_scheme turns --kv-cache-dtype auto into fp8
        return CompressedTensors(groups=tuple(groups), ignore=_tuple(cfg.get("ignore"), "ignore"),
                                 kv_cache_dtype="fp8" if cfg.get("kv_cache_scheme") is not None else None)
    if method == "awq":
        return Awq(bits=_int(cfg, ("bits", "w_bit"), 4), group_size=_int(cfg, ("group_size", "q_group_size"), 128),
                   zero_point=bool(cfg.get("zero_point", True)), lm_head_quantized=bool(cfg.get("lm_head", False)),
                   ignore=_tuple(cfg.get("modules_to_not_convert"), "modules_to_not_convert"))
    if method == "gptq":
        return Gptq(bits=_int(cfg, ("bits",), 4), group_size=_int(cfg, ("group_size",), 128),
                    desc_act=bool(cfg.get("desc_act", False)), sym=bool(cfg.get("sym", True)),
                    lm_head_quantized=bool(cfg.get("lm_head", False)),
                    ignore=_tuple(cfg.get("modules_to_not_convert"), "modules_to_not_convert"))
    if method == "mxfp4":
        return Mxfp4(ignore=_tuple(cfg.get("modules_to_not_convert"), "modules_to_not_convert"))
    return BitsAndBytes(bits=8 if cfg.get("load_in_8bit") else 4,
                        quant_type=str(cfg.get("bnb_4bit_quant_type") or "fp4"),
                        double_quant=bool(cfg.get("bnb_4bit_use_double_quant", False)),
                        ignore=_tuple(cfg.get("llm_int8_skip_modules"), "llm_int8_skip_modules"))


def scheme_from_config(cfg: dict[str, Any] | None, names: ModuleNames | None = None) -> QuantScheme | None:
    """The scheme of a config.json's ``quantization_config`` (None: unquantized); ``names``: how the family's
    checkpoint names its modules (analysis.model.module_names), which ModelOpt's lists need."""
    if cfg is None:
        return None
    if not isinstance(cfg, dict):
        raise QuantizationError(f"quantization_config must be an object, got {type(cfg).__name__}")
    return _from_hf(cfg, names)


# vLLM 0.32's online FP8 shorthands (config/quantization.py _ONLINE_SHORTHANDS); "fp8" is how
# vLLM up to 0.2x spelled the per-tensor one (0.32 refuses it on an unquantized checkpoint).
_ONLINE_FP8 = {"fp8": ("tensor", None), "fp8_per_tensor": ("tensor", None),
               "fp8_per_channel": ("channel", None), "fp8_per_block": ("block", (128, 128))}
OVERRIDES = (*_ONLINE_FP8, "awq", "gptq", "compressed-tensors", "mxfp4", "bitsandbytes", "none")


def scheme_for_override(name: str, checkpoint: QuantScheme | None) -> QuantScheme | None:
    """What vLLM runs with ``--quantization NAME`` on a checkpoint with scheme ``checkpoint``.

    ``fp8_per_tensor`` / ``fp8_per_channel`` / ``fp8_per_block`` (and the older
    spelling ``fp8``, per-tensor) on an unquantized checkpoint are vLLM's online FP8
    (``online/fp8.py``: every ``LinearBase`` and the MoE experts; lm_head, embeddings
    and routers stay in the model dtype); on an FP8 checkpoint they mean that
    checkpoint's scheme. ``bitsandbytes`` on an unquantized checkpoint is vLLM's
    in-flight 4-bit quantization (``model_loader/bitsandbytes_loader.py``
    ``_unquantized_generator``: ``quantize_4bit(compress_statistics=True,
    quant_type="nf4")``, bitsandbytes' default blocksize 64, double quantization).
    The other names read the checkpoint's own config and are refused without one.
    ``none`` drops the checkpoint's scheme.
    """
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in OVERRIDES:
        raise QuantizationError(f"--quantization {name!r} is not modelled; known: {', '.join(OVERRIDES)}")
    if key == "none":
        return None
    if checkpoint is not None:
        if key in _ONLINE_FP8:
            key = "fp8"
        if checkpoint.method != key and not (key == "fp8" and isinstance(checkpoint, CompressedTensors)):
            raise QuantizationError(f"--quantization {name} does not match the checkpoint's "
                                    f"quantization_config ({checkpoint.method})")
        return checkpoint
    if key in _ONLINE_FP8:
        strategy, block = _ONLINE_FP8[key]
        return Fp8(strategy=strategy, weight_block_size=block, online=True)
    if key == "bitsandbytes":
        return BitsAndBytes(bits=4, quant_type="nf4", double_quant=True)
    raise QuantizationError(f"--quantization {name} needs the checkpoint's quantization_config "
                            "(group size, bits, ignored layers); this config.json has none")
