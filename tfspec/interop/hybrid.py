"""What the hybrid families share (layers mixing by a token mixer or by attention, as ``layer_types`` says): each
layer's sublayers by part, read from the graph, and the spec of a pre-normed hybrid decoder."""

from __future__ import annotations

from ..ir import nodes as ir
from ..ir.queries import layer_template, residual_placement
from .mapping import InteropError


def layer_parts(model, layer: int, family: str) -> dict[str, str]:
    """Layer ``layer``'s ``operator`` (its mixer or attention) and ``feedforward``, the norm before each
    (``operator_norm``, ``feedforward_norm``), and ``attends``: whether the operator is attention; refused where a
    sublayer is not pre-normed, as ``family``'s are."""
    g = model.spec.graph()
    found: dict[str, str] = {}
    for node in layer_template(g, "decoder", g.stacks["decoder"].kind_of(layer)):
        if isinstance(node, (ir.Attention, ir.Mixer, ir.FeedForward)):
            part = "feedforward" if isinstance(node, ir.FeedForward) else "operator"
            norm = g.node(node.inputs[0])
            if residual_placement(g, node).placement != "pre-norm" or not isinstance(norm, ir.Norm):
                raise InteropError(f"spec '{model.spec.name}': layer {layer}'s {node.name} is not pre-normed, as "
                                   f"{family}'s sublayers are")
            found[part], found[f"{part}_norm"] = node.name, norm.module.name
            if isinstance(node, ir.Attention):
                found["attends"] = node.name
    return found


def decoder_text(w, s, *, name: str, heading: tuple[str, ...], head: bool, norm: str, position: str, own: str,
                 feedforward: str, sections: str, attn_dropout: bool = True) -> str:
    """A pre-normed hybrid decoder's spec from the settings ``s`` (``d_model``, ``layers``, ``vocab``,
    ``init_std``, ``tied``; ``p_attn_dropout`` where ``attn_dropout``): ``norm`` everywhere, the stack's
    ``position``, its ``own`` mixing sublayer line and ``feedforward`` arguments, and the ``sections`` (``layers``
    lines) of its other kinds of layer; the causal LM's head where ``head``."""
    dropout = f"\n  attn_dropout {s.p_attn_dropout}" if attn_dropout else ""
    text = f"""model {name}

defaults {{
  residual pre
  norm {norm}{dropout}
  init normal(std={s.init_std})
}}

embedding tokens {{ vocab {s.vocab}; dim {s.d_model}; position none }}

decoder x {s.layers} {{
  position {position}
  {own}
  feedforward {feedforward}
  final {norm}
{sections}}}
"""
    if head:
        text += "\nhead " + ("tied(tokens)" if s.value("tied") else f"linear({s.vocab}) bias=false") + "\n"
    return w.text(text, list(heading))
