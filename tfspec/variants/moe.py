"""A mixture of experts (Shazeer et al. 2017; Switch, Fedus et al. 2021; Mixtral, Jiang et al. 2024) in place of the
feed-forward network: ``experts`` networks of the sublayer's ``d_ff`` and ``activation`` (GLU included), a router
that scores each position against every expert, and the ``top`` best experts' outputs summed by their weights.

The router is a linear map (with a bias where ``router_bias``) and the parts the sublayer's ``router=`` combines
(``tfspec.variants.router_parts``: its scoring, what it reads, what steers the choice, how the weights are weighed;
a softmax alone by default). Options: ``weigh`` (``outputs``: the chosen experts' outputs summed by their weights;
``inputs``: each chosen expert runs on its input scaled by its weight and the outputs are summed as they are, Llama
4's); ``shared`` (the d_ff of a network every position also runs; Qwen2-MoE's shared expert) with ``shared_gate``
(its output scaled by sigmoid(w·x)); ``experts_norm=rmsnorm`` (the experts read x RMS-normed, with a weight, of
``norm_eps``, while the router reads x: Gemma 4's mixture beside its MLP). Training adds the load-balancing loss
(``aux_loss``: its coefficient; Switch's and Mixtral's ``experts · Σ f_e·P_e``) and the router z-loss
(``z_loss``), which the trainer logs as ``moe_balance`` and ``moe_z``; both over the call's real positions (a
padded batch's pads left out, as Hugging Face's attention mask leaves them out).

At run time the mixture is its parts (``tfspec.nn.moe``): the router's linear map (``router``), its ``choice``
with each router part under its name (``choice.correction.bias``, ``choice.expert_scale.scale``), the ``experts``,
the ``shared`` network and its ``shared_gate``, the ``experts_norm``.

Compute is dropless, each expert running once on the positions that chose it (``tfspec.nn.moe``); the analysis
counts a position's ``top`` experts (and the router, and the shared network): FLOPs per position do not depend
on which experts are chosen, and ``summary`` prints the active parameters against the total.

    decoder x 32 { ...; feedforward d_ff=14336 activation=swiglu kind=moe(experts=8, top=2) router=renormalize }
"""

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..registry import ACTIVATIONS, FEEDFORWARD_KINDS, ROUTER_PARTS, Constructor, FeedForwardKind, Param, linear_params
from .dense import dense_flops, dense_params


def router_parts(body) -> list:
    """The sublayer's router parts as (part, options) pairs, a softmax first where none scores."""
    parts = [ROUTER_PARTS.of(choice) for choice in body.router]
    if not any(part.scores for part, _ in parts):
        parts.insert(0, (ROUTER_PARTS["softmax"], ROUTER_PARTS["softmax"].options({})))
    return parts


@FEEDFORWARD_KINDS.register
class MixtureOfExperts(FeedForwardKind):
    name = "moe"
    title = "Mixture of Experts"
    positional = ("experts", "top")
    examples = ({"experts": 4, "top": 2},
                {"experts": 3, "top": 1, "router_bias": True, "shared": 8, "shared_gate": True, "aux_loss": 0.01,
                 "z_loss": 0.001},
                {"experts": 4, "top": 1, "weigh": "inputs", "shared": 8},
                {"experts": 4, "top": 2, "experts_norm": "rmsnorm", "norm_eps": 1e-5})
    doc = ("moe(experts, top): a router sends each position to its top experts, networks of the sublayer's d_ff "
           "and activation, and sums their outputs by the routing weights")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        experts: int = Field(gt=0, le=1 << 16)
        top: int = Field(gt=0, le=1 << 16)
        router_bias: bool = False  # the router's linear map has a bias (gpt-oss's)
        shared: int = Field(0, ge=0, le=1 << 24)  # d_ff of the network every position runs (0: none)
        shared_gate: bool = False
        aux_loss: float = Field(0.0, ge=0, le=1e3)
        z_loss: float = Field(0.0, ge=0, le=1e3)
        weigh: Literal["outputs", "inputs"] = "outputs"  # what the routing weights scale: each expert's output or input
        experts_norm: Literal["none", "rmsnorm"] = "none"  # the experts (and a shared network) read x normed so
        norm_eps: float = Field(1e-6, gt=0, lt=1)  # of the experts' norm

        @model_validator(mode="after")
        def _fits(self):
            if self.top > self.experts:
                raise ValueError(f"top={self.top} of {self.experts} experts: a position chooses at most every expert")
            if self.shared_gate and not self.shared:
                raise ValueError("shared_gate scales a shared network: give its d_ff as shared=")
            if self.norm_eps != 1e-6 and self.experts_norm == "none":
                raise ValueError("norm_eps is the experts' norm's: give experts_norm=rmsnorm")
            return self

    trains_activation = False  # its experts share one activation module: one with parameters of its own is refused
    routes = True

    def params(self, width, body, options):
        activation = ACTIVATIONS[body.activation.name]
        experts, up = options.experts, activation.up_features(body.d_ff)
        params = {**linear_params("router", experts, width, options.router_bias),
                  **{f"choice.{part.name}.{k}": p for part, part_options in router_parts(body)
                     for k, p in part.params(width, options, part_options).items()},
                  **({"experts_norm.weight": Param((width,), "norm_weight")} if options.experts_norm == "rmsnorm"
                     else {}),
                  "experts.up": Param((experts, up, width), "matrix"),
                  "experts.down": Param((experts, width, body.d_ff), "matrix", residual=True)}
        if body.bias:
            params.update({"experts.up_bias": Param((experts, up), "bias"),
                           "experts.down_bias": Param((experts, width), "bias")})
        if options.shared:
            params.update(dense_params(width, options.shared, activation, body.bias, prefix="shared."))
            if options.shared_gate:
                params.update(linear_params("shared_gate", 1, width, False))
        return params

    def module(self, width, body, options):
        """The mixture as its parts: the router's linear map, the choice of experts (its router parts), the
        experts, the shared network and its gate, the experts' norm."""
        from ..nn.feedforward import FeedForward
        from ..nn.moe import Choice, Experts, MixtureOfExperts as Module
        activation, values = ACTIVATIONS.of(body.activation)
        experts, up = options.experts, activation.up_features
        choice = Constructor(Choice, (options.top, {part.name: part.module(width, options, part_options)
                                                     for part, part_options in router_parts(body)}))
        parts = {"aux_loss": options.aux_loss, "z_loss": options.z_loss}
        if options.shared:
            parts["shared"] = Constructor(FeedForward, (width, options.shared, activation.module_for(values),
                                                        up(options.shared), body.bias, body.dropout))
        if options.shared_gate:
            parts["shared_gate"] = Constructor("Linear", (width, 1), {"bias": False})
        if options.experts_norm == "rmsnorm":
            parts["experts_norm"] = Constructor("RMSNorm", (width,), {"eps": options.norm_eps})
        return Constructor(Module, (Constructor("Linear", (width, experts), {"bias": options.router_bias}), choice,
                                    Constructor(Experts, (experts, width, body.d_ff, up(body.d_ff),
                                                          activation.module_for(values), body.bias, body.dropout,
                                                          options.weigh == "inputs"))), parts)

    def flops(self, width, body, options):
        activation = ACTIVATIONS[body.activation.name]
        matmul, elementwise = dense_flops(width, body.d_ff, activation, body.bias, body.dropout)
        matmul, elementwise = options.top * matmul, options.top * elementwise
        # the router, its scores and the top-k weights; each choice's weighting and its sum into the output
        matmul += 2 * width * options.experts
        elementwise += (options.experts if options.router_bias else 0) + 3 * options.experts \
            + 2 * options.top * width
        elementwise += sum(part.flops(width, options, part_options) for part, part_options in router_parts(body))
        if options.experts_norm == "rmsnorm":
            elementwise += 4 * width
        if options.shared:
            shared_matmul, shared_elementwise = dense_flops(width, options.shared, activation, body.bias,
                                                            body.dropout)
            matmul, elementwise = matmul + shared_matmul, elementwise + shared_elementwise + width
            if options.shared_gate:
                matmul, elementwise = matmul + 2 * width, elementwise + 1 + width
        return matmul, elementwise

    def saved(self, width, body, options):
        activation = ACTIVATIONS[body.activation.name]
        top, experts = options.top, options.experts
        # each choice: the gathered input, the network's own (``Activation.feedforward_saved``), its output and
        # weight, kept by the weighting
        elements = top * (2 * width + 1 + activation.feedforward_saved(body.d_ff, bool(body.dropout)))
        # float32 words: the probabilities; the chosen experts, the grouped order and each choice's position
        # (int64: two words each)
        words = experts + 3 * 2 * top
        for part, part_options in router_parts(body):
            part_elements, part_words = part.saved(width, options, part_options)
            elements, words = elements + part_elements, words + part_words
        if options.weigh == "inputs":  # the grouped order again, by which each choice's weight is gathered
            words += 2 * top
        if options.shared:
            elements += activation.feedforward_saved(options.shared, bool(body.dropout))
            if options.shared_gate:  # the gate's sigmoid and the shared output it scales
                elements += width + 1
        if options.z_loss:  # the logits and their log-sum-exp (training)
            elements, words = elements + experts, words + 1
        if options.experts_norm == "rmsnorm":  # the normed input (for its weight); 1/rms
            elements, words = elements + width, words + 1
        return elements, words

    def active_params(self, width, body, options):
        params = self.params(width, body, options)
        stacked = [name for name in params if name.startswith("experts.")]  # (not experts_norm: every position's)
        per_expert = sum(math.prod(params[name].shape[1:]) for name in stacked)
        rest = sum(math.prod(p.shape) for name, p in params.items() if name not in stacked)
        return rest + options.top * per_expert

    def describe(self, body, options):
        activation = ACTIVATIONS.label(body.activation)
        shared = f" + shared {options.shared}" if options.shared else ""
        router = " + ".join(ROUTER_PARTS.label(choice) for choice in body.router) or "softmax"
        return (f"Mixture of Experts ({router} router → top {options.top} of {options.experts} experts, "
                f"{activation}, {body.d_ff}{shared})")
