"""Hypothesis strategies: random *valid* spec texts, with the facts each one should produce.

Reused by later test modules (compiler properties), so specs stay small enough to build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hypothesis import strategies as st

from tfspec.front.schema import Choice
from tfspec.registry import (ACTIVATIONS, ATTENTION_KINDS, FEEDFORWARD_KINDS, MASKS, MIXERS, NORMS, POSITIONS,
                             AttentionShape, combined_reach)


@dataclass
class Generated:
    text: str
    kind: str
    width: int
    layers: dict  # role -> repeat
    heads: int
    has_head: bool
    causal_decoder: bool


NORM_TEXT = st.sampled_from([(name if not options else f"{name}(" + ", ".join(
    f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items()) + ")")
    for name in NORMS for options in NORMS[name].examples])  # every registered norm, with its example options
RATE = st.sampled_from(["0", "0.1", "0.25"])


def mask_choices(cross: bool = False) -> list[tuple]:
    """Every registered mask, with each of its example options, as ``(variant, options, text)``: new masks join
    the generated specs by being registered."""
    return [(MASKS[name], MASKS[name].options(options), choice_text(name, options)) for name in MASKS
            for options in MASKS[name].examples
            if not MASKS[name].absent and (MASKS[name].allowed_in_cross or not cross)]


def no_mask() -> list[str]:
    """The registered ways of writing "no mask" (absent entries)."""
    return [name for name in MASKS if MASKS[name].absent]


@st.composite
def self_mask(draw, causal: bool, padding: bool = False, windows: bool = True) -> str:
    """Masks for a self-attention, drawn by their declared properties. ``causal``: one that is causal from the
    start (``causal_from``); ``padding``: one that reads padding; ``windows``: other structural masks may join
    (with a causal mask the result stays causal)."""
    choices = mask_choices()
    parts = []
    if causal:
        parts.append(draw(st.sampled_from([text for v, o, text in choices
                                           if v.structural and v.causal_from(o) == "start" and v.reach(o)[0] is None])))
    readers = [text for v, o, text in choices if v.reads_padding]
    if padding or draw(st.booleans()):
        parts.append(draw(st.sampled_from(readers)))
    taken = {part.split("(")[0] for part in parts}  # a mask is given once: another of its options is no other
    others = [text for v, o, text in choices if v.structural and v.name not in taken]
    if windows and others and draw(st.integers(0, 3)) == 0:
        parts.append(draw(st.sampled_from(others)))
    draw(st.randoms()).shuffle(parts)
    return " + ".join(parts) if parts else draw(st.sampled_from([*no_mask(), ""]))


def choice_text(name: str, options: dict) -> str:
    if not options:
        return name
    return f"{name}(" + ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items()) + ")"


def attention_positions(width: int, heads: int, kinds: tuple = (), plain: bool = True) -> list[str]:
    """Every registered in-attention position scheme, with each of its example options, that accepts this
    geometry as each of ``kinds`` (``(AttentionKind, options)`` pairs) shows it to the scheme, and as it is where
    ``plain`` (an attention of the default kind beside them) (its own ``check`` decides; a latent attention's
    positions act on its rotated part): new schemes join the property tests by being registered."""
    shape = AttentionShape(width=width, heads=heads, kv_heads=heads, head_dim=width // heads, memory_width=width,
                           cross=False, bias=True, out_bias=True)
    shapes = [kind.position_shape(shape, options) for kind, options in kinds] + ([shape] if plain or not kinds else [])
    return [choice_text(name, options) for name in POSITIONS for options in POSITIONS[name].examples
            if POSITIONS[name].acts == "attention"
            and not any(POSITIONS[name].check(POSITIONS[name].options(options), s) for s in shapes)]


def kind_choices() -> dict[str, tuple]:
    """Each attention kind with each of its example options, by how a generated spec writes it."""
    return {choice_text(name, options): (ATTENTION_KINDS[name], ATTENTION_KINDS[name].options(options))
            for name in ATTENTION_KINDS for options in ATTENTION_KINDS[name].examples}


def kinds_for(shape: AttentionShape, kv_heads: int, mask: str | list[Choice] = "") -> list[str]:
    """Every registered attention kind (with its example options) that accepts this geometry and these masks
    (``mask``: as ``self_mask`` writes them, or ``Choice``s; the kind's own ``conflicts`` decide)."""
    by_text = {text: (variant, options) for variant, options, text in mask_choices()}
    masks = mask if isinstance(mask, list) else [
        Choice(name=by_text[m][0].name, options=by_text[m][1].model_dump()) for m in mask.split(" + ") if m in by_text]
    causal = combined_reach([MASKS.of(m) for m in masks])[1] == 0  # (forgetting attention takes causal masks alone)
    shape = AttentionShape(**{**shape.__dict__, "kv_heads": kv_heads, "causal": causal})
    kinds = []
    for name in ATTENTION_KINDS:
        for options in ATTENTION_KINDS[name].examples:
            kind, values = ATTENTION_KINDS[name], ATTENTION_KINDS[name].options(options)
            if not kind.check(values, shape) and not kind.conflicts(values, masks, POSITIONS["none"], None):
                kinds.append(choice_text(name, options))
    return kinds


def embedding_positions() -> list[str]:
    """Every registered position scheme added to the embedding (and ``none``), with its example options."""
    return [choice_text(name, options) for name in POSITIONS for options in POSITIONS[name].examples
            if POSITIONS[name].acts == "embedding" or POSITIONS[name].absent]


def _arg(name: str, value: str) -> str:
    return f" {name}={value}" if value else ""


@st.composite
def sequential_block(draw, role: str, heads: str, has_cross: bool, causal: bool, sep: str, padding: bool = False,
                     windows: bool = True, shape: AttentionShape | None = None, layers: int = 1) -> list[str]:
    lines = []
    if draw(st.booleans()):
        lines.append(f"residual {draw(st.sampled_from(['post', 'pre', 'none']))}")
    if draw(st.booleans()):
        lines.append(f"norm {draw(NORM_TEXT)}")
    n_attn = draw(st.integers(1, 2))
    for _ in range(n_attn):
        kv_heads = draw(st.sampled_from(["", *[str(k) for k in range(1, shape.heads) if shape.heads % k == 0]]))
        mask = draw(self_mask(causal, padding, windows))
        kinds = kinds_for(shape, int(kv_heads or shape.heads), mask)
        kind = draw(st.sampled_from(["", *kinds]))
        extra = _arg("residual", draw(st.sampled_from(["", "pre", "post", "none"])))
        lines.append(f"attention self heads={heads}{_arg('mask', mask)}{_arg('kind', kind)}"
                     f"{_arg('kv_heads', kv_heads)}{_arg('bias', draw(st.sampled_from(['', 'true', 'false'])))}{extra}")
    if draw(st.integers(0, 3)) == 0:  # a mixer beside attention (a hybrid's layer), each registered one
        fitting = [choice_text(n, o) for n in MIXERS for o in MIXERS[n].examples
                   if not MIXERS[n].check(MIXERS[n].options(o), shape.width, layers)]  # (lightning's depth)
        lines.append(f"mixer {draw(st.sampled_from(fitting))}")
    if has_cross:
        readers = [text for v, o, text in mask_choices(cross=True) if v.reads_padding and not v.structural]
        cross_masks = readers if padding else ['', *no_mask(), *readers]
        lines.append(f"attention cross heads={heads}{_arg('mask', draw(st.sampled_from(cross_masks)))}"
                     f"{draw(st.sampled_from(['', ' memory=encoder']))}")
    if draw(st.integers(0, 4)):
        # (one reading per-layer inputs needs its embedding to make them: tests/test_per_layer.py)
        kinds = [(name, choice_text(name, o)) for name in FEEDFORWARD_KINDS for o in FEEDFORWARD_KINDS[name].examples
                 if not FEEDFORWARD_KINDS[name].reads_per_layer]
        kind, kind_text = draw(st.sampled_from([("dense", ""), *kinds]))
        # an activation that trains parameters (xIELU) only where the network holds them (not a mixture's experts)
        act = draw(st.sampled_from(ACTIVATIONS.names() if FEEDFORWARD_KINDS[kind].trains_activation
                                   else fixed_activations()))
        lines.append(f"feedforward d_ff={draw(st.sampled_from(['d_ff', '16', '2 * d_model']))} activation={act}"
                     f"{_arg('dropout', draw(st.sampled_from(['', '0.1'])))}"
                     f"{_arg('kind', kind_text)}")
    if draw(st.booleans()):
        lines.append(f"final {draw(NORM_TEXT)}")
    return lines


def fixed_activations() -> list[str]:
    """The activations that train nothing of their own, which any feed-forward kind takes."""
    return [name for name in ACTIVATIONS.names() if not ACTIVATIONS[name].params(1, ACTIVATIONS[name].options({}))]


@st.composite
def layer_section(draw, repeat: int, has_ffn: bool) -> str:
    """A ``layers`` section making some layers differ in what no property depends on: their norms, their
    feed-forward's width and activation (a layer schedule)."""
    selection = draw(st.sampled_from([str(repeat - 1), f"range(0, {repeat - 1})", "every(2)", "every(2, from=1)"]))
    changes = []
    if draw(st.booleans()) or not has_ffn:
        changes.append(f"norm {draw(NORM_TEXT)}")
    if has_ffn:
        changes.append(f"ffn d_ff=16 activation={draw(st.sampled_from(fixed_activations()))}")  # (any ffn kind)
    return f"layers {selection} {{ {'; '.join(changes)} }}"


@st.composite
def wired_block(draw, role: str, heads: str, has_cross: bool, causal: bool, padding: bool = False,
                windows: bool = True) -> list[str]:
    mask = draw(self_mask(causal, padding, windows))
    readers = [text for v, o, text in mask_choices(cross=True) if v.reads_padding and not v.structural]
    cross_mask = f", mask={draw(st.sampled_from(readers))}" if padding or draw(st.booleans()) else ""
    attn = f"attention(h, heads={heads}{', mask=' + mask if mask else ''})"
    style = draw(st.sampled_from(["parallel", "pre", "post"]))
    lines = []
    if style == "parallel":  # GPT-J: one norm feeds attention and feedforward side by side
        lines += ["h = norm(x)", f"x = x + {attn} + feedforward(h, d_ff=d_ff)"]
    elif style == "pre":
        lines += ["h = layernorm(x, eps=1e-6)", f"x = x + dropout({attn})"]
        if has_cross:
            lines += [f"x = x + attention(norm(x), cross, heads=heads{cross_mask})"]
        lines += ["x = x + feedforward(rmsnorm(x), d_ff=d_ff, activation=gelu)"]
    else:
        lines += ["h = x", f"x = norm(x + {attn})"]
        if has_cross:
            lines += [f"x = norm(x + attention(x, cross, heads=heads{cross_mask}))"]
        lines += ["x = norm(x + feedforward(x, d_ff=d_ff))"]
    if style == "parallel" and has_cross:
        lines.append(f"x = x + attention(norm(x), cross, heads=heads{cross_mask})")
    return lines


@st.composite
def valid_specs(draw, kinds=("encoder-only", "decoder-only", "encoder-decoder"), max_width: int = 64,
                positions=None, padding: bool = False, windows: bool = True,
                max_layers: int = 3, in_attention: bool = True) -> Generated:
    """A random valid spec. ``padding``: every attention masks padding; ``windows``: may use window masks;
    ``in_attention``: a stack may apply a position scheme inside its self-attentions (rotary, ALiBi, ...)."""
    kind = draw(st.sampled_from(kinds))
    width = draw(st.sampled_from([w for w in (8, 16, 24, 32, 48, 64) if w <= max_width]))
    heads = draw(st.sampled_from([h for h in (1, 2, 4, 8) if width % h == 0]))
    vocab = draw(st.integers(5, 60))
    sep = draw(st.sampled_from(["\n", "\n\n", "; "]))
    out = [f"# generated {kind}", "model generated"]
    out.append(f"let d_model = {width}, heads = {heads}, d_ff = {draw(st.sampled_from(['2 * d_model', '32', '4 * d_model // 2']))}")
    out.append(f"let vocab = {vocab}")
    defaults = []
    if draw(st.booleans()):
        defaults.append(f"residual {draw(st.sampled_from(['post', 'pre']))}")
    if draw(st.booleans()):
        defaults.append(f"norm {draw(NORM_TEXT)}")
    if draw(st.booleans()):
        defaults.append(f"dropout {draw(RATE)}")
    if draw(st.booleans()):
        defaults.append(f"activation {draw(st.sampled_from(['relu', 'gelu', 'swiglu']))}")
    if defaults:
        out.append("defaults { " + "; ".join(defaults) + " }")
    position = draw(st.sampled_from(positions or embedding_positions()))
    emb = [f"vocab vocab", "dim d_model", f"position {position}"]
    if draw(st.booleans()):
        emb.append("scale sqrt(d_model)")
    if kind == "encoder-only" and draw(st.booleans()):
        emb.append(f"segments {draw(st.integers(1, 3))}")
    if draw(st.booleans()):
        emb.append(f"norm {draw(NORM_TEXT)}")
    out.append("embedding tokens {" + sep + sep.join(emb) + sep + "}")
    layers = {}
    causal_decoder = False
    shape = AttentionShape(width=width, heads=heads, kv_heads=heads, head_dim=width // heads, memory_width=width,
                           cross=False, bias=True, out_bias=True)
    for role in ("encoder", "decoder"):
        if kind == f"{'decoder' if role == 'encoder' else 'encoder'}-only":
            continue
        repeat = draw(st.integers(1, max_layers))
        layers[role] = repeat
        causal = role == "decoder" and draw(st.integers(0, 5)) > 0
        causal_decoder = causal_decoder or causal
        has_cross = role == "decoder" and kind == "encoder-decoder"
        if draw(st.integers(0, 3)) == 0:
            body = draw(wired_block(role, "heads", has_cross, causal, padding, windows))
        else:
            body = draw(sequential_block(role, "heads", has_cross, causal, sep, padding, windows, shape, repeat))
        written = [kind_choices().get(k) for line in body if not line.startswith("feedforward")
                   for k in re.findall(r"kind=(\w+(?:\([^)]*\))?)", line)]
        # (an attention written without kind= is the default kind's, whose heads the scheme sees whole)
        plain = any("attention" in line and "kind=" not in line for line in body if not line.startswith("feedforward"))
        schemes = attention_positions(width, heads, tuple(k for k in written if k is not None), plain) \
            if in_attention else []
        kinds = [ATTENTION_KINDS[k] for line in body if not line.startswith("feedforward")
                 for k in re.findall(r"kind=(\w+)", line)]
        if not all(k.scores_by_dot_product for k in kinds):  # schemes that need q·k do not apply
            schemes = [s for s in schemes if not POSITIONS[s.split("(")[0]].needs_dot_product]
        if any(k.mixes_positions for k in kinds):  # no scheme acts by position on projected keys
            schemes = []
        if any(k.own_pattern for k in kinds):  # a kind that scores only its own blocks takes no score bias
            schemes = [s for s in schemes if not POSITIONS[s.split("(")[0]].biases_scores]
        if not all(k.plain_softmax for k in kinds):  # nor those that compute the mix themselves
            schemes = [s for s in schemes if not POSITIONS[s.split("(")[0]].mixes_values]
        # nor those a kind refuses itself (Longformer's global projections take no in-attention scheme)
        schemes = [s for s in schemes if not any(k.conflicts(k.options(k.examples[0]), [], POSITIONS[s.split("(")[0]],
                                                             None) for k in kinds)]
        if schemes and draw(st.integers(0, 2)) == 0:
            body = [f"position {draw(st.sampled_from(schemes))}"] + body
        if repeat > 1 and draw(st.integers(0, 2)) == 0:  # a schedule, in either form (a wired call by its name)
            has_ffn = any(line.startswith("feedforward") or "feedforward(" in line for line in body)
            body.append(draw(layer_section(repeat, has_ffn)))
        out.append(f"{role} x {repeat} {{" + sep + sep.join(body) + sep + "}")
    head = draw(st.sampled_from(["", "head tied(tokens)", "head linear", "head linear(7) bias=false",
                                 "head tied(tokens) bias=true transform=gelu norm=layernorm"]))
    if head:
        out.append(head)
    if kind == "encoder-only" and draw(st.booleans()):
        out.append("pooler tanh")
    if not any(re.search(r"\bd_ff\b(?!\s*=)", line) for line in out[3:]):  # feed-forwards that size themselves
        out[2] = re.sub(r", d_ff = .*$", "", out[2])  # declares no d_ff: an unused let is a warning
    return Generated("\n".join(out) + "\n", kind, width, layers, heads, bool(head), causal_decoder)


@st.composite
def mutated(draw, base: st.SearchStrategy = valid_specs()) -> str:
    """A valid spec with random character-level damage."""
    text = draw(base).text
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        op = draw(st.sampled_from(["delete", "insert", "replace", "truncate", "duplicate"]))
        char = draw(st.sampled_from(list("{}()=+-*/,;#\"x0 \n\tq_é×\x00") + [chr(draw(st.integers(1, 0x2FFF)))]))
        if op == "delete":
            text = text[:i] + text[i + 1:]
        elif op == "insert":
            text = text[:i] + char + text[i:]
        elif op == "replace":
            text = text[:i] + char + text[i + 1:]
        elif op == "truncate":
            text = text[:i]
        else:
            j = draw(st.integers(i, min(len(text), i + 40)))
            text = text[:j] + text[i:j] + text[j:]
    return text
