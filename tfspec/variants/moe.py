"""A mixture of experts (Shazeer et al. 2017; Switch, Fedus et al. 2021; Mixtral, Jiang et al. 2024) in place of the
feed-forward network: ``experts`` networks of the sublayer's ``d_ff`` and ``activation`` (GLU included), a router
that scores each position against every expert, and the ``top`` best experts' outputs summed by their weights.

Options: ``score`` (``softmax`` over the experts, or ``sigmoid`` per expert), then the top ``top``; ``renormalize``
(the chosen weights divided by their sum: Mixtral's, whose softmax-then-top-k is then top-k-then-softmax);
``scale`` (DeepSeek's routed scaling factor); ``sparsemixer`` (GRIN, Liu et al. 2024: Phi-3.5-MoE's routing) chooses two
experts in turn, each among those whose logits lie within a relative ``2·eps`` of the best left, the best in eval and
one sampled by its softmax in training, weighted by that softmax and trained through Heun's third-order estimate of
the routing gradient; ``input_jitter`` multiplies a training call's input by noise uniform in 1 ± it; ``correction`` (DeepSeek-V3's per-expert bias added to the scores
that choose, not to the weights; outside gradient descent: with ``correction_rate`` γ, each training call raises
an expert's bias by γ where it was chosen less often than the mean and lowers it where more often, DeepSeek-V3's
balancing without an auxiliary loss); ``groups`` and
``top_groups`` (group-limited routing: each position chooses among the ``top_groups`` groups that score highest,
a group by its two best scores' sum, ``group_score=top2``: DeepSeek-V3's, or by its best, ``max``: DeepSeek-V2's);
``router_bias``; ``router_input=normed`` (the router reads rms(x) · s / √width, s a learned scale per channel),
``renormalize_eps`` (added to the sum the chosen weights are divided by: LFM2-MoE's 1e-6);
``experts_norm=rmsnorm`` (the experts read x RMS-normed, with a weight, while the router reads x: Gemma 4's
mixture beside its MLP), ``norm_eps`` (both norms'), ``expert_scale`` (a learned scale per expert on its routing
weight, after the renormalisation: Gemma 4's ``per_expert_scale``); ``weigh`` (``outputs``: the chosen experts' outputs summed by their weights; ``inputs``: each
chosen expert runs on its input scaled by its weight and the outputs are summed as they are, Llama 4's); ``shared`` (the d_ff of a network every position
also runs; Qwen2-MoE's shared expert) with ``shared_gate`` (its output scaled by sigmoid(w·x)). Training adds the
load-balancing loss (``aux_loss``: its coefficient; Switch's and Mixtral's ``experts · Σ f_e·P_e``) and the router
z-loss (``z_loss``), which the trainer logs as ``moe_balance`` and ``moe_z``; both over the call's real positions
(a padded batch's pads left out, as Hugging Face's attention mask leaves them out).

At run time the mixture is its parts (``tfspec.nn.moe``): the router's input (``router_input.scale``), its linear map
(``router``), its ``choice`` (``choice.correction.bias``, ``choice.expert_scale``), the ``experts``, the ``shared``
network and its ``shared_gate``, the ``experts_norm``.

Compute is dropless, each expert running once on the positions that chose it (``tfspec.nn.moe``); the analysis
counts a position's ``top`` experts (and the router, and the shared network): FLOPs per position do not depend
on which experts are chosen, and ``summary`` prints the active parameters against the total.

    decoder x 32 { ...; feedforward d_ff=14336 activation=swiglu kind=moe(experts=8, top=2, renormalize=true) }
"""

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..registry import ACTIVATIONS, FEEDFORWARD_KINDS, Constructor, FeedForwardKind, Param, linear_params
from .dense import dense_flops, dense_params


@FEEDFORWARD_KINDS.register
class MixtureOfExperts(FeedForwardKind):
    name = "moe"
    title = "Mixture of Experts"
    positional = ("experts", "top")
    examples = ({"experts": 4, "top": 2, "renormalize": True},
                {"experts": 3, "top": 1, "score": "sigmoid", "scale": 2.0, "router_bias": True, "shared": 8,
                 "shared_gate": True, "aux_loss": 0.01, "z_loss": 0.001},
                {"experts": 8, "top": 3, "score": "sigmoid", "correction": True, "groups": 4, "top_groups": 2,
                 "renormalize": True, "scale": 2.5, "shared": 8, "correction_rate": 0.001},
                {"experts": 4, "top": 2, "score": "sigmoid", "correction": True, "renormalize": True,
                 "renormalize_eps": 1e-6, "scale": 1.5},
                {"experts": 6, "top": 2, "groups": 3, "top_groups": 2, "group_score": "max", "scale": 1.5},
                {"experts": 4, "top": 1, "score": "sigmoid", "weigh": "inputs", "shared": 8},
                {"experts": 4, "top": 2, "score": "sparsemixer", "eps": 0.2, "input_jitter": 0.01, "aux_loss": 0.01},
                {"experts": 4, "top": 2, "renormalize": True, "router_input": "normed", "experts_norm": "rmsnorm",
                 "norm_eps": 1e-5, "expert_scale": True})
    doc = ("moe(experts, top): a router sends each position to its top experts, networks of the sublayer's d_ff "
           "and activation, and sums their outputs by the routing weights")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        experts: int = Field(gt=0, le=1 << 16)
        top: int = Field(gt=0, le=1 << 16)
        score: Literal["softmax", "sigmoid", "sparsemixer"] = "softmax"
        renormalize: bool = False
        scale: float = Field(1.0, gt=0, le=1e6)
        router_bias: bool = False
        shared: int = Field(0, ge=0, le=1 << 24)  # d_ff of the network every position runs (0: none)
        shared_gate: bool = False
        aux_loss: float = Field(0.0, ge=0, le=1e3)
        z_loss: float = Field(0.0, ge=0, le=1e3)
        correction: bool = False  # DeepSeek-V3's per-expert bias on the choice (not on the weights)
        groups: int = Field(1, gt=0, le=1 << 16)  # group-limited routing: experts in this many groups ...
        top_groups: int = Field(1, gt=0, le=1 << 16)  # ... of which each position chooses among the best these
        group_score: Literal["top2", "max"] = "top2"  # a group's: its two best scores' sum, or its best
        correction_rate: float = Field(0.0, ge=0, le=1)  # γ: how far a training call moves the correction bias
        weigh: Literal["outputs", "inputs"] = "outputs"  # what the routing weights scale: each expert's output or input
        eps: float = Field(0.01, ge=0, le=1)  # sparsemixer: the experts within a relative 2·eps of the best compete
        input_jitter: float = Field(0.0, ge=0, lt=1)  # training multiplies the input by noise uniform in 1 ± this
        # what the router reads: the input, or rms(x) · s / √width with s a learned scale per channel (Gemma 4's)
        router_input: Literal["plain", "normed"] = "plain"
        experts_norm: Literal["none", "rmsnorm"] = "none"  # the experts (and a shared network) read x normed so
        norm_eps: float = Field(1e-6, gt=0, lt=1)  # of the router's norm and the experts' norm
        expert_scale: bool = False  # a learned scale per expert on its routing weight (Gemma 4's per_expert_scale)
        renormalize_eps: float = Field(0.0, ge=0, lt=1)  # added to the chosen weights' sum (LFM2-MoE's 1e-6)

        @model_validator(mode="after")
        def _fits(self):
            if self.top > self.experts:
                raise ValueError(f"top={self.top} of {self.experts} experts: a position chooses at most every expert")
            if self.shared_gate and not self.shared:
                raise ValueError("shared_gate scales a shared network: give its d_ff as shared=")
            if self.experts % self.groups or (self.groups > 1 and self.experts // self.groups < 2):
                raise ValueError(f"{self.experts} experts do not split into {self.groups} groups of 2 or more")
            if self.correction_rate and not self.correction:
                raise ValueError("correction_rate moves a correction bias: set correction=true")
            if self.score == "sparsemixer" and (self.top != 2 or self.renormalize or self.scale != 1.0 or self.correction
                                                or self.groups > 1):
                raise ValueError("score=sparsemixer chooses two experts with weights of its own: give top=2, and no "
                                 "renormalize, scale, correction or groups")
            if self.eps != 0.01 and self.score != "sparsemixer":
                raise ValueError("eps is the sparse mixer's threshold: give score=sparsemixer")
            if self.norm_eps != 1e-6 and self.router_input == "plain" and self.experts_norm == "none":
                raise ValueError("norm_eps is the router's and the experts' norm's: give router_input=normed or "
                                 "experts_norm=rmsnorm")
            if self.renormalize_eps and not self.renormalize:
                raise ValueError("renormalize_eps is added to the sum renormalize divides by: set renormalize=true")
            if self.group_score != "top2" and self.groups == 1:
                raise ValueError(f"group_score={self.group_score} ranks groups of experts: give groups=")
            if self.top_groups > self.groups or self.top > self.top_groups * (self.experts // self.groups):
                raise ValueError(f"top_groups={self.top_groups} of {self.groups} groups hold fewer than top={self.top} "
                                 "experts")
            return self

    trains_activation = False  # its experts share one activation module: one with parameters of its own is refused
    routes = True

    def params(self, width, body, options):
        activation = ACTIVATIONS[body.activation.name]
        experts, up = options.experts, activation.up_features(body.d_ff)
        params = {**linear_params("router", experts, width, options.router_bias),
                  **({"router_input.scale": Param((width,), "norm_weight", value=1.0)}
                     if options.router_input == "normed" else {}),
                  **({"choice.expert_scale": Param((experts,), "norm_weight", value=1.0)}
                     if options.expert_scale else {}),
                  **({"experts_norm.weight": Param((width,), "norm_weight")} if options.experts_norm == "rmsnorm"
                     else {}),
                  **({"choice.correction.bias": Param((experts,), "bias")} if options.correction else {}),
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
        """The mixture as its parts: the router's linear map (and what it reads), the choice of experts (scoring,
        correction, groups, weighing), the experts, the shared network and its gate, the experts' norm."""
        from ..nn.feedforward import FeedForward
        from ..nn.moe import Choice, Correction, Experts, GroupLimit, MixtureOfExperts as Module, NormedRouterInput
        activation, values = ACTIVATIONS.of(body.activation)
        experts, up = options.experts, activation.up_features
        choice = Constructor(Choice, (experts, options.top, options.score), {
            "eps": options.eps, "renormalize": options.renormalize, "renormalize_eps": options.renormalize_eps,
            "scale": options.scale, "expert_scale": options.expert_scale,
            "correction": Constructor(Correction, (experts, options.correction_rate)) if options.correction else None,
            "groups": Constructor(GroupLimit, (options.groups, options.top_groups, options.group_score))
            if options.groups > 1 else None})
        parts = {"input_jitter": options.input_jitter, "aux_loss": options.aux_loss, "z_loss": options.z_loss}
        if options.shared:
            parts["shared"] = Constructor(FeedForward, (width, options.shared, activation.module_for(values),
                                                        up(options.shared), body.bias, body.dropout))
        if options.shared_gate:
            parts["shared_gate"] = Constructor("Linear", (width, 1), {"bias": False})
        if options.router_input == "normed":
            parts["router_input"] = Constructor(NormedRouterInput, (width, options.norm_eps))
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
        if options.router_input == "normed":  # the norm (4 a channel), its scale and the constant
            elementwise += 6 * width
        if options.experts_norm == "rmsnorm":
            elementwise += 4 * width
        if options.expert_scale:
            elementwise += options.top
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
        # (int64: two words each); a renormalisation's weights and their sum
        words = experts + 3 * 2 * top + (top + 1 if options.renormalize else 0)
        if options.weigh == "inputs":  # the grouped order again, by which each choice's weight is gathered
            words += 2 * top
        if options.score == "sparsemixer":  # each choice's gradient estimate: its weight, expert and gates
            words += 2 * (1 + 2 + experts)
        if options.input_jitter:  # the noise (the jittered input then takes the place of the input the router keeps)
            elements += width
        if options.shared:
            elements += activation.feedforward_saved(options.shared, bool(body.dropout))
            if options.shared_gate:  # the gate's sigmoid and the shared output it scales
                elements += width + 1
        if options.z_loss:  # the logits and their log-sum-exp (training)
            elements, words = elements + experts, words + 1
        if options.router_input == "normed":  # the normed input (for its scale) and the router's input; 1/rms
            elements, words = elements + 2 * width, words + 1
        if options.experts_norm == "rmsnorm":  # the normed input (for its weight); 1/rms
            elements, words = elements + width, words + 1
        if options.expert_scale:  # the weights it scales and the chosen experts' scales
            elements += 2 * top
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
        return (f"Mixture of Experts (router → top {options.top} of {options.experts} experts, {activation}, "
                f"{body.d_ff}{shared})")
