"""The parts of a mixture of experts' router (``feedforward ... kind=moe(experts, top) router=...``), combined with
``+``, each at most once; without a scoring part the router scores by ``softmax``:

- scoring: ``softmax`` over the experts (Mixtral's, Qwen's), ``sigmoid`` per expert (DeepSeek-V3's, Llama 4's), or
  ``sparsemixer(eps=0.01)`` (GRIN, Liu et al. 2024: Phi-3.5-MoE's), which chooses two experts in turn, each among
  those whose logits lie within a relative ``2·eps`` of the best left, the best in eval and one sampled by its
  softmax in training, weighted by that softmax and trained through Heun's third-order estimate of the routing
  gradient;
- what the router reads: ``normed_input(eps=1e-6)``, rms(x) · s / √width with s a learned scale per channel (Gemma
  4's); ``jitter(amount)``, a training call's input (the router's and the experts') times noise uniform in
  1 ± amount (PhiMoE's);
- what steers the choice, not the weights: ``correction(rate=0)``, DeepSeek-V3's per-expert bias added to the scores
  that choose, moved outside gradient descent by ``rate`` γ after each training call (up where an expert was chosen
  less often than the mean, down where more often: balancing without an auxiliary loss); ``groups(groups,
  top_groups=1, by=top2)``, group-limited routing: each position chooses among the ``top_groups`` groups that score
  highest, a group by its two best scores' sum (``top2``: DeepSeek-V3's) or its best (``max``: DeepSeek-V2's);
- the weights: ``renormalize(eps=0)``, divided by their sum (plus eps: LFM2-MoE's 1e-6; Mixtral's softmax-then-top-k
  is then top-k-then-softmax); ``scale(factor)``, times DeepSeek's routed scaling factor; ``expert_scale``, times a
  learned scale per expert (Gemma 4's ``per_expert_scale``) -- in this order, however they are written.

    feedforward d_ff=2048 activation=swiglu kind=moe(256, 8, shared=2048)
                router=sigmoid + correction + groups(8, 4) + renormalize + scale(2.5)
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ROUTER_PARTS, Constructor, Param, Problem, RouterPart


def _runtime(name: str, *args) -> Constructor:
    from ..nn import moe
    return Constructor(getattr(moe, name), args)


@ROUTER_PARTS.register
class Softmax(RouterPart):
    name = "softmax"
    scores = True
    doc = "softmax: the probabilities a softmax over the experts' logits (the default)"

    def module(self, width, mixture, options):
        return _runtime("Softmax")


@ROUTER_PARTS.register
class Sigmoid(RouterPart):
    name = "sigmoid"
    scores = True
    doc = "sigmoid: each expert's probability the sigmoid of its logit (DeepSeek-V3, Llama 4)"

    def module(self, width, mixture, options):
        return _runtime("Sigmoid")


@ROUTER_PARTS.register
class SparseMixer(RouterPart):
    name = "sparsemixer"
    title = "sparse mixer"
    scores = True
    positional = ("eps",)
    examples = ({}, {"eps": 0.2})
    doc = "sparsemixer(eps=0.01): two experts chosen in turn among those within a relative 2·eps of the best (GRIN)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        eps: float = Field(0.01, ge=0, le=1)  # the experts within a relative 2·eps of the best compete

    def check(self, options, mixture, parts):
        others = [p for p in parts if p in ("renormalize", "scale", "correction", "groups")]
        if mixture.top != 2 or others:
            return [Problem("the sparse mixer chooses two experts with weights of its own: it takes top=2"
                            + (f" and no {', '.join(others)}" if others else ""),
                            "give moe(experts, 2) and drop the other parts of the choice")]
        return []

    def module(self, width, mixture, options):
        return _runtime("SparseMixer", options.eps)

    def saved(self, width, mixture, options):
        return 0, 2 * (1 + 2 + mixture.experts)  # each choice's gradient estimate: its weight, expert and gates


@ROUTER_PARTS.register
class NormedInput(RouterPart):
    name = "normed_input"
    title = "normed input"
    positional = ("eps",)
    examples = ({}, {"eps": 1e-5})
    doc = "normed_input(eps=1e-6): the router reads rms(x) · s / √width, s learned per channel (Gemma 4)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        eps: float = Field(1e-6, gt=0, lt=1)

    def params(self, width, mixture, options):
        return {"scale": Param((width,), "norm_weight", value=1.0)}

    def module(self, width, mixture, options):
        return _runtime("NormedInput", width, options.eps)

    def flops(self, width, mixture, options):
        return 6 * width  # the norm (4 a channel), its scale and the constant

    def saved(self, width, mixture, options):
        return 2 * width, 1  # the normed input (for its scale) and the router's input; 1/rms


@ROUTER_PARTS.register
class Jitter(RouterPart):
    name = "jitter"
    positional = ("amount",)
    examples = ({"amount": 0.01}, {"amount": 0.2})
    doc = "jitter(amount): a training call's input times noise uniform in 1 ± amount (PhiMoE)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        amount: float = Field(gt=0, lt=1)  # the noise's half-width around 1

    def module(self, width, mixture, options):
        return _runtime("Jitter", options.amount)

    def saved(self, width, mixture, options):
        return width, 0  # the noise (the jittered input then takes the place of the input the router keeps)


@ROUTER_PARTS.register
class Correction(RouterPart):
    name = "correction"
    positional = ("rate",)
    examples = ({}, {"rate": 0.001})
    doc = ("correction(rate=0): a per-expert bias on the scores that choose, moved towards balance by rate after "
           "each training call (DeepSeek-V3)")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        rate: float = Field(0.0, ge=0, le=1)  # γ: how far a training call moves the bias

    def params(self, width, mixture, options):
        return {"bias": Param((mixture.experts,), "bias")}

    def module(self, width, mixture, options):
        return _runtime("Correction", mixture.experts, options.rate)


@ROUTER_PARTS.register
class Groups(RouterPart):
    name = "groups"
    positional = ("groups", "top_groups")
    examples = ({"groups": 2}, {"groups": 2, "top_groups": 2, "by": "max"})
    doc = "groups(groups, top_groups=1, by=top2): each position chooses among the best top_groups groups of experts"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        groups: int = Field(gt=1, le=1 << 16)  # the experts in this many groups ...
        top_groups: int = Field(1, gt=0, le=1 << 16)  # ... of which each position chooses among the best these
        by: Literal["top2", "max"] = "top2"  # a group's score: its two best scores' sum, or its best

    def check(self, options, mixture, parts):
        experts, top = mixture.experts, mixture.top
        if experts % options.groups or experts // options.groups < 2:
            return [Problem(f"{experts} experts do not split into {options.groups} groups of 2 or more",
                            "give a number of groups that divides the experts")]
        if options.top_groups > options.groups or top > options.top_groups * (experts // options.groups):
            return [Problem(f"top_groups={options.top_groups} of {options.groups} groups hold fewer than top={top} "
                            "experts", "choose among more groups")]
        return []

    def module(self, width, mixture, options):
        return _runtime("GroupLimit", options.groups, options.top_groups, options.by)


@ROUTER_PARTS.register
class Renormalize(RouterPart):
    name = "renormalize"
    positional = ("eps",)
    examples = ({}, {"eps": 1e-6})
    doc = "renormalize(eps=0): the chosen experts' weights divided by their sum (plus eps: LFM2-MoE)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        eps: float = Field(0.0, ge=0, lt=1)  # added to the sum (LFM2-MoE's 1e-6)

    def module(self, width, mixture, options):
        return _runtime("Renormalize", options.eps)

    def saved(self, width, mixture, options):
        return 0, mixture.top + 1  # the weights it divides and their sum


@ROUTER_PARTS.register
class Scale(RouterPart):
    name = "scale"
    positional = ("factor",)
    examples = ({"factor": 2.5}, {"factor": 0.5})
    doc = "scale(factor): the weights times factor (DeepSeek's routed scaling factor)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        factor: float = Field(gt=0, le=1e6)

    def module(self, width, mixture, options):
        return _runtime("Scale", options.factor)


@ROUTER_PARTS.register
class ExpertScale(RouterPart):
    name = "expert_scale"
    title = "expert scale"
    doc = "expert_scale: each chosen expert's weight times a learned scale of its own (Gemma 4's per_expert_scale)"

    def params(self, width, mixture, options):
        return {"scale": Param((mixture.experts,), "norm_weight", value=1.0)}

    def module(self, width, mixture, options):
        return _runtime("ExpertScale", mixture.experts)

    def flops(self, width, mixture, options):
        return mixture.top

    def saved(self, width, mixture, options):
        return 2 * mixture.top, 0  # the weights it scales and the chosen experts' scales
