"""Hugging Face ``Gemma4ForCausalLM`` (Gemma 4's text model; and ``Gemma4TextModel``) <-> a compiled spec.

Gemma 4 (Google DeepMind 2026) keeps Gemma 3's sandwich-normed layer (``x = x + norm(attention(norm(x)))``) with
its norms plain RMSNorms (a weight, not 1 + w), unscaled scores (``scale=1``: the per-head qk-norm sets their size)
and each head's values RMS-normed without a weight (``steps=value_norm``), and ends each layer by multiplying the
stream by a scalar held with the weights (``layer_scalar``: ``x = gain(x, scalar=true, trained=false)``). Its sliding
and full layers differ in more than the mask, as ``layer_types`` and ``per_layer_config`` say: the full ones have
heads of their own width (``global_head_dim``), rotate only the fastest quarter of their frequencies (p-RoPE:
``rotary(scaling=proportional, proportion=0.25)``, θ 1e6) and, with ``attention_k_eq_v``, take their values from
the keys' projection (``kind=same_kv``) with fewer kv heads (``num_global_key_value_heads``) -- a layer schedule.

The smaller sizes (E2B, E4B) add two parts. Per-layer input embeddings (``hidden_size_per_layer_input``): the
embedding makes features for each layer (``per_layer 256``) and each layer, after its MLP, adds a normed gate of
its own (``x = x + norm(feedforward(x, d_ff=256, activation=gelu_tanh, kind=per_layer))``). And the last
``num_kv_shared_layers`` layers attend with the keys and values of the last earlier layer of their kind,
projecting queries alone (``self_attn kv_from=j steps=none``), their MLPs twice as wide with
``use_double_wide_mlp``. The 26B-A4B has a mixture of experts beside each MLP (``enable_moe_block``): the router
reads the stream RMS-normed and scaled, the experts read it normed with a weight, each chosen expert's weight is
scaled by its own learned scale, and the MLP's and the mixture's outputs are each normed before their sum is
(``x = x + norm(norm(feedforward(norm(x), ...)) + norm(feedforward(x, ..., kind=moe(...))))``).
"""

from __future__ import annotations

from ..family import Family, causal_lm
from ...ir import nodes as ir
from ...ir.queries import sublayers
from ...registry import ATTENTION_KINDS, FEEDFORWARD_KINDS
from . import hf_gemma2, hf_llama
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError
from .. import layouts
from ..document import Document, Statement
from ..weights import Weights, GatedMLP, Projections, Tensor
from ..writer import causal_masks, schedule

SLIDING, FULL = hf_gemma2.SLIDING, hf_gemma2.FULL
_GEMMA2 = {e.name: e for e in hf_gemma2.FIELDS.fields}
SCALINGS = {"default": "none", "linear": "linear", "proportional": "proportional"}  # the full layers' rope_type
# the per-layer gate's function of one input, by hidden_activation (the MLP gates with the same function)
ONE_INPUT = {"gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
_DEFAULT_ROPE = {SLIDING: {"rope_type": "default", "rope_theta": 1e4},
                 FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}}


def _rope(config, kind: str) -> dict:
    """The rotary settings of one kind of layer (Hugging Face's defaults where the configuration has none)."""
    return dict((config.rope_parameters or {}).get(kind) or _DEFAULT_ROPE[kind])


def _types(config) -> list[str]:
    return list(config.layer_types)


def _shape(config, kind: str) -> tuple[int, int] | None:
    """(head_dim, kv heads) of the first layer of a kind, as ``per_layer_config`` resolves them (None: none is)."""
    for i, t in enumerate(_types(config)):
        if t == kind:
            layer = config.per_layer_config[i]
            return layer.head_dim, layer.num_key_value_heads
    return None


def _per_type(config) -> bool:
    """Do the layers of each kind share one head width and number of kv heads (all Hugging Face's rotary
    tables, one per kind, can serve)?"""
    return all(_shape(config, t) == (config.per_layer_config[i].head_dim,
                                     config.per_layer_config[i].num_key_value_heads)
               for i, t in enumerate(_types(config)))


def _nodes(f) -> list:
    return f.per_layer_nodes("decoder", ir.Attention, "self-attention", reads="self")


def _of_kind(f, sliding: bool):
    """The first layer's attention node of a kind (``sliding``: a windowed one), or None."""
    return next((a for a in _nodes(f) if (f.window_of(a.spec.mask) is not None) == sliding), None)


def _geometry(f, sliding: bool, what: str):
    node = _of_kind(f, sliding)
    return getattr(node.geometry, what) if node is not None else None


def _values_from_keys(node) -> bool:
    """Does an attention take its values from its keys' projection (no value rows of its own)?"""
    kind, options = ATTENTION_KINDS.of(node.spec.kind)
    return kind.value_rows(node.geometry, options) == 0


def _k_eq_v(f) -> bool:
    full = _of_kind(f, sliding=False)
    return full is not None and _values_from_keys(full)


def _full_rotary(f) -> dict:
    return f.layer_rotaries("decoder", sliding=False)


def _config_makers(config) -> list[int | None]:
    """Per layer, the layer whose keys and values it reads (Hugging Face's ``kv_sharing_modes``: the last
    ``num_kv_shared_layers`` reuse those of the last earlier layer of their kind), or None: its own."""
    types, first = _types(config), config.num_hidden_layers - (config.num_kv_shared_layers or 0)
    return [None if i < first else max((j for j in range(first) if types[j] == t), default=None)
            for i, t in enumerate(types)]


def _makers(f) -> list[int | None]:
    return [a.spec.kv_from for a in _nodes(f)]


def _layer_mlps(f) -> list:
    """Each layer's MLP (not its mixture or per-layer gate), in layer order."""
    info, mlps = f.g.stacks["decoder"], {}
    for node in f.g.of(ir.FeedForward, stack="decoder", in_block=True):
        kind = FEEDFORWARD_KINDS[node.spec.kind.name]
        if not kind.routes and not kind.reads_per_layer:
            mlps.setdefault(node.layer_kind, node.spec)
    if len(mlps) != len(info.kinds):
        raise f.refuse("a kind of its layers has no MLP")
    return [mlps[info.kind_of(i)] for i in range(info.repeat)]


def _mlp(f):
    """The MLP of the stack's own kind of layer."""
    return _layer_mlps(f)[f.g.stacks["decoder"].kinds[0].layers[0]]


def _routes(f) -> bool:
    """Does some layer have a mixture of experts (beside its MLP)?"""
    return any(FEEDFORWARD_KINDS[n.spec.kind.name].routes for n in f.g.of(ir.FeedForward, stack="decoder"))


def _double_wide(f) -> bool:
    """Are the MLPs of the layers reading another's keys and values twice as wide as the others'?"""
    makers, widths = _makers(f), [ff.d_ff for ff in _layer_mlps(f)]
    readers = {w for w, m in zip(widths, makers) if m is not None}
    return bool(readers) and readers == {2 * widths[0]}


FIELDS = Fields(
    *(_GEMMA2[n] for n in ("d_model", "heads", "layers", "vocab", "window", "layer_types", "eps",
                           "p_attn_dropout", "init_std", "attention_bias", "tied", "final_softcap")),
    Field("d_ff", "intermediate_size", lambda f: _mlp(f).d_ff),
    Field("activation", "hidden_activation", lambda f: _mlp(f).activation.name, names=hf_gemma2.ACTIVATIONS),
    # the sliding layers' heads (and the full ones', where nothing else says)
    Field("kv_heads", "num_key_value_heads", lambda f: _geometry(f, True, "kv_heads") or (
        None if _k_eq_v(f) else _geometry(f, False, "kv_heads")),
          read=lambda c: _shape(c, SLIDING)[1] if SLIDING in _types(c) else
          None if c.attention_k_eq_v else _shape(c, FULL)[1]),
    Field("head_dim", "head_dim", lambda f: _geometry(f, True, "head_dim"),
          read=lambda c: _shape(c, SLIDING)[0] if SLIDING in _types(c) else None),
    Field("global_head_dim", "global_head_dim", lambda f: _geometry(f, False, "head_dim"),
          read=lambda c: _shape(c, FULL)[0] if FULL in _types(c) else None),
    Field("global_kv_heads", "num_global_key_value_heads",
          lambda f: _geometry(f, False, "kv_heads") if _k_eq_v(f) else None,
          read=lambda c: _shape(c, FULL)[1] if FULL in _types(c) and c.attention_k_eq_v else None),
    Field("k_eq_v", "attention_k_eq_v", _k_eq_v, read=lambda c: bool(c.attention_k_eq_v) and FULL in _types(c),
          setting=False),
    Field("local_theta", "rope_parameters.sliding_attention.rope_theta",
          lambda f: f.layer_rotaries("decoder", sliding=True).get("theta"),
          read=lambda c: float(_rope(c, SLIDING)["rope_theta"]) if SLIDING in _types(c) else None),
    Field("rope_theta", "rope_parameters.full_attention.rope_theta", lambda f: _full_rotary(f).get("theta"),
          read=lambda c: float(_rope(c, FULL)["rope_theta"]) if FULL in _types(c) else None),
    *hf_llama.scaling_fields("rope_parameters.full_attention",
                             params=lambda c: _rope(c, FULL) if FULL in _types(c) else {"rope_type": "default"},
                             options=_full_rotary, scalings=SCALINGS),
    Fixed("rope_parameters.sliding_attention.rope_type", "default", "rope scaling '{value}' of the sliding layers "
          "is not expressed (only of the full ones)", read=lambda c: _rope(c, SLIDING)["rope_type"], exported=True),
    Fixed("per_layer_config", True, "per_layer_config gives layers of one kind different head widths or kv heads, "
          "which Hugging Face's rotary tables (one per kind of layer) do not serve", read=_per_type,
          required="one head_dim and number of kv heads per kind of layer"),
    # "all" makes every attention bidirectional; "vision" (the larger sizes' setting) only lets a multimodal
    # model's image tokens see each other, so the text model attends causally: carried back as it was
    Fixed("use_bidirectional_attention", None, "bidirectional attention ({value}) makes Gemma 4 an encoder; "
          "tfspec reads the causal model",
          read=lambda c: "all" if getattr(c, "use_bidirectional_attention", None) == "all" else None),
    # per-layer input embeddings (E2B, E4B): the embedding's per_layer, and each layer's per-layer gate
    Field("per_layer_dim", "hidden_size_per_layer_input", lambda f: f.embedding.per_layer or 0,
          read=lambda c: c.hidden_size_per_layer_input or None),
    Field("per_layer_vocab", "vocab_size_per_layer_input",
          lambda f: (f.embedding.per_layer_vocab or f.embedding.vocab) if f.embedding.per_layer else None,
          read=lambda c: c.vocab_size_per_layer_input if c.hidden_size_per_layer_input else None),
    # the last layers read the keys and values of the last earlier layer of their kind (``kv_from``)
    Field("shared_layers", "num_kv_shared_layers", lambda f: sum(_makers(f)[i] is not None
                                                                for i in range(f.layers("decoder"))) or None,
          read=lambda c: c.num_kv_shared_layers or None, setting=False),
    Field("double_wide", "use_double_wide_mlp", _double_wide, read=lambda c: bool(c.use_double_wide_mlp
                                                                                   and c.num_kv_shared_layers),
          setting=False),
    Fixed("num_kv_shared_layers", None, "every layer shares keys and values (num_kv_shared_layers={value}): none "
          "makes them (Gemma 4's assistant models read a target model's)", required="fewer than num_hidden_layers",
          read=lambda c: c.num_kv_shared_layers if (c.num_kv_shared_layers or 0) >= c.num_hidden_layers else None),
    # the mixture of experts beside each layer's MLP (26B-A4B)
    Field("moe", "enable_moe_block", _routes, read=lambda c: bool(c.enable_moe_block), setting=False),
    Field("experts", "num_experts", lambda f: f.mixture("decoder").experts if _routes(f) else None,
          read=lambda c: c.num_experts if c.enable_moe_block else None),
    Field("top", "top_k_experts", lambda f: f.mixture("decoder").top if _routes(f) else None,
          read=lambda c: c.top_k_experts if c.enable_moe_block else None),
    Field("moe_d_ff", "moe_intermediate_size", lambda f: f.mixture_body("decoder").d_ff if _routes(f) else None,
          read=lambda c: c.moe_intermediate_size if c.enable_moe_block else None),
    ignored={"max_position_embeddings": "the longest sequence trained on; the rotary positions compute the same at "
                                        "any length",
             },
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Gemma 4's text spec: sandwich-normed layers in the wiring form, each ending by its stored scalar, and the
    sliding and full layers (heads, positions and values of their own) as a layer schedule."""
    eps = s.eps

    def attention(slides: bool) -> dict[str, str]:  # one kind of layer's attention options
        if slides:
            return {"mask": causal_masks(s.window, padding), "kv_heads": s.kv_heads, "head_dim": s.head_dim,
                    "kind": "dot"}
        return {"mask": causal_masks(None, padding), "kv_heads": s.global_kv_heads if s.value("k_eq_v") else
                s.kv_heads, "head_dim": s.global_head_dim, "kind": "same_kv" if s.value("k_eq_v") else "dot"}

    def position(slides: bool) -> str:
        return f"rotary(theta={s.local_theta})" if slides else hf_llama.rotary(s)

    slides = [s.window is not None and t == SLIDING for t in s.value("layer_types")]
    makers = _config_makers(s.config)
    unmade = sorted({t for t, m, i in zip(s.value("layer_types"), makers, range(len(makers)))
                     if m is None and i >= len(makers) - (s.config.num_kv_shared_layers or 0)})
    if unmade:
        raise InteropError(f"the layers sharing keys and values include {', '.join(unmade)} ones, but no earlier "
                           "layer of that kind makes them")
    double = s.value("double_wide")
    # (a layer reading another's keys is never the stack's own: a section cannot undo kv_from)
    (base, _), sections = schedule(list(zip(slides, makers)), own=lambda layer: layer[1] is None)
    own = attention(base)

    def section(slide: bool, maker: int | None) -> str:  # what a section's layers change of the stack's own
        changed = [f"{k}={v}" for k, v in attention(slide).items() if v != own[k]]
        if maker is not None:  # its queries against the maker's keys and values, as they were made
            changed += [f"kv_from={maker}", "steps=none"]
        parts = [f"self_attn {' '.join(changed)}" if changed else "",
                 f"position {position(slide)}" if slide != base else "",
                 f"ffn d_ff=2 * {s.d_ff}" if maker is not None and double else ""]
        return "; ".join(p for p in parts if p)

    written = ", ".join(f"{k}={v}" for k, v in own.items() if (k, v) != ("kind", "dot"))
    mlp = f"feedforward(norm(x), d_ff={s.d_ff}, activation={s.activation}, bias=false)"
    if s.value("moe"):  # beside the MLP: the experts read the stream normed, the router the stream itself
        mlp = (f"norm({mlp}) + norm(feedforward(x, d_ff={s.moe_d_ff}, activation={s.activation}, bias=false, \\\n"
               f"               kind=moe({s.experts}, {s.top}, experts_norm=rmsnorm, norm_eps={eps}), \\\n"
               f"               router=normed_input({eps}) + renormalize + expert_scale))")
    gate = ""
    if s.per_layer_dim:  # each layer's gate after its MLP
        gate = (f"x = x + norm(feedforward(x, d_ff={s.per_layer_dim}, activation={ONE_INPUT[s.value('activation')]}, "
                "bias=false, kind=per_layer))\n")
    wiring = f"""x = x + norm(attention(norm(x), heads={s.heads}, {written}, \\
                       scale=1, bias={s.attention_bias}, qk_norm=rmsnorm(eps={eps}), steps=value_norm(eps={eps})))
x = x + norm({mlp})
{gate}x = gain(x, scalar=true, trained=false)"""
    document = layouts.wired(s, norm=f"rmsnorm(eps={eps})", position=position(base), wiring=wiring,
                                     head=False).add("embedding tokens", Statement("scale", f"sqrt({s.d_model})"))
    if s.per_layer_dim:  # the per-layer inputs' table and projection with the embedding
        document = document.add("embedding tokens", Statement("per_layer", s.per_layer_dim))
        if s.value("per_layer_vocab") != s.value("vocab"):
            document = document.add("embedding tokens", Statement("per_layer_vocab", s.per_layer_vocab))
        document = document.add("embedding tokens", Statement("per_layer_norm", f"rmsnorm(eps={eps})"))
    for layers, layer in sections:
        document = document.add("decoder", f"layers {layers} {{ {section(*layer)} }}")
    return hf_gemma2.with_head(s, document, head)


def _layer_modules(model) -> dict[str, str]:
    """Module names, inside one decoder layer (every kind names its calls alike), of each part of Gemma 4's layer
    and the norms around it, under Hugging Face's names: ``self_attn``, ``mlp``, ``experts`` (the mixture, where it
    has one), ``per_layer`` (the per-layer gate), and the norms ``input_layernorm``, ``post_attention_layernorm``,
    ``pre_feedforward_layernorm``, ``post_feedforward_layernorm`` (and ``..._1``, ``..._2`` with a mixture),
    ``post_per_layer_input_norm``, ``layer_scalar``."""
    g = model.spec.graph()
    found: dict[str, str] = {}

    def refuse(what: str) -> InteropError:
        return InteropError(f"spec '{model.spec.name}' is not Gemma 4's layer: {what}")

    def norm_after(node) -> ir.Node:
        after = g.consumers(node.id)
        if len(after) != 1 or not isinstance(after[0], ir.Norm):
            raise refuse(f"its {node.name} is not normed before it is added to the stream")
        return after[0]

    def norm_before(node) -> str:
        before = g.node(node.inputs[0])
        if not isinstance(before, ir.Norm):
            raise refuse(f"its {node.name} does not read a norm of the stream")
        return before.module.name

    for node in sublayers(g, "decoder", kind=0):
        kind = FEEDFORWARD_KINDS[node.spec.kind.name] if isinstance(node, ir.FeedForward) else None
        if isinstance(node, ir.Attention):
            found.update(self_attn=node.name, input_layernorm=norm_before(node),
                         post_attention_layernorm=norm_after(node).module.name)
        elif kind.reads_per_layer:
            found.update(per_layer=node.name, post_per_layer_input_norm=norm_after(node).module.name)
        elif kind.routes:  # beside the MLP: both normed, summed, and the sum normed
            post = norm_after(node)
            total = [c for c in g.consumers(post.id) if isinstance(c, ir.Add)]
            if len(total) != 1:
                raise refuse("its mixture's normed output is not summed with the MLP's")
            found.update(experts=node.name, post_feedforward_layernorm_2=post.module.name,
                         post_feedforward_layernorm=norm_after(total[0]).module.name)
        else:
            found.update(mlp=node.name, pre_feedforward_layernorm=norm_before(node),
                         post_feedforward_layernorm_1=norm_after(node).module.name)
    if "experts" not in found:  # the MLP's norm after it is the layer's own
        found["post_feedforward_layernorm"] = found.pop("post_feedforward_layernorm_1", None)
    for node in g.of(ir.Norm, stack="decoder", in_block=True):
        if node.layer_kind == 0 and any(isinstance(c, ir.BlockOutput) for c in g.consumers(node.id)):
            found["layer_scalar"] = node.module.name
    missing = [part for part in ("self_attn", "mlp", "layer_scalar") if part not in found]
    if missing:
        raise refuse(f"it has no {', '.join(missing)} (x = gain(x, scalar=true, trained=false) ends the layer)")
    return found


# Gemma 4's checkpoint: its layer's parts under Hugging Face's names (``_layer_modules``)
WEIGHTS = Weights({
    "self_attn": Projections(), "self_attn.q_norm": "self_attn.q_norm", "self_attn.k_norm": "self_attn.k_norm",
    "mlp": GatedMLP(),
    **{norm: norm for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                               "post_feedforward_layernorm", "post_feedforward_layernorm_1",
                               "post_feedforward_layernorm_2", "post_per_layer_input_norm")},
    "layer_scalar.weight": Tensor("layer_scalar"),
    "per_layer.gate": "per_layer_input_gate", "per_layer.down": "per_layer_projection",
    # the mixture: its router (and its scales), the stacked experts (gate rows first), their norm
    "experts.router": "router.proj", "experts.choice.normed_input.scale": Tensor("router.scale"),
    "experts.choice.expert_scale.scale": Tensor("router.per_expert_scale"),
    "experts.experts.up": Tensor("experts.gate_up_proj"), "experts.experts.down": Tensor("experts.down_proj"),
    "experts.experts_norm": "pre_feedforward_layernorm_2"},
    top={"embeddings.tokens.tokens": "embed_tokens", "decoder.final_norm": "norm",
         # the per-layer inputs' table, projection and norm
         "embeddings.tokens.per_layer.table": "embed_tokens_per_layer",
         "embeddings.tokens.per_layer.projection": "per_layer_model_projection",
         "embeddings.tokens.per_layer.norm": "per_layer_projection_norm"},
    parts=_layer_modules)

EXAMPLES = {
    # E2B's layers: sliding and full ones (wider heads, p-RoPE), per-layer input embeddings, and the last three
    # reading the keys and values of the last earlier layer of their kind, with MLPs twice as wide; and the
    # 26B-A4B's mixture of experts beside each MLP
    "Gemma4ForCausalLM": dict(model_type="gemma4_text", vocab_size=90, hidden_size=32, num_hidden_layers=7,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, global_head_dim=16,
                              intermediate_size=48, sliding_window=6, final_logit_softcapping=0.4,
                              enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=12,
                              hidden_size_per_layer_input=8, vocab_size_per_layer_input=90,
                              num_kv_shared_layers=3, use_double_wide_mlp=True,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2
                              + ["full_attention"],
                              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                               "full_attention": {"rope_type": "proportional", "rope_theta": 1e6,
                                                                  "partial_rotary_factor": 0.5}}),
    # the 26B-A4B's layers: full ones with values from the keys and fewer kv heads, a mixture of experts beside
    # each MLP; and the last two reading earlier layers' keys
    "Gemma4TextModel": dict(model_type="gemma4_text", vocab_size=90, hidden_size=32, num_hidden_layers=5,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, global_head_dim=16,
                            num_global_key_value_heads=1, attention_k_eq_v=True, intermediate_size=48,
                            enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=12,
                            sliding_window=5, hidden_size_per_layer_input=0, num_kv_shared_layers=2,
                            use_bidirectional_attention="vision",  # (the larger sizes': causal for text)
                            layer_types=["full_attention", "sliding_attention", "full_attention",
                                         "sliding_attention", "full_attention"]),
}

COVERAGE = [dict(model_type="gemma4_text", vocab_size=91, hidden_size=24, num_hidden_layers=3,
                 num_attention_heads=3, num_key_value_heads=3, head_dim=16, global_head_dim=32,
                 num_global_key_value_heads=1, attention_k_eq_v=True, intermediate_size=40, rms_norm_eps=1e-5,
                 sliding_window=7, attention_dropout=0.1, initializer_range=0.05, hidden_activation="gelu",
                 attention_bias=True, tie_word_embeddings=False, final_logit_softcapping=10.0,
                 hidden_size_per_layer_input=0, enable_moe_block=True, num_experts=5, top_k_experts=3,
                 moe_intermediate_size=10, layer_types=["full_attention", "sliding_attention",
                                                        "full_attention"],
                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 2e4},
                                  "full_attention": {"rope_type": "proportional", "rope_theta": 5e5,
                                                     "partial_rotary_factor": 0.5, "factor": 2.0}}),
            dict(model_type="gemma4_text", vocab_size=91, hidden_size=24, num_hidden_layers=5,
                 num_attention_heads=3, num_key_value_heads=1, head_dim=8, global_head_dim=16,
                 intermediate_size=40, sliding_window=7, hidden_size_per_layer_input=6,
                 vocab_size_per_layer_input=97, num_kv_shared_layers=2,
                 use_double_wide_mlp=True, layer_types=["sliding_attention", "full_attention"] * 2
                 + ["full_attention"]),
            *(dict(model_type="gemma4_text", vocab_size=91, hidden_size=24, num_hidden_layers=2,
                   num_attention_heads=3, num_key_value_heads=1, head_dim=8, global_head_dim=8,
                   intermediate_size=40, sliding_window=7, hidden_size_per_layer_input=0,
                   layer_types=["sliding_attention", "full_attention"],
                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                    "full_attention": rope})
              for rope in ({"rope_type": "linear", "rope_theta": 1e6, "factor": 4.0},
                           {"rope_type": "default", "rope_theta": 1e6}))]


GEMMA4 = Family(
    "Gemma 4", ("gemma4_text",), causal_lm("Gemma4", base="Gemma4TextModel"),
    "Gemma 4 (text): Gemma 3's sandwich-normed layer with plain RMSNorms, unscaled scores, weightless value "
    "norms and a stored scalar ending each layer (gain); full layers with heads of their own width, p-RoPE "
    "and, with attention_k_eq_v, values from the keys' projection and fewer kv heads (a layer schedule); "
    "per-layer input embeddings, the last layers reading earlier layers' keys and values (kv_from), a "
    "mixture of experts beside each MLP",
    priority=540, fields=FIELDS, document=document, requires=(hf_gemma2.EMBEDDING_SCALE,),
    rules=WEIGHTS,
    carried=("use_bidirectional_attention",))
