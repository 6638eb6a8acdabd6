"""Weight quantization schemes: the bytes vLLM holds on the GPU for each.

One class per scheme, each owning its bytes formula (as vLLM's
``v1/kv_cache_interface.py`` has one spec class per KV-cache kind): which modules
it quantizes, and what one quantized weight matrix of ``out × in`` costs, packed
values, scales and zero points as vLLM keeps them after loading. Everything a
scheme leaves alone (embeddings, norms, biases, MoE routers, ignored modules)
stays at the model dtype; ``analysis.model.params`` does that sum.

A module is named as in the Hugging Face checkpoint (``model.layers.3.self_attn.q_proj``,
``model.layers.3.mlp.experts``, ``lm_head``), so a checkpoint's own ignore list
(``ignore``, ``ignored_layers``, ``modules_to_not_convert``, ``llm_int8_skip_modules``)
applies as written: exact names, dotted prefixes, ``*`` globs and ``re:`` regexes.

Source: vLLM 0.32 ``vllm/model_executor/layers/quantization/`` (file named per class);
bitsandbytes from vLLM 0.10 (``quantization/bitsandbytes.py``; 0.32 no longer ships it).
The measured bytes are vLLM's "Model loading took X GiB": torch memory allocated
after ``process_weights_after_loading`` (``DeviceMemoryProfiler``), so repacked and
dropped tensors count as vLLM leaves them, not as the checkpoint stores them.
"""

from __future__ import annotations

import fnmatch
import math
import re
from typing import Annotated, Any, Literal

from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field

from analysis.model.layers import round_up
from analysis.model.module_names import ModuleNames
from analysis.versions import known_release

# "unquantized": a matrix vLLM keeps in the model dtype whatever the scheme (DeepSeek-V3.2's indexer wk and
# weights_proj, dequantized at load)
ModuleKind = Literal["linear", "expert", "router", "lm_head", "embedding", "unquantized"]

FP32 = 4


class QuantizationError(ValueError):
    """A quantization_config (or --quantization name) kvprof cannot model; the message says which field."""


def module_matches(name: str, patterns: tuple[str, ...]) -> bool:
    """Whether a module (or one of its parents) is named by an ignore list.

    Accepts the conventions checkpoints use: an exact name or dotted prefix
    (``lm_head``, ``model.layers.0.mlp``), a last component (``gate``, bitsandbytes'
    ``llm_int8_skip_modules``), ``*`` globs (``model.layers.*.self_attn``, mxfp4) and
    ``re:`` regexes matched against the full name (``re:.*mlp.gate$``, compressed-tensors).
    """
    parts = name.split(".")
    prefixes = {".".join(parts[: i + 1]) for i in range(len(parts))}
    for pat in patterns:
        if pat.startswith("re:"):
            if re.match(pat[3:], name):
                return True
        elif "*" in pat:
            if any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
                return True
        elif pat in prefixes or pat in parts or name.endswith("." + pat):
            return True
    return False


def _scale_count(strategy: str, block: Any, out_features: int, in_features: int) -> int:
    """float32 scales of one weight matrix: one per block (128 × 128 by default), per output channel, or one."""
    if strategy == "block":
        bo, bi = block or (128, 128)
        return math.ceil(out_features / bo) * math.ceil(in_features / bi)
    return out_features if strategy == "channel" else 1


class QuantScheme(BaseModel):
    """How a checkpoint's weights are held on the GPU. Subclasses own their bytes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str
    ignore: tuple[str, ...] = Field((), description="modules the checkpoint leaves unquantized")
    lm_head_quantized: bool = False
    kv_cache_dtype: str | None = Field(None, description="the KV-cache dtype the checkpoint declares, which vLLM "
                                       "runs when --kv-cache-dtype is auto (None: the model dtype)")

    def quantizes(self, name: str, kind: ModuleKind) -> bool:
        """Whether vLLM runs this module through the scheme's quantized method.

        Only ``LinearBase`` layers and fused MoE experts are; embeddings and the
        router (``ReplicatedLinear(..., quant_config=None)`` in vLLM's MoE models,
        a plain ``nn.Linear`` in gpt-oss) never are; ``lm_head`` (a ParallelLMHead,
        not a LinearBase) only where the scheme says so.
        """
        if kind in ("embedding", "router", "unquantized"):
            return False
        if kind == "lm_head" and not self.lm_head_quantized:
            return False
        return not module_matches(name, self.ignore)

    def matrix_bytes(self, out_features: int, in_features: int, dtype_bytes: int) -> float:
        """Bytes of one quantized ``out × in`` weight with its scales and zero points."""
        raise NotImplementedError

    def module_bytes(self, name: str, kind: ModuleKind, out_features: int, in_features: int,
                     dtype_bytes: int) -> float:
        """Bytes of the quantized module ``name`` (schemes with per-module settings override this)."""
        return self.matrix_bytes(out_features, in_features, dtype_bytes)

    def experts_bytes(self, name: str, num_experts: int, hidden: int, intermediate: int, gated: bool,
                      bias: bool, dtype_bytes: int, tp: int = 1) -> float:
        """Bytes of one MoE layer's routed experts, all ranks together.

        ``intermediate`` is the expert's full intermediate size; biases stay at the model dtype.
        """
        mats = [(intermediate, hidden)] * (2 if gated else 1) + [(hidden, intermediate)]
        if self.quantizes(name, "expert"):
            one = sum(self.module_bytes(name, "expert", o, i, dtype_bytes) for o, i in mats)
        else:
            one = sum(o * i for o, i in mats) * dtype_bytes
        if bias:
            one += ((2 if gated else 1) * intermediate + hidden) * dtype_bytes
        return num_experts * one

    def for_device(self, generation: str | None, vllm_version: str | None = None,
                   segment: str | None = None) -> QuantScheme:
        """The scheme as vLLM lays it out on a GPU of ``generation`` (the catalog's ``GPU.generation``: ampere,
        ada, hopper, blackwell) and ``segment`` (datacenter, workstation, consumer: Blackwell's datacenter parts are
        sm_100, the others sm_120); most layouts depend on neither."""
        return self

    def describe(self) -> str:
        return self.method


class Fp8(QuantScheme):
    """FP8 (e4m3) weights, one byte each, with float32 scales (vLLM ``fp8.py``).

    ``tensor``: one scale per matrix (per logical shard on disk; vLLM requantizes a
    fused qkv/gate-up to the max, ``process_fp8_weight_tensor_strategy``).
    ``channel``: one per output row (compressed-tensors FP8-dynamic,
    ``compressed_tensors_w8a8_fp8.py`` ``ChannelQuantScaleParameter`` float32).
    ``block``: one ``weight_scale_inv`` per ``weight_block_size`` tile (DeepSeek / Qwen3
    FP8, ``Fp8LinearMethod.create_weights``). A static activation scheme adds one
    float32 ``input_scale``. ``ignore`` is the checkpoint's ``ignored_layers``.
    Meta's ``fbgemm_fp8`` checkpoints (``fbgemm_fp8.py``) are per-channel FP8 with float32
    row scales, leaving ``modules_to_not_convert`` in 16 bits.
    Also vLLM's online ``--quantization fp8`` of a bf16 checkpoint
    (``online/fp8.py`` ``Fp8PerTensorOnlineLinearMethod``): every ``LinearBase`` and
    the MoE experts, per-tensor; lm_head, embeddings and routers stay bf16.
    """

    method: Literal["fp8"] = "fp8"
    strategy: Literal["tensor", "channel", "block"] = "tensor"
    weight_block_size: tuple[int, int] | None = None
    static_activations: bool = False
    online: bool = False

    def matrix_bytes(self, out_features: int, in_features: int, dtype_bytes: int) -> float:
        scales = _scale_count(self.strategy, self.weight_block_size, out_features, in_features)
        return out_features * in_features + FP32 * (scales + (1 if self.static_activations else 0))

    def describe(self) -> str:
        kind = f"block {self.weight_block_size[0]}x{self.weight_block_size[1]}" if (
            self.strategy == "block" and self.weight_block_size) else f"per-{self.strategy}"
        return f"fp8 {kind}" + (" (online)" if self.online else "")


class WeightArgs(BaseModel):
    """compressed-tensors ``config_groups.*.weights`` (``QuantizationArgs``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    num_bits: int = Field(8, gt=0)
    type: Literal["int", "float"] = "int"
    strategy: Literal["tensor", "channel", "group", "block", "tensor_group"] = "tensor"
    group_size: int | None = None
    block_structure: tuple[int, int] | None = None
    symmetric: bool = True
    actorder: str | bool | None = None


class CompressedTensors(QuantScheme):
    """A compressed-tensors checkpoint (``compressed_tensors/compressed_tensors.py``).

    ``config_groups`` map ``targets`` to weight args; the module's scheme is the
    first group whose targets match (``Linear`` matches every linear layer, not
    ``lm_head``, which is quantized only when a group names it). Bytes per
    ``schemes/``: 8-bit int or float weights (W8A8 int8 / FP8) are one byte each with
    float32 scales per tensor / channel / block (``compressed_tensors_w8a8_fp8.py``,
    ``compressed_tensors_w8a8_int8.py``); 4-bit (W4A16, ``compressed_tensors_wNa16.py``)
    packs eight values in an int32 (``weight_packed``), keeps ``weight_scale`` per
    group in the model dtype, an int32-packed ``weight_zero_point`` per group when
    not symmetric, and an int32 ``weight_g_idx`` per input column with group actorder.
    Asymmetric 8-bit int adds an int32 ``azp``-style zero point per channel (negligible).
    4-bit floats (NVFP4, ``compressed_tensors_w4a4_nvfp4.py``) keep a one-byte fp8 scale
    per group of 16 and a float32 global scale; kernels that swizzle those scales into
    128 x 4 tiles are not modelled (under 1 % of the weight).
    """

    method: Literal["compressed-tensors"] = "compressed-tensors"
    groups: tuple[tuple[tuple[str, ...], WeightArgs], ...]

    def _args(self, name: str, kind: ModuleKind) -> WeightArgs | None:
        for targets, args in self.groups:
            for t in targets:
                if kind == "lm_head":
                    if t == "lm_head" or (t.startswith("re:") and re.match(t[3:], name)):
                        return args
                elif t in ("Linear", "FusedMoE") or module_matches(name, (t,)):
                    return args
        return None

    def quantizes(self, name: str, kind: ModuleKind) -> bool:
        if kind in ("embedding", "router", "unquantized") or module_matches(name, self.ignore):
            return False
        return self._args(name, kind) is not None

    def module_bytes(self, name: str, kind: ModuleKind, out_features: int, in_features: int,
                     dtype_bytes: int) -> float:
        args = self._args(name, kind)
        assert args is not None
        return self._bytes(args, out_features, in_features, dtype_bytes)

    @staticmethod
    def _bytes(args: WeightArgs, out_features: int, in_features: int, dtype_bytes: int) -> float:
        n = out_features * in_features
        values = n * args.num_bits / 8
        if args.num_bits >= 8:
            scales = _scale_count(args.strategy, args.block_structure, out_features, in_features)
            zero = 0 if args.symmetric else out_features * 4
            return values + FP32 * scales + zero
        group = in_features if args.strategy == "channel" else (args.group_size or in_features)
        groups = math.ceil(in_features / group)
        if args.type == "float":
            # NVFP4 / MXFP4 (compressed_tensors_w4a4_nvfp4.py): uint8 pairs, an fp8 (or e8m0)
            # scale per group, a float32 global scale per tensor_group tensor
            return values + out_features * groups + (FP32 if args.strategy == "tensor_group" else 0)
        scales = out_features * groups * dtype_bytes
        zeros = 0 if args.symmetric else out_features * groups * args.num_bits / 8
        g_idx = 4 * in_features if args.actorder in ("group", True) else 0
        return values + scales + zeros + g_idx

    def matrix_bytes(self, out_features: int, in_features: int, dtype_bytes: int) -> float:
        return self._bytes(self.groups[0][1], out_features, in_features, dtype_bytes)

    def describe(self) -> str:
        a = self.groups[0][1]
        return f"compressed-tensors {a.type}{a.num_bits} {a.strategy}" + (
            f" g{a.group_size}" if a.strategy == "group" else "")


class Awq(QuantScheme):
    """AWQ int4 (``auto_awq.py`` ``AutoAWQMarlinLinearMethod``).

    ``qweight`` int32 ``[in, out/8]``, ``qzeros`` int32 ``[in/g, out/8]`` (4-bit zero per
    group and output column, when ``zero_point``), ``scales`` ``[in/g, out]`` in the
    model dtype; vLLM repacks qweight and qzeros to the GPTQ / Marlin layout in place
    of the same size. ``modules_to_not_convert`` stay unquantized; lm_head only with
    the ``lm_head`` flag.
    """

    method: Literal["awq"] = "awq"
    bits: int = 4
    group_size: int = 128
    zero_point: bool = True

    def matrix_bytes(self, out_features: int, in_features: int, dtype_bytes: int) -> float:
        n = out_features * in_features
        groups = math.ceil(in_features / (in_features if self.group_size == -1 else self.group_size))
        scales = groups * out_features * dtype_bytes
        zeros = groups * out_features * self.bits / 8 if self.zero_point else 0
        return n * self.bits / 8 + scales + zeros

    def describe(self) -> str:
        return f"awq int{self.bits} g{self.group_size}"


class Gptq(QuantScheme):
    """GPTQ (``auto_gptq.py``; Marlin: ``kernels/linear/mixed_precision/marlin.py``).

    ``qweight`` int32 ``[in/8, out]`` (``bits`` per value) and ``scales`` ``[in/g, out]``
    in the model dtype. vLLM 0.32 runs symmetric checkpoints only (``TYPE_MAP``:
    uint4b8 / uint8b128) with ``zero_points=False``, so Marlin replaces the loaded
    ``qzeros`` with an empty tensor; it refuses ``desc_act=True`` with groups
    (``gptq_utils.normalize_and_validate_gptq_desc_act``). Older vLLMs ran both: an
    asymmetric checkpoint keeps its packed zeros (``bits`` per group and column) and
    act-order keeps ``g_idx`` and its sort permutation, two int32 per input column;
    those are the bytes modelled for them. Marlin zero-pads shapes that are not
    multiples of its 64 x 128 tiles (``marlin_padded_nk``), which no catalog shape needs.
    """

    method: Literal["gptq"] = "gptq"
    bits: int = 4
    group_size: int = 128
    desc_act: bool = False
    sym: bool = True

    def matrix_bytes(self, out_features: int, in_features: int, dtype_bytes: int) -> float:
        n = out_features * in_features
        groups = math.ceil(in_features / (in_features if self.group_size == -1 else self.group_size))
        scales = groups * out_features * dtype_bytes
        zeros = 0 if self.sym else groups * out_features * self.bits / 8
        g_idx = 2 * 4 * in_features if self.desc_act else 0
        return n * self.bits / 8 + scales + zeros + g_idx

    def describe(self) -> str:
        return f"gptq int{self.bits} g{self.group_size}" + (" act-order" if self.desc_act else "")


class Mxfp4(QuantScheme):
    """MXFP4 MoE experts (gpt-oss), ``mxfp4.py`` ``GptOssMxfp4MoEMethod``.

    Only the fused experts are quantized: ``w13_weight`` / ``w2_weight`` uint8 with
    two 4-bit values per byte and a uint8 (e8m0) scale per 32 values; expert biases
    are bf16. Every ``LinearBase`` (attention, the router) gets
    ``UnquantizedLinearMethod``, so attention, router, embeddings and lm_head stay
    bf16. The expert kernel pads the hidden and intermediate sizes
    (``fused_moe/oracle/mxfp4.py`` ``mxfp4_round_up_hidden_size_and_intermediate_size``),
    so the bytes depend on the kernel (``kernel``, see :func:`mxfp4_kernel`):

    - ``marlin``: weight-only Marlin (GPUs without FP4 units: Ampere, Ada, and Hopper
      up to vLLM 0.10.1, whose log warns "Weight-only FP4 compression will be used
      leveraging the Marlin kernel"); FlashInfer TRT-LLM on Blackwell pads the same
      way. Intermediate (per rank) to a multiple of 128, hidden to 256; bf16 biases.
    - ``triton``: triton_kernels' matmul_ogs on Hopper (vLLM logs "Using 'TRITON' Mxfp4
      MoE backend"). vLLM rounds the per-rank intermediate to 64, turns the biases to
      float32 (``convert_gpt_oss_weight_to_mxfp4_moe_kernel_format``) and swizzles
      every matrix into triton_kernels' Hopper layouts (``_swizzle_mxfp4``):
      ``HopperMXValueLayout`` pads the packed contraction dimension to 64 bytes (128
      values) and the output dimension to 256 (``_padded_shape``);
      ``HopperMXScaleLayout`` pads the output dimension to 256 and vLLM pads the scale
      groups to a multiple of 4 (the "#47303" patch in ``_swizzle_mxfp4``). Read off
      triton-lang/triton's ``tensor_details/layout_details/hopper_{value,scale}.py``;
      vLLM vendors a version of it, so older releases may differ by a few tiles.
    """

    method: Literal["mxfp4"] = "mxfp4"
    kernel: Literal["marlin", "triton"] = "triton"

    def for_device(self, generation: str | None, vllm_version: str | None = None,
                   segment: str | None = None) -> Mxfp4:
        return self.model_copy(update={"kernel": mxfp4_kernel(generation, vllm_version)})

    def describe(self) -> str:
        return f"mxfp4 ({self.kernel})"

    def quantizes(self, name: str, kind: ModuleKind) -> bool:
        return kind == "expert"

    def matrix_bytes(self, out_features: int, in_features: int, dtype_bytes: int) -> float:
        n = out_features * in_features
        return n / 2 + n / 32

    def experts_bytes(self, name: str, num_experts: int, hidden: int, intermediate: int, gated: bool,
                      bias: bool, dtype_bytes: int, tp: int = 1) -> float:
        """Per rank: fused w13 ``[E, 2·I, H]`` and w2 ``[E, H, I]`` as the kernel lays them
        out, with scales and biases; times ``tp`` so that the caller's split gives one rank."""
        if intermediate % tp:
            raise QuantizationError(f"expert intermediate size {intermediate} does not split over {tp} ranks")
        rows = 2 if gated else 1
        if self.kernel == "marlin":
            h, i = round_up(hidden, 256), round_up(intermediate // tp, 128)
            one = self.matrix_bytes(rows * i, h, dtype_bytes) + self.matrix_bytes(h, i, dtype_bytes)
            one += (rows * i + h) * 2 if bias else 0  # bf16 (GptOssMxfp4MoEMethod.create_weights)
        else:
            i = round_up(intermediate // tp, 64)
            one = _hopper_mx_bytes(rows * i, hidden) + _hopper_mx_bytes(hidden, i)
            one += (rows * i + hidden) * 4 if bias else 0  # float32 for triton_kernels
        return num_experts * one * tp


class DeepseekV4Fp8(Fp8):
    """DeepSeek-V4's checkpoints (``quant_method: fp8`` on a ``deepseek_v4`` model, which vLLM 0.32 reads as
    ``deepseek_v4_fp8``: models/deepseek_v4/quant_config.py): every ``LinearBase`` fp8 in 128 × 128 blocks and, with
    ``expert_dtype: fp4``, the routed experts MXFP4 (``Mxfp4MoEMethod``: two e2m1 values a byte and a ue8m0 scale a
    32, w13 ``[E, 2I, H/2]`` and w2 ``[E, H, I/2]``); the linears' block scales are then ue8m0 too, one byte each
    (``is_scale_e8m0``), not float32. With ``expert_dtype: fp8`` the experts are fp8 blocks like the linears. The
    expert kernels round the per-rank intermediate to 128 and the hidden size to 256 (oracle/mxfp4.py), a no-op on
    the published models. NVIDIA's builds keep that and make the experts NVFP4 (``moe_quant_algo: NVFP4``), which
    vLLM runs with ModelOpt's NVFP4 MoE method (``DeepseekV4FP8Config.get_quant_method``)."""

    method: Literal["deepseek_v4_fp8"] = "deepseek_v4_fp8"  # type: ignore[assignment]
    strategy: Literal["tensor", "channel", "block"] = "block"
    weight_block_size: tuple[int, int] | None = (128, 128)
    expert_dtype: Literal["fp4", "fp8"] = "fp4"
    # fp4 experts as MXFP4 (the published checkpoints) or, where the config's moe_quant_algo is NVFP4 (NVIDIA's
    # builds), as ModelOpt NVFP4 (``ModelOptNvFp4FusedMoE``: its bytes and per-device padding are ModelOpt's)
    expert_format: Literal["mxfp4", "nvfp4"] = "mxfp4"
    moe_layout: Literal["checkpoint", "trtllm", "marlin"] = "checkpoint"

    def for_device(self, generation: str | None, vllm_version: str | None = None,
                   segment: str | None = None) -> DeepseekV4Fp8:
        """NVFP4 experts run ModelOpt's NVFP4 MoE kernels, padded as they pad on the device
        (:meth:`ModelOpt.for_device`); MXFP4 and fp8 experts keep one layout."""
        if self.expert_dtype != "fp4" or self.expert_format != "nvfp4":
            return self
        layout = ModelOpt(algo="NVFP4").for_device(generation, vllm_version, segment).moe_layout
        return self.model_copy(update={"moe_layout": layout})

    def matrix_bytes(self, out_features: int, in_features: int, dtype_bytes: int) -> float:
        scales = _scale_count(self.strategy, self.weight_block_size, out_features, in_features)
        return out_features * in_features + scales * (1 if self.expert_dtype == "fp4" else FP32)

    def experts_bytes(self, name: str, num_experts: int, hidden: int, intermediate: int, gated: bool,
                      bias: bool, dtype_bytes: int, tp: int = 1) -> float:
        if self.expert_dtype == "fp8":
            return super().experts_bytes(name, num_experts, hidden, intermediate, gated, bias, dtype_bytes, tp)
        if self.expert_format == "nvfp4":
            return ModelOpt(algo="NVFP4", moe_layout=self.moe_layout).experts_bytes(
                name, num_experts, hidden, intermediate, gated, bias, dtype_bytes, tp)
        if intermediate % tp:
            raise QuantizationError(f"expert intermediate size {intermediate} does not split over {tp} ranks")
        h, i = round_up(hidden, 256), round_up(intermediate // tp, 128)
        rows = 2 if gated else 1
        one = (rows * i * h + h * i) * (1 / 2 + 1 / 32)
        return num_experts * one * tp

    def describe(self) -> str:
        experts = "fp8" if self.expert_dtype == "fp8" else self.expert_format.upper()
        return f"fp8 block 128x128, {experts} experts"


def _hopper_mx_bytes(out_features: int, in_features: int) -> int:
    """One mxfp4 matrix in triton_kernels' Hopper value and scale layouts (see :class:`Mxfp4`)."""
    n = round_up(out_features, 256)
    values = round_up(-(-in_features // 2), 64) * n
    scales = n * round_up(-(-in_features // 32), 4)
    return values + scales


def mxfp4_kernel(generation: str | None, vllm_version: str | None = None) -> Literal["marlin", "triton"]:
    """The MoE kernel vLLM runs mxfp4 experts with on a GPU of ``generation`` (``GPU.generation``).

    vLLM picks it by compute capability (``get_mxfp4_backend``): Hopper (SM 9.0: H100, H200,
    H800, GH200 alike) runs triton_kernels from vLLM 0.10.2 on (0.10.1 still chose Marlin
    there, issue 23278's log); Blackwell's TRT-LLM kernel pads like Marlin, and GPUs without
    FP4 (Ampere, Ada) run Marlin. A GPU of no stated generation is taken as Hopper.
    """
    if (generation or "hopper") != "hopper":
        return "marlin"
    if (v := known_release(vllm_version)) is not None and v < Version("0.10.2"):
        return "marlin"
    return "triton"


class BitsAndBytes(QuantScheme):
    """bitsandbytes (vLLM 0.10 ``bitsandbytes.py``; quant states live on the GPU).

    4-bit (nf4 / fp4): two values per uint8 (``total_size // quant_ratio``), plus the
    ``QuantState`` absmax per ``blocksize`` (64) values: float32, or with double
    quantization a uint8 per block plus a float32 per 256 blocks (and a 256-entry
    float32 code book per matrix). 8-bit (LLM.int8): int8 weights and a float32 row
    scale (``SCB``) per output row. ``llm_int8_skip_modules`` stay unquantized.
    """

    method: Literal["bitsandbytes"] = "bitsandbytes"
    bits: Literal[4, 8] = 4
    quant_type: str = "nf4"
    double_quant: bool = False
    blocksize: int = 64

    def matrix_bytes(self, out_features: int, in_features: int, dtype_bytes: int) -> float:
        n = out_features * in_features
        if self.bits == 8:
            return n + FP32 * out_features
        blocks = math.ceil(n / self.blocksize)
        # double quantization: a uint8 per block, a float32 per 256 blocks, a 256-entry float32 code book
        absmax = blocks + FP32 * (math.ceil(blocks / 256) + 256) if self.double_quant else FP32 * blocks
        return n / 2 + absmax

    def describe(self) -> str:
        return f"bitsandbytes {self.quant_type if self.bits == 4 else 'int8'}"


ModelOptAlgo = Literal["FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "W4A16_NVFP4", "MXFP8"]
MODELOPT_ALGOS: tuple[str, ...] = (*ModelOptAlgo.__args__, "MIXED_PRECISION")  # type: ignore[attr-defined]
_NVFP4 = ("NVFP4", "W4A16_NVFP4")


class ModelOpt(QuantScheme):
    """An NVIDIA ModelOpt checkpoint (``modelopt.py``: NVIDIA's FP8, NVFP4 and mixed-precision builds).

    vLLM reads it from config.json's ``quantization_config`` or, failing that, from the
    ``hf_quant_config.json`` beside it (analysis.model.architecture reads both as vLLM does).
    ``algo`` is the checkpoint's ``quant_algo``; under ``MIXED_PRECISION`` each layer's algo is
    its entry in ``quantized_layers`` and a layer not listed stays unquantized (``_resolve_quant_algo``).
    Every ``LinearBase`` not excluded is quantized, ``lm_head`` included unless excluded
    (``get_quant_method``); embeddings, norms, routers and recurrent-state parameters never are.
    A module is excluded as ``is_layer_excluded`` decides on vLLM's layer: the layer's own name
    or every shard of a fused layer listed, any listed name a substring of the layer's (the
    "ModelOpt < 0.39" rule), or a shell wildcard matching it, after vLLM rewrote each ``X*`` into
    ``X`` and ``X.*`` (``apply_vllm_mapper``). ``names`` is the family's checkpoint naming
    (analysis.model.module_names), under which those lists are written.

    Bytes (docs/vllm-notes/modelopt-nvfp4.md, file:line citations): NVFP4 (and W4A16_NVFP4)
    a uint8 per two weights and an fp8 scale per ``group_size`` (16) of them, 9/16 byte a weight;
    FP8 one byte with float32 scalars; FP8_PER_CHANNEL_PER_TOKEN a float32 per row more; FP8_PB_WO
    rows padded to 128 and a float32 per 128 × 128 block; MXFP8 an e8m0 byte per 32. The NVFP4
    MoE kernels pad the experts per rank (``moe_layout``, from :meth:`for_device`): FlashInfer
    TRT-LLM on datacenter Blackwell pads the hidden size to 256 and the intermediate to 64 (gated) or 128;
    Marlin, the weight-only FP4 kernel on Hopper, Ada and Ampere, pads the intermediate to 64
    (128 where the hidden size is not a multiple of 128). The linear kernels' tile padding is
    not modelled: none where a layer's dimensions are multiples of 128.
    """

    method: Literal["modelopt"] = "modelopt"
    algo: Literal[ModelOptAlgo, "MIXED_PRECISION"]
    layers: tuple[tuple[str, ModelOptAlgo], ...] = Field((), description="MIXED_PRECISION's quantized_layers")
    group_size: int = Field(16, gt=0)
    block_size: int = Field(128, gt=0)
    names: ModuleNames = ModuleNames()
    moe_layout: Literal["checkpoint", "trtllm", "marlin"] = "checkpoint"
    lm_head_quantized: bool = True

    def for_device(self, generation: str | None, vllm_version: str | None = None,
                   segment: str | None = None) -> ModelOpt:
        """FlashInfer TRT-LLM on datacenter Blackwell (sm_100), Marlin on Hopper, Ada and Ampere; sm_120's
        backends (FlashInfer CUTLASS, B12X) are not analysed byte for byte and keep the checkpoint's layout, as does
        an unknown GPU."""
        if generation == "blackwell":
            layout = "trtllm" if segment in (None, "datacenter") else "checkpoint"
        else:
            layout = "checkpoint" if generation is None else "marlin"
        return self.model_copy(update={"moe_layout": layout})

    def describe(self) -> str:
        kv = f", {self.kv_cache_dtype} KV cache" if self.kv_cache_dtype else ""
        return f"modelopt {self.algo.lower()}{kv}"

    # -- which modules -------------------------------------------------------------------------
    def _excluded(self, layer: str, shards: tuple[str, ...]) -> bool:
        ex = self.ignore
        if layer in ex or (shards and all(s in ex for s in shards)):
            return True
        if shards and any(s in ex for s in shards):
            listed = ", ".join(s for s in shards if s in ex)
            raise QuantizationError(f"exclude_modules lists some shards of {layer} ({listed}) but not all; "
                                    "vLLM refuses a fused layer with mixed schemes")
        stripped = layer.removeprefix("language_model.")
        if any(e != layer and (e in layer or (stripped != layer and e in stripped)) for e in ex):
            return True
        return any(fnmatch.fnmatchcase(layer, e) for e in ex)

    def _algo(self, name: str, kind: ModuleKind) -> str | None:
        """The algo vLLM runs module ``name`` (kvprof's name) with, None where it stays unquantized."""
        if kind in ("embedding", "router", "unquantized"):
            return None
        layer, shards = self.names.layer(self.names.checkpoint(name))
        if self._excluded(layer, shards) or any(v in layer for v in ("vision_tower", "vision_model")):
            return None
        if self.algo != "MIXED_PRECISION":
            return self.algo
        table = dict(self.layers)
        if layer in table:
            return table[layer]
        algos = {table[s] for s in shards if s in table}
        if len(algos) > 1:
            raise QuantizationError(f"quantized_layers gives the shards of {layer} different algos "
                                    f"({', '.join(sorted(algos))}); vLLM refuses a fused layer with mixed schemes")
        if algos:
            return algos.pop()
        parents = [layer + "."] + ([layer.rsplit(".experts", 1)[0] + "."] if layer.endswith(".experts") else [])
        return next((a for k, a in self.layers if any(k.startswith(p) for p in parents)), None)

    def quantizes(self, name: str, kind: ModuleKind) -> bool:
        return self._algo(name, kind) is not None

    # -- bytes -------------------------------------------------------------------------------
    def _linear_bytes(self, algo: str, out_features: int, in_features: int) -> float:
        n = out_features * in_features
        if algo in _NVFP4:
            if in_features % 16:
                raise QuantizationError(f"NVFP4 needs input sizes that are multiples of 16, not {in_features}")
            return n / 2 + out_features * math.ceil(in_features / self.group_size) + FP32
        if algo == "FP8_PER_CHANNEL_PER_TOKEN":
            return n + FP32 * out_features
        if algo == "FP8_PB_WO":
            b = self.block_size
            return round_up(out_features, b) * in_features + FP32 * math.ceil(out_features / b) * math.ceil(
                in_features / b)
        if algo == "MXFP8":
            return n + n / 32
        return n + 2 * FP32  # FP8: the weight and input scales are scalars once loaded

    def module_bytes(self, name: str, kind: ModuleKind, out_features: int, in_features: int,
                     dtype_bytes: int) -> float:
        algo = self._algo(name, kind)
        assert algo is not None
        return self._linear_bytes(algo, out_features, in_features)

    def matrix_bytes(self, out_features: int, in_features: int, dtype_bytes: int) -> float:
        return self._linear_bytes(self.algo if self.algo != "MIXED_PRECISION" else "NVFP4", out_features, in_features)

    def experts_bytes(self, name: str, num_experts: int, hidden: int, intermediate: int, gated: bool,
                      bias: bool, dtype_bytes: int, tp: int = 1) -> float:
        """Per rank: w13 ``[E, S·I, H]`` and w2 ``[E, H, I]`` (``S`` 2 when gated) as the kernel keeps them;
        times ``tp`` so that the caller's split gives one rank."""
        algo = self._algo(name, "expert")
        if algo is None:
            return super().experts_bytes(name, num_experts, hidden, intermediate, gated, bias, dtype_bytes, tp)
        if intermediate % tp:
            raise QuantizationError(f"expert intermediate size {intermediate} does not split over {tp} ranks")
        s, i, h = (2 if gated else 1), intermediate // tp, hidden
        if algo in _NVFP4:
            if self.moe_layout == "trtllm":
                h, i = round_up(h, 256), round_up(i, 64 if gated else 128)
            elif self.moe_layout == "marlin":
                i = round_up(i, 64 if h % 128 == 0 else 128)
            one = 9 / 16 * (s + 1) * i * h + FP32 * 3 * (s + 1)
        else:
            one = sum(self._linear_bytes(algo, o, k) for o, k in [(s * i, h), (h, i)])
        if bias:
            one += (s * intermediate // tp + hidden) * dtype_bytes
        return num_experts * one * tp


AnyScheme = Annotated[Fp8 | DeepseekV4Fp8 | CompressedTensors | Awq | Gptq | Mxfp4 | BitsAndBytes | ModelOpt,
                      Field(discriminator="method")]
"""Any scheme, told apart by ``method`` (how an Architecture stores and reloads it)."""
