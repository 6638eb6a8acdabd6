"""Vision towers whose start-up profile vLLM runs: one class per tower kind, each owning its formulas
(Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3's SigLIP).

vLLM's V1 profile run (vllm/v1/worker/gpu_model_runner.py ``profile_run``, 0.32) first runs the multimodal
encoder on a dummy batch of the modality with the most tokens per item (``MultiModalBudget``,
vllm/multimodal/encoder_budget.py), keeps the encoder outputs in ``encoder_cache`` while the decoder's dummy
forward pass and the sampler warm up, and only then clears them. torch's peak over that run is the activation
reserve, so an image item of 16,384 tokens through a 32-block ViT can cost more than the decoder's whole pass.

Each kind answers:

* ``max_item_tokens(modality, max_model_len)``: the decoder tokens of the largest item vLLM profiles;
* ``patches(tokens)``: the ViT's sequence length for that many output tokens (the merger's spatial_merge_size²);
* ``peak_bytes_per_patch(dtype_bytes, tp)``: the bytes live per patch at the tower's peak (one block's MLP),
  counted from the tensors vLLM's forward keeps alive, plus the pixel values in the model dtype;
* ``output_bytes(tokens, dtype_bytes)``: the encoder outputs held through the decoder's profile.

A new tower kind is a class here and the line of ``analysis.model.encoders._vision_tower`` that builds it.
"""

from __future__ import annotations

import json
from typing import Annotated, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

# Qwen2-VL's and Qwen2.5-VL's published preprocessor_config.json (Qwen/Qwen2-VL-7B-Instruct,
# Qwen/Qwen2.5-VL-7B-Instruct): "max_pixels": 12845056 = 14 × 14 × 4 × 16384, i.e. 16,384 merged tokens an image.
# vLLM sizes the largest image from it (qwen2_vl.py ``get_image_size_with_most_features``); a checkpoint directory
# with its own preprocessor_config.json overrides it.
QWEN_VL_MAX_PIXELS = 12845056
# vllm/model_executor/models/qwen2_vl.py _MAX_FRAMES_PER_VIDEO (0.32): the frames of the largest profiled video.
QWEN_VL_MAX_FRAMES = 14
# Qwen3-VL's published preprocessor_config.json and video_preprocessor_config.json (Qwen/Qwen3-VL-*-Instruct):
# images "size": {"longest_edge": 16777216} = (16 × 2)² × 16,384 merged tokens; videos {"longest_edge": 25165824}
# over the two frames of a temporal patch. A checkpoint directory's own files override them.
QWEN3_VL_MAX_PIXELS = 16777216
QWEN3_VL_VIDEO_MAX_PIXELS = 25165824


def plain_mlp_block_elements(width: int, intermediate: int, tp: int = 1) -> int:
    """A pre-norm block with a two-matrix MLP (``x = x + mlp(norm(x))``) at its activation: the block's input, the
    residual sum and the norm's output [P, width] beside fc1's and the activation's [P, intermediate / tp]."""
    return 3 * width + 2 * intermediate // tp


class _Tower(BaseModel):
    """What every tower has: a ViT of ``width`` with an MLP of ``intermediate``, patches of ``patch_size`` pixels,
    outputs of the decoder's width; its peak a patch is one block's live tensors plus the patch's pixel values."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    width: int = Field(gt=0, description="the ViT's hidden size")
    intermediate: int = Field(gt=0, description="its MLP's hidden size")
    out_width: int = Field(gt=0, description="the tower's output width (the decoder's hidden size)")
    patch_size: int = Field(gt=0)
    in_channels: int = Field(3, gt=0)

    @property
    def pixel_values_per_patch(self) -> int:
        """One patch's pixel values, cast to the model dtype on the GPU."""
        return self.in_channels * self.patch_size ** 2

    def block_elements_per_patch(self, tp: int = 1) -> int:
        raise NotImplementedError

    def peak_bytes_per_patch(self, dtype_bytes: int, tp: int = 1) -> int:
        return dtype_bytes * (self.block_elements_per_patch(tp) + self.pixel_values_per_patch)

    def output_bytes(self, tokens: int, dtype_bytes: int) -> int:
        return tokens * self.out_width * dtype_bytes

    def decoder_buffer_bytes(self, max_num_batched_tokens: int, decoder_width: int, dtype_bytes: int) -> int:
        """Buffers the decoder allocates for the tower's outputs when the model is built (none by default)."""
        return 0


class QwenVisionTower(_Tower):
    """What Qwen2-VL's and Qwen2.5-VL's towers share: 14-pixel patches over 2 frames, merged 2 × 2 into one
    decoder token, images and videos sized by the preprocessor's ``max_pixels``."""

    kind: str
    patch_size: int = Field(14, gt=0)
    temporal_patch_size: int = Field(2, gt=0)
    spatial_merge_size: int = Field(2, gt=0)
    max_pixels: int = Field(QWEN_VL_MAX_PIXELS, gt=0)
    modalities: ClassVar[tuple[str, ...]] = ("image", "video")

    @property
    def merge_unit(self) -> int:
        return self.spatial_merge_size ** 2

    @property
    def frame_tokens(self) -> int:
        """Decoder tokens of the largest image (one temporal patch of the largest frame): max_pixels over the
        merged patch's area, as ``get_image_size_with_most_features`` factorises it (a square number here)."""
        unit = self.patch_size * self.spatial_merge_size
        return self.max_pixels // (unit * unit)

    def _video_tokens(self, frames: int) -> int:
        # qwen2_vl.py _get_vision_info: frames padded to a whole temporal patch, at least one.
        padded = frames + frames % self.temporal_patch_size
        return max(padded // self.temporal_patch_size, 1) * self.frame_tokens

    def max_item_tokens(self, modality: str, max_model_len: int) -> int:
        """The tokens of the largest item of ``modality`` (0.32 ``get_mm_max_tokens_per_item``): an image of
        ``max_pixels``; a video of as many such frames as fit ``max_model_len`` (``_get_max_video_frames``),
        at most 14 (``_MAX_FRAMES_PER_VIDEO``), at least one."""
        if modality == "image":
            return self.frame_tokens
        if modality != "video":
            raise ValueError(f"{self.kind} takes image and video inputs, not {modality!r}")
        frames = 1
        while frames < QWEN_VL_MAX_FRAMES and self._video_tokens(frames + 1) <= max_model_len:
            frames += 1
        return self._video_tokens(frames)

    def patches(self, tokens: int) -> int:
        return tokens * self.merge_unit

    @property
    def pixel_values_per_patch(self) -> int:
        """One patch's pixel values (channels × temporal patch × patch²), cast to the model dtype on the GPU."""
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2


class Qwen2VisionTower(QwenVisionTower):
    """Qwen2-VL (vllm/model_executor/models/qwen2_vl.py, 0.32): ``x = x + attn(norm1(x))`` then
    ``x = x + mlp(norm2(x))``, the MLP fc1 → QuickGELU → fc2 of width × mlp_ratio. Its peak is the activation
    call: the block's input, the residual sum and norm2's output [P, width], fc1's output and the activation's
    [P, intermediate / tp] (fc1's is freed only once ``x_parallel`` is rebound)."""

    kind: Literal["qwen2_vl"] = "qwen2_vl"

    def block_elements_per_patch(self, tp: int = 1) -> int:
        return plain_mlp_block_elements(self.width, self.intermediate, tp)


class Qwen25VisionTower(QwenVisionTower):
    """Qwen2.5-VL (vllm/model_executor/models/qwen2_5_vl.py, 0.32): ``x_attn = attn(norm1(x))``,
    ``x_fused_norm, residual = norm2(x, residual=x_attn)``, ``x = residual + mlp(x_fused_norm)``, the MLP a fused
    gate_up projection → SiluAndMul → down. At down_proj the block's input, ``x_attn``, ``x_fused_norm`` and
    ``residual`` [P, width] are alive with gate_up's output [P, 2 · intermediate / tp], the activation's
    [P, intermediate / tp] and down_proj's output [P, width]: 5 · width + 3 · intermediate / tp a patch.

    Checked against a vLLM 0.23 start-up log (Qwen2.5-VL-7B on an A100-SXM4-80GB, max_model_len 128000, one video
    item of 114,688 tokens = 458,752 patches): its profile reserve works out to 35,970 bytes a patch; this count
    gives 2 × (5 · 1280 + 3 · 3420 + 1176) = 35,672 (tests/analysis/model/test_vision.py)."""

    kind: Literal["qwen2_5_vl"] = "qwen2_5_vl"

    def block_elements_per_patch(self, tp: int = 1) -> int:
        return 5 * self.width + 3 * self.intermediate // tp


class Qwen3VisionTower(QwenVisionTower):
    """Qwen3-VL (vllm/model_executor/models/qwen3_vl.py, 0.32): 16-pixel patches over 2 frames plus learned
    position embeddings, blocks ``x = x + attn(norm1(x))`` then ``x = x + mlp(norm2(x))`` with the MLP
    linear_fc1 → GELU(tanh) → linear_fc2, and DeepStack: after each block in ``deepstack_visual_indexes`` a merger
    of its own maps the block's output to the decoder's width, and the tower returns the main merger's output
    concatenated with those, [tokens, out_width × (1 + levels)].

    Its peak a patch is a late block's MLP activation: the caller's block input, the post-attention sum and
    norm2's output [P, width] with fc1's and the activation's [P, intermediate / tp] (as Qwen2-VL's), the
    position embeddings the forward keeps in its metadata [P, width], the DeepStack features made so far
    (levels × out_width a merged token, out_width × levels / 4 a patch), and the pixel values.

    vLLM profiles the modality with the most tokens an item: an image of ``max_pixels`` (16,384 tokens by
    default); a video item is two frames of ``video_max_pixels`` / 2 (``get_max_video_tokens``: 12,288). Checked
    by hand (docs/plan.md) on a vLLM 0.13 start-up of Qwen3-VL-30B-A3B on an H100 NVL; a vLLM 0.11.0 start-up at
    tp 4 (the start-up corpus) profiled a 153,600-token video item instead, which this rule does not reproduce."""

    kind: Literal["qwen3_vl"] = "qwen3_vl"
    patch_size: int = Field(16, gt=0)
    max_pixels: int = Field(QWEN3_VL_MAX_PIXELS, gt=0)
    video_max_pixels: int = Field(QWEN3_VL_VIDEO_MAX_PIXELS, gt=0)
    deepstack_levels: int = Field(0, ge=0, le=64)

    def max_item_tokens(self, modality: str, max_model_len: int) -> int:
        if modality == "image":
            return self.frame_tokens
        if modality != "video":
            raise ValueError(f"{self.kind} takes image and video inputs, not {modality!r}")
        unit = self.patch_size * self.spatial_merge_size
        return self.video_max_pixels // self.temporal_patch_size // (unit * unit)

    def block_elements_per_patch(self, tp: int = 1) -> int:
        return (plain_mlp_block_elements(self.width, self.intermediate, tp) + self.width
                + self.deepstack_levels * self.out_width // self.merge_unit)

    def output_bytes(self, tokens: int, dtype_bytes: int) -> int:
        return tokens * self.out_width * (1 + self.deepstack_levels) * dtype_bytes

    def decoder_buffer_bytes(self, max_num_batched_tokens: int, decoder_width: int, dtype_bytes: int) -> int:
        """The decoder's DeepStack input buffers, allocated when the model is built (``deepstack_input_embeds``:
        one [max_num_batched_tokens, hidden] a level), so "Model loading took" counts them."""
        return self.deepstack_levels * max_num_batched_tokens * decoder_width * dtype_bytes


class SiglipVisionTower(_Tower):
    """Gemma 3's SigLIP tower (vllm/model_executor/models/siglip.py and gemma3_mm.py, 0.32): one fixed-size
    image of (image_size / patch_size)² patches pooled to ``mm_tokens_per_image`` decoder tokens (256), images
    only. A SiglipEncoderLayer keeps ``residual`` and runs ``layer_norm2`` → fc1 → activation → fc2: at the
    activation the layer's input, the residual and the norm's output [P, width] are alive with fc1's and the
    activation's outputs [P, intermediate / tp]: 3 · width + 2 · intermediate / tp a patch (as Qwen2-VL's).
    Not yet held against an NVIDIA log: the published Gemma 3 start-ups (vLLM 0.19 on H100) keep a larger
    sampler warm-up, so the tower's peak does not show in them."""

    kind: Literal["siglip"] = "siglip"
    image_size: int = Field(gt=0)
    tokens_per_image: int = Field(256, gt=0, description="config.json mm_tokens_per_image")
    modalities: ClassVar[tuple[str, ...]] = ("image",)

    def max_item_tokens(self, modality: str, max_model_len: int) -> int:
        if modality != "image":
            raise ValueError(f"a SigLIP tower takes images, not {modality!r}")
        return self.tokens_per_image

    def patches(self, tokens: int) -> int:
        return tokens // self.tokens_per_image * (self.image_size // self.patch_size) ** 2

    def block_elements_per_patch(self, tp: int = 1) -> int:
        return plain_mlp_block_elements(self.width, self.intermediate, tp)


VisionTower = Annotated[Qwen2VisionTower | Qwen25VisionTower | Qwen3VisionTower | SiglipVisionTower,
                        Field(discriminator="kind")]


class EncoderProfile(BaseModel):
    """The encoder part of vLLM's profile run on one GPU: which items it runs and what they cost."""

    model_config = ConfigDict(frozen=True)

    modality: str
    items: int
    item_tokens: int
    budget_tokens: int = Field(description="the encoder budget: max(max_num_batched_tokens, the item's tokens)")
    patches: int
    peak_bytes: int = Field(description="the tower's activation peak over the dummy batch")
    output_bytes: int = Field(description="its outputs, held in the encoder cache through the decoder's profile")

    @property
    def summary(self) -> str:
        return (f"vision encoder profiled on {self.items} {self.modality} item{'s' * (self.items > 1)} of "
                f"{self.item_tokens:,} tokens ({self.patches:,} patches)")

    def peak_with(self, decoder_peak: int) -> int:
        """The profile run's activation peak: the tower's own, or the decoder's on top of the encoder outputs the
        cache holds until the sampler returns."""
        return max(self.peak_bytes, self.output_bytes + decoder_peak)


def encoder_profile(tower: _Tower, *, max_model_len: int,
                    max_num_batched_tokens: int, max_num_seqs: int, dtype_bytes: int, tp: int = 1,
                    limits: dict[str, int] | None = None) -> EncoderProfile | None:
    """What vLLM 0.32's profile run feeds the tower (``MultiModalBudget``, ``compute_mm_encoder_budget``): the
    modality with the most tokens per item among those ``limits`` (``--limit-mm-per-prompt``; a modality not named
    allows 999 items a prompt, MultiModalConfig.get_limit_per_prompt) leaves on; the encoder budget
    max(max_num_batched_tokens, that item's tokens); as many items as the budget holds, at most max_num_seqs × the
    items a prompt may carry. None: every modality is off."""
    limits = limits or {}
    allowed = [m for m in tower.modalities if limits.get(m, 1) > 0]
    if not allowed:
        return None
    tokens = {m: tower.max_item_tokens(m, max_model_len) for m in allowed}
    modality = max(allowed, key=lambda m: (tokens[m], m))  # get_modality_with_max_tokens: ties go by name
    item = tokens[modality]
    budget = max(max_num_batched_tokens, item)
    per_prompt = max(1, min(limits.get(modality, 999), max_model_len // item))
    items = max(1, min(budget // item, max_num_seqs * per_prompt))
    patches = items * tower.patches(item)
    return EncoderProfile(modality=modality, items=items, item_tokens=item, budget_tokens=budget, patches=patches,
                          peak_bytes=patches * tower.peak_bytes_per_patch(dtype_bytes, tp),
                          output_bytes=items * tower.output_bytes(item, dtype_bytes))


# vLLM's modality names (MultiModalDataDict's keys); Kimi-K2.5 takes images and video chunks as one "vision_chunk".
Modality = Literal["image", "video", "audio", "vision_chunk"]
MODALITIES: tuple[str, ...] = get_args(Modality)


def parse_mm_limits(text: str) -> dict[str, int]:
    """``--limit-mm-per-prompt`` JSON as vLLM takes it (``{"image": 2, "video": 0}``, or a modality's
    ``{"count": n, ...}``) → items allowed a prompt per modality, or one ValueError naming what is wrong."""
    example = '; example: \'{"image": 1, "video": 0}\''
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--limit-mm-per-prompt is not JSON ({exc.msg} at character {exc.pos}){example}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"--limit-mm-per-prompt must be a JSON object of modality: items{example}")
    out: dict[str, int] = {}
    for modality, value in raw.items():
        if modality not in MODALITIES:
            raise ValueError(f"--limit-mm-per-prompt: {modality!r} is not a modality ({', '.join(MODALITIES)})")
        count = value.get("count") if isinstance(value, dict) else value
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(f"--limit-mm-per-prompt: {modality} must be a whole number of items >= 0, got {count!r}")
        out[modality] = count
    return out
