"""Reading a spec's settings for a reference configuration (export): the first attention, feed-forward and norm
of a stack, the embedding, the init. What they read is then proven, not assumed: the exporter writes the spec
the configuration describes and compares every architectural fact with the spec's (``architecture_problems``).
"""

from __future__ import annotations

from ..front import schema as S
from ..ir import nodes as ir
from ..ir.queries import residual_placement, sublayers
from ..registry import (ATTENTION_KINDS, FEEDFORWARD_KINDS, INPUTS, MASKS, MIXERS, POSITIONS, ROUTER_PARTS,
                        combined_reach)
from .mapping import InteropError


class OtherKind(InteropError):
    """The spec is not even of the family's kind (encoder-only, decoder-only, encoder-decoder)."""


class Facts:
    """A compiled spec's settings, as a family's ``hf_config`` asks for them."""

    def __init__(self, spec, family: str):
        self.spec, self.family, self.g = spec, family, spec.graph()

    def refuse(self, why: str) -> InteropError:
        return InteropError(f"not a {self.family} model: {why}")

    def kind(self, *kinds: str) -> None:
        if self.spec.kind not in kinds:
            raise OtherKind(f"not a {self.family} model: '{self.spec.name}' is {self.spec.kind}")

    @property
    def embedding(self):
        return self.spec.embeddings[0]

    def stack(self, role: str):
        return getattr(self.spec, role)

    def layers(self, role: str) -> int:
        return self.stack(role).repeat

    def weight_sets(self, role: str) -> int:
        """The sets of weights ``role``'s layers run (its layers' count where each has its own)."""
        return self.g.stacks[role].weight_sets

    def node(self, role: str, cls: type[ir.Node], reads: str = "self") -> ir.Node:
        """The first node of type ``cls`` (Attention, FeedForward, Norm) of ``role``'s layer (attention: that
        ``reads``)."""
        for node in self.g.of(cls, stack=role, in_block=True):
            if not isinstance(node, ir.Attention) or node.spec.reads == reads:
                return node
        raise self.refuse(f"its {role} layer has no {cls.kind}" + (f" ({reads})" if cls is ir.Attention else ""))

    def attention(self, role: str, reads: str = "self"):
        return self.node(role, ir.Attention, reads).spec

    def position_option(self, role: str, option: str):
        """An option of the first self-attention's position scheme, as the scheme reads it (its default where
        the spec leaves it out; None where the scheme has no such option)."""
        return getattr(POSITIONS.of(self.attention(role).position)[1], option, None)

    def attention_kind(self, role: str, reads: str = "self"):
        """The options of the first attention's kind (a latent attention's ranks)."""
        return ATTENTION_KINDS.of(self.attention(role, reads).kind)[1]

    def attention_value_dim(self, role: str, reads: str = "self") -> int:
        """Each head's value width in the first attention (its kind's ``value_dim``)."""
        node = self.node(role, ir.Attention, reads)
        kind, options = ATTENTION_KINDS.of(node.spec.kind)
        return kind.value_dim(node.geometry, options)

    def geometry(self, role: str, reads: str = "self"):
        """The first attention's shape (heads, kv heads, head dim) of ``role``'s layer."""
        return self.node(role, ir.Attention, reads).geometry

    @property
    def tied(self) -> bool | None:
        """Does the head share the token embedding (None: the spec has no head)?"""
        return None if self.spec.head is None else self.spec.head.tied_to is not None

    def feedforward(self, role: str):
        return self.node(role, ir.FeedForward).spec

    def mixture(self, role: str):
        """The options of the first mixture of experts among ``role``'s layers' feed-forwards (a schedule may
        give some layers one network instead); refused where none is."""
        return FEEDFORWARD_KINDS.of(self.mixture_body(role).kind)[1]

    def router(self, role: str) -> "Router":
        """The router of the first mixture of experts among ``role``'s layers' feed-forwards."""
        return Router(self.mixture_body(role).router)

    def mixture_body(self, role: str):
        """The first of ``role``'s feed-forwards that is a mixture of experts (its d_ff, activation, ...)."""
        for node in self.g.of(ir.FeedForward, stack=role, in_block=True):
            if self.routes(node.spec):
                return node.spec
        raise self.refuse(f"its {role} layers' feed-forwards are not mixtures of experts (kind=moe(...))")

    @staticmethod
    def routes(feedforward) -> bool:
        """Is a feed-forward (a ``schema.FeedForward``) a mixture choosing among experts for each position?"""
        return FEEDFORWARD_KINDS[feedforward.kind.name].routes

    @staticmethod
    def rotates(position) -> bool:
        """Is a position scheme (a ``Choice``) one that rotates queries and keys (rotary)?"""
        return POSITIONS[position.name].rotates

    @staticmethod
    def window_of(masks) -> int | None:
        """The sliding window ``masks`` (``Choice``s) give: how many keys up to a query's own it sees, where they
        bound how far back it looks (None: no bound; chunks, which bound it without sliding, are ``chunk_of``'s)."""
        sliding = [(variant, options) for variant, options in map(MASKS.of, masks) if variant.chunk(options) is None]
        behind, _ = combined_reach(sliding)
        if behind is None:  # a prefix-LM's window, unbounded over the prefix alone
            return min((k for k in (v.window_after_prefix(o) for v, o in sliding) if k is not None), default=None)
        return behind + 1

    @staticmethod
    def chunk_of(masks) -> int | None:
        """The size of the chunks of positions ``masks`` (``Choice``s) confine each query to (None: none)."""
        chunks = [variant.chunk(options) for variant, options in map(MASKS.of, masks)]
        return min((c for c in chunks if c is not None), default=None)

    def norm_placement(self, role: str) -> str:
        """Where the first sublayer of ``role``'s layer meets its norm: "pre-norm", "post-norm", ..."""
        first = next(n for n in self.g.of(ir.Sublayer, stack=role, in_block=True))
        return residual_placement(self.g, first).placement

    def parallel(self, role: str) -> bool:
        """Do the sublayers of ``role``'s layer read one input (one norm's output, or norms of one tensor)?"""
        inputs = {n.inputs[0] for n in sublayers(self.g, role, kind=0)}
        sources = {self.g.node(i).inputs[0] if isinstance(self.g.node(i), ir.Norm) else i for i in inputs}
        return len(inputs) == 1 or len(sources) == 1

    def residual_scale(self, role: str) -> float:
        """The constant every sublayer's output is multiplied by before its residual sum (1.0: none); layers
        that scale differently are refused."""
        factors = {node.factor for node in self.g.of(ir.Scale, stack=role, in_block=True)}
        if len(factors) > 1:
            raise self.refuse(f"its {role} layers scale their branches differently ({sorted(factors)})")
        return factors.pop() if factors else 1.0

    def residual_dropout(self, role: str) -> float:
        """The dropout on a sublayer's output before its residual sum (0 when the layer has none)."""
        dropouts = self.g.of(ir.Dropout, stack=role, in_block=True)
        return dropouts[0].p if dropouts else 0.0

    def norm_option(self, role: str, option: str, default=None):
        return self.node(role, ir.Norm).choice.options.get(option, default)

    def input_option(self, option: str):
        """An option of what the embedding reads instead of token ids (``input patches(image=...)``: ``image``)."""
        given = self.embedding.input
        if given is None:
            raise self.refuse(f"embedding '{self.embedding.name}' reads token ids, not an input of another kind "
                              "(input patches(...))")
        options = INPUTS.of(given)[1]
        if option not in type(options).model_fields:
            raise self.refuse(f"embedding '{self.embedding.name}' reads input {given}, which has no {option}")
        return getattr(options, option)

    def embedding_norm_option(self, option: str, default=None):
        norm = self.embedding.norm
        if norm is None:
            raise self.refuse("its embedding has no norm")
        return norm.options.get(option, default)

    def position_table(self) -> int | None:
        """The rows of the embedding's table of learned positions (None: its positions have no table)."""
        return self.table_rows(self.embedding.position, self.embedding.dim)

    @staticmethod
    def table_rows(position, dim: int) -> int | None:
        """The rows of the table of learned positions a position scheme (a ``Choice``) on an embedding of width
        ``dim`` trains (None: it trains none: positions it computes, or none at all)."""
        variant, options = POSITIONS.of(position)
        tables = [p.shape[0] for p in variant.params(dim, options).values() if p.role == "position_table"] \
            if variant.acts == "embedding" else []
        return tables[0] if tables else None

    @staticmethod
    def computed_positions(position, dim: int) -> bool:
        """Does a position scheme (a ``Choice``) add to an embedding of width ``dim`` positions it computes, with
        nothing trained (sinusoids)?"""
        variant, options = POSITIONS.of(position)
        return variant.acts == "embedding" and not variant.absent and not variant.params(dim, options)

    def learned_positions(self) -> int:
        """The rows of the embedding's table of learned positions (refused where it has none)."""
        rows = self.position_table()
        if rows is None:
            raise self.refuse(f"its embedding's positions are {self.embedding.position.name}, not a learned table")
        return rows

    def stack_bias(self, role: str):
        """The options of the relative score bias ``role``'s stack owns (one table its layers' attentions read:
        T5's), refused where its attention's positions are another scheme."""
        node = self.node(role, ir.Attention)
        variant, options = POSITIONS.of(node.spec.position)
        if not (variant.biases_scores and variant.stack_params(node.positioned, options)):
            raise self.refuse(f"its attention's positions are {node.spec.position.name}, not T5's relative bias "
                              "(one its stack owns)")
        return node.spec.position

    def rotary(self, role: str) -> dict:
        """The rotary options of the stack's self-attentions (of the first layer that has them, in a schedule)."""
        # (of each kind of layer in the order the layers first run them: a hybrid's may have none)
        positions = [n.spec.position for n in self.g.of(ir.Attention, stack=role, in_block=True)
                     if n.spec.reads == "self"]
        if not positions:
            raise self.refuse(f"its {role} layers have no self-attention")
        rotary = next((p for p in positions if self.rotates(p)), None)
        if rotary is None:
            raise self.refuse(f"its attention's positions are {positions[0].name}, not rotary")
        return rotary.options

    def init_option(self, option: str, default):
        init = self.spec.init
        return init.options.get(option, default) if init is not None else default

    def window(self, role: str) -> int | None:
        return self.window_of(self.attention(role).mask)

    def per_layer(self, role: str, cls: type[ir.Node], what: str, reads: str | None = None) -> list:
        """Each layer's first node of type ``cls`` (its spec; attention: that ``reads``), in layer order: a
        schedule's layers differ."""
        return [node.spec for node in self.per_layer_nodes(role, cls, what, reads)]

    def per_layer_nodes(self, role: str, cls: type[ir.Node], what: str, reads: str | None = None) -> list:
        """Each layer's first node of type ``cls`` itself (``per_layer``), with its geometry."""
        info = self.g.stacks[role]
        by_kind = {}
        for node in self.g.of(cls, stack=role, in_block=True):
            if reads is None or node.spec.reads == reads:
                by_kind.setdefault(node.layer_kind, node)
        if len(by_kind) != len(info.kinds):
            raise self.refuse(f"a kind of its {role} layers has no {what}")
        return [by_kind[info.kind_of(i)] for i in range(info.repeat)]

    def layer_attentions(self, role: str) -> list:
        """Each layer's first self-attention, in layer order."""
        return self.per_layer(role, ir.Attention, "self-attention", reads="self")

    def layer_mixers(self, role: str) -> list:
        """Each layer's token mixer (a ``schema.Mixer``), None where the layer has none (attention mixes there)."""
        info = self.g.stacks[role]
        by_kind = {n.layer_kind: n.spec for n in self.g.of(ir.Mixer, stack=role, in_block=True)}
        return [by_kind.get(info.kind_of(i)) for i in range(info.repeat)]

    def mixer(self, role: str):
        """The options of the first token mixer of ``role``'s layers (refused where none has one)."""
        mixers = [m for m in self.layer_mixers(role) if m is not None]
        if not mixers:
            raise self.refuse(f"its {role} layers have no token mixer (mixer KIND)")
        return MIXERS.of(mixers[0].kind)[1]

    def layer_feedforwards(self, role: str) -> list:
        """Each layer's first feed-forward, in layer order."""
        return self.per_layer(role, ir.FeedForward, "feed-forward")

    def layer_routes(self, role: str) -> list[bool]:
        """Per layer: is its feed-forward a mixture of experts?"""
        return [self.routes(feedforward) for feedforward in self.layer_feedforwards(role)]

    def layer_rotaries(self, role: str, sliding: bool) -> dict:
        """The rotary options of the first layer that slides (``sliding``) or sees every earlier key (empty
        options: no such layer)."""
        for attention, window in zip(self.layer_attentions(role), self.layer_windows(role)):
            if (window is not None) == sliding:
                if not self.rotates(attention.position):
                    raise self.refuse(f"its attention's positions are {attention.position.name}, not rotary")
                return attention.position.options
        return {}

    def layer_windows(self, role: str) -> list[int | None]:
        """Each layer's sliding window (None: it sees every earlier key)."""
        return [self.window_of(a.mask) for a in self.layer_attentions(role)]

    def one_window(self, role: str) -> int | None:
        """The window every sliding layer has (None: no layer slides); layers of different windows are refused."""
        windows = {w for w in self.layer_windows(role) if w is not None}
        if len(windows) > 1:
            raise self.refuse(f"its {role} layers slide over different windows ({', '.join(map(str, sorted(windows)))})")
        return windows.pop() if windows else None

    @staticmethod
    def theirs(table: dict[str, str], ours: str, what: str) -> str:
        """The reference's name for our ``ours`` in a {theirs: ours} table (its first, canonical one)."""
        for name, value in table.items():
            if value == ours:
                return name
        raise InteropError(f"{what} {ours} has no equivalent (the reference has {', '.join(sorted(set(table.values())))})")


class Router:
    """A mixture's router parts (``router=sigmoid + renormalize``) as a family's field table reads them: each
    part's options by its name, and the values a configuration states of them, a part's absence its default."""

    def __init__(self, parts) -> None:
        self.parts = {part.name: ROUTER_PARTS.of(part)[1] for part in parts}

    def option(self, part: str, option: str, default=None):
        """An option of the part ``part`` (``default`` where the router has no such part)."""
        return getattr(self.parts[part], option) if part in self.parts else default

    @property
    def score(self) -> str:
        """How the logits become probabilities: softmax (the default), sigmoid or sparsemixer."""
        return next((name for name in self.parts if ROUTER_PARTS[name].scores), "softmax")

    @property
    def renormalize(self) -> bool:
        return "renormalize" in self.parts

    @property
    def correction(self) -> bool:
        return "correction" in self.parts

    @property
    def scale(self) -> float:
        return self.option("scale", "factor", 1.0)

    @property
    def groups(self) -> int:
        return self.option("groups", "groups", 1)

    @property
    def top_groups(self) -> int:
        return self.option("groups", "top_groups", 1)


class TowerFacts:
    """A model of towers' settings, as a two-tower family's ``hf_config`` asks for them: ``text`` and ``vision``
    are the ``Facts`` of the tower reading token ids and of the one reading pictures."""

    def __init__(self, towers, family: str):
        if not isinstance(towers, S.Towers):
            raise OtherKind(f"not a {family} model: '{towers.name}' is one model, not towers")
        if towers.contrastive is None or len(towers.towers) != 2:
            raise OtherKind(f"not a {family} model: '{towers.name}' is not two towers joined by a contrastive head")
        self.towers, self.family = towers, family
        self.text_name, self.vision_name = tower_roles(towers, family)
        self.text = Facts(towers.tower(self.text_name), family)
        self.vision = Facts(towers.tower(self.vision_name), family)
        self.contrastive = towers.contrastive

    theirs = staticmethod(Facts.theirs)

    def refuse(self, reason: str):
        """An ``OtherKind``-like refusal naming the family, as ``Facts.refuse`` (what a ``Requires`` raises)."""
        return self.text.refuse(reason)


def tower_roles(towers, family: str) -> tuple[str, str]:
    """The names of the tower reading token ids and of the one reading pictures (refused otherwise)."""
    text = [t.name for t in towers.towers if t.spec.embeddings[0].input is None]
    vision = [t.name for t in towers.towers if t.spec.embeddings[0].input is not None]
    if len(text) != 1 or len(vision) != 1:
        raise OtherKind(f"not a {family} model: '{towers.name}' needs a tower of token ids and one of pictures")
    return text[0], vision[0]
