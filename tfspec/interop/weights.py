"""Where a model's tensors are in a Hugging Face checkpoint, declared as a table rather than written as a function:
each of our modules inside a layer (``"attention_norm"``, ``"feedforward.down"``: a part of the layer, as
``mapping.layer_modules`` names it, then the module inside it) beside the name of the checkpoint's module inside its
layer, and the few outside the layers (the token table, the final norm). A family derives its table from its
parent's by the names that differ, as its field table is derived.

    >>> llama = Weights({"feedforward.down": "mlp.down_proj", "attention_norm": "input_layernorm"})
    >>> starcoder2 = llama.derive({"feedforward.down": "mlp.c_proj"})
    >>> dict(starcoder2.layer), starcoder2.top["decoder.final_norm"]
    ({'feedforward.down': 'mlp.c_proj', 'attention_norm': 'input_layernorm'}, 'norm')
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Callable, Mapping, Union

from . import mtp
from .mapping import InteropError, Rule, layer_modules, linear_rules, rule

# where a module's tensors are in the checkpoint: a module (its weight, and its bias where either side has one);
# several modules joined along the first dimension (a gated unit's gate and up); or a function of the model, our
# module, the checkpoint's layer, the checkpoint's tensors and ours, giving the rules (a mixture's experts)
Where = Union[str, tuple, Callable]


@dataclass(frozen=True)
class Projections:
    """An attention's projections: ``q``, ``k`` and ``v`` into our fused ``qkv`` (split by heads and kv heads), ``o``
    into ``out``, under the checkpoint layer's ``module``; queries alone where the layer reads another layer's keys
    and values, and no ``v`` where its values are its keys' projection (Gemma 4's)."""

    module: str = "self_attn"
    names: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "o_proj")

    def __call__(self, model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
        core = model.get_submodule(ours)
        q, k, v, o = (f"{theirs}.{self.module}.{name}" for name in self.names)
        out = linear_rules(f"{ours}.out", o, state, ours_state)
        q_width, kv_width = core.heads * core.head_dim, core.kv_heads * core.head_dim
        if hasattr(core, "kv"):  # cross-attention: the queries apart, the memory's keys and values together
            return linear_rules(f"{ours}.q", q, state, ours_state) + \
                _fused(f"{ours}.kv", core.kv, (k, v), (kv_width, kv_width), k, state, ours_state) + out
        if not hasattr(core, "qkv"):  # it reads another layer's keys and values: it projects queries alone
            return linear_rules(f"{ours}.q", q, state, ours_state) + out
        names, split = (q, k, v), (q_width, kv_width, kv_width)
        if core.qkv.out_features == q_width + kv_width:  # its values are its keys' projection: no v_proj
            names, split = names[:2], split[:2]
        return _fused(f"{ours}.qkv", core.qkv, names, split, k, state, ours_state) + out


def _fused(ours: str, linear, names: tuple[str, ...], split: tuple[int, ...], keys: str, state: dict,
           ours_state: dict) -> list[Rule]:
    """A fused projection's rules; where its keys' rows have no bias (``nn.attention.UnbiasedKeys``: Whisper's
    ``k_proj``), its bias is the others' alone."""
    rules = linear_rules(ours, names, state, ours_state, split=split)
    if hasattr(linear, "keys") and len(rules) == 2:
        kept = [(name, size) for name, size in zip(names, split) if name != keys]
        rules[1] = rule(f"{ours}.bias", tuple(f"{name}.bias" for name, _ in kept), split=tuple(s for _, s in kept))
    return rules


@dataclass(frozen=True)
class GatedMLP:
    """A gated MLP under the checkpoint layer's ``module`` (none: ``theirs`` is the MLP): ``gate_proj`` and
    ``up_proj`` into our ``up`` (gate first), ``down_proj`` into ``down``; no rules where neither side has one (a
    layer whose feed-forward is a mixture)."""

    module: str = "mlp"

    def __call__(self, model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
        return self.rules(ours, theirs, state, ours_state)

    def rules(self, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
        mlp = ".".join(p for p in (theirs, self.module) if p)
        return _module_rules(f"{ours}.up", (f"{mlp}.gate_proj", f"{mlp}.up_proj"), state, ours_state) + \
            _module_rules(f"{ours}.down", (f"{mlp}.down_proj",), state, ours_state)


@dataclass(frozen=True)
class Conv1D:
    """A GPT-2 ``Conv1D`` under the checkpoint layer's ``name``: a linear map whose weight is stored transposed,
    and its bias."""

    name: str

    def __call__(self, model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
        return [rule(f"{ours}.weight", f"{theirs}.{self.name}.weight", transpose=True),
                rule(f"{ours}.bias", f"{theirs}.{self.name}.bias")]


@dataclass(frozen=True)
class Tensor:
    """One tensor of ours, not a module's weight and bias, under the checkpoint layer's ``name`` (xIELU's trained
    values, stacked experts), where our model holds it; ``transpose``: stored with its last two dimensions
    swapped (Llama 4's experts)."""

    name: str
    transpose: bool = False

    def __call__(self, model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
        return [rule(ours, f"{theirs}.{self.name}", transpose=self.transpose)] if ours in ours_state else []


@dataclass(frozen=True)
class Reordered:
    """A fused projection (``name``) whose rows stand in another order than ours: ``rows(model, attention)`` gives,
    for each of our rows, its row in the checkpoint's (``per_head_rows``: q, k and v interleaved per head)."""

    name: str
    rows: Callable

    def __call__(self, model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
        core = model.get_submodule(ours.rsplit(".", 1)[0])
        return linear_rules(ours, f"{theirs}.{self.name}", state, ours_state, rows=self.rows(model, core))


def per_head_rows(heads: int, head_dim: int) -> tuple[int, ...]:
    """For each row of our [q; k; v], its row in a projection interleaving [q_h, k_h, v_h] per head (GPT-NeoX's,
    BLOOM's).

    >>> per_head_rows(2, 1)
    (0, 3, 1, 4, 2, 5)
    """
    return tuple(h * 3 * head_dim + part * head_dim + d
                 for part in range(3) for h in range(heads) for d in range(head_dim))


def _frozen(table: Mapping) -> Mapping:
    return MappingProxyType(dict(table))


@dataclass(frozen=True)
class MaskedLMHead:
    """An encoder's masked-LM head and pooler, under the checkpoint's names: ``transform`` (a linear map), its
    ``norm``, the ``decoder`` (tied to the token table, or its own), the ``bias`` (the decoder's bias, an alias of
    it), and the base model's ``pooler``; ``module``: the masked LM's attribute holding the head (``cls``)."""

    transform: str = "cls.predictions.transform.dense"
    norm: str = "cls.predictions.transform.LayerNorm"
    decoder: str = "cls.predictions.decoder"
    bias: str = "cls.predictions.bias"
    pooler: str = "pooler.dense"

    @property
    def module(self) -> str:
        return self.decoder.split(".")[0]

    def __call__(self, model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
        rules, aliases, ours_state = [], {}, model.state_dict()
        if model.pooler is not None:
            rules += linear_rules("pooler.dense", f"{prefix}{self.pooler}", state, ours_state)
        if model.head is not None:
            rules += [*linear_rules("head.transform", self.transform, state, ours_state),
                      *linear_rules("head.transform_norm", self.norm, state, ours_state)]
            if "head.bias" in ours_state or self.bias in state:
                rules.append(rule("head.bias", self.bias))
            if self.bias != f"{self.decoder}.bias":  # (the decoder's bias is that tensor)
                aliases = {f"{self.decoder}.bias": "head.bias"}
            if model.tied_to is not None:
                aliases[f"{self.decoder}.weight"] = "embeddings.tokens.tokens.weight"
            else:
                rules.append(rule("head.weight", f"{self.decoder}.weight"))
        return rules, aliases


@dataclass(frozen=True)
class Classifier:
    """An encoder's classifier (``name``, on the base model's pooled vector: ViT's ``classifier``), and the base
    model's ``pooler``; ``module``: the attribute holding the classifier."""

    name: str = "classifier"
    pooler: str = "pooler.dense"

    @property
    def module(self) -> str:
        return self.name

    def __call__(self, model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
        ours_state = model.state_dict()
        rules = linear_rules("pooler.dense", f"{prefix}{self.pooler}", state, ours_state) if model.pooler else []
        return rules + (linear_rules("head", self.name, state, ours_state) if model.head is not None else []), {}


@dataclass(frozen=True)
class Weights:
    """A checkpoint of one stack's tensors (a decoder's, an encoder's): ``top``, our modules outside the layers
    beside the base model's (under its ``prefix``); ``layer``, our modules inside a layer beside the checkpoint
    layer's (``Where``), layer i of ours being its ``{layers}.{i}``; ``parts(model)``: the names of a layer's parts,
    which a ``layer`` key starts with (``mapping.layer_modules``: ``attention``, ``feedforward_norm``, ...; Gemma 2's
    sandwich names the norms after each sublayer too), or a list of each layer's (a hybrid's, whose layers mix by a
    ``mixer`` or by ``attention``: ``hybrid.parts``); None: the keys are our modules' own paths (BERT's
    ``self_attn.qkv``). ``top``'s values may be functions as ``layer``'s are, given the checkpoint's ``prefix``
    (ViT's patches, stored as a convolution's kernel). ``head``: the causal LM's head (its name; an alias of the
    token table where tied) or an encoder's (``MaskedLMHead``, ``Classifier``); multi-token prediction's modules
    follow a decoder's layers (``tfspec.interop.mtp``). Called as a family's ``rules(model, prefix, state, lm)``."""

    layer: Mapping[str, Where]
    top: Mapping[str, Where] = field(default_factory=lambda: _frozen(
        {"embeddings.tokens.tokens": "embed_tokens", "decoder.final_norm": "norm"}))
    layers: str = "layers"
    parts: Callable | None = layer_modules
    head: str | MaskedLMHead | Classifier = "lm_head"

    def __post_init__(self):
        object.__setattr__(self, "layer", _frozen(self.layer))
        object.__setattr__(self, "top", _frozen(self.top))

    def derive(self, layer: Mapping[str, Where | None] = MappingProxyType({}),
               top: Mapping[str, str | None] = MappingProxyType({}), **changes) -> "Weights":
        """This table with a family's differences: ``layer`` and ``top`` entries added or renamed (None: a module
        the family has not), and any other field changed."""
        def merged(table, differences):
            return {k: v for k, v in {**table, **differences}.items() if v is not None}

        return replace(self, layer=merged(self.layer, layer), top=merged(self.top, top), **changes)

    def layer_rules(self, model, parts: dict | None, ours: str, theirs: str, state: dict, ours_state: dict
                    ) -> list[Rule]:
        """One layer's rules: our layer ``ours`` (``decoder.layers.3``) and the checkpoint's ``theirs``."""
        rules = []
        for module, where in self.layer.items():
            if parts is None:
                path = f"{ours}.{module}"
            else:
                part, _, inside = module.partition(".")
                if part not in parts:
                    continue  # a part this spec's layer has not: its tensors are then reported unmapped
                path = ".".join(p for p in (ours, parts[part], inside) if p)
            if callable(where):
                rules += where(model, path, theirs, state, ours_state)
            else:
                rules += _module_rules(path, tuple(f"{theirs}.{name}" for name in _names(where)), state, ours_state)
        return rules

    def __call__(self, model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
        if len(model.spec.stacks) != 1:
            raise InteropError(f"spec '{model.spec.name}' is {model.spec.kind}; the checkpoint is one stack's")
        role = model.spec.stacks[0].role
        ours_state = model.state_dict()
        parts = self.parts(model) if self.parts is not None else None
        per_layer = parts if isinstance(parts, list) else [parts] * len(getattr(model, role).layers)
        rules = [r for ours, theirs in self.top.items()
                 for r in (theirs(model, ours, prefix, state, ours_state) if callable(theirs) else
                           _module_rules(ours, tuple(f"{prefix}{t}" for t in _names(theirs)), state, ours_state))]

        def layer(ours: str, theirs: str, parts: dict = per_layer[0]) -> list[Rule]:
            return self.layer_rules(model, parts, ours, theirs, state, ours_state)

        for i, parts in enumerate(per_layer):
            rules += layer(f"{role}.layers.{i}", f"{prefix}{self.layers}.{i}", parts)
        if callable(self.head):
            head, aliases = self.head(model, prefix, state, lm)
        else:
            head, aliases = lm_head_rules(model, lm, self.head, state)
        ahead, shared = mtp.rules(model, prefix, state, layer) if lm else ([], {})  # (checkpoints' layers L, ...)
        return rules + head + ahead, {**aliases, **shared}


@dataclass(frozen=True)
class TiedHead:
    """An LM head tied to the token table of the embedding the stack ``table`` reads: the checkpoint's ``name`` an
    alias of it, the head's bias stored as ``bias`` (1 × vocab: BART's ``final_logits_bias``) where it has one. A
    spec whose head is its own is refused."""

    name: str = "lm_head"
    table: str = "decoder"
    bias: str | None = None

    def __call__(self, model, embeddings: dict[str, str]) -> tuple[list[Rule], dict[str, str]]:
        if model.tied_to is None:
            raise InteropError(f"spec '{model.spec.name}' has a head of its own; the checkpoint ties it to the "
                               "token table")
        table = embeddings[self.table]
        vocab = next(e.vocab for e in model.spec.embeddings if e.name == table)
        rules = [rule("head.bias", self.bias, shape=(1, vocab))] if self.bias else []
        return rules, {f"{self.name}.weight": f"embeddings.{table}.tokens.weight"}


@dataclass(frozen=True)
class Stacks:
    """An encoder-decoder's checkpoint as tables: ``stacks``, each stack's ``Weights`` by its role, whose ``top`` (the
    stack's modules outside its layers) and ``layers`` are names under the base model's prefix; ``top``, the modules
    outside both (a token table both read); ``aliases``, the checkpoint's names of tensors of ours (each stack's copy
    of that table); ``head``, the LM head's (``TiedHead``, or ``lm_head_rules``' ``name`` where it may be its own).
    Our names may say ``{encoder}`` and ``{decoder}``, the embedding each stack reads (and a stack's own ``top``,
    ``{embedding}``, its own, and its layer's parts: ``{attention}``, which keys T5's position bias). A ``top`` entry
    maps where our model holds the module (a sinusoid table the spec computes is none of ours: the family's
    ``computed``). Called as a family's ``rules(model, prefix, state, lm)``."""

    stacks: Mapping[str, Weights]
    top: Mapping[str, Where] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)
    head: TiedHead | str = "lm_head"

    def __call__(self, model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
        roles = tuple(stack.role for stack in model.spec.stacks)
        if roles != tuple(self.stacks):
            raise InteropError(f"spec '{model.spec.name}' is {model.spec.kind}; the checkpoint holds "
                               f"{' and '.join(self.stacks)} stacks")
        ours_state = model.state_dict()
        embeddings = {stack.role: stack.embedding for stack in model.spec.stacks}

        def held(table: Mapping, **names) -> list[Rule]:
            rules = []
            for ours, theirs in table.items():
                ours = ours.format(**embeddings, **names)
                if f"{ours}.weight" in ours_state:
                    rules += linear_rules(ours, f"{prefix}{theirs}", state, ours_state)
            return rules

        rules = held(self.top)
        for role, weights in self.stacks.items():
            parts = weights.parts(model, role)
            rules += held(weights.top, embedding=embeddings[role], **parts)
            rules += [r for i in range(len(getattr(model, role).layers)) for r in weights.layer_rules(
                model, parts, f"{role}.layers.{i}", f"{prefix}{weights.layers}.{i}", state, ours_state)]
        aliases = {f"{prefix}{theirs}": ours.format(**embeddings) for theirs, ours in self.aliases.items()}
        head, head_aliases = ([], {}) if not lm else self.head(model, embeddings) if isinstance(self.head, TiedHead) \
            else lm_head_rules(model, lm, self.head, state, f"embeddings.{embeddings['decoder']}")
        return rules + head, {**aliases, **head_aliases}


@dataclass(frozen=True)
class One:
    """One tensor of a ``Towers`` table (its key names ours whole: a class token, a contrastive scale), ``theirs``
    in the checkpoint; ``shape``: the checkpoint's shape of it where ours is held in another; ``dims``: the
    checkpoint's dimensions, ours with leading ones (InternViT's class token, ``(1, 1, width)``)."""

    theirs: str
    shape: tuple[int, ...] | None = None
    transpose: bool = False
    dims: int | None = None

    def __call__(self, model, ours: str, names: dict, state: dict, ours_state: dict) -> list[Rule]:
        theirs = self.theirs.format(**names)
        held = ours in ours_state or theirs in state  # (a class token one vision tower has and another has not)
        shape = self.shape
        if self.dims is not None and ours in ours_state:
            shape = (1,) * (self.dims - ours_state[ours].dim()) + tuple(ours_state[ours].shape)
        return [rule(ours, theirs, transpose=self.transpose, shape=shape)] if held else []


@dataclass(frozen=True)
class Patches:
    """A ``Towers`` table's patch kernel (our ``patches``, a linear map of each patch's pixels) stored as a
    convolution's (``theirs``, its bias too where either side has one): (dim, channels, [frames,] patch, patch)."""

    theirs: str
    frames: bool = False  # a 3-D convolution over frames too (Qwen2.5-VL's)

    def __call__(self, model, ours: str, names: dict, state: dict, ours_state: dict) -> list[Rule]:
        embedding = model.get_submodule(ours.rsplit(".", 1)[0])
        frames = (embedding.frames,) if self.frames else ()
        theirs = self.theirs.format(**names)
        shape = (embedding.dim, embedding.channels, *frames, embedding.patch, embedding.patch)
        return [rule(f"{ours}.weight", f"{theirs}.weight", shape=shape),
                *linear_rules(ours, theirs, state, ours_state)[1:]]


@dataclass(frozen=True)
class Towers:
    """A model of towers' checkpoint as tables (CLIP's; a vision-language model's vision tower and connector):
    ``top``, our tensors outside the towers' layers beside the checkpoint's (a module's weight and bias where either
    side has them; or a function of the model, our name, the names below, the checkpoint's tensors and ours: a
    ``One`` tensor, ``Patches``); ``layers``, our layers beside the checkpoint's, with the table of one layer (a
    ``Weights``' ``layer``, by our module paths in it); ``models``, a tower that is a family's model of its own
    (Qwen2.5-VL's text model: Llama's table) beside the checkpoint's prefix of it. Names may say ``{text}`` and
    ``{vision}`` (the towers: a connector's target and source), ``{tokens}`` and ``{image}`` (their embeddings),
    ``{steps}`` (the connector's steps) and what ``paths(state)`` gives (where the checkpoint holds a tower, which
    transformers moved: LLaVA's). Called as a family's ``rules(model, prefix, state, lm)``."""

    top: Mapping[str, Where]
    layers: Mapping[str, tuple[str, Mapping[str, Where]]] = field(default_factory=dict)
    models: Mapping[str, tuple[str, Callable]] = field(default_factory=dict)
    paths: Callable[[dict], dict] | None = None

    def __call__(self, model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
        from .facts import tower_roles

        spec, ours_state = model.spec, model.state_dict()
        vision, text = (spec.connectors[0].source, spec.connectors[0].target) if spec.connectors else \
            reversed(tower_roles(spec, "two-tower"))
        names = {"text": text, "vision": vision, "tokens": spec.tower(text).embeddings[0].name,
                 "image": spec.tower(vision).embeddings[0].name, "steps": f"connectors.{vision}.steps",
                 **(self.paths(state) if self.paths else {})}
        rules = []
        for ours, theirs in self.top.items():
            ours = ours.format(**names)
            rules += theirs(model, ours, names, state, ours_state) if callable(theirs) else \
                _module_rules(ours, (theirs.format(**names),), state, ours_state)
        for ours, (theirs, layer) in self.layers.items():
            ours, theirs, table = ours.format(**names), theirs.format(**names), Weights(layer, parts=None)
            for i in range(len(model.get_submodule(ours))):
                rules += table.layer_rules(model, None, f"{ours}.{i}", f"{theirs}.{i}", state, ours_state)
        aliases = {}
        for tower, (theirs, weights) in self.models.items():
            tower = tower.format(**names)
            inner, inner_aliases = weights(model.towers[tower], theirs, state, True)
            rules += [replace(r, ours=tuple(f"towers.{tower}.{o}" for o in r.ours)) for r in inner]
            aliases |= {k: f"towers.{tower}.{o}" for k, o in inner_aliases.items()}
        return rules, aliases


def _names(where: str | tuple) -> tuple[str, ...]:
    return (where,) if isinstance(where, str) else where


def _module_rules(ours: str, theirs: tuple[str, ...], state: dict, ours_state: dict) -> list[Rule]:
    """A module's weight and bias (``linear_rules``), unless neither side has it: a module some specs of a family
    have and others have not (Gemma 4's per-layer inputs; a layer reading another's keys has no key norm), which
    is then no rule; where one side has it, the rule stands and ``load_state`` names what the other lacks."""
    if f"{ours}.weight" not in ours_state and not any(f"{t}.weight" in state for t in theirs):
        return []
    return linear_rules(ours, theirs, state, ours_state)


def lm_head_rules(model, lm: bool, name: str = "lm_head", state: dict | None = None,
                  embedding: str = "embeddings.tokens") -> tuple[list[Rule], dict[str, str]]:
    """The causal LM's head (none without ``lm``): ``name``, its bias too where either side has one (PhiMoE's,
    GPT-J's); its weight an alias of the token table of ``embedding`` where tied."""
    if not lm:
        return [], {}
    rules = linear_rules("head", name, state or {}, model.state_dict())
    if model.tied_to is not None:
        return rules[1:], {f"{name}.weight": f"{embedding}.tokens.weight"}
    return rules, {}
