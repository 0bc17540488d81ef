"""Hugging Face ``LongformerForMaskedLM`` / ``LongformerModel`` <-> a compiled encoder-only spec.

Longformer (Beltagy et al. 2020) is RoBERTa's encoder (``hf_roberta``: positions from
``padding_idx + 1``, counting real tokens) whose self-attention is ``kind=longformer``: a sliding window of
``attention_window`` / 2 keys each side (``mask=window(attention_window // 2 + 1) + padding``), plus the global
tokens of a call -- Hugging Face's ``global_attention_mask``, tfspec's run-time input ``global_tokens`` -- with
their own projections (``query_global``, ``key_global``, ``value_global``: ``global_qkv``). A list of windows, one
per layer, is a layer schedule. Hugging Face pads a sequence to a multiple of the window; tfspec needs not, and
the padding changes nothing a real token computes.
"""

from __future__ import annotations

from . import hf_roberta
from ..document import Document
from ..fields import Field, Fields
from ..family import masked_lm
from ..mapping import InteropError
from ..writer import schedule
from ..layouts import covering


def _windows(config) -> list[int]:
    """Each layer's ``attention_window`` (the field is one for every layer, or a list)."""
    window = config.attention_window
    return list(window) if isinstance(window, (list, tuple)) else [window] * config.num_hidden_layers


def _exported(f) -> int | list[int]:
    """``attention_window`` from each layer's window mask (one number where every layer has the same)."""
    windows = []
    for i, k in enumerate(f.layer_windows("encoder")):
        if k is None:
            raise f.refuse(f"the self-attention of layer {i} has no window mask")
        windows.append(2 * (k - 1))
    return windows[0] if len(set(windows)) == 1 else windows


FIELDS = Fields(
    *hf_roberta.FIELDS.entries,
    # each layer's window: a let for the most common, a layer schedule for the others (not one setting)
    Field("attention_window", "attention_window", _exported, read=_windows, setting=False),
    ignored={**hf_roberta.FIELDS.ignored,
             "onnx_export": "how the attention is written for ONNX export; the result is the same"},
)


def _mask(keys: str, padding: bool) -> str:
    return f"window({keys})" + (" + padding" if padding else "")


def document(s, *, pooler: bool, head: bool, padding: bool) -> Document:
    """Longformer's spec: RoBERTa's with a sliding window (a layer schedule where the layers' windows differ) and
    the global tokens a call marks."""
    windows = _windows(s.config)
    if len(windows) != s.config.num_hidden_layers:
        raise InteropError(f"attention_window has {len(windows)} windows for {s.config.num_hidden_layers} layers")
    odd = [w for w in windows if not isinstance(w, int) or w <= 0 or w % 2]
    if odd:
        raise InteropError(f"attention_window {odd[0]!r} is not a positive even number (the keys on each side of "
                           "a query are half of it)")
    base, sections = schedule(windows)
    mask = _mask(s.writer("attention_window", base, "attention_window") + " // 2 + 1", padding)
    document = (hf_roberta.document(s, pooler=pooler, head=head, padding=padding)
                .insert("encoder", "attention", "mask", kind="longformer")
                .change("encoder", "attention", mask=mask))
    for selection, window in sections:
        own = _mask(str(window // 2 + 1), padding)
        document = document.add("encoder", f"layers {selection} {{ self_attn mask={own} }}")
    return document


EXAMPLES = {
    "LongformerForMaskedLM": dict(model_type="longformer", vocab_size=90, hidden_size=32, num_hidden_layers=3,
                                  num_attention_heads=4, intermediate_size=64, max_position_embeddings=60,
                                  attention_window=[4, 8, 4], pad_token_id=1),  # a window per layer: a schedule,
    "LongformerModel": dict(model_type="longformer", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=64, max_position_embeddings=60,
                            attention_window=6, pad_token_id=1, hidden_act="relu"),
}

COVERAGE = [covering("longformer", num_hidden_layers=3, max_position_embeddings=35, layer_norm_eps=1e-7,
                     hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3, initializer_range=0.05,
                     type_vocab_size=3, hidden_act="relu", tie_word_embeddings=False, pad_token_id=3,
                     attention_window=[6, 2, 6], architectures=["LongformerForMaskedLM"]),
            covering("longformer", num_hidden_layers=2, attention_window=10)]


LONGFORMER = hf_roberta.ROBERTA.derive(
    "Longformer", ("longformer",), masked_lm("Longformer"),
    "Longformer (Beltagy et al. 2020): RoBERTa's encoder whose self-attention slides a window of "
    "attention_window / 2 keys each side (kind=longformer, mask=window(w // 2 + 1)), plus the global tokens "
    "a call marks (global_attention_mask: the run-time input global_tokens), which have projections of "
    "their own; a list of windows is a layer schedule",
    priority=50, fields=FIELDS, document=document, prefix="longformer.",
    # and the global projections beside each layer's query, key and value
    rules=hf_roberta.WEIGHTS.derive(
        {"self_attn.global_qkv": tuple(f"attention.self.{n}_global" for n in ("query", "key", "value"))}))
