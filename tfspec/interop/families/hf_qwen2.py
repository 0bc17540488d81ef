"""Hugging Face ``Qwen2ForCausalLM`` (and its base model) <-> a compiled spec: Llama's (its checkpoint's names,
its weight table) with q/k/v projections biased but not the output, and layers that differ, which the spec writes
as a layer schedule: ``layer_types`` put a sliding window on some layers (``layers 3 { self_attn mask=causal +
padding }``), the stack's own block the most common kind of layer; export reads each layer back into
``layer_types``. Qwen3 and SmolLM3 derive from it (``hf_qwen3``, ``hf_smollm3``).
"""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama
from ..document import Document
from ..fields import Field
from ..writer import causal_masks, schedule
from ..layouts import example

SLIDING, FULL = "sliding_attention", "full_attention"


def _window(config):
    """The sliding window of the layers that slide (None: none does)."""
    window = getattr(config, "sliding_window", None)
    sliding = SLIDING in (getattr(config, "layer_types", None) or [])
    return int(window) if window is not None and sliding and getattr(config, "use_sliding_window", False) else None


def _layer_windows(config) -> list[bool]:
    """Per layer: does it slide?"""
    window = _window(config)
    return [window is not None and t == SLIDING for t in config.layer_types]


def _head_dim(f) -> int | None:
    """head_dim, exported only where it is not hidden_size / num_attention_heads (these configurations have
    no such field by default)."""
    shape = f.geometry("decoder")
    return shape.head_dim if shape.head_dim != shape.width // shape.heads else None


def _max_window_layers(windows: list) -> int | None:
    """Qwen2's other way to say which layers slide, written where it says the same as ``layer_types``: full
    layers first, sliding ones from this index on (None: it does not, and ``layer_types`` alone says it)."""
    first = next((i for i, w in enumerate(windows) if w is not None), None)
    if first is None or any(w is None for w in windows[first:]):
        return None
    return first


SCHEDULE_FIELDS = [
    Field("head_dim", "head_dim", _head_dim, read=hf_llama.written_head_dim),
    Field("window", "sliding_window", lambda f: f.one_window("decoder"), read=_window),
    # which layers slide, as spec_text reads it from these three (a layer schedule, not one setting)
    Field("use_sliding_window", "use_sliding_window", lambda f: f.one_window("decoder") is not None or None,
          read=lambda c: bool(getattr(c, "use_sliding_window", False)), setting=False),
    Field("max_window_layers", "max_window_layers", lambda f: _max_window_layers(f.layer_windows("decoder")),
          read=lambda c: getattr(c, "max_window_layers", None) if _window(c) is not None else None, setting=False),
    Field("layer_types", "layer_types", lambda f: [SLIDING if w is not None else FULL
                                                   for w in f.layer_windows("decoder")],
          read=lambda c: [t if _window(c) is not None else FULL for t in c.layer_types], setting=False),
]

EXAMPLES = {
    "Qwen2ForCausalLM": example("qwen2", num_hidden_layers=4, use_sliding_window=True, sliding_window=6,
                                layer_types=["sliding_attention"] * 3 + ["full_attention"]),
    "Qwen2Model": example("qwen2", num_hidden_layers=3, num_key_value_heads=4, use_sliding_window=True,
                          sliding_window=5, max_window_layers=1),
}


FIELDS = hf_llama.FIELDS.derive(*SCHEDULE_FIELDS, drop={"head_dim", "window", "attention_bias", "mlp_bias",
                                                        "pretraining_tp"})


def layered(s, *, padding: bool, head: bool, attention: dict, feedforward_bias: str = "false",
            ropes: list[bool] | None = None) -> Document:
    """Llama's spec with the ``attention`` and feed-forward bias a family sets, its layers scheduled as they differ:
    a sliding window where the configuration's ``layer_types`` say, rotary positions where ``ropes`` says (every
    layer by default); the stack's own block the most common kind of layer."""
    rotary = hf_llama.rotary(s)

    def masks(slides: bool) -> str:
        return causal_masks(s.window if slides else None, padding)

    ropes = ropes or [True] * s.config.num_hidden_layers
    base, sections = schedule(list(zip(_layer_windows(s.config), ropes)))
    document = (hf_llama.document(s, padding=padding, head=head)
                .change("decoder", "position", rotary if base[1] else "none")
                .change("decoder", "attention", mask=masks(base[0]), **attention)
                .change("decoder", "feedforward", bias=feedforward_bias))
    for layers, (slides, rope) in sections:
        changes = ([f"self_attn mask={masks(slides)}"] if slides != base[0] else []) + \
                  ([f"position {rotary if rope else 'none'}"] if rope != base[1] else [])
        document = document.add("decoder", f"layers {layers} {{ {'; '.join(changes)} }}")
    return document


def document(s, *, padding: bool, head: bool) -> Document:
    """Qwen2's spec: q, k and v biased but not the output."""
    return layered(s, padding=padding, head=head, attention={"bias": "true", "out_bias": "false"})


QWEN2 = hf_llama.LLAMA.derive(
    "Qwen2", ("qwen2",), causal_lm("Qwen2"),
    "Qwen2: Llama's block with biased q/k/v projections; layer_types give some layers a sliding window "
    "(a layer schedule)",
    priority=200, fields=FIELDS, document=document, hf_config=None)
