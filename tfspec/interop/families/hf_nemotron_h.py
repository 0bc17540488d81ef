"""Hugging Face ``NemotronHForCausalLM`` (NVIDIA's Nemotron-H and Nemotron 3; and its base model) <-> a compiled spec.

Nemotron-H's blocks are each one RMS-normed sublayer on a residual branch, of the kind ``layer_types`` (its
``hybrid_override_pattern``: M, *, -, E) says: Mamba-2 (``mixer mamba2(...)``), grouped-query attention without
positions or biases, a non-gated MLP (``squared_relu``: ``mlp_hidden_act`` relu2), or a mixture of non-gated experts
chosen by sigmoid scores plus a correction bias among the best groups (DeepSeek-V3's routing) beside an always-on
shared MLP. The most common kind is the stack's sublayer; the others sections that put theirs in its place.
"""

from __future__ import annotations

from ..family import Family, Requires, causal_lm
from ..weights import Weights, Projections, Tensor
from ...ir import nodes as ir
from ...ir.queries import layer_template
from ...registry import ACTIVATIONS
from .. import hybrid, layouts
from . import hf_llama
from ..facts import Facts
from ..fields import Field, Fields, Fixed, lookup, standard
from ..mapping import InteropError
from ..document import Block, Document, Statement
from ..writer import causal_masks, router, schedule
from ..layouts import covering

MAMBA, ATTENTION, MLP, MOE = "linear_attention", "full_attention", "mlp", "moe"
ACTIVATION_NAMES = {"relu2": "squared_relu", **{n: n for n in ("relu", "gelu", "silu", "tanh")}}


def _block(f, i: int) -> str:
    """Layer ``i``'s kind, from its one sublayer."""
    g = f.g
    nodes = {type(n): n for n in layer_template(g, "decoder", g.stacks["decoder"].kind_of(i))}
    if ir.Mixer in nodes:
        return MAMBA
    if ir.Attention in nodes:
        return ATTENTION
    if ir.FeedForward not in nodes:
        raise f.refuse(f"its layer {i} has no sublayer")
    return MOE if Facts.routes(nodes[ir.FeedForward].spec) else MLP


def _layer_types(f) -> list[str]:
    return [_block(f, i) for i in range(f.layers("decoder"))]


def _some(f, kind: str, value):
    """``value(f)`` where some layer is of ``kind``; None (left out) otherwise."""
    return value(f) if kind in _layer_types(f) else None


def _of(kind: str, name: str, config: str, fact, let: bool = True) -> Field:
    """A field of the layers of ``kind`` (the MLPs', the mixtures'): read, and written back, only where some layer
    is of that kind."""
    return Field(name, config, lambda f: _some(f, kind, fact),
                 read=lambda c: lookup(c, config) if kind in c.layers_block_type else None, let=let)


def _mlp(f):
    return next(n.spec for n in f.g.of(ir.FeedForward, stack="decoder", in_block=True) if not Facts.routes(n.spec))


# Nemotron-H's mixtures, where it has them: sigmoid scores plus a correction bias, an ungated shared network
MIXTURE = Requires(lambda f: not any(Facts.routes(s) for s in _feedforwards(f)) or (
    f.router("decoder").score == "sigmoid" and f.router("decoder").correction and not f.mixture("decoder").shared_gate),
    "its mixture is not Nemotron-H's: sigmoid scores plus a correction bias (router=sigmoid + correction), an "
    "ungated shared network")


def _feedforwards(f) -> list:
    return [n.spec for n in f.g.of(ir.FeedForward, stack="decoder", in_block=True)]


def _activation(f) -> str | None:
    names = {s.activation.name for s in _feedforwards(f)}
    if not names:
        return None
    if len(names) != 1 or any(ACTIVATIONS[n].up_features(4) != 4 for n in names):
        raise f.refuse("its feed-forwards are gated or differ in their activation; Nemotron-H's MLPs and experts "
                       "share one, applied to their up projection alone")
    return names.pop()


FIELDS = Fields(
    *standard("decoder", d_model="hidden_size", vocab="vocab_size"),
    Field("layers", "num_hidden_layers", lambda f: f.layers("decoder"), read=lambda c: len(c.layers_block_type)),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Field("heads", "num_attention_heads", lambda f: _some(f, ATTENTION, lambda f: f.geometry("decoder").heads)),
    Field("kv_heads", "num_key_value_heads",
          lambda f: _some(f, ATTENTION, lambda f: f.geometry("decoder").kv_heads)),
    Field("head_dim", "head_dim", lambda f: _some(f, ATTENTION, lambda f: f.geometry("decoder").head_dim),
          read=lambda c: getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads),
    Field("p_attn_dropout", "attention_dropout",
          lambda f: _some(f, ATTENTION, lambda f: f.attention("decoder").dropout)),
    Field("activation", "mlp_hidden_act", _activation, names=ACTIVATION_NAMES),
    Field("mlp_bias", "mlp_bias", lambda f: next((s.bias for s in _feedforwards(f)), None), let=False),
    _of(MLP, "d_ff", "intermediate_size", lambda f: _mlp(f).d_ff),
    _of(MOE, "experts", "n_routed_experts", lambda f: f.mixture("decoder").experts),
    _of(MOE, "top", "num_experts_per_tok", lambda f: f.mixture("decoder").top),
    _of(MOE, "expert_d_ff", "moe_intermediate_size", lambda f: f.mixture_body("decoder").d_ff),
    _of(MOE, "shared", "moe_shared_expert_intermediate_size", lambda f: f.mixture("decoder").shared),
    _of(MOE, "routed_scale", "routed_scaling_factor", lambda f: f.router("decoder").scale),
    _of(MOE, "expert_groups", "n_group", lambda f: f.router("decoder").groups),
    _of(MOE, "top_groups", "topk_group", lambda f: f.router("decoder").top_groups),
    _of(MOE, "renormalize", "norm_topk_prob", lambda f: f.router("decoder").renormalize, let=False),
    *hybrid.mamba2_fields("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel",
                          "chunk_size", "use_conv_bias", "use_bias", None),
    Field("layer_types", "layer_types", _layer_types, read=lambda c: list(c.layers_block_type), setting=False),
    Fixed("mamba_hidden_act", "silu", "mamba_hidden_act={value}: tfspec's Mamba-2 convolution applies SiLU"),
    Fixed("moe_latent_size", None, "moe_latent_size={value} projects the experts' input to a latent and back, "
                                   "which tfspec's mixture does not"),
    Fixed("num_nextn_predict_layers", 0, "num_nextn_predict_layers={value}: Nemotron-H's multi-token prediction "
                                         "blocks are not imported"),
    Fixed("mamba_ssm_cache_dtype", "float32", "mamba_ssm_cache_dtype={value}: tfspec's Mamba-2 keeps its state in "
                                              "float32"),
    ignored={**hf_llama.FIELDS.ignored, **hybrid.MAMBA2_IGNORED,
             "attention_bias": "Nemotron-H's attention projections have no bias whatever it says",
             "sliding_window": "read by no Nemotron-H layer: its attention sees every earlier position",
             "mamba_proj_bias": "read by no Nemotron-H layer: use_bias biases its Mamba-2 projections",
             "expand": "the Mamba-2 layers' width is mamba_num_heads × mamba_head_dim",
             "n_shared_experts": "Nemotron-H builds one shared MLP of moe_shared_expert_intermediate_size whatever "
                                 "it says",
             "moe_shared_expert_overlap": "overlaps the shared MLP's work with the experts' on GPUs; the same sum",
             "output_router_logits": "whether a call returns its routers' logits; no loss is added from them",
             "use_mamba_kernels": "whether CUDA kernels run the Mamba-2 layers; the result is the same",
             "residual_in_fp32": "keeps the residual stream in float32 under half precision (a float32 model's is "
                                 "float32 anyway); tfspec's stream has the model's dtype",
             "hidden_dropout": "read by no Nemotron-H layer",
             "rescale_prenorm_residual": "scales a new model's out_proj draw; a checkpoint holds out_proj",
             "mtp_layers_block_type": "the kinds of the multi-token prediction blocks, which are not imported",
             "layers_block_type": "layer_types under its older name (read as layer_types)",
             "num_logits_to_keep": "how many positions' logits a generation step computes; the rest are unused"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a Nemotron-H configuration describes: one normed sublayer a block, of the kind each layer's
    type says (the most common the stack's; the others sections that put theirs in its place)."""
    types = s.value("layer_types")
    mamba = hybrid.mamba2_layer(s, "eps")
    attention = [f"heads={s.heads}", f"kv_heads={s.kv_heads}", f"head_dim={s.head_dim}",
                 f"mask={causal_masks(padding=padding)}", "bias=false"]
    mlp = [f"d_ff={s.d_ff}", f"activation={s.activation}", f"bias={s.mlp_bias}"]
    moe = [f"d_ff={s.expert_d_ff}", f"activation={s.activation}", f"bias={s.mlp_bias}",
           f"kind=moe({s.experts}, {s.top}, shared={s.shared})",
           "router=" + router("sigmoid", "correction", f"groups({s.expert_groups}, {s.top_groups})"
                              if (s.value("expert_groups") or 1) > 1 else None,
                              "renormalize" if s.value("renormalize") else None, f"scale({s.routed_scale})")]
    # each kind: the layer's attribute for it, its statement in the stack, and its call in a section
    sublayer = {MAMBA: ("mamba", f"mixer {mamba}", f"mixer({mamba})"),
                ATTENTION: ("self_attn", "attention self " + " ".join(attention),
                            f"attention(self, {', '.join(attention)})"),
                MLP: ("ffn", "feedforward " + " ".join(mlp), f"feedforward({', '.join(mlp)})"),
                MOE: ("ffn", "feedforward " + " ".join(moe), f"feedforward({', '.join(moe)})")}
    base, sections = schedule(types)
    own = sublayer[base][0]
    norm = f"rmsnorm(eps={s.eps})"
    document = Document.of(
        Block("defaults", Statement("residual", "pre"), Statement("norm", norm),
              Statement("attn_dropout", s.p_attn_dropout if s.p_attn_dropout is not None else 0.0),
              Statement("init", f"normal(std={s.init_std})")),
        Block("embedding tokens", Statement("vocab", s.vocab), Statement("dim", s.d_model),
              Statement("position", "none")),
        Block(f"decoder x {s.layers}", sublayer[base][1], Statement("final", norm)),
        tail=(layouts.causal_lm_head(s),) if head else ())
    for layers, kind in sections:
        document = document.add("decoder", f"layers {layers} {{ {own} = {sublayer[kind][2]} }}")
    return document


def _parts(model) -> list[dict[str, str]]:
    """Each layer's one sublayer (``mixer``, ``attention`` or ``feedforward``) and the ``norm`` before it."""
    g, found = model.spec.graph(), []
    for i in range(len(model.decoder.layers)):
        nodes = [n for n in layer_template(g, "decoder", g.stacks["decoder"].kind_of(i))
                 if isinstance(n, (ir.Mixer, ir.Attention, ir.FeedForward))]
        if len(nodes) != 1 or not isinstance(g.node(nodes[0].inputs[0]), ir.Norm):
            raise InteropError(f"spec '{model.spec.name}': layer {i} is not one normed sublayer, as Nemotron-H's "
                               "blocks are")
        kind = {ir.Mixer: "mixer", ir.Attention: "attention"}.get(type(nodes[0]), "feedforward")
        found.append({kind: nodes[0].name, "norm": g.node(nodes[0].inputs[0]).module.name})
    return found


EXAMPLES = {
    # Nemotron-H: blocks of Mamba-2, attention, a squared-ReLU MLP and a mixture (grouped sigmoid routing, a shared
    # MLP); the base model's of Mamba-2 (biased projections), an MLP and attention
    "NemotronHForCausalLM": dict(model_type="nemotron_h", vocab_size=90, hidden_size=32, num_attention_heads=4,
                                 num_key_value_heads=2, head_dim=8, intermediate_size=40, mamba_num_heads=4,
                                 mamba_head_dim=16, ssm_state_size=8, n_groups=2, chunk_size=8,
                                 n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=12,
                                 moe_shared_expert_intermediate_size=20, n_group=2, topk_group=1,
                                 routed_scaling_factor=1.5, tie_word_embeddings=False,
                                 hybrid_override_pattern="ME*M-"),
    "NemotronHModel": dict(model_type="nemotron_h", vocab_size=90, hidden_size=32, intermediate_size=24,
                           mamba_num_heads=2, mamba_head_dim=32, ssm_state_size=6, n_groups=1, conv_kernel=3,
                           chunk_size=4, use_bias=True, use_conv_bias=False, mlp_bias=True, layer_norm_epsilon=1e-6,
                           num_attention_heads=2, num_key_value_heads=1,
                           layer_types=["linear_attention", "mlp", "full_attention",
                                        "linear_attention"]),
}

COVERAGE = [covering("nemotron_h", num_key_value_heads=1, head_dim=16, mlp_hidden_act="relu", mlp_bias=True,
                     attention_dropout=0.1, layer_norm_epsilon=1e-6, initializer_range=0.05, tie_word_embeddings=True,
                     mamba_num_heads=3, mamba_head_dim=16, ssm_state_size=6, n_groups=3, conv_kernel=3, chunk_size=4,
                     use_bias=True, use_conv_bias=False, n_routed_experts=6, num_experts_per_tok=3,
                     moe_intermediate_size=8, moe_shared_expert_intermediate_size=12, n_group=3, topk_group=2,
                     routed_scaling_factor=2.5, norm_topk_prob=False,
                     layer_types=["moe", "attention", "mamba", "mlp", "mamba"])]


NEMOTRON_H = Family(
    "Nemotron-H", ("nemotron_h",), causal_lm("NemotronH"),
    "Nemotron-H: blocks of one RMS-normed sublayer each, as layer_types (hybrid_override_pattern) says: Mamba-2 "
    "(mixer mamba2), attention without positions or biases, a non-gated MLP (squared_relu), or a mixture of "
    "non-gated experts by sigmoid scores and a correction bias among groups beside a shared MLP; a layer "
    "schedule",
    priority=640, fields=FIELDS, document=document, requires=(MIXTURE,),
    # every sublayer under the layer's ``mixer``: Mamba-2, attention, an MLP, or a mixture (its router, correction
    # bias, stacked experts and shared MLP)
    rules=Weights({
        "mixer": hybrid.Mamba2Mixer("mixer"), "attention": Projections("mixer"),
        "feedforward.up": "mixer.up_proj", "feedforward.down": "mixer.down_proj",
        "feedforward.router": "mixer.gate",
        "feedforward.choice.correction.bias": Tensor("mixer.gate.e_score_correction_bias"),
        "feedforward.experts.up": Tensor("mixer.experts.up_proj"),
        "feedforward.experts.down": Tensor("mixer.experts.down_proj"),
        "feedforward.shared.up": "mixer.shared_experts.up_proj",
        "feedforward.shared.down": "mixer.shared_experts.down_proj", "norm": "norm"},
        top={"embeddings.tokens.tokens": "embeddings", "decoder.final_norm": "norm_f"}, parts=_parts))
