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

from . import hf_bert, hf_roberta
from ..family import exported_config
from ..fields import Field, Fields
from ..mapping import InteropError, Rule, rule
from ..writer import SpecWriter, schedule


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


def spec_text(config, *, pooler: bool, head: bool, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Longformer configuration describes: RoBERTa's with a sliding window (a layer schedule
    where the layers' windows differ) and the global tokens a call marks."""
    windows = _windows(config)
    if len(windows) != config.num_hidden_layers:
        raise InteropError(f"attention_window has {len(windows)} windows for {config.num_hidden_layers} layers")
    odd = [w for w in windows if not isinstance(w, int) or w <= 0 or w % 2]
    if odd:
        raise InteropError(f"attention_window {odd[0]!r} is not a positive even number (the keys on each side of "
                           "a query are half of it)")
    if config.pad_token_id is None or config.pad_token_id + 1 >= config.max_position_embeddings:
        raise InteropError(f"pad_token_id {config.pad_token_id} leaves no row of the "
                           f"{config.max_position_embeddings} positions for a token")
    w = SpecWriter()
    base, sections = schedule(windows)
    mask = _mask(w("attention_window", base, "attention_window") + " // 2 + 1", padding)
    document = (hf_bert.document(FIELDS.write(config, w), pooler=pooler, head=head, padding=padding)
                .change("embedding tokens", "position",
                        f"learned(max_len, offset={config.pad_token_id + 1}, skip_padding=true)")
                .insert("encoder", "attention", "mask", kind="longformer")
                .change("encoder", "attention", mask=mask))
    for selection, window in sections:
        own = _mask(str(window // 2 + 1), padding)
        document = document.add("encoder", f"layers {selection} {{ self_attn mask={own} }}")
    return w.text((document.change_tail("head", transform="gelu") if head else document).text(name), list(heading))

hf_config = exported_config("Longformer", "longformer", "encoder-only", FIELDS)


def _layer_rules(ours: str, i: int, prefix: str) -> list[Rule]:
    """BERT's names for a layer, and the global projections beside its query, key and value."""
    own = f"{prefix}encoder.layer.{i}.attention.self"
    qkv = [f"{own}.{n}_global" for n in ("query", "key", "value")]
    return [*hf_bert.bert_layer_rules(ours, i, prefix),
            rule(f"{ours}.self_attn.global_qkv.weight", tuple(f"{q}.weight" for q in qkv)),
            rule(f"{ours}.self_attn.global_qkv.bias", tuple(f"{q}.bias" for q in qkv))]


def _rules(model, prefix: str):
    return hf_bert.weight_rules(model, prefix, hf_roberta.HEAD, layer=_layer_rules)


EXPORT_PRIORITY = 50  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_bert.encoder_family(
        "Longformer", ("longformer",),
        {"LongformerForMaskedLM": {"pooler": False, "head": True},
         "LongformerModel": {"pooler": True, "head": False}},
        "Longformer (Beltagy et al. 2020): RoBERTa's encoder whose self-attention slides a window of "
        "attention_window / 2 keys each side (kind=longformer, mask=window(w // 2 + 1)), plus the global tokens "
        "a call marks (global_attention_mask: the run-time input global_tokens), which have projections of "
        "their own; a list of windows is a layer schedule",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_rules,
        base="longformer", head="lm_head"),
)
