"""The contracts of a layer's parts other than attention: activations, feed-forward kinds, norms, token
mixers, initialisations."""

from __future__ import annotations

import math
from typing import ClassVar

from .contract import ComplexityClass, Constructor, Param, Problem, Registry, Variant


class Activation(Variant):
    """What a feed-forward applies between its projections: ``module()`` maps ``up_features(d_ff)`` features to
    ``d_ff`` (an element-wise function; a gated unit halves them, act(gate) * value)."""

    # Cost model (tfspec.inspect.analysis): FLOPs per element by convention, and which tensor
    # autograd keeps for the backward pass ("input": GELU, SiLU; "output": ReLU, tanh).
    flops_per_element: ClassVar[int] = 1
    saves: ClassVar[str] = "input"

    def module(self) -> Constructor:
        """The function as an ``nn.Module``, from ``up_features(d_ff)`` features to ``d_ff``."""
        raise NotImplementedError

    def module_for(self, options) -> Constructor:
        """``module()`` with the options it was written with (gpt-oss's clamped SwiGLU has some; most none)."""
        return self.module()

    def up_features(self, d_ff: int) -> int:
        """The features the up projection makes for ``d_ff`` hidden units (a gated unit's: gate and value)."""
        return d_ff

    def params(self, d_ff: int, options) -> dict[str, Param]:
        """The parameters it trains, by name in its module, for a network of ``d_ff`` hidden units (xIELU's two);
        {}: a fixed function."""
        return {}

    def flops(self, d_ff: int) -> int:
        """Element-wise FLOPs per position, from ``d_ff`` hidden units."""
        return self.flops_per_element * d_ff

    def feedforward_saved_bytes(self, d_ff: int) -> int:
        """Bytes per position it keeps whatever the activations' dtype (xIELU's bool choice of branch)."""
        return 0

    def call_saved(self, element_bytes: int) -> int:
        """Bytes a network's call keeps whatever its length (what a trained activation makes of its values)."""
        return 0

    def feedforward_saved(self, d_ff: int, dropout: bool) -> int:
        """Elements a feed-forward keeps per position between its projections: what the function keeps, and
        with dropout its mask and the dropped values, the down projection's input. Without dropout that input
        is the function's output: kept by a function that keeps its output (ReLU), else computed again from
        the input in backward (``tfspec.nn.recompute.linear_of_activation``)."""
        return (1 + (2 if dropout else 0)) * d_ff

    def build(self):
        return self.module().build()


class FeedForwardKind(Variant):
    """How a feed-forward sublayer maps each position: one network (``dense``), or a router choosing among experts
    (``moe``). Its whole contract, from the sublayer's settings (``body``: a ``schema.FeedForward``: ``d_ff``,
    ``activation``, ``bias``, ``dropout``) and the stream's ``width``: parameters with their roles, the runtime
    module, cost and memory per position."""

    routes: ClassVar[bool] = False  # chooses among experts for each position (a mixture), as ``moe`` does
    # Holds what an activation trains (xIELU's two parameters) with its network; a mixture's experts share one
    # module of the function, so one that trains parameters is refused there
    trains_activation: ClassVar[bool] = True
    # Reads its layer's per-layer inputs (``embedding ... { per_layer N }``: Gemma 4's), which its stack's
    # embedding must make, N wide (``d_ff``); the graph has an edge on port ``per_layer`` from them
    reads_per_layer: ClassVar[bool] = False

    def params(self, width: int, body, options) -> dict[str, Param]:
        raise NotImplementedError

    def module(self, width: int, body, options) -> Constructor:
        """The runtime ``nn.Module``, ``forward(x)`` of ``(..., width)``, owning exactly ``params``."""
        raise NotImplementedError

    def flops(self, width: int, body, options) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs per position (multiply-adds count 2)."""
        raise NotImplementedError

    def saved(self, width: int, body, options) -> tuple[int, int]:
        """Per position, the (activation-dtype elements, 4-byte words) autograd keeps between the sublayer's input
        and its output, its input excluded (the analysis counts that once for all its readers)."""
        raise NotImplementedError

    def saved_bytes(self, width: int, body, options) -> int:
        """Per position, the bytes it keeps besides ``saved``'s whatever the dtype (its activation's bool masks)."""
        return 0

    def call_saved(self, width: int, body, options, element_bytes: int) -> int:
        """Bytes a call keeps whatever its length (a trained activation's values, as its functions make them)."""
        return 0

    def active_params(self, width: int, body, options) -> int:
        """The parameters one position's computation reads (a mixture's router, chosen and shared experts)."""
        return sum(math.prod(p.shape) for p in self.params(width, body, options).values())

    def describe(self, body, options) -> str:
        """The node's label: "Feed Forward (SwiGLU, 14336)"."""
        raise NotImplementedError


class RouterPart(Variant):
    """A part of a mixture of experts' router (``feedforward ... kind=moe(8, 2) router=sigmoid + renormalize``): how
    the router's logits become probabilities (a ``scores`` part: softmax, the default, sigmoid, the sparse mixer),
    what the router reads, what steers the choice of the ``top`` experts and how the chosen ones are weighed. Its
    whole contract, from the mixture's ``width`` and its options (``mixture``: ``experts``, ``top``): parameters
    with their roles (under the mixture's ``choice.NAME.``), checks, cost per position, label, and the runtime part
    (a ``tfspec.nn.moe.RouterPart``)."""

    scores: ClassVar[bool] = False  # it turns the logits into probabilities: a router has one such part

    def params(self, width: int, mixture, options) -> dict[str, Param]:
        return {}

    def check(self, options, mixture, parts: tuple[str, ...]) -> list[Problem]:
        """Objections to the mixture (``mixture``: its options) and to the router's other ``parts`` (names)."""
        return []

    def module(self, width: int, mixture, options) -> Constructor:
        raise NotImplementedError

    def flops(self, width: int, mixture, options) -> int:
        """Element-wise FLOPs it adds per position."""
        return 0

    def saved(self, width: int, mixture, options) -> tuple[int, int]:
        """Per position, the (activation-dtype elements, 4-byte words) autograd keeps for it."""
        return 0, 0


class Norm(Variant):
    flops_per_element: ClassVar[int] = 0  # by convention, for tfspec.inspect.analysis
    module_name: ClassVar[str] = "norm"  # what a wiring call of it is named in its layer (``norm``, ``norm_1``, ...)

    def saved(self, dim: int, options=None) -> tuple[int, int]:
        """Per position, the (activation-dtype, float32) elements autograd keeps for backward (``options``: its
        own, where they change it; None: its defaults')."""
        return (0, 0)

    def params(self, dim: int, options) -> dict[str, Param]:
        """Its parameters with their roles (a scale: ``norm_weight``; a shift: ``norm_bias``), so every scheme
        initialises them as a norm's wherever the norm stands (a sublayer's, a final norm, qk-norm, a head's)."""
        return {}

    def module(self, dim: int, options) -> Constructor:
        """An ``nn.Module`` normalising the last dimension, owning exactly ``params``."""
        raise NotImplementedError

    def build(self, dim: int, options):
        return self.module(dim, options).build()


class TokenMixer(Variant):
    """A sublayer that mixes positions other than by attention, carrying a recurrent state while decoding (a short
    convolution's window of past inputs; a state-space model's or a linear attention's state matrix). Its whole
    contract, from the stream's ``width`` and its options: parameters with their roles (and initial values where
    a paper gives them), checks, cost, label and the runtime module, which computes a whole sequence at once (the
    parallel form, for training and prompts) and continues from its ``RecurrentState`` one call at a time
    (``tfspec.nn.state``): ``forward(x, ctx=None, state=None)``.

    ``module_name``: the layer's attribute for it (LFM2's ``conv``), which names its weights and its sublayer in
    ``layers`` sections. ``causal``: an output depends on its own and earlier positions only, so a decoder's
    cache of states continues exactly what recomputation gives. ``reads_padding``: padded positions enter its
    state as nothing (each is left out), so the model takes a padding mask for it."""

    module_name: ClassVar[str] = "mixer"
    causal: ClassVar[bool] = True
    reads_padding: ClassVar[bool] = True

    def params(self, width: int, options) -> dict[str, Param]:
        raise NotImplementedError

    def module(self, width: int, options) -> Constructor:
        """The torch-only runtime module, owning exactly ``params``: ``forward(x, ctx=None, state=None)`` of
        ``(batch, length, width)``."""
        raise NotImplementedError

    def check(self, options, width: int, layers: int) -> list[Problem]:
        """Objections to its options in a stack of ``width`` and ``layers`` layers."""
        return []

    def flops(self, width: int, options, length: int) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs over one sequence of ``length`` positions, as its parallel form runs
        (multiply-adds count 2; a convolution's as ``FlopCounterMode`` counts them)."""
        raise NotImplementedError

    def saved(self, width: int, options, batch: int, length: int) -> int:
        """Activation-dtype elements autograd keeps between the sublayer's input and its output for the batch, its
        input excluded (the analysis counts that once for all its readers)."""
        raise NotImplementedError

    def reach(self, options) -> int | None:
        """How many positions before its own an output depends on (a short convolution's kernel − 1); None:
        every earlier one (a recurrence carries its state from the first)."""
        return None

    def state_elements(self, width: int, options) -> int:
        """Elements its decoding state holds per sequence, whatever the length (what a KV cache holds per token,
        a recurrent state holds once)."""
        raise NotImplementedError

    def state_bytes(self, width: int, options, element_bytes: int) -> int:
        """Bytes its decoding state takes per sequence with activations of ``element_bytes``: its elements at that
        size, unless a tensor of it keeps a dtype of its own (Gated DeltaNet's float32 state)."""
        return self.state_elements(width, options) * element_bytes

    def describe(self, options) -> str:
        """The node's label: "Short Convolution (kernel 3)"."""
        return self.label(options)

    def complexity(self, options) -> "ComplexityClass":
        """Its row of Table 1: a recurrence over the positions, linear in the length."""
        return ComplexityClass("O(n·d²)", "O(n)", "O(n)", "a state carried from position to position")


class Init(Variant):
    """An initialisation convention; ``initialise`` fills every parameter of a compiled model in place."""

    def initialise(self, parameters, options, generator=None) -> None:
        """``parameters``: ``(name, tensor, role)`` triples in a fixed order (see
        ``tfspec.backend.compiler.ParamRole``); every draw takes ``generator`` (a ``torch.Generator``; None: torch's
        global one)."""
        raise NotImplementedError


ACTIVATIONS: Registry[Activation] = Registry("activation", Activation)
NORMS: Registry[Norm] = Registry("norm", Norm)
FEEDFORWARD_KINDS: Registry[FeedForwardKind] = Registry("feed-forward kind", FeedForwardKind)
MIXERS: Registry[TokenMixer] = Registry("mixer", TokenMixer)
ROUTER_PARTS: Registry[RouterPart] = Registry("router part", RouterPart)
INITS: Registry[Init] = Registry("init", Init)
