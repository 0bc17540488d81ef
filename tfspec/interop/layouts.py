"""The base layouts families derive their specs from (``tfspec.interop.document``): what every spec of a kind
holds, read from a family's settings (its field table's), which each family then changes by its differences.

A setting the family's table has is written where the layout has a place for it (``dropout`` where the table has
``p_dropout``, ``kv_heads`` where it has ``kv_heads``); what the table does not have the layout leaves out.
"""

from __future__ import annotations

import textwrap

from .document import Block, Document, Statement
from .writer import causal_masks, schedule


def decoder(s, *, norm: str, padding: bool, head: bool) -> Document:
    """A decoder-only spec from the settings ``s``: ``norm`` before each sublayer and after the stack, dropout and
    attention dropout where the table has them, a normal init of ``init_std``; token embeddings without positions;
    layers of causal self-attention (``kv_heads`` and ``head_dim`` where set; its padded keys hidden where
    ``padding``) and a feed-forward of ``d_ff`` (4 · d_model where the table has none) and ``activation``; and the
    causal LM's head where ``head`` (tied to the embeddings where ``tied``)."""
    defaults = [Statement("residual", "pre"), Statement("norm", norm)]
    defaults += [Statement(word, getattr(s, setting)) for setting, word in
                 (("p_dropout", "dropout"), ("p_attn_dropout", "attn_dropout")) if s.has(setting)]
    attention = Statement("attention", "self", heads=s.heads, kv_heads=s.kv_heads if s.has("kv_heads") else None,
                          head_dim=s.head_dim if s.has("head_dim") else None, mask=causal_masks(padding=padding))
    feedforward = Statement("feedforward", d_ff=s.d_ff if s.has("d_ff") else "4 * d_model",
                            activation=s.activation if s.has("activation") else None)
    document = Document.of(
        Block("defaults", *defaults, Statement("init", f"normal(std={s.init_std})")),
        Block("embedding tokens", Statement("vocab", s.vocab), Statement("dim", s.d_model),
              Statement("position", "none")),
        Block(f"decoder x {s.layers}", attention, feedforward, Statement("final", norm)))
    return document.with_tail(causal_lm_head(s)) if head else document


def causal_lm_head(s) -> Statement:
    """The causal LM's head: tied to the token embeddings where ``tied`` says, else a linear map without a bias."""
    return Statement("head", "tied(tokens)") if s.value("tied") else Statement("head", f"linear({s.vocab})",
                                                                              bias="false")


def wired(s, *, norm: str | None, position: str, wiring: str, head: bool, final: str | None = None,
          role: str = "decoder") -> Document:
    """A spec of one stack in the wiring form from the settings ``s``: ``norm`` the default of every ``norm()`` and
    the stack's ``final`` norm (None: the wiring names its norms, and ``final`` is given), attention dropout where
    the table has it, a normal init of ``init_std``; token embeddings without positions; a ``role`` stack (a
    decoder, or an encoder) of ``position`` and the ``wiring`` (the layer's assignments as the language writes
    them, lines continued with ``\\``); a decoder's causal LM head where ``head``."""
    defaults = ([Statement("norm", norm)] if norm else []) + \
        ([Statement("attn_dropout", s.p_attn_dropout)] if s.has("p_attn_dropout") else [])
    document = Document.of(
        Block("defaults", *defaults, Statement("init", f"normal(std={s.init_std})")),
        Block("embedding tokens", Statement("vocab", s.vocab), Statement("dim", s.d_model),
              Statement("position", "none")),
        Block(f"{role} x {s.layers}", Statement("position", position), textwrap.dedent(wiring).strip("\n"),
              Statement("final", final or norm)))
    return document.with_tail(causal_lm_head(s)) if head else document


def scheduled_feedforwards(document: Document, s, mixture: dict, dense: dict, sparse: list[bool]) -> Document:
    """``document`` whose layers' feed-forwards are the ``mixture`` where ``sparse`` says and the ``dense`` network
    elsewhere (each a dict of the feed-forward's options, ``d_ff`` and ``kind``), of the settings' ``activation``
    and without biases: the more common one the stack's, the layers of the other ``layers`` sections (DeepSeek's
    first dense layers, Qwen-MoE's ``mlp_only_layers``)."""
    base, sections = schedule(sparse)
    document = document.put("decoder", Statement("feedforward", activation=s.activation, bias="false",
                                                 **(mixture if base else dense)))
    for selection, layer in sections:
        ffn = Statement("ffn", **(mixture if layer else dense))
        document = document.add("decoder", f"layers {selection} {{ {ffn.text()} }}")
    return document



# the sizes of the families' tiny test configurations, as Llama's configuration names them: what each example
# (``EXAMPLES``: built, saved and compared with Hugging Face's) and each configuration of a family's coverage
# (``COVERAGE``: imported and exported back) changes, so that it states only what it is about
EXAMPLE_SIZES = dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=48)
COVERAGE_SIZES = dict(vocab_size=91, hidden_size=24, num_attention_heads=3, intermediate_size=40)


def example(model_type: str, **values) -> dict:
    """A tiny configuration of ``model_type`` for a family's ``EXAMPLES``: ``EXAMPLE_SIZES`` but for ``values``.

    >>> example("mistral", num_key_value_heads=1, sliding_window=6)["num_key_value_heads"]
    1
    """
    return {"model_type": model_type, **EXAMPLE_SIZES, **values}


def covering(model_type: str, **values) -> dict:
    """A configuration of ``model_type`` for a family's ``COVERAGE``: ``COVERAGE_SIZES`` but for ``values``."""
    return {"model_type": model_type, **COVERAGE_SIZES, **values}


# the sizes of a vision tower in a family's COVERAGE (CLIP's, SigLIP's, and the vision-language models built on
# them), as their vision configurations name them
VISION_COVERAGE = dict(hidden_size=20, intermediate_size=36, num_hidden_layers=1, num_attention_heads=5,
                       num_channels=1, layer_norm_eps=1e-7, attention_dropout=0.2)


def covering_vision(**values) -> dict:
    """A vision tower's configuration for a family's ``COVERAGE``: ``VISION_COVERAGE`` but for ``values``."""
    return {**VISION_COVERAGE, **values}
