"""Importing Hugging Face models: configuration -> readable spec, directory -> compiled model with its weights.

Every family is a tiny random-weight model written with ``save_pretrained`` into a temporary directory (never
a hub); ``tfspec.from_pretrained`` of that directory must compute the Hugging Face model's logits on a padded
batch.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import warnings

import pytest
import torch

import tfspec
from tfspec.interop.layouts import example
from tfspec.interop import InteropError
from tfspec.interop.families import FAMILIES, coverage, examples, import_config
from tfspec.interop.families.hf_llama import ROPE_EXAMPLES
from numerics import FLOAT32, assert_close

T = pytest.importorskip("transformers")
T.logging.set_verbosity_error()

TOL = FLOAT32
CONFIGS = copy.deepcopy(examples())  # model class -> a tiny configuration of it, as its family declares


# transformers before 5.2x has no gpt-oss fields swiglu_alpha and swiglu_limit and computes gpt-oss's 1.702 and 7.0
# whatever a configuration says: its reference is held to those
if not hasattr(T.GptOssConfig(), "swiglu_alpha"):
    for values in CONFIGS.values():
        if values["model_type"] == "gpt_oss":
            values.pop("swiglu_alpha", None), values.pop("swiglu_limit", None)


def _gated_norm_spans_groups(reference) -> bool:
    """Whether the reference's Mamba-2 gated RMSNorm takes no group size (so normalizes all groups together)."""
    norms = [type(m) for m in reference.modules() if type(m).__name__.endswith("RMSNormGated")]
    return any(not {"group_size", "n_groups"} & set(inspect.signature(norm.__init__).parameters) for norm in norms)


def saved(tmp_path, cls: str, untie: bool = False, seed: int = 0, **extra):
    """A tiny random ``cls`` written with save_pretrained into ``tmp_path/<cls>``; returns (directory, model).
    ``untie``: give it an LM head of its own (Hugging Face builds T5's tied whatever its configuration says)."""
    values = {**CONFIGS[cls], **extra}
    config = T.AutoConfig.for_model(values.pop("model_type"), **values, architectures=[cls])
    # the reference computes what its paper says, on every transformers version and device: eager attention where
    # scores are soft-capped (transformers 5.17's SDPA path drops Gemma 2's attn_logit_softcapping), eager experts
    # (grouped_mm needs rows of 16-byte multiples in bf16: moe_intermediate_size 12 is 24 bytes); eager attention
    # where latent attention's values start at an offset CUDA's fused kernels cannot read (transformers 5.17 hands
    # SDPA DeepSeek's values split off after each head's qk_nope_head_dim features: 6 of them is 12 bytes in bf16,
    # a 'misaligned address' on an H200 that poisons the process; tfspec copies such a view, ``nn.attention.sdpa``)
    capped = getattr(config, "attn_logit_softcapping", None) or getattr(getattr(config, "text_config", None),
                                                                       "attn_logit_softcapping", None)
    if capped is not None or getattr(config, "qk_nope_head_dim", 8) % 8:  # (PaliGemma 2's text model's too)
        config._attn_implementation = "eager"
        if hasattr(config, "qk_nope_head_dim"):  # (a default of 128 key/value heads, which only eager reads)
            config.num_key_value_heads = config.num_attention_heads
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    torch.manual_seed(seed)
    reference = getattr(T, cls)(config).eval()
    groups = next((name for name in ("n_groups", "mamba_n_groups") if getattr(config, name, 1) > 1), None)
    if groups and _gated_norm_spans_groups(reference):
        # transformers 5.17 (the GPU machine's) normalizes Mamba-2's gated RMSNorm over all B/C groups
        # at once in its torch path, where mamba_ssm's kernel (and tfspec) normalizes each group: with one group
        # the two agree, so the comparison still holds there
        return saved(tmp_path, cls, untie, seed, **{**extra, groups: 1})
    if untie:
        reference.lm_head.weight = torch.nn.Parameter(torch.randn_like(reference.lm_head.weight))
    with torch.no_grad():  # every weight away from its initialisation: a norm weight of exactly 1 hides mistakes
        for p in reference.parameters():
            if p.requires_grad:  # (not Marian's frozen sinusoid tables, which no checkpoint changes)
                p.mul_(1 + 0.2 * torch.randn_like(p)).add_(0.02 * torch.randn_like(p))
        if hasattr(reference, "cls"):  # BERT's MLM head holds its bias twice (decoder.bias): the same values
            reference.cls.predictions.decoder.bias.copy_(reference.cls.predictions.bias)
    directory = tmp_path / cls.lower()
    reference.save_pretrained(directory)
    return directory, reference


def outputs(model, reference, cls: str, device: str = "cpu", pooler_tolerance: float | None = TOL,
            padded: bool = True):
    """Both models' outputs on a batch (logits, or the last hidden states of base models), its second row
    right-padded where ``padded``; ``device``: where the models are; a pooled vector is checked to
    ``pooler_tolerance`` (None: not checked)."""
    if hasattr(reference.config, "vision_config") and hasattr(reference, "get_text_features"):  # two towers meeting
        # in a contrastive head: texts against pictures
        return _contrasted(model, reference, device, padded)
    if hasattr(reference.config, "image_token_id"):  # pictures read into a text model's prompt
        return _connected(model, reference, device, padded)
    if reference.main_input_name == "pixel_values":  # pictures, which have no padding
        c, side = reference.config.num_channels, reference.config.image_size
        pixels = torch.randn(2, c, side, side, generator=torch.Generator().manual_seed(1)).to(device)
        with torch.no_grad():
            ours, result = model(pixels), reference(pixel_values=pixels)
        if isinstance(ours, tuple):  # the hidden states and the pooled vector
            if pooler_tolerance is not None:
                assert_close(ours[1], result.pooler_output, pooler_tolerance)
            ours = ours[0]
        theirs = result.logits if hasattr(result, "logits") else result.last_hidden_state
        return ours, theirs, torch.ones(theirs.shape[:-1], dtype=torch.bool, device=device)
    if reference.main_input_name == "input_features":  # spectrograms, then the target tokens
        config = reference.config
        features = torch.randn(2, config.num_mel_bins, 2 * config.max_source_positions,  # (in the weights' dtype:
                               generator=torch.Generator().manual_seed(1)).to(device, reference.dtype)  # HF's takes it)
        target = torch.randint(3, config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(2)).to(device)
        with torch.no_grad():
            ours, result = model(features, target), reference(input_features=features, decoder_input_ids=target)
        theirs = result.logits if hasattr(result, "logits") else result.last_hidden_state
        return ours, theirs, torch.ones_like(target, dtype=torch.bool)
    # no 0, 1 or 2: RoBERTa reads a pad token (1) as padding wherever it stands; tokenizers put it only there
    tokens = torch.randint(3, reference.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    tokens = tokens.to(device)
    mask = torch.ones(2, 24, dtype=torch.long, device=device)
    if padded:
        mask[1, 17:] = 0
    padding = mask == 0
    with torch.no_grad():
        if reference.config.is_encoder_decoder:
            target = tokens[:, :11]
            ours = model(tokens, target, src_padding_mask=padding)
            result = reference(input_ids=tokens, attention_mask=mask, decoder_input_ids=target)
            theirs = result.logits if hasattr(result, "logits") else result.last_hidden_state
            return ours, theirs, torch.ones_like(target, dtype=torch.bool)
        ours = model(tokens, padding_mask=padding)
        result = reference(input_ids=tokens, attention_mask=mask, **unsliced(reference))
        if isinstance(ours, tuple):  # logits or hidden states, and the pooled vector
            if hasattr(result, "pooler_output") and pooler_tolerance is not None:
                assert_close(ours[1], result.pooler_output, pooler_tolerance)
            ours = ours[0]
        theirs = result.logits if hasattr(result, "logits") else result.last_hidden_state
        return ours, theirs, ~padding


def _contrasted(model, reference, device: str, padded: bool):
    """A contrastive pair's logits over 3 texts (each with its end-of-text id, the third right-padded where
    ``padded``) and 2 pictures: ours and the reference's ``logits_per_text``."""
    text, vision = reference.config.text_config, reference.config.vision_config
    tokens = torch.randint(3, text.vocab_size - 1, (3, 9), generator=torch.Generator().manual_seed(1))
    eos = text.eos_token_id if text.eos_token_id != 2 else text.vocab_size - 1  # (legacy: the highest id)
    for row, end in enumerate((8, 5, 3)):
        tokens[row, end] = min(eos, text.vocab_size - 1)
    mask = torch.ones_like(tokens)
    if padded:
        mask[2, 4:] = 0
    side = vision.image_size
    pixels = torch.randn(2, vision.num_channels, side, side, generator=torch.Generator().manual_seed(2))
    tokens, mask, pixels = tokens.to(device), mask.to(device), pixels.to(device)
    with torch.no_grad():
        ours = model(text=tokens, text_padding_mask=mask == 0, vision=pixels).logits
        theirs = reference(input_ids=tokens, attention_mask=mask, pixel_values=pixels).logits_per_text
    return ours, theirs, torch.ones(theirs.shape, dtype=torch.bool, device=device)


def side_of(value) -> int:
    """One side of a configuration's square size (InternViT's are [height, width])."""
    return value[0] if isinstance(value, (list, tuple)) else value


def image_tokens(config) -> int:
    """The image tokens one picture takes in a vision-language configuration's prompts (Idefics3's: its patches
    less the pixel shuffle's factor²)."""
    vision = config.vision_config
    blocks = getattr(config, "scale_factor", None) or getattr(config, "spatial_merge_size", None) or \
        getattr(vision, "spatial_merge_size", None) or 1
    return getattr(config, "image_seq_length", None) or getattr(config, "mm_tokens_per_image", None) or \
        (side_of(vision.image_size) // side_of(vision.patch_size)) ** 2 // blocks ** 2


def theirs_pictures(reference, ids, pixels, prompt_as_prefix: bool = False) -> dict:
    """Pictures as a vision-language reference takes them: Idefics3's as (prompts, tiles, ...), one tile each; with
    Gemma 3's ``token_type_ids``, which its processor gives (1 at image tokens: they see one another), or
    PaliGemma's (0 in the prefix, which sees itself: the whole prompt where ``prompt_as_prefix``, as generation
    reads it; else none of it, as a model given no prefix lengths reads it)."""
    import inspect
    takes = inspect.signature(reference.forward).parameters
    pixels = pixels[:, None] if "pixel_attention_mask" in takes else pixels
    types = {"token_type_ids": (ids == reference.config.image_token_id).long()} if "token_type_ids" in takes else {}
    if reference.config.model_type == "paligemma":
        types = {"token_type_ids": torch.zeros_like(ids) if prompt_as_prefix else torch.ones_like(ids)}
    # (Pixtral's encoder reads each picture's size, which its processor gives)
    pixtral = reference.config.vision_config.model_type == "pixtral"
    sizes = {"image_sizes": torch.tensor([pixels.shape[-2:]] * len(pixels))} if pixtral else {}
    if "image_grid_thw" in takes:  # Qwen2.5-VL's: its processor's flattened patches, their grid, the image tokens
        from test_vision_towers import qwen_patches
        vision = reference.config.vision_config
        rows, columns = pixels.shape[-2] // vision.patch_size, pixels.shape[-1] // vision.patch_size
        return {"pixel_values": torch.cat([qwen_patches(p, vision.patch_size, vision.spatial_merge_size,
                                                        vision.temporal_patch_size) for p in pixels.cpu()]
                                          ).to(pixels.device),
                "image_grid_thw": torch.tensor([[1, rows, columns]] * len(pixels), device=pixels.device),
                "mm_token_type_ids": (ids == reference.config.image_token_id).int()}
    return {"pixel_values": pixels, **types, **sizes}


def _pictured(reference, extra: int, start: int, seed: int, size: tuple[int, int] | None = None):
    """Two prompts holding one picture's image tokens from ``start`` on and ``extra`` other tokens, and two
    pictures, for a vision-language reference; ``size``: the pictures' height and width (of a family reading any
    size), else its square ``image_size``."""
    config = reference.config
    text, vision = config.text_config, config.vision_config
    height, width = size or (side_of(vision.image_size), side_of(vision.image_size))
    count = image_tokens(config)
    if size is not None:  # a grid of merged blocks of patches
        block = vision.patch_size * (getattr(config, "spatial_merge_size", None) or vision.spatial_merge_size)
        count = (height // block) * (width // block)
    ids = torch.randint(3, text.vocab_size, (2, count + extra), generator=torch.Generator().manual_seed(seed))
    ids[ids == config.image_token_id] = 3
    if hasattr(config, "spatial_merge_size"):  # Mistral 3's processor ends each row of image tokens with a break
        columns = round(count ** 0.5) if size is None else width // block
        rows = torch.full((count // columns, columns + 1), config.image_token_id)
        rows[:, -1] = config.image_token_id - 1
        ids[:, start:start + rows.numel()] = rows.flatten()
    else:
        ids[:, start:start + count] = config.image_token_id
    channels = getattr(vision, "num_channels", None) or vision.in_channels
    pixels = torch.randn(2, channels, height, width, generator=torch.Generator().manual_seed(seed + 1))
    return ids, pixels


def _connected(model, reference, device: str, padded: bool):
    """A vision-language model's logits over two prompts holding a picture's image tokens, the second
    right-padded where ``padded``: ours and the reference's."""
    ids, pixels = _pictured(reference, 8, 2, seed=1)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, -3:] = 0
    ids, mask, pixels = ids.to(device), mask.to(device), pixels.to(device)
    with torch.no_grad():
        ours = model(text=ids, text_padding_mask=mask == 0, vision=pixels)
        theirs = reference(input_ids=ids, attention_mask=mask, **theirs_pictures(reference, ids, pixels)).logits
    return ours, theirs, mask.bool()


def unsliced(reference) -> dict:
    """Arguments the reference needs to run at all: transformers 5.24's Gemma 4 with layers sharing keys and values
    but no per-layer embeddings slices the per-layer inputs it does not have before its shared layers (a
    TypeError); asking for the hidden states takes its unsliced path, which computes the same logits."""
    config = reference.config
    shares = getattr(config, "num_kv_shared_layers", 0) and not getattr(config, "hidden_size_per_layer_input", 1)
    return {"output_hidden_states": True} if shares else {}


def greedy(model, reference, new: int = 6) -> list[list[int]]:
    """Greedy continuations of two prompts, the second left-padded (a decoder's), or greedy outputs for two source
    sentences, the second padded (an encoder-decoder's), by tfspec's cached decoding or by Hugging Face's
    ``generate`` when ``model`` is the reference."""
    from tfspec.run.decoding import Continuation, sample
    if reference.main_input_name == "input_features":  # spectrograms: Whisper's own generate (it returns no start)
        config = reference.config
        features = torch.randn(2, config.num_mel_bins, 2 * config.max_source_positions,
                               generator=torch.Generator().manual_seed(3))
        if model is reference:
            with torch.no_grad():
                return reference.generate(input_features=features, max_new_tokens=new, min_new_tokens=new,
                                          do_sample=False, eos_token_id=None).tolist()
        return sample(Continuation(model, features), torch.full((2, 1), config.decoder_start_token_id), max_new=new)
    if hasattr(reference.config, "image_token_id"):  # a picture in each prompt, the second left-padded
        ids, pixels = _pictured(reference, 6, 3, seed=2)
        mask = torch.ones_like(ids)
        mask[1, :2] = 0
        if model is reference:
            with torch.no_grad():
                out = reference.generate(ids, attention_mask=mask, max_new_tokens=new,
                                         **theirs_pictures(reference, ids, pixels, prompt_as_prefix=True),
                                         min_new_tokens=new, do_sample=False, pad_token_id=0, eos_token_id=None)
            return out[:, ids.shape[1]:].tolist()
        return sample(Continuation.of(model, vision=pixels, prompt_padding_mask=mask == 0), ids, max_new=new)
    ids = torch.randint(3, 90, (2, 7), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    encoder_decoder = reference.config.is_encoder_decoder
    if encoder_decoder:
        mask[1, 5:] = 0
    else:
        mask[1, :3] = 0
    if model is reference:
        with torch.no_grad():
            out = reference.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                     do_sample=False, pad_token_id=0, eos_token_id=None, **unsliced(reference))
            out = out.sequences if hasattr(out, "sequences") else out
        return out[:, 1:].tolist() if encoder_decoder else out[:, ids.shape[1]:].tolist()
    if encoder_decoder:
        start = torch.full((2, 1), reference.config.decoder_start_token_id)
        steps = Continuation(model, ids, src_padding_mask=mask == 0)
        return sample(steps, start, max_new=new)
    return sample(Continuation(model, prompt_padding_mask=mask == 0), ids, max_new=new)


@pytest.mark.parametrize("cls, size", [
    ("Qwen2_5_VLForConditionalGeneration", (8, 20)),  # wider than the spec's 12 × 12 pictures, and not square
    ("Qwen2_5_VLForConditionalGeneration", (16, 12)),  # taller: its tiles partial at the bottom
    ("Qwen2VLForConditionalGeneration", (8, 20)),  # (its vision layers over the whole picture)
    ("Mistral3ForConditionalGeneration", (8, 16)),  # (Pixtral's rotary table holds image_size // patch a side)
    ("Mistral3ForConditionalGeneration", (16, 8)),
])
def test_pictures_of_any_size_are_read_as_hugging_face_reads_them(tmp_path, cls, size):
    """Qwen2.5-VL and Mistral 3 read pictures of any size (Hugging Face's ``image_grid_thw``, ``image_sizes``):
    each picture's own grid for its 2-D positions, tiles and merged blocks, and M-RoPE's numbering by its longer
    side; the logits on a plain and a right-padded batch, and greedy generation, as Hugging Face's."""
    directory, reference = saved(tmp_path, cls)
    model = tfspec.from_pretrained(directory)
    ids, pixels = _pictured(reference, 8, 2, seed=1, size=size)
    for padded in (False, True):
        mask = torch.ones_like(ids)
        mask[1, -3:] = 0 if padded else 1
        with torch.no_grad():
            ours = model(text=ids, text_padding_mask=mask == 0, vision=pixels)
            theirs = reference(input_ids=ids, attention_mask=mask, **theirs_pictures(reference, ids, pixels)).logits
        assert_close(ours[mask.bool()], theirs[mask.bool()], TOL, msg=padded)
    from tfspec.run.decoding import Continuation, sample
    ids, pixels = _pictured(reference, 6, 3, seed=2, size=size)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    with torch.no_grad():
        out = reference.generate(ids, attention_mask=mask, **theirs_pictures(reference, ids, pixels), max_new_tokens=6,
                                 min_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    expected = out[:, ids.shape[1]:].tolist()
    assert len({t for row in expected for t in row}) >= 2
    assert sample(Continuation.of(model, vision=pixels, prompt_padding_mask=mask == 0), ids, max_new=6) == expected


def test_pictures_of_several_sizes_in_one_batch_are_read_as_hugging_face_reads_them(tmp_path):
    """Qwen2.5-VL's batch of pictures of three sizes (Hugging Face's ``image_grid_thw`` of three rows), the first
    prompt holding two of them and the second one: a list of batches, one per size, in the order their image
    tokens stand; the logits on a plain and a right-padded batch, and greedy generation after a left-padded
    prompt, as Hugging Face's."""
    from test_vision_towers import qwen_patches
    from tfspec.run.decoding import Continuation, sample
    directory, reference = saved(tmp_path, "Qwen2_5_VLForConditionalGeneration")
    model = tfspec.from_pretrained(directory)
    generator = torch.Generator().manual_seed(5)
    sizes = [(8, 20), (4, 8), (16, 12)]  # 2 × 5, 1 × 2 and 4 × 3 merged blocks of 2 × 2 patches of 2 pixels
    pictures = [torch.randn(1, 3, h, w, generator=generator) for h, w in sizes]
    ids = torch.randint(3, 80, (2, 30), generator=generator)
    for row, start, (h, w) in ((0, 1, sizes[0]), (0, 15, sizes[1]), (1, 3, sizes[2])):
        count = h * w // 16
        ids[row, start], ids[row, start + 1:start + 1 + count], ids[row, start + 1 + count] = 87, 89, 88
    theirs_pictures = {"pixel_values": torch.cat([qwen_patches(p[0], 2, 2) for p in pictures]),
                       "image_grid_thw": torch.tensor([[1, h // 2, w // 2] for h, w in sizes]),
                       "mm_token_type_ids": (ids == 89).int()}
    for padded in (False, True):
        mask = torch.ones_like(ids)
        mask[1, -3:] = 0 if padded else 1
        with torch.no_grad():
            ours = model(text=ids, text_padding_mask=mask == 0, vision=pictures)
            theirs = reference(input_ids=ids, attention_mask=mask, **theirs_pictures).logits
        assert_close(ours[mask.bool()], theirs[mask.bool()], TOL, msg=padded)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    with torch.no_grad():
        out = reference.generate(ids, attention_mask=mask, **theirs_pictures, max_new_tokens=6, min_new_tokens=6,
                                 do_sample=False, pad_token_id=0, eos_token_id=None)
    expected = out[:, ids.shape[1]:].tolist()
    assert len({t for row in expected for t in row}) >= 2
    for use_cache in (True, False):
        steps = Continuation.of(model, vision=pictures, prompt_padding_mask=mask == 0, use_cache=use_cache)
        assert sample(steps, ids, max_new=6) == expected
    short = ids.clone()
    short[1, 4:6] = 3  # the third picture's first two image tokens made text
    with pytest.raises(ValueError, match=r"the prompt's rows hold \[12, 10\] image tokens \(89\), but the pictures "
                                         r"give \[10, 2, 12\] vectors, in order along the rows"):
        sample(Continuation.of(model, vision=pictures), short, max_new=1)
    with pytest.raises(ValueError, match="text holds 22 image tokens \\(89\\), but vision gives 3 examples of 10, 2, "
                                         "12 vectors: 24 in all"):
        model(text=short, vision=pictures)


def _processed(cls: str, config, images: list) -> tuple[dict, list[list[int]]]:
    """Hugging Face's image processor of a vision-language family (built here, offline) on ``images``, and each
    picture's image tokens as its processor writes them in a prompt (Qwen2.5-VL's between a vision start and end
    token, Mistral 3's each row of blocks ended by a break)."""
    vision = config.vision_config
    if cls == "InternVLForConditionalGeneration":  # GotOcr2's: each picture cut into crops and a thumbnail, each a
        side = side_of(vision.image_size)         # picture of the tower's size with its own image tokens
        outputs = T.GotOcr2ImageProcessor(size={"height": side, "width": side}, crop_to_patches=True,
                                          max_patches=3)(images, return_tensors="pt")
        return outputs, [[config.image_token_id] * (image_tokens(config) * n) for n in outputs["num_patches"].tolist()]
    if cls == "PaliGemmaForConditionalGeneration":  # SigLIP's: each picture resized to the tower's square
        side = vision.image_size
        outputs = T.SiglipImageProcessor(size={"height": side, "width": side})(images, return_tensors="pt")
        return outputs, [[config.image_token_id] * image_tokens(config)] * len(images)
    if cls == "LlavaForConditionalGeneration":
        side = vision.image_size
        outputs = T.CLIPImageProcessor(size={"shortest_edge": side},
                                       crop_size={"height": side, "width": side})(images, return_tensors="pt")
        return outputs, [[config.image_token_id] * image_tokens(config)] * len(images)
    if cls == "Idefics3ForConditionalGeneration":  # each picture split into tiles and a global view
        side = vision.image_size
        outputs = T.Idefics3ImageProcessor(size={"longest_edge": 2 * side}, max_image_size={"longest_edge": side})(
            [[image] for image in images], return_tensors="pt")
        tiles = (outputs["pixel_values"] != 0).flatten(2).any(dim=-1).sum(dim=1).tolist()
        return outputs, [[config.image_token_id] * (image_tokens(config) * n) for n in tiles]
    if cls in ("Qwen2_5_VLForConditionalGeneration", "Qwen2VLForConditionalGeneration"):
        outputs = T.Qwen2VLImageProcessor(patch_size=vision.patch_size, merge_size=vision.spatial_merge_size,
                                                     temporal_patch_size=vision.temporal_patch_size, min_pixels=16,
                                                     max_pixels=400)(images, return_tensors="pt")
        counts = [int(g.prod()) // vision.spatial_merge_size ** 2 for g in outputs["image_grid_thw"]]
        return outputs, [[config.vision_start_token_id] + [config.image_token_id] * n + [config.vision_end_token_id]
                         for n in counts]
    block = vision.patch_size * config.spatial_merge_size  # Mistral 3: Pixtral's processor, its longest edge
    outputs = T.PixtralImageProcessor(patch_size=vision.patch_size,
                                                 size={"longest_edge": vision.image_size})(images, return_tensors="pt")
    return outputs, [([config.image_token_index] * (w // block) + [config.image_token_index - 1]) * (h // block)
                     for h, w in outputs["image_sizes"].tolist()]


@pytest.mark.parametrize("cls", ["LlavaForConditionalGeneration", "Idefics3ForConditionalGeneration",
                                 "Qwen2_5_VLForConditionalGeneration", "Qwen2VLForConditionalGeneration",
                                 "Mistral3ForConditionalGeneration", "PaliGemmaForConditionalGeneration",
                                 "InternVLForConditionalGeneration"])
def test_the_processors_pictures_are_read_as_hugging_face_reads_them(tmp_path, cls):
    """The processors stay Hugging Face's: two pictures of different sizes (9 × 21 and 16 × 12 pixels) through the
    family's image processor (resized, normalised; Idefics3's cut into 3 and 5 tiles, Qwen2.5-VL's flattened into
    patches, Pixtral's padded to one size, InternVL's cut into crops and a thumbnail), ``tfspec.interop.pictures``
    making the compiled model's ``vision=`` input of its outputs; the logits as the reference's on the processor's
    outputs, each prompt holding its picture's image tokens."""
    import numpy as np
    from PIL import Image

    directory, reference = saved(tmp_path, cls)
    model = tfspec.from_pretrained(directory)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in ((9, 21), (16, 12))]
    outputs, tokens = _processed(cls, reference.config, images)
    length = max(map(len, tokens)) + 5
    ids = torch.randint(3, 80, (2, length), generator=torch.Generator().manual_seed(6))
    for row, picture in enumerate(tokens):
        ids[row, 1:1 + len(picture)] = torch.tensor(picture)
    theirs_inputs = {k: v for k, v in outputs.items()
                     if k in ("pixel_values", "image_grid_thw", "image_sizes", "pixel_attention_mask")}
    if "image_grid_thw" in outputs:  # (Qwen's)
        theirs_inputs["mm_token_type_ids"] = (ids == reference.config.image_token_id).int()
    if reference.config.model_type == "paligemma":  # its answer's type: causal, as ours without prefix lengths
        theirs_inputs["token_type_ids"] = torch.ones_like(ids)
    with torch.no_grad():
        theirs = reference(input_ids=ids, **theirs_inputs).logits
        ours = model(text=ids, vision=tfspec.interop.pictures(directory, outputs))
    assert_close(ours, theirs, TOL)


@pytest.mark.parametrize("cls, changes, why", [
    ("Qwen2VLForConditionalGeneration", [("let vision_mlp_ratio = 2", "let vision_mlp_ratio = 2.5")],
     "its vision feed-forward is 80 wide, not a whole multiple of the tower's width 32 (mlp_ratio)"),
    ("InternVLForConditionalGeneration", [("gain(", ""), (", init=vision_layer_scale)", "")],
     "its vision layers' branches are not scaled per channel (gain(...)), as InternViT's are"),
])
def test_a_vision_language_family_refuses_a_tower_it_does_not_describe_saying_why(cls, changes, why):
    """Export asks each vision-language family in turn; one whose vision tower differs refuses it in a sentence
    (a fact its fields read), not a traceback."""
    from tfspec.interop.families import family_of
    text = changed = import_config(CONFIGS[cls])
    for old, new in changes:
        assert old in changed
        changed = changed.replace(old, new)
    with pytest.raises(InteropError, match=re.escape(why)), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a let the changed spec no longer reads)
        family_of(CONFIGS[cls]["model_type"]).hf_config(tfspec.parse(changed))
    assert text != changed


@pytest.mark.parametrize("text", [
    {},  # PaliGemma 2's Gemma 2, its sliding layers' window (4) shorter than the prefixes
    {"text_config": example("gemma", num_key_value_heads=1, head_dim=8, tie_word_embeddings=True)},  # PaliGemma's
], ids=["gemma2", "gemma"])
def test_paligemmas_pictures_and_prompt_see_one_another_and_its_answer_is_causal(tmp_path, text):
    """PaliGemma's prefix-LM mask: what its processor marks ``token_type_ids`` 0 (the pictures and the prompt) sees
    itself whole, the answer after it (1) is causal (in a sliding layer, within its window); the compiled model
    reads each row's prefix length (``text_prefix_lengths``). The logits over rows whose prefixes differ in length,
    plain and right-padded, are Hugging Face's, and differ from a causal reading's."""
    directory, reference = saved(tmp_path, "PaliGemmaForConditionalGeneration", **text)
    model = tfspec.from_pretrained(directory)
    ids, pixels = _pictured(reference, 8, 0, seed=4)
    prefix = torch.tensor([1, 4]) + image_tokens(reference.config)
    types = (torch.arange(ids.shape[1]) >= prefix[:, None]).long()
    for padded in (False, True):
        mask = torch.ones_like(ids)
        mask[1, -2:] = 0 if padded else 1
        with torch.no_grad():
            ours = model(text=ids, text_padding_mask=mask == 0, text_prefix_lengths=prefix, vision=pixels)
            theirs = reference(input_ids=ids, attention_mask=mask, pixel_values=pixels, token_type_ids=types).logits
        assert_close(ours[mask.bool()], theirs[mask.bool()], TOL, msg=padded)
    with torch.no_grad():
        causal = model(text=ids, text_padding_mask=mask == 0, vision=pixels)
    assert (causal - ours)[mask.bool()].abs().max() > 1e-3 * theirs.abs().max()


def test_a_processors_outputs_that_are_not_pictures_are_refused_saying_why(tmp_path):
    directory, reference = saved(tmp_path, "Qwen2_5_VLForConditionalGeneration")
    with pytest.raises(ValueError, match="hold no pixel_values"):
        tfspec.interop.pictures(directory, {"input_ids": torch.zeros(1, 3)})
    with pytest.raises(ValueError, match="come with their image_grid_thw"):
        tfspec.interop.pictures(directory, {"pixel_values": torch.zeros(4, 24)})
    with pytest.raises(ValueError, match="a video, which tfspec does not read"):
        tfspec.interop.pictures(directory, {"pixel_values": torch.zeros(8, 24),
                                            "image_grid_thw": torch.tensor([[2, 2, 2]])})
    with pytest.raises(ValueError, match=r"pixel_values \(5, 24\) are not the patches of image_grid_thw"):
        tfspec.interop.pictures(directory, {"pixel_values": torch.zeros(5, 24),
                                            "image_grid_thw": torch.tensor([[1, 2, 2]])})
    with pytest.raises(InteropError, match="reads no pictures"):
        tfspec.interop.pictures(saved(tmp_path, "LlamaForCausalLM")[0], {"pixel_values": torch.zeros(1, 3, 4, 4)})


def test_a_vision_tower_numbering_one_grid_refuses_pictures_of_another_size(tmp_path):
    """LLaVA's CLIP tower adds a learned table of its grid's positions: a picture of another size is a ValueError
    naming the argument and the size it takes; Qwen2.5-VL's takes it but for sides of whole patches."""
    model = tfspec.from_pretrained(saved(tmp_path, "LlavaForConditionalGeneration")[0])
    vision = model.towers["vision"]
    side = vision.embeddings["image"].image
    with pytest.raises(ValueError, match=rf"pixel_values must be shaped \(batch, 3, {side}, {side}\)"):
        model(text=torch.zeros(1, 4, dtype=torch.long), vision=torch.randn(1, 3, side, 2 * side))
    qwen = tfspec.from_pretrained(saved(tmp_path, "Qwen2_5_VLForConditionalGeneration")[0])
    with pytest.raises(ValueError, match=r"pixel_values must be pictures whose sides are whole 2-pixel patches; "
                                         r"got 12 × 13 pixels"):
        qwen.towers["vision"](torch.randn(1, 3, 12, 13))
    with pytest.raises(ValueError, match=r"pixel_shuffle\(2\) reads a grid of whole 2 × 2 blocks; got 18 vectors 6 a "
                                         "row"):
        qwen(text=torch.zeros(1, 4, dtype=torch.long), vision=torch.randn(1, 3, 6, 12))


@pytest.mark.parametrize("cls", list(CONFIGS))
def test_an_imported_directory_computes_what_hugging_face_computes_and_exports_back(tmp_path, cls):
    """Logits equal to the Hugging Face model's on a plain and a padded batch, greedy generation equal to its
    generate's; the import's text checks; export gives back the model (``exports_back``)."""
    directory, reference = saved(tmp_path, cls)
    model = tfspec.from_pretrained(directory)
    for padded in (False, True):
        ours, theirs, real = outputs(model, reference, cls, padded=padded)
        assert ours.shape == theirs.shape
        assert_close(ours[real], theirs[real], TOL, msg=padded)
    generates = getattr(model, "head", None) is not None and model.spec.decoder is not None or \
        bool(getattr(model, "connectors", None))  # (a vision-language model's text tower)
    if generates and not cls.startswith("T5"):  # T5: untied, below
        expected = greedy(reference, reference)
        if not reference.config.is_encoder_decoder:  # a tiny tied encoder-decoder repeats its start token
            assert len({t for row in expected for t in row}) >= 2  # a real continuation, not one token repeated
        assert greedy(model, reference) == expected
    exports_back(tmp_path, cls, reference, model)
    text = import_config(directory)
    assert text.startswith(f"# Imported by tfspec from a Hugging Face {cls} configuration")
    assert "\nlet " in text and tfspec.parse(text).parameter_count() == sum(p.numel() for p in model.parameters())


def test_roberta_positions_count_real_tokens_of_a_left_padded_batch(tmp_path):
    """RoBERTa's positions start after its padding row and skip pads: a left-padded row computes what it
    computes alone (and what Hugging Face computes, which finds the pads by their token id)."""
    directory, reference = saved(tmp_path, "RobertaForMaskedLM")
    model = tfspec.from_pretrained(directory)
    tokens = torch.randint(3, 90, (2, 12), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(tokens)
    mask[1, :5] = 0
    tokens[1, :5] = reference.config.pad_token_id
    with torch.no_grad():
        ours = model(tokens, padding_mask=mask == 0)
        theirs = reference(input_ids=tokens, attention_mask=mask).logits
        alone = model(tokens[1:, 5:])
    real = mask.bool()
    assert_close(ours[real], theirs[real], TOL)
    assert_close(ours[1, 5:], alone[0], TOL)


def test_a_t5_checkpoint_with_its_own_head_imports_untied(tmp_path):
    directory, reference = saved(tmp_path, "T5ForConditionalGeneration", untie=True)
    text = import_config(directory)
    assert "head linear(vocab) bias=false" in text and "scale=" not in text.split("head linear")[1]
    model = tfspec.from_pretrained(directory)
    ours, theirs, real = outputs(model, reference, "T5ForConditionalGeneration")
    assert_close(ours[real], theirs[real], TOL)
    expected = greedy(reference, reference)  # (a tied tiny T5 repeats its start token: the untied one is checked)
    assert len({t for row in expected for t in row}) >= 3
    assert greedy(model, reference) == expected


def test_a_t5_with_its_own_head_exports_untied(tmp_path):
    from tfspec.interop.families import export_pretrained
    directory, reference = saved(tmp_path, "T5ForConditionalGeneration", untie=True)
    export_pretrained(tfspec.from_pretrained(directory), tmp_path / "exported")
    back = T.T5ForConditionalGeneration.from_pretrained(tmp_path / "exported")
    assert back.lm_head.weight is not back.shared.weight
    assert torch.equal(back.lm_head.weight, reference.lm_head.weight)


def test_every_configuration_reads_the_same_with_transformers_loaded_without_torch():
    """``tfspec import`` of a configuration loads transformers as if torch were not installed
    (``configurations_without_torch``): every class's configuration gives the spec it gives with torch, a
    dtype among its fields too (transformers keeps it a string there)."""
    import subprocess
    import sys
    from pathlib import Path

    configs = {**CONFIGS, "bfloat16": {**CONFIGS["LlamaForCausalLM"], "torch_dtype": "bfloat16"}}
    probe = ("import json, sys\n"
             "from tfspec.interop.families import configurations_without_torch, import_config\n"
             "configurations_without_torch()\n"
             "specs = {name: import_config(values) for name, values in json.loads(sys.stdin.read()).items()}\n"
             "assert sys.modules.get('torch') is None, 'torch was imported'\n"
             "print(json.dumps(specs))")
    done = subprocess.run([sys.executable, "-c", probe], input=json.dumps(configs), capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {name: import_config(json.loads(json.dumps(values)))
                                       for name, values in configs.items()}


def test_importing_leaves_the_callers_configuration_as_it_was():
    """transformers writes into a configuration's nested dicts (Bamba's rope_parameters gains its rotary
    fraction); import reads a copy, so a dict a caller passes, and reuses, is not changed."""
    import copy
    config = dict(CONFIGS["BambaModel"])
    before = copy.deepcopy(config)
    import_config(config)
    assert config == before


def test_every_family_class_is_covered():
    assert {cls for family in FAMILIES for cls in family.classes} - set(CONFIGS) == {"MistralModel"}


def test_every_family_is_declared_data():
    """Each family's weights are a table and its spec a document; it loads and exports by its base's functions."""
    from tfspec.interop.weights import Stacks, Towers, Weights
    assert [f.name for f in FAMILIES if not isinstance(f.rules, (Weights, Stacks, Towers))] == []
    assert [f.name for f in FAMILIES if f.document is None or {"spec_text", "load", "export"} - f.derived_functions] \
        == []


@pytest.mark.parametrize("cls, tied", [("GPT2LMHeadModel", False), ("BertForMaskedLM", False),
                                       ("BigBirdForMaskedLM", False), ("LlamaForCausalLM", True),
                                       ("GPTNeoXForCausalLM", True)])
def test_the_head_is_tied_or_not_as_the_configuration_says(tmp_path, cls, tied):
    """The other way from the family's usual: imported with the same logits, exported with the same tensors."""
    from tfspec.interop.families import export_pretrained
    directory, reference = saved(tmp_path, cls, tie_word_embeddings=tied)
    assert (reference.get_output_embeddings().weight is reference.get_input_embeddings().weight) == tied
    model = tfspec.from_pretrained(directory)
    assert (model.head.weight is None) == tied
    ours, theirs, real = outputs(model, reference, cls)
    assert_close(ours[real], theirs[real], TOL)
    assert export_pretrained(model, tmp_path / "exported") == cls
    back = getattr(T, cls).from_pretrained(tmp_path / "exported")
    assert back.config.tie_word_embeddings == tied
    theirs_state, back_state = reference.state_dict(), back.state_dict()
    assert theirs_state.keys() == back_state.keys()
    assert all(torch.equal(theirs_state[k], back_state[k]) for k in theirs_state)


def _field_values(table, config) -> dict:
    """Each field's value as the spec reads it (a name's spellings as the one thing they name: swish is silu)."""
    return {f.name: f.names.get(f.value(config), f.value(config)) if f.names else f.value(config)
            for f in table.fields}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_configuration_field_is_accounted_for(family):
    """Each field a transformers configuration of the family has is in the family's table: a setting both
    directions read, a value the spec must have, or one that does not change the computation (with why)."""
    accounted = family.fields.accounted()

    def missing(items, where: str = "") -> list[str]:  # a dict's fields as outer.inner, at any depth
        return [name for key, value in items for name in
                ([] if f"{where}{key}" in accounted else missing(value.items(), f"{where}{key}.")
                 if isinstance(value, dict) else [f"{where}{key}"])]

    for model_type in family.model_types:
        unaccounted = missing(T.AutoConfig.for_model(model_type).to_dict().items())
        assert not unaccounted, f"{model_type}: {unaccounted} are not in {family.module}.FIELDS"
    assert all(reason for reason in family.fields.ignored.values())


# Llama 3.1's scaling and the others Hugging Face's rope_parameters name, each stretching a context of 8
ROPE_SCALINGS = ROPE_EXAMPLES


@pytest.mark.parametrize("scaling", ROPE_SCALINGS)
def test_scaled_rotary_positions_compute_what_hugging_face_computes(tmp_path, scaling):
    """Llama 3.1's rope scaling and the others, over 24 positions of a model trained on 8 (dynamic: whose
    max_position_embeddings is 8): the same logits, and greedy generation equal to HF generate."""
    rope = ROPE_SCALINGS[scaling]
    directory, reference = saved(tmp_path, "LlamaForCausalLM", rope_parameters=rope, max_position_embeddings=8 if
                                 scaling == "dynamic" else 32)
    model = tfspec.from_pretrained(directory)
    assert f"scaling={rope['rope_type']}" in import_config(directory)
    for padded in (False, True):
        ours, theirs, real = outputs(model, reference, "LlamaForCausalLM", padded=padded)
        assert_close(ours[real], theirs[real], TOL)
    unscaled = saved(tmp_path / "unscaled", "LlamaForCausalLM", max_position_embeddings=32,
                     rope_parameters={"rope_type": "default", "rope_theta": rope["rope_theta"]})[1]
    assert (outputs(model, unscaled, "LlamaForCausalLM")[0] - outputs(model, unscaled, "LlamaForCausalLM")[1]
            ).abs().max() > 10 * TOL  # the scaling changes what the model computes
    if scaling != "dynamic":  # dynamic frequencies follow the longest position: recomputed, HF's cache differs
        expected = greedy(reference, reference, new=20)  # past the original context
        assert greedy(model, reference, new=20) == expected


# every field of each table away from its default; a family's table is exercised by its configurations together
EVERY_FIELD = coverage()  # each family module's configurations setting every field of its table


@pytest.mark.parametrize("module", sorted(EVERY_FIELD))
def test_every_field_survives_import_then_export(module):
    """config -> import_config -> compiled spec -> the configuration export writes: every field of the family's
    table reads the same; each one was away from its default in one of the configurations."""
    from tfspec.interop.families import family_of, hf_equivalent, read_config
    table = next(f for f in FAMILIES if f.module == module).fields
    exercised = set()
    for values in EVERY_FIELD[module]:
        config = read_config(values)
        default = _field_values(table, read_config({"model_type": values["model_type"]}))
        before = _field_values(table, config)
        exercised |= {name for name, value in before.items() if value != default[name]}
        default_class = next(iter(family_of(values["model_type"]).classes))
        expected = values.get("architectures", [default_class])[0]  # of families that compute alike, the one read
        ids = {k: v for k, v in values.items() if k.endswith("_token_id")}  # as a run's tokenizer gives them
        _, cls, exported = hf_equivalent(tfspec.compile(import_config(values)), prefer=expected, token_ids=ids)
        assert cls == expected
        after = _field_values(table, exported)
        assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert exercised == {f.name for f in table.fields if not f.constant}


def test_the_imported_spec_reads_well(tmp_path):
    directory, _ = saved(tmp_path, "BertModel")
    text = import_config(directory / "config.json")
    assert "model bertmodel" in text
    assert "let d_model = 32, heads = 4, layers = 2, d_ff = 64, vocab = 90, max_len = 40, eps = 1e-07" in text
    assert "#   num_hidden_layers" in text or "layers = num_hidden_layers" in text  # the fields are cited
    assert "  norm layernorm(eps=eps)" in text and "  feedforward d_ff=d_ff activation=relu" in text
    assert "pooler tanh" in text and "head " not in text.split("pooler tanh")[1]


@pytest.mark.parametrize("config, message", [
    ({"model_type": "rwkv"}, "RWKV mixes positions with a recurrence"),
    ({"model_type": "xlnet"}, "model_type 'xlnet' is not a family tfspec reads"),
    ({"vocab_size": 3}, "no model_type"),
    ({"model_type": "llama", "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 64,
                                               "long_factor": [2.0] * 64, "original_max_position_embeddings": 1024}},
     "rope_parameters.rope_type 'longrope' has no tfspec rope_scaling (supported: default, dynamic, linear, llama3"),
    ({"model_type": "gpt2", "activation_function": "mish"}, "activation_function 'mish' has no tfspec activation"),
    ({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"model_type": "bert", "is_decoder": True}, "is_decoder=True makes the self-attention causal"),
    ({"model_type": "big_bird", "is_decoder": True, "add_cross_attention": True}, "add_cross_attention=True"),
    ({"model_type": "gpt2", "add_cross_attention": True}, "add_cross_attention=True makes GPT-2"),
    ({"model_type": "t5", "is_decoder": True}, "is_decoder=True makes T5's encoder stack causal"),
    ({"model_type": "t5", "feed_forward_proj": "gated-relu"}, "feed_forward_proj 'gated-relu' has no tfspec"),
    ({"model_type": "llama", "hidden_act": "relu"}, "hidden_act 'relu' has no tfspec activation (supported: gelu"),
    ({"model_type": "bert", "hidden_act": "mish"}, "hidden_act 'mish' has no tfspec activation"),
    ({"model_type": "deepseek_v2", "mlp_bias": True}, "mlp_bias=True: DeepSeek-V2's dense and shared networks"),
    ({"model_type": "deepseek_v2", "topk_method": "noaux_tc"}, "topk_method 'noaux_tc' has no tfspec topk_method"),
    ({"model_type": "deepseek_v3", "num_hidden_layers": 2, "first_k_dense_replace": 2},
     "no layer of this configuration is a mixture of experts"),
    ({"model_type": "gemma4_text", "hidden_size_per_layer_input": 0, "num_hidden_layers": 2,
      "num_kv_shared_layers": 2}, "every layer shares keys and values (num_kv_shared_layers=2)"),
    ({"model_type": "gemma4_text", "hidden_size_per_layer_input": 0, "use_bidirectional_attention": "all"},
     "bidirectional attention (all) makes Gemma 4 an encoder"),
    ({"model_type": "vit", "image_size": [32, 24]}, "tfspec's pictures and patches are square"),
    ({"model_type": "siglip", "text_config": {"projection_size": 64}},
     "text_config.projection_size other than vision_config.hidden_size: the two towers' vectors"),
    ({"model_type": "siglip", "vision_config": {"vision_use_head": False}}, "vision_use_head=false"),
    ({"model_type": "clip", "vision_config": {"image_size": [32, 24]}}, "tfspec's pictures are square"),
    ({"model_type": "llava", "vision_feature_layer": [-2, -5]}, "vision_feature_layer naming several layers"),
    ({"model_type": "llava", "vision_config": {"model_type": "siglip_vision_model"}},
     "vision_config of model_type 'siglip_vision_model': tfspec reads LLaVA's CLIP vision tower"),
    ({"model_type": "gemma3"}, "vision_use_head=true: an attention pool Gemma 3 never reads"),
    ({"model_type": "gemma3", "vision_config": {"vision_use_head": False}, "mm_tokens_per_image": 8},
     "mm_tokens_per_image not the square of a divisor of the patches' side"),
    ({"model_type": "gemma3", "vision_config": {"vision_use_head": False}, "text_config": {"sliding_window": 200}},
     "a picture's image tokens (mm_tokens_per_image) as many as the text model's sliding window or more"),
    ({"model_type": "idefics3"}, "scale_factor not dividing the side of the grid of patches"),  # (7 × 7, by 2)
    ({"model_type": "qwen2_5_vl", "vision_config": {"out_hidden_size": 1024}},
     "vision_config.out_hidden_size other than text_config.hidden_size"),
    ({"model_type": "qwen2_5_vl", "vision_config": {"window_size": 100}}, "window_size not a multiple of"),
    ({"model_type": "qwen2_5_vl", "vision_config": {"image_size": 450}}, "image_size not a multiple of"),
    ({"model_type": "qwen2_5_vl", "text_config": {"use_sliding_window": True}}, "use_sliding_window=true"),
    ({"model_type": "qwen2_vl", "vision_config": {"hidden_size": 1024}},
     "vision_config.hidden_size other than text_config.hidden_size"),
    ({"model_type": "paligemma", "projection_dim": 1024}, "projection_dim other than text_config.hidden_size"),
    ({"model_type": "internvl", "vision_feature_select_strategy": "full"},
     "vision_feature_select_strategy 'full': the class token kept beside the patches"),
    ({"model_type": "internvl", "downsample_ratio": 0.3}, "downsample_ratio not one over a whole number"),
    ({"model_type": "internvl", "image_seq_length": 100}, "image_seq_length other than the vectors a picture gives"),
    ({"model_type": "internvl", "vision_config": {"use_mean_pooling": False}},
     "use_mean_pooling=false with vision_feature_layer -1"),
    # (the library's default Mistral 3 configuration ties the whole model's head but not its text model's)
    ({"model_type": "mistral3"}, "tie_word_embeddings other than text_config.tie_word_embeddings"),
    ({"model_type": "mistral3", "tie_word_embeddings": False, "spatial_merge_size": 3},
     "spatial_merge_size not dividing the patches' side"),  # (110 patches a side)
    ({"model_type": "mistral3", "tie_word_embeddings": False, "vision_feature_layer": [-1, -2]},
     "vision_feature_layer naming several layers"),
    ({"model_type": "mistral3", "tie_word_embeddings": False, "vision_config": {"model_type": "siglip_vision_model"}},
     "vision_config of model_type 'siglip_vision_model': tfspec reads Mistral 3's Pixtral vision encoder"),
    ({"model_type": "llava", "image_seq_length": 100}, "image_seq_length other than the vectors a picture gives"),
    ({"model_type": "llava", "text_config": {"model_type": "rwkv"}},
     "text_config: model_type 'rwkv' cannot be imported exactly: RWKV mixes positions"),
    ({"model_type": "llava", "text_config": {"model_type": "llama", "hidden_act": "relu"}},
     "text_config: hidden_act 'relu' has no tfspec activation"),
    ({"model_type": "vit", "pooler_output_size": 64}, "pooler_output_size=64: tfspec's pooler keeps the width"),
    ({"model_type": "bert", "architectures": ["BertForQuestionAnswering"]},
     "BertForQuestionAnswering: not a BERT class tfspec reads (it reads BertForMaskedLM, BertModel)"),
])
def test_what_cannot_be_expressed_is_named(config, message):
    with pytest.raises(InteropError, match=None) as info:
        import_config(config)
    assert message in str(info.value)


def test_bad_directories_are_clear_errors(tmp_path):
    with pytest.raises(InteropError, match="no such file"):
        import_config(tmp_path / "missing")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    with pytest.raises(InteropError, match="not a readable JSON configuration"):
        import_config(tmp_path / "broken")
    (tmp_path / "config_only").mkdir()
    (tmp_path / "config_only" / "config.json").write_text(json.dumps(CONFIGS["GPT2Model"]))
    with pytest.raises(InteropError, match="no weights"):
        tfspec.from_pretrained(tmp_path / "config_only")
    assert "model config_only" in import_config(tmp_path / "config_only")


def test_import_cli_writes_a_spec_that_checks(tfspec_cli, tmp_path):
    directory, _ = saved(tmp_path, "MistralForCausalLM")
    out = tmp_path / "mistral.tfs"
    result = tfspec_cli("import", str(directory), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "mistralforcausallm: decoder-only, 2 layers, d_model 32, 4 heads" in result.stdout
    text = out.read_text()
    assert "mask=causal + window(window) + padding" in text and "let " in text
    checked, printed = tfspec_cli.many(("check", str(out)), ("import", str(directory / "config.json")))
    assert checked.returncode == 0, checked.stderr
    assert printed.returncode == 0 and printed.stdout == text


IMPORT_ERRORS = [
    (["{tmp}/missing"], "{tmp}/missing: no such file", 1),
    (["{tmp}/rwkv.json"], "model_type 'rwkv' cannot be imported exactly", 1),
    (["{tmp}/rwkv.json", "-o", "{tmp}"], "is a directory; name the .tfs file to write", 2),  # checked first
    ([], "import needs a model directory (or its config.json), or --list", 2),
    (["--list", "{tmp}/rwkv.json"], "--list takes no model directory", 2),
]


def test_import_cli_errors(tfspec_cli, tmp_path):
    (tmp_path / "rwkv.json").write_text(json.dumps({"model_type": "rwkv"}))
    results = tfspec_cli.many(*(("import", *[a.format(tmp=tmp_path) for a in args]) for args, _, _ in IMPORT_ERRORS))
    for (args, message, code), result in zip(IMPORT_ERRORS, results):
        assert result.returncode == code, args
        assert message.format(tmp=tmp_path) in result.stderr and "Traceback" not in result.stderr


def exports_back(tmp_path, cls: str, reference, model) -> None:
    """import -> export -> from_pretrained: the same tensors bit for bit, the same computation-relevant
    configuration, the same logits."""
    from tfspec.interop.families import export_pretrained
    exported = tmp_path / "exported"
    # what `tfspec export` of a run passes from its tokenizer
    ids = {k: getattr(reference.config, k, None) for k in ("pad_token_id", "eos_token_id", "decoder_start_token_id")}
    assert export_pretrained(model, exported, token_ids={k: v for k, v in ids.items() if v is not None}) == cls
    back = getattr(T, cls).from_pretrained(  # on the path the reference runs (eager, where it must be)
        exported, attn_implementation=reference.config._attn_implementation).eval()
    theirs, ours = reference.state_dict(), back.state_dict()
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    before, after = reference.config.to_dict(), back.config.to_dict()
    ignored = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype", "output_attentions",
               "output_hidden_states", "return_dict", "use_cache", "max_position_embeddings",
               # GPT-2's is its table's rows (compared as tensors); GPT-J's and MPT's a cache's length
               "n_positions", "max_seq_len", "bos_token_id",
               "eos_token_id", "pad_token_id", "decoder_start_token_id", "sep_token_id", "classifier_dropout",
               "forced_bos_token_id", "forced_eos_token_id",  # token ids, which generation reads
               "_attn_implementation_autoset", "rope_scaling", "rope_theta", "rotary_emb_base", "rotary_pct",
               "partial_rotary_factor", "tie_word_embeddings"}

    generic = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype", "output_attentions",
               "output_hidden_states", "return_dict", "use_cache"}

    def kept(value):  # a nested configuration (MPT's attn_config) without the fields every configuration has
        return {k: kept(v) for k, v in value.items() if k not in generic} if isinstance(value, dict) else value

    differing = {k for k in before.keys() | after.keys() - ignored
                 if k not in ignored and kept(before.get(k)) != kept(after.get(k))}
    assert not differing, {k: (before.get(k), after.get(k)) for k in differing}
    ours_out, theirs_out, real = outputs(model, back, cls)
    assert_close(ours_out[real], theirs_out[real], TOL)


def test_a_spec_without_a_hugging_face_equivalent_is_refused_with_the_reason():
    from tfspec.interop.families import hf_equivalent
    shaw = tfspec.compile("examples/shaw_relative.tfs", overrides={"layers": 1, "d_model": 32, "heads": 4,
                                                                     "d_ff": 32, "vocab": 50})
    with pytest.raises(InteropError) as info:
        hf_equivalent(shaw)
    assert "no Hugging Face equivalent; the closest family, T5" in str(info.value)
    assert "positions are shaw, not T5's relative bias" in str(info.value)
    text = open("examples/gpt2_small.tfs").read().replace("mask=causal", "mask=causal + window(8)")
    gpt2 = tfspec.parse(text, overrides={"d_model": 32, "heads": 4, "layers": 1, "vocab": 90, "context": 40})
    with pytest.raises(InteropError) as info:
        hf_equivalent(tfspec.compile(gpt2))
    assert "the closest family, GPT-2" in str(info.value) and "window(8)" in str(info.value)


@pytest.mark.parametrize("cls, router, why", [
    ("Lfm2MoeForCausalLM", "kind=moe(experts, top) router=sigmoid + correction + renormalize(1e-06) + scale(",
     "its mixture is not LFM2-MoE's: sigmoid scores"),
    ("NemotronHForCausalLM", "router=sigmoid + correction", "its mixture is not Nemotron-H's")])
def test_a_family_refuses_a_mixture_whose_router_is_not_its_own(cls, router, why):
    """A family's router is a declared requirement: the imported spec exports; with a softmax router in place of
    its own it is refused, naming what its router is."""
    from tfspec.interop.families import family_of, hf_equivalent, import_config
    text = import_config(copy.deepcopy(CONFIGS[cls]))
    assert router in text
    hf_equivalent(tfspec.compile(text, seed=0))
    changed = re.sub(r"router=\w+(\([^)]*\))?( \+ \w+(\([^)]*\))?)*", "router=softmax", text)
    assert changed != text
    with pytest.raises(InteropError, match="no Hugging Face equivalent"):
        hf_equivalent(tfspec.compile(changed, seed=0))
    with pytest.raises(InteropError) as info:
        family_of(CONFIGS[cls]["model_type"]).hf_config(tfspec.parse(changed))
    assert why in str(info.value), info.value


def test_siglips_declared_requirements_refuse_a_softmax_head_and_a_vision_tower_not_pooled_by_attention():
    from tfspec.interop.families import family_of, import_config
    text = import_config(copy.deepcopy(CONFIGS["SiglipModel"]))
    assert family_of("siglip").hf_config(tfspec.parse(text))["model_type"] == "siglip"
    head = next(line for line in text.splitlines() if line.startswith("contrastive"))
    for changed, why in [(text.replace(head, "contrastive text vision loss=softmax"), "not the sigmoid one"),
                         (re.sub(r"head pool=attention\([^)]*\)", "head pool=mean", text), "not an attention pool")]:
        assert changed != text
        with pytest.raises(InteropError, match=why):
            family_of("siglip").hf_config(tfspec.parse(changed))


def checkpoint_of(tmp_path, model, text: str, **meta):
    from tfspec.run import checkpoint
    return checkpoint.save(tmp_path / "run", 0, model, text, meta, {})


def test_export_cli_writes_what_transformers_and_torch_load(tfspec_cli, tmp_path):
    directory, reference = saved(tmp_path, "GPTNeoXForCausalLM")
    model = tfspec.from_pretrained(directory)
    checkpoint_of(tmp_path, model, import_config(directory), hf_class="GPTNeoXForCausalLM")
    result = tfspec_cli("export", str(tmp_path / "run"), "--to", "hf", "-o", str(tmp_path / "hf"))
    assert result.returncode == 0, result.stderr
    assert "a Hugging Face GPTNeoXForCausalLM" in result.stdout
    back = T.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ours, theirs, real = outputs(model, back, "GPTNeoXForCausalLM")
    assert_close(ours[real], theirs[real], TOL)

    result = tfspec_cli("export", str(tmp_path / "run"), "--to", "torch", "-o", str(tmp_path / "torch"))
    assert result.returncode == 0, result.stderr
    import importlib.util

    from safetensors.torch import load_file
    loader = importlib.util.spec_from_file_location("exported_model", tmp_path / "torch" / "model.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    standalone = module.Model().eval()
    standalone.load_state_dict(load_file(str(tmp_path / "torch" / "model.safetensors")))
    tokens = torch.randint(0, 90, (2, 12))
    with torch.no_grad():
        assert torch.equal(standalone(tokens), model(tokens))


EXPORT_REFUSALS = [
    (["--to", "hf", "-o", "{tmp}/shaw_hf"], "no Hugging Face equivalent; the closest family, T5"),
    (["--to", "hf", "-o", "{tmp}"], "already exists"),
    (["--to", "onnx", "-o", "{tmp}/onnx"], "ONNX export needs onnx"),
]


def test_export_cli_refusals(tfspec_cli, tmp_path):
    import importlib.util
    onnx = importlib.util.find_spec("onnx") and importlib.util.find_spec("onnxscript")
    cases = [(args, message) for args, message in EXPORT_REFUSALS if not (onnx and "onnx" in args)]
    overrides = {"layers": 1, "d_model": 32, "heads": 4, "d_ff": 32, "vocab": 50}
    shaw = tfspec.compile("examples/shaw_relative.tfs", overrides=overrides)
    text = open("examples/shaw_relative.tfs").read()
    for name, value in overrides.items():
        text = re.sub(rf"\b{name} = [^,\n]+", f"{name} = {value}", text, count=1)
    checkpoint_of(tmp_path, shaw, text)
    results = tfspec_cli.many(*(("export", str(tmp_path / "run"), *[a.format(tmp=tmp_path) for a in args])
                                for args, _ in cases))
    for (args, message), result in zip(cases, results):
        assert result.returncode in (1, 2), args
        assert message in result.stderr and "Traceback" not in result.stderr


def test_import_run_is_a_checkpoint_that_export_reads(tfspec_cli, tmp_path):
    directory, reference = saved(tmp_path, "BertForMaskedLM")
    result = tfspec_cli("import", str(directory), "-o", str(tmp_path / "bert.tfs"), "--run", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "the BertForMaskedLM weights" in result.stdout
    exported, *refusals = tfspec_cli.many(("export", str(tmp_path / "run"), "--to", "hf", "-o", str(tmp_path / "back")),
                                          ("generate", str(tmp_path / "run"), "--input", "hi"),
                                          ("train", "--resume", str(tmp_path / "run")))
    assert exported.returncode == 0, exported.stderr
    back = T.BertForMaskedLM.from_pretrained(tmp_path / "back")
    assert all(torch.equal(back.state_dict()[k], v) for k, v in reference.state_dict().items())
    for refused in refusals:  # the imported weights are no training run: nothing to generate from or resume
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert "imported" in refused.stderr


def test_a_damaged_checkpoint_is_refused_not_filled_with_random_values(tmp_path):
    from safetensors.torch import load_file, save_file
    directory, _ = saved(tmp_path, "GPT2LMHeadModel")
    weights = load_file(str(directory / "model.safetensors"))
    del weights["transformer.h.1.mlp.c_fc.weight"]
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(InteropError, match="does not match its config.json") as info:
        tfspec.from_pretrained(directory)
    assert "transformer.h.1.mlp.c_fc.weight" in str(info.value) or "h.1.mlp.c_fc.weight" in str(info.value)
    (directory / "model.safetensors").write_bytes(b"\x00\x01 not safetensors")
    with pytest.raises(InteropError):
        tfspec.from_pretrained(directory)


def test_import_run_refuses_an_existing_path(tfspec_cli, tmp_path):
    directory, _ = saved(tmp_path, "GPT2Model")
    (tmp_path / "taken.tfs").write_text("x")
    result = tfspec_cli("import", str(directory), "--run", str(tmp_path / "taken.tfs"))
    assert result.returncode == 2 and "already exists" in result.stderr and "Traceback" not in result.stderr


def tiny_tokenizer(directory, vocab_size: int = 80):
    """A character-level BPE of ``vocab_size`` tokens trained here on a few sentences, saved as tokenizer.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    text = ["the quick brown fox jumps over the lazy dog", "attention is all you need",
            "a spec says what a model is", "tokens become vectors and vectors become tokens"] * 20
    tokenizer.train_from_iterator(text, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"]))
    tokenizer.save(str(directory / "tokenizer.json"))
    return tokenizer


def test_an_imported_run_generates_what_hugging_face_generates(tfspec_cli, tmp_path):
    directory, reference = saved(tmp_path, "GPT2LMHeadModel")
    tokenizer = tiny_tokenizer(directory)
    assert tokenizer.get_vocab_size() <= 90
    result = tfspec_cli("import", str(directory), "--run", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "and its tokenizer.json" in result.stdout
    prompt = "the quick brown"
    generated = tfspec_cli("generate", str(tmp_path / "run"), "--input", prompt, "--max-new", "12")
    assert generated.returncode == 0, generated.stderr
    ids = torch.tensor([tokenizer.encode(prompt).ids])
    with torch.no_grad():
        out = reference.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                                 pad_token_id=0)
    expected = tokenizer.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=True)
    assert generated.stdout.splitlines()[-1] == prompt + expected


def test_generate_image_of_an_imported_vision_language_run_says_where_its_processor_is(tfspec_cli, tmp_path):
    """A vision-language directory with a tokenizer.json imports as a run holding it (the text tower's vocabulary);
    ``--image`` prepares a picture as tfspec's digits task draws it, which an imported model never saw: it is
    refused (exit 1), naming what prepares its pictures instead."""
    from PIL import Image
    directory, _ = saved(tmp_path, "LlavaForConditionalGeneration")
    tiny_tokenizer(directory)
    imported = tfspec_cli("import", str(directory), "--run", str(tmp_path / "run"))
    assert imported.returncode == 0 and "and its tokenizer.json" in imported.stdout, imported.stderr
    Image.new("RGB", (12, 12), "white").save(tmp_path / "picture.png")
    result = tfspec_cli("generate", str(tmp_path / "run"), "--image", str(tmp_path / "picture.png"))
    assert result.returncode == 1 and "it reads pictures as its Hugging Face processor prepares them" in result.stderr
    assert "tfspec.interop.pictures(PATH, processor outputs)" in result.stderr and "Traceback" not in result.stderr


def test_a_tokenizer_larger_than_the_embedding_is_refused(tfspec_cli, tmp_path):
    directory, _ = saved(tmp_path, "GPT2LMHeadModel", vocab_size=40)
    tiny_tokenizer(directory, vocab_size=80)
    result = tfspec_cli("import", str(directory), "--run", str(tmp_path / "run"))
    assert result.returncode == 1 and "tokens, but the model's embedding has 40 rows" in result.stderr


def test_a_bad_output_is_refused_before_the_run_is_written(tfspec_cli, tmp_path):
    directory, _ = saved(tmp_path, "GPT2Model")
    result = tfspec_cli("import", str(directory), "-o", str(tmp_path), "--run", str(tmp_path / "run"))
    assert result.returncode == 2 and "is a directory" in result.stderr
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- the whole life of an imported model
LIFECYCLE = ["BertForMaskedLM", "GPT2LMHeadModel", "LlamaForCausalLM", "MistralForCausalLM", "GPTNeoXForCausalLM",
             "T5ForConditionalGeneration", "BigBirdForMaskedLM", "MarianMTModel"]
# the tokenizer's special ids: <pad> 0 (Marian's decoder starts from it), </s> 1; a vocabulary of the tokenizer's
# words alone, so that what it translates into is words
LIFECYCLE_IDS = {"MarianMTModel": dict(pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, vocab_size=24,
                                       forced_eos_token_id=1,  # generate forces the end token last
                                       decoder_vocab_size=24)}
WORDS = "the quick brown fox jumps over the lazy dog while attention is all you need and a spec says what it is"


def lifecycle_tokenizer(directory, encoder_decoder: bool):
    """A word-level tokenizer whose first ids are <pad> (0), </s> (1), [UNK], [MASK] — the ids the tiny
    configurations name — and, for T5, a post-processor that ends each input with </s> as T5's does."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    specials = ["<pad>", "</s>", "[UNK]", "[MASK]"]
    vocab = {w: i for i, w in enumerate(specials + sorted(set(WORDS.split())))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(specials)
    if encoder_decoder:
        tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    from tokenizers import decoders
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer.save(str(directory / "tokenizer.json"))
    return tokenizer


def cli(capsys, *args) -> str:
    """The CLI in this process (faster than a subprocess for a chain of commands); its standard output."""
    from tfspec.cli import main
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize("cls", LIFECYCLE)
def test_import_generate_fine_tune_export_for_every_family(tmp_path, capsys, cls):
    from tfspec.run import checkpoint
    directory, reference = saved(tmp_path, cls, **LIFECYCLE_IDS.get(cls, {}))
    encoder_decoder = reference.config.is_encoder_decoder
    tokenizer = lifecycle_tokenizer(directory, encoder_decoder)
    cli(capsys, "import", directory, "--run", tmp_path / "imported")
    # Marian's frozen sinusoid tables are computed here; its final_logits_bias, a buffer there, is the head's bias
    count = sum(p.numel() for p in reference.parameters() if p.requires_grad)
    count += reference.final_logits_bias.numel() if hasattr(reference, "final_logits_bias") else 0
    parameters = f"{count:,} parameters"
    assert parameters in cli(capsys, "check", tmp_path / "imported")  # a run is read as the spec of its weights

    prompt = "the quick brown fox"
    if cls.endswith("MaskedLM"):  # an encoder-only model has no decoder to generate with
        data = tmp_path / "text.txt"
        data.write_text((WORDS + " ") * 30)
    else:
        out = cli(capsys, "generate", tmp_path / "imported", "--input", prompt, "--max-new", "6").splitlines()[-1]
        ids = torch.tensor([tokenizer.encode(prompt).ids])
        with torch.no_grad():
            if encoder_decoder:  # greedy decoding from the start token to the end token, as generate does
                expected = reference.generate(ids, max_new_tokens=6, do_sample=False)[0]
            else:
                expected = reference.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                                              do_sample=False, pad_token_id=0)[0, ids.shape[1]:]
        text = tokenizer.decode(expected.tolist(), skip_special_tokens=True)
        assert out == (f"  {prompt} -> {text}" if encoder_decoder else prompt + text)
        if cls in LIFECYCLE_IDS:  # the translation is words of the vocabulary, not an empty string
            assert text.split() and set(text.split()) <= set(WORDS.split())
        data = tmp_path / ("pairs.tsv" if encoder_decoder else "text.txt")
        words = WORDS.split()
        data.write_text("".join(f"{' '.join(words[i:i + 3])}\t{' '.join(words[i + 3:i + 5])}\n"
                                for i in range(len(words) - 5)) * 3 if encoder_decoder else (WORDS + " ") * 30)

    before = checkpoint.load(tmp_path / "imported").weights
    cli(capsys, "train", "--init", tmp_path / "imported", "--data", data, "--seq-len", 16, "--steps", 3,
        "--batch", 4, "--eval-size", 4, "--lr", "1e-3", "--warmup", 1, "--no-progress", "--out", tmp_path / "tuned")
    tuned = checkpoint.load(tmp_path / "tuned")
    assert (tuned.path / "tokenizer.json").read_bytes() == (directory / "tokenizer.json").read_bytes()
    assert before.keys() == tuned.weights.keys()
    assert any(not torch.equal(before[k], tuned.weights[k]) for k in before)  # it learned ...
    assert max((before[k] - tuned.weights[k]).abs().max().item() for k in before) < 0.02  # ... from these weights

    cli(capsys, "export", tmp_path / "tuned", "--to", "hf", "-o", tmp_path / "exported")
    exported = getattr(T, cls).from_pretrained(tmp_path / "exported").eval()
    hf_tokenizer = T.AutoTokenizer.from_pretrained(tmp_path / "exported")
    assert hf_tokenizer(prompt).input_ids == tokenizer.encode(prompt).ids
    if encoder_decoder:
        assert exported.config.decoder_start_token_id == 0 and exported.config.eos_token_id == 1
    ours, theirs, real = outputs(tuned.model(), exported, cls)
    assert_close(ours[real], theirs[real], TOL)


@pytest.mark.parametrize("value, shown", [
    ("32", '"32"; transformers expects int'), (32.5, "32.5; transformers expects int"),
    (True, "true; transformers expects int"), ([32], "[32]; transformers expects int"),
    (float("nan"), "NaN, not a number a model can use"), (float("inf"), "infinite, not a number a model can use"),
])
def test_a_configuration_field_of_the_wrong_type_is_one_sentence(tmp_path, capsys, value, shown):
    """transformers' own StrictDataclassFieldValidationError used to end the command in a traceback; JSON's NaN,
    Infinity and 1e400 (read as inf) are refused before transformers sees them. (A size, such as n_embd, is
    tfspec's to read first: tests/test_hostile.py.)"""
    from tfspec.cli import main
    import transformers as T

    config = T.GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=16, vocab_size=50, bos_token_id=0,
                          eos_token_id=0).to_dict()
    config["n_positions"] = value
    text = json.dumps(config)
    if value == float("inf"):
        text = text.replace("Infinity", "1e400")
    (tmp_path / "config.json").write_text(text)
    assert main(["import", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "n_positions is " + shown in err, err


def test_the_coverage_table_is_the_code(tfspec_cli):
    """docs/hf_families.md is what `tfspec import --list` generates from the family table: every family, every
    class it reads, the fields it reads and refuses; the README links it."""
    from pathlib import Path

    from tfspec.interop.coverage import coverage_markdown
    table = coverage_markdown()
    assert Path("docs/hf_families.md").read_text(encoding="utf-8") == table, \
        "regenerate it: tfspec import --list > docs/hf_families.md"
    for family in FAMILIES:
        assert all(cls in table for cls in family.classes)
        assert all(f"`{f.config}`" in table for f in family.fields.fields)
    assert "`rope_parameters.rope_type` = 'default'" in table  # a refusal, stated
    assert "(docs/hf_families.md)" in Path("README.md").read_text(encoding="utf-8")
    listed = tfspec_cli("import", "--list")
    assert listed.returncode == 0 and listed.stdout == table


def test_unilm_starts_from_bert_masked_lm_weights_and_with_a_whole_row_prefix_computes_bert(tmp_path):
    """examples/unilm.tfs has BertForMaskedLM's parameters (UniLM was initialised from BERT-large): copying them
    is refused as an exact import -- the architecture differs -- and done with initialise=True, which warns; with
    every row's prefix its whole length, the prefix-LM is BERT's bidirectional encoder and computes its logits."""
    from tfspec.interop.families.hf_bert import from_hf_bert
    sizes = {"layers": 2, "d_model": 32, "heads": 4, "vocab": 90, "max_len": 40}
    unilm = tfspec.compile("examples/unilm.tfs", overrides=sizes, seed=0).eval()
    _, reference = saved(tmp_path, "BertForMaskedLM", layer_norm_eps=1e-12, intermediate_size=128)
    with pytest.raises(InteropError, match="initialise=True"):
        from_hf_bert(unilm, reference)
    with pytest.warns(UserWarning, match="whose architecture differs:\n.*mask"):
        from_hf_bert(unilm, reference, initialise=True)
    tokens = torch.randint(3, 90, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours = unilm(tokens, prefix_lengths=torch.tensor([12, 12]))
        theirs = reference(input_ids=tokens).logits
        causal = unilm(tokens, prefix_lengths=torch.tensor([0, 0]))
    assert_close(ours, theirs, TOL)
    assert (causal - theirs).abs().max().item() > 1e-3  # a left-to-right LM computes something else


def test_a_kimi_k2_checkpoint_is_read_as_deepseek_v3_with_a_note(tmp_path):
    """Kimi K2's config.json says model_type 'kimi_k2' (which transformers does not know) and architectures
    DeepseekV3ForCausalLM: it imports as DeepSeek-V3, computes what that model computes, says so in the spec, and
    exports as deepseek_v3."""
    from tfspec.interop.families import export_pretrained

    directory, reference = saved(tmp_path, "DeepseekV3ForCausalLM")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "model_type": "kimi_k2",
                                                       "auto_map": {"AutoConfig": "configuration_deepseek.X"}}))
    text = import_config(directory)
    assert "model_type 'kimi_k2'" in text.replace("\n# ", " ") and "read as DeepSeek-V3" in text.replace("\n# ", " ")
    model = tfspec.from_pretrained(directory)
    ours, theirs, real = outputs(model, reference, "DeepseekV3ForCausalLM")
    assert_close(ours[real], theirs[real], TOL)
    exported = tmp_path / "exported"
    assert export_pretrained(model, exported) == "DeepseekV3ForCausalLM"
    assert json.loads((exported / "config.json").read_text())["model_type"] == "deepseek_v3"
    listed = import_config({**config, "model_type": "kimi_k2"})
    assert listed.splitlines()[-1] == text.splitlines()[-1]


def test_no_interop_module_tests_a_variant_by_its_name():
    """Interop asks variants what they are (``Facts.routes``, ``rotates``, ``table_rows``, ``stack_bias``, a kind's
    ``own_pattern``), never their names: a comparison of a choice's ``.name`` with a registered variant's name in
    ``tfspec/interop`` fails here. (Writing a reference's architecture in spec text names them, as it must.)"""
    import re
    from pathlib import Path
    from tfspec.registry import (ACTIVATIONS, ATTENTION_KINDS, ATTENTION_STEPS, CONNECTOR_STEPS, FEEDFORWARD_KINDS,
                                 INPUTS, MASKS, MIXERS, NORMS, POOLS, POSITIONS)
    names = {n for r in (ACTIVATIONS, ATTENTION_KINDS, ATTENTION_STEPS, CONNECTOR_STEPS, FEEDFORWARD_KINDS, INPUTS,
                         MASKS, MIXERS, NORMS, POOLS, POSITIONS) for n in r}
    compared = re.compile(r"\.name\s*(?:==|!=)\s*[\"'](\w+)[\"']|[\"'](\w+)[\"']\s*(?:==|!=)\s*\w+\.name\b"
                          r"|\.name\s+(?:not\s+)?in\s+\(([^)]*)\)")
    found = []
    for path in sorted(Path(tfspec.__file__).parent.joinpath("interop").glob("*.py")):
        for line, text in enumerate(path.read_text().splitlines(), 1):
            for match in compared.finditer(text):
                words = set(re.findall(r"\w+", " ".join(g for g in match.groups() if g)))
                if words & names:
                    found.append(f"{path.name}:{line}: {text.strip()}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("written", ['[0.0, Infinity]', '[0.0, {"__float__": "Infinity"}]'])
def test_an_unbounded_time_step_limit_reads_as_no_bound(tmp_path, written):
    """Mamba-2's configurations write ``time_step_limit`` [0.0, Infinity] (JSON's Infinity, or transformers' tag
    for it): an upper bound that is no bound, read as such, where any other infinity is refused; Nemotron-H's older
    ``mamba_dt_limit`` too."""
    for model_type, field in (("mamba2", "time_step_limit"), ("nemotron_h", "mamba_dt_limit")):
        config = {**CONFIGS["Mamba2ForCausalLM" if model_type == "mamba2" else "NemotronHModel"]}
        text = json.dumps(config)[:-1] + f', "{field}": {written}}}'
        (tmp_path / "config.json").write_text(text)
        assert "mixer mamba2(" in import_config(tmp_path)


def test_older_layer_kind_names_read_as_the_current_ones(tmp_path):
    """Nemotron-H's config.json files written before transformers renamed its layer kinds say "mamba" and
    "attention" (under layer_types or layers_block_type): the same spec as the current names, on every transformers
    version (5.17 refuses them itself); a kind no version knows is one sentence with transformers' reason."""
    current = {**CONFIGS["NemotronHModel"]}
    legacy = {**current, "layer_types": None,
              "layers_block_type": ["mamba" if t == "linear_attention" else "attention" if t == "full_attention"
                                    else t for t in current["layer_types"]]}
    del legacy["layer_types"]
    assert "mamba" in legacy["layers_block_type"] and "attention" in legacy["layers_block_type"]
    assert import_config(legacy) == import_config(current)
    with pytest.raises(InteropError, match=r"cannot read this nemotron_h configuration: .*invalid types: \{'bogus'\}"):
        import_config({**current, "layer_types": ["bogus", *current["layer_types"][1:]]})


def test_whispers_scale_embedding_changes_nothing_hugging_face_computes(tmp_path):
    """Whisper's configuration has ``scale_embedding``, which tfspec ignores: transformers keeps it and never scales
    with it. Should a version start to, this fails and the field must become a setting."""
    _, plain = saved(tmp_path, "WhisperForConditionalGeneration")
    _, scaled = saved(tmp_path / "scaled", "WhisperForConditionalGeneration", scale_embedding=True)
    assert scaled.config.scale_embedding and torch.equal(plain.model.decoder.embed_tokens.weight,
                                                         scaled.model.decoder.embed_tokens.weight)
    features, target = torch.randn(2, 12, 20), torch.randint(3, 90, (2, 5))
    with torch.no_grad():
        logits = [m(input_features=features, decoder_input_ids=target).logits for m in (plain, scaled)]
    assert torch.equal(*logits)


def test_a_clip_checkpoint_from_before_its_end_of_text_id_pools_at_the_highest_id(tmp_path):
    """CLIP's first checkpoints say eos_token_id 2 and pool at each text's highest id (their end-of-text token was
    the vocabulary's last): imported as ``pool=highest_id``, computing Hugging Face's logits, exported back."""
    text = {**CONFIGS["CLIPModel"]["text_config"], "eos_token_id": 2}
    directory, reference = saved(tmp_path, "CLIPModel", text_config=text)
    assert "pool=highest_id" in import_config(directory)
    model = tfspec.from_pretrained(directory)
    ours, theirs, _ = outputs(model, reference, "CLIPModel")
    assert_close(ours, theirs, TOL)
    exports_back(tmp_path, "CLIPModel", reference, model)


def test_a_llava_reads_its_text_model_through_that_models_own_family(tmp_path):
    """LLaVA's text_config may name any family: a tied Qwen2 (biased q, k, v) is written, loaded and exported by
    Qwen2's family, its lets prefixed and citing text_config; the class token kept and the last layer's output
    read, through a projector without biases: Hugging Face's logits and greedy generation, and back bit for bit."""
    qwen2 = dict(model_type="qwen2", vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=40, tie_word_embeddings=True)
    directory, reference = saved(tmp_path, "LlavaForConditionalGeneration", text_config=qwen2, image_seq_length=10,
                                 vision_feature_select_strategy="full", vision_feature_layer=-1,
                                 multimodal_projector_bias=False, projector_hidden_act="relu", tie_word_embeddings=True)
    text = import_config(directory)
    cited = " ".join(line.lstrip("# ") for line in text.split("\n") if line.startswith("#"))
    assert "text_d_model = text_config.hidden_size" in cited and "let text_d_model = 32" in text
    tower = text.split("\ntower text {")[1]
    assert "head tied(tokens)" in tower and "bias=true" in tower  # Qwen2's q, k, v biases
    assert "layer=-1 drop=none {\n  linear text_d_model bias=false\n  activation relu\n" in text
    model = tfspec.from_pretrained(directory)
    for padded in (False, True):
        ours, theirs, real = outputs(model, reference, "LlavaForConditionalGeneration", padded=padded)
        assert_close(ours[real], theirs[real], TOL)
    expected = greedy(reference, reference)
    assert len({t for row in expected for t in row}) >= 2 and greedy(model, reference) == expected
    exports_back(tmp_path, "LlavaForConditionalGeneration", reference, model)


def test_a_llava_checkpoint_is_loaded_only_into_the_spec_its_configuration_describes(tmp_path):
    """Weights are copied only once every fact agrees: a text tower of other kv heads, or a connector reading
    another layer, is refused naming the difference, before any tensor is read."""
    from tfspec.interop.families import family_of
    directory, reference = saved(tmp_path, "LlavaForConditionalGeneration")
    family = family_of("llava")
    text = import_config(directory)
    for before, after, named in (("text_kv_heads = 2,", "text_kv_heads = 4,", "kv"), ("layer=-2", "layer=-3", "layer")):
        other = text.replace(before, after)
        assert other != text
        with pytest.raises(InteropError, match="cannot load LlavaForConditionalGeneration weights") as info:
            family.load(tfspec.compile(other), reference)
        assert named in str(info.value)


def test_a_mistral_3_text_model_without_a_window_exports_as_llamas_and_computes_the_same(tmp_path):
    """Mistral Small 3.1's text model has no sliding window: its text_config exports as a Llama's (as a Mistral
    alone does), which Mistral 3 builds with the same tensors; the logits stay the reference's."""
    from tfspec.interop.families import export_pretrained
    cls = "Mistral3ForConditionalGeneration"
    directory, reference = saved(tmp_path, cls, text_config={**CONFIGS[cls]["text_config"], "sliding_window": None})
    model = tfspec.from_pretrained(directory)
    assert "window(" not in import_config(directory)
    assert export_pretrained(model, tmp_path / "exported") == cls
    back = T.Mistral3ForConditionalGeneration.from_pretrained(tmp_path / "exported").eval()
    assert back.config.text_config.model_type == "llama"
    theirs, ours = reference.state_dict(), back.state_dict()
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    ours_out, theirs_out, real = outputs(model, back, cls)
    assert_close(ours_out[real], theirs_out[real], TOL)
    assert_close(ours_out[real], outputs(model, reference, cls)[1][real], TOL)


def _text_of(cls: str) -> dict:
    return {k: v for k, v in CONFIGS[cls].items() if k != "model_type"}


# multimodal checkpoints whose whole model tfspec does not read yet, each with its text model's configuration, its
# other towers small; the head's tying is the whole model's (tie_word_embeddings at the top, unlike the text's)
TEXT_ALONE = {
    "Gemma4ForConditionalGeneration": lambda: dict(
        model_type="gemma4", tie_word_embeddings=True, text_config={**_text_of("Gemma4ForCausalLM"),
                                                                    "tie_word_embeddings": False},
        vision_config=dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                           num_key_value_heads=2, head_dim=8, global_head_dim=8, patch_size=4)),
    "Llama4ForConditionalGeneration": lambda: dict(
        model_type="llama4", tie_word_embeddings=False, text_config=_text_of("Llama4ForCausalLM"),
        vision_config=dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                           image_size=16, patch_size=4, vision_output_dim=16, projector_input_dim=16,
                           projector_output_dim=16)),
    "Qwen3_5MoeForConditionalGeneration": lambda: dict(
        model_type="qwen3_5_moe", tie_word_embeddings=False, text_config=_text_of("Qwen3_5MoeForCausalLM"),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, patch_size=4,
                           out_hidden_size=32, num_position_embeddings=16)),
    "Qwen3_5ForConditionalGeneration": lambda: dict(
        model_type="qwen3_5", tie_word_embeddings=False, text_config={**_text_of("Qwen3_5ForCausalLM"),
                                                                      "tie_word_embeddings": True},
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=24, num_heads=2, patch_size=4,
                           out_hidden_size=32, num_position_embeddings=16)),
}
# each multimodal class whose text model imports alone, and the class that model exports as
TEXT_CLASSES = {"Gemma3ForConditionalGeneration": "Gemma3ForCausalLM", "LlavaForConditionalGeneration":
                "LlamaForCausalLM", "Mistral3ForConditionalGeneration": "MistralForCausalLM",
                "Qwen2_5_VLForConditionalGeneration": "Qwen2ForCausalLM",
                "Qwen2VLForConditionalGeneration": "Qwen2ForCausalLM", "Gemma4ForConditionalGeneration":
                "Gemma4ForCausalLM", "Llama4ForConditionalGeneration": "Llama4ForCausalLM",
                "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLM",
                "Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeForCausalLM"}


def _saved_whole(tmp_path, cls: str):
    """A tiny random multimodal ``cls`` saved into ``tmp_path/<cls>``: (directory, model)."""
    if cls not in TEXT_ALONE:
        return saved(tmp_path, cls)
    values = TEXT_ALONE[cls]()
    config = T.AutoConfig.for_model(values.pop("model_type"), **values, architectures=[cls])
    config._experts_implementation = "eager"
    torch.manual_seed(0)
    reference = getattr(T, cls)(config).eval()
    with torch.no_grad():  # every weight off its initial value: a norm of exactly 1 hides a misplaced one
        for parameter in reference.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    directory = tmp_path / cls
    reference.save_pretrained(directory)
    return directory, reference


@pytest.mark.parametrize("cls", list(TEXT_CLASSES))
def test_a_multimodal_checkpoints_text_model_imports_alone(tmp_path, cls):
    """``--tower text`` of a multimodal checkpoint imports its text model as the text model's family writes it
    (causal masks: no pictures), computing what the whole model computes on prompts without pictures, and exports as
    the text model's class with the whole model's tensors (its head tied as the whole model ties it)."""
    from tfspec.interop.families import export_pretrained
    directory, reference = _saved_whole(tmp_path, cls)
    text = import_config(directory, tower="text")
    assert "pictures" not in text
    assert f"The text model (text_config) of a Hugging Face {cls}" in " ".join(
        line.lstrip("# ") for line in text.split("\n") if line.startswith("#"))
    model = tfspec.from_pretrained(directory, tower="text")
    ids = torch.randint(3, 86, (2, 12), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    # (transformers 5.24's Llama4ForConditionalGeneration fails on a prompt without pictures, reading the image
    # outputs its text model does not return: its text model, the whole model's own module, answers)
    whole_text = reference.language_model if cls == "Llama4ForConditionalGeneration" else reference
    with torch.no_grad():
        ours, theirs = model(ids, padding_mask=mask == 0), whole_text(input_ids=ids, attention_mask=mask).logits
    assert_close(ours[mask.bool()], theirs[mask.bool()], TOL)
    assert export_pretrained(model, tmp_path / "text") == TEXT_CLASSES[cls]
    alone = getattr(T, TEXT_CLASSES[cls]).from_pretrained(tmp_path / "text").eval()
    assert alone.config.tie_word_embeddings == reference.config.tie_word_embeddings
    whole = reference.state_dict()
    for name, value in alone.state_dict().items():  # each tensor of the text model is the whole model's
        inner = name.split(".", 1)[1] if name.startswith("model.") else name
        assert any(torch.equal(value, whole[k]) for k in whole if k.endswith(inner)), name
    with torch.no_grad():
        assert_close(alone(input_ids=ids, attention_mask=mask).logits[mask.bool()], theirs[mask.bool()], TOL)


def test_a_tower_that_is_no_model_of_its_own_and_a_whole_model_not_read_are_refused_naming_the_way(tmp_path,
                                                                                                 tfspec_cli):
    directory, _ = saved(tmp_path, "Gemma3ForConditionalGeneration")
    with pytest.raises(InteropError, match=re.escape("--tower vision: only tower text (text_config) is a model of "
                                                     "its own")):
        import_config(directory, tower="vision")
    with pytest.raises(InteropError, match="--tower text: a Llama model is one model, not towers"):
        import_config(CONFIGS["LlamaForCausalLM"], tower="text")
    run = tfspec_cli("import", str(directory), "--tower", "text", "--run", str(tmp_path / "run"))
    assert run.returncode == 0 and "the Gemma3ForCausalLM weights" in run.stdout, run.stderr
    whole, _ = _saved_whole(tmp_path, "Qwen3_5ForConditionalGeneration")
    refused = tfspec_cli("import", str(whole))
    assert refused.returncode == 1 and len(refused.stderr.strip().split("\n")) == 1, refused.stderr
    assert "model_type 'qwen3_5' (Qwen3_5ForConditionalGeneration): tfspec does not read Qwen3.5's vision tower yet; " \
           "its text model imports alone with --tower text" in refused.stderr
    with pytest.raises(InteropError, match=re.escape("--tower vision: only tower text (text_config) is a model of "
                                                     "its own in a Qwen3_5ForConditionalGeneration configuration")):
        import_config(whole, tower="vision")


@pytest.mark.parametrize("model_type, closest", [
    ("qwen3_vl", "the closest family tfspec reads, Qwen2.5-VL (qwen2_5_vl), differs: Qwen2.5-VL's towers, but "
                 "DeepStack features"),
    ("kimi_linear", "the closest family tfspec reads, Qwen3-Next (qwen3_next), differs: a hybrid as Qwen3-Next is"),
    ("olmo_hybrid", "the closest by its configuration's fields is Qwen3.5 (qwen3_5_text), whose configuration has"),
    ("llava_next", "the closest by its configuration's fields is LLaVA (llava)"),
    ("lamma", "the closest by name is Llama (llama), which may not be the same architecture"),
    ("no_such_model", "transformers does not know it either"),
])
def test_a_model_type_tfspec_does_not_read_is_refused_in_three_lines_naming_the_closest(tmp_path, tfspec_cli,
                                                                                       model_type, closest):
    """What it is, the closest family tfspec reads and how (what differs where it is known, else the most fields
    in common, else the name), and where the list is; no list of eighty model types."""
    directory = tmp_path / model_type
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": model_type}))
    result = tfspec_cli("import", str(directory))
    lines = result.stderr.strip().split("\n")
    assert result.returncode == 1 and len(lines) == 3 and "Traceback" not in result.stderr, result.stderr
    assert f"model_type '{model_type}' is not a family tfspec reads" in lines[0]
    assert lines[1].strip().startswith(closest), lines[1]
    assert lines[2].strip() == "the families it reads, each with its classes: tfspec import --list"
    assert len(result.stderr.replace(str(directory), "DIR")) < 400  # (the 800-character list is gone)
