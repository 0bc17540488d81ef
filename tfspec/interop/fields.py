"""One table per family: every configuration field that changes what a model computes, the spec setting it
is, and how each direction reads it.

A family's ``FIELDS`` is the one description of its configuration. Import (``spec_text``) reads each field
from a configuration and writes it into the spec: as a ``let`` parameter that cites the field, or in place
for names and switches (``activation=swiglu``, ``bias=true``). Export (``hf_config``) reads the same setting
back from a compiled spec's facts. A value the language cannot express is named by ``unsupported``, never
approximated. Fields that never change the computation (token ids, output switches, the dropout of
classification heads) are ``ignored`` with the reason, so every field a configuration has is accounted for.

    >>> from types import SimpleNamespace
    >>> from .writer import SpecWriter
    >>> table = Fields(Field("d_model", "hidden_size", lambda f: f.embedding.dim),
    ...                Field("activation", "hidden_act", lambda f: "gelu", names={"gelu": "gelu"}))
    >>> w = SpecWriter()
    >>> s = table.write(SimpleNamespace(hidden_size=64, hidden_act="gelu"), w)
    >>> s.d_model, s.activation, w.values
    ('d_model', 'gelu', {'d_model': '64'})
    >>> table.unsupported(SimpleNamespace(hidden_size=64, hidden_act="mish"))
    ["hidden_act 'mish' has no tfspec activation (supported: gelu)"]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ..errors import quoted
from ..front import schema as S
from .writer import SpecWriter, number

# fields of every transformers configuration that do not change what the model computes
COMMON_IGNORED = {
    "_name_or_path": "where the configuration was read from",
    "transformers_version": "the version that wrote it",
    "architectures": "the class, chosen by the family's classes",
    "model_type": "the family, chosen by family_of",
    "dtype": "the weights' storage type; tfspec loads them as float32",
    "torch_dtype": "the weights' storage type; tfspec loads them as float32",
    "output_attentions": "what a forward call returns, not what it computes",
    "output_hidden_states": "what a forward call returns, not what it computes",
    "return_dict": "what a forward call returns, not what it computes",
    "use_cache": "whether decoding keeps a cache; the result is the same",
    "chunk_size_feed_forward": "splits the feed-forward's work into chunks; the result is the same",
    "id2label": "labels of classification heads, which tfspec does not import",
    "label2id": "labels of classification heads, which tfspec does not import",
    "problem_type": "the loss of classification heads, which tfspec does not import",
    "classifier_dropout": "dropout of classification heads, which tfspec does not import",
    "is_encoder_decoder": "the family's kind, which its spec states",
    "pad_token_id": "a token id, which the tokenizer and generation read (exported with the run's tokenizer)",
    "bos_token_id": "a token id, which the tokenizer and generation read (exported with the run's tokenizer)",
    "eos_token_id": "a token id, which the tokenizer and generation read (exported with the run's tokenizer)",
    "sep_token_id": "a token id, which the tokenizer and generation read (exported with the run's tokenizer)",
    "decoder_start_token_id": "a token id, which generation reads (exported with the run's tokenizer)",
    "_attn_implementation_autoset": "which attention kernel transformers picks; the result is the same",
}


# Sizes and counts, by the names transformers' configurations give them, wherever they stand (the top level or a
# tower's nested ``*_config``): each is a whole number in its range before transformers or a family reads it. A 0
# of heads divided by zero and 10**12 layers listed a layer each (or a label each) before this; the ranges are the
# language's own (``schema.MAX_LAYERS``, ``schema.MAX_DIM``), so no imported spec could hold a value past them.
_LAYER_COUNTS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
                 "num_decoder_layers", "depth", "attn_layer_period", "expert_layer_period", "decoder_sparse_step",
                 "num_hidden_groups", "full_attn_idxs_period", "moe_layer_interval")
_WIDTHS = ("hidden_size", "n_embd", "d_model", "intermediate_size", "vocab_size", "n_inner", "ffn_dim",
           "encoder_ffn_dim", "decoder_ffn_dim", "hidden_dim", "embedding_size", "d_ff", "d_kv", "head_dim",
           "moe_intermediate_size", "num_attention_heads", "n_head", "n_heads", "num_heads", "num_key_value_heads",
           "encoder_attention_heads", "decoder_attention_heads", "mamba_n_heads", "mamba_d_head", "mamba_d_state",
           "mamba_d_conv", "mamba_expand", "state_size", "conv_kernel", "patch_size", "image_size", "num_channels",
           "mm_tokens_per_image", "spatial_merge_size", "temporal_patch_size", "scale_factor", "num_labels",
           "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
           "linear_conv_kernel_dim", "num_mel_bins", "max_source_positions", "out_hidden_size", "in_channels",
           "time_step_rank", "mamba_dt_rank")
_EXPERT_COUNTS = ("num_experts", "n_routed_experts", "num_local_experts", "num_experts_per_tok")  # 0: no mixture
SIZES: dict[str, tuple[int, int]] = {**{name: (1, S.MAX_LAYERS) for name in _LAYER_COUNTS},
                                     **{name: (1, S.MAX_DIM) for name in _WIDTHS},
                                     **{name: (0, S.MAX_DIM) for name in _EXPERT_COUNTS}}
_AUTO = {"mamba_d_head", "time_step_rank", "mamba_dt_rank"}  # sizes transformers derives where they say "auto"


def size_problem(values: Mapping, where: str = "") -> str | None:
    """The first size of ``SIZES`` in a parsed configuration (and its nested ``*_config`` dicts) that is not a whole
    number in its range (nor a list or dict of them: a value per stage, a picture's height and width), as a sentence
    naming the field; None where there is none. ``null`` is the family's default; ``"auto"``, where transformers
    derives the size."""
    for key, value in values.items():
        path = f"{where}{key}"
        if isinstance(value, Mapping) and key.endswith("_config"):
            found = size_problem(value, path + ".")
            if found is not None:
                return found
        elif key in SIZES and value is not None and not (key in _AUTO and value == "auto"):
            least, most = SIZES[key]
            items = value if isinstance(value, list) and 0 < len(value) <= S.MAX_LAYERS else \
                list(value.values()) if isinstance(value, Mapping) and value else [value]  # per stage; height, width
            if not all(isinstance(v, int) and not isinstance(v, bool) and least <= v <= most for v in items):
                auto = ' (or "auto")' if key in _AUTO else ""
                return (f"config.json's field {path} is {quoted(value)}; tfspec reads a whole number from {least} to "
                        f"{most:,}{auto} there")
    return None


@dataclass(frozen=True)
class Field:
    """A configuration field that is a spec setting.

    ``name``: the imported spec's ``let`` parameter (or, with ``let=False``, the setting its template reads);
    ``config``: the configuration's field (``"rope_parameters.rope_theta"`` for one inside a dict);
    ``fact``: export, the field's value read from a spec's ``Facts`` (None: the field is left out);
    ``read``: import, the value from a configuration, when it is not the field itself (older names, fields
    that only matter when another is set; None: the spec has no such setting); ``names``: ``{theirs: ours}``
    when the value names something (an activation), the first of ours being the one exported; ``setting``
    False: the value shapes the spec rather than filling one setting (``layer_types``: a layer schedule, which
    the family's ``spec_text`` writes from it); ``null``: export writes None too (a field whose default is a
    value: Gemma 2's soft caps), where it otherwise leaves the field out; a function of the facts where that
    depends on the spec (a base model computes no logits to cap); ``constant``: the setting takes one value whatever
    the configuration says (``read`` returns it: ERNIE 4.5's attention dropout, which its attention never applies)."""

    name: str
    config: str
    fact: Callable[[Any], Any]
    read: Callable[[Any], Any] | None = None
    names: Mapping[str, str] | None = None
    let: bool = True
    setting: bool = True
    null: bool | Callable[[Any], bool] = False
    constant: bool = False

    def value(self, config) -> Any:
        return self.read(config) if self.read is not None else lookup(config, self.config)


# the facts of the settings most families have, by the stack (``role``) whose first layer holds them
STANDARD: dict[str, Callable[[str], Callable[[Any], Any]]] = {
    "d_model": lambda role: lambda f: f.embedding.dim,
    "vocab": lambda role: lambda f: f.embedding.vocab,
    "layers": lambda role: lambda f: f.layers(role),
    "heads": lambda role: lambda f: f.geometry(role).heads,
    "kv_heads": lambda role: lambda f: f.geometry(role).kv_heads,
    "d_ff": lambda role: lambda f: f.feedforward(role).d_ff,
    "max_len": lambda role: lambda f: f.learned_positions(),
    "p_dropout": lambda role: lambda f: f.residual_dropout(role),
    "p_attn_dropout": lambda role: lambda f: f.attention(role).dropout,
    "init_std": lambda role: lambda f: f.init_option("std", 0.02),
}


def standard(role: str, **configs: str) -> list[Field]:
    """The fields of settings most families have (``STANDARD``'s), each under the name this family's configuration
    gives it, read from ``role``'s stack.

    >>> [(f.name, f.config) for f in standard("encoder", d_model="dim", heads="n_heads")]
    [('d_model', 'dim'), ('heads', 'n_heads')]
    """
    return [Field(name, config, STANDARD[name](role)) for name, config in configs.items()]


@dataclass(frozen=True)
class Fixed:
    """A field whose value every spec of the family has (``value``); any other cannot be expressed, for the
    reason ``why`` (``{value}``: the configuration's). ``exported``: written by export (otherwise it is the
    configuration's default, and left to it). ``required``: how the coverage table states the value a spec
    needs, where ``= value`` would not say it (a field that must equal another)."""

    config: str
    value: Any
    why: str
    read: Callable[[Any], Any] | None = None
    exported: bool = False
    required: str | None = None

    def current(self, config) -> Any:
        return self.read(config) if self.read is not None else lookup(config, self.config, self.value)


class Settings:
    """A configuration's settings as an imported spec writes them: ``s.d_model`` is the text to write (a
    ``let`` name, or the value in place), None where the spec has no such setting; ``s.value(name)`` is the
    configuration's value; ``s.config`` the configuration itself, for what shapes the spec rather than filling a
    setting (a layer schedule); ``s.writer`` the ``SpecWriter`` the spec is written with:
    ``s.writer(name, value, field)`` names another value as a ``let``, ``s.writer.forget(name)`` leaves one out."""

    def __init__(self, text: dict[str, str | None], values: dict[str, Any], config=None,
                 writer: SpecWriter | None = None):
        self._text, self._values, self.config, self.writer = text, values, config, writer

    def __getattr__(self, name: str) -> str | None:
        try:
            return self._text[name]
        except KeyError:
            raise AttributeError(f"no setting {name!r}") from None

    def value(self, name: str) -> Any:
        return self._values[name]

    def has(self, name: str) -> bool:
        """Whether the family's table has the setting ``name`` and the configuration gives it a value."""
        return self._text.get(name) is not None


class Fields:
    """A family's table (see the module's docstring); ``+`` joins two (BigBird's fields and BERT's)."""

    def __init__(self, *entries: Field | Fixed, ignored: Mapping[str, str] | None = None):
        self.entries = entries
        self.ignored = {**COMMON_IGNORED, **(ignored or {})}

    def __add__(self, other: Fields) -> Fields:
        return Fields(*self.entries, *other.entries, ignored={**self.ignored, **other.ignored})

    def derive(self, *changes: Field | Fixed, drop: Iterable[str] = (), ignored: Mapping[str, str] | None = None
               ) -> Fields:
        """This table with a family's stated differences: each of ``changes`` replaces the entry of its name (a
        ``Fixed``'s, its configuration field) where it stands, or is added at the end; ``drop`` names the entries
        (by name or configuration field) it does not have; ``ignored`` adds fields that change nothing.

        >>> parent = Fields(Field("d_model", "hidden_size", None), Field("eps", "rms_norm_eps", None))
        >>> [e.config for e in parent.derive(Field("eps", "layer_norm_eps", None), drop={"d_model"}).entries]
        ['layer_norm_eps']
        """
        drop, new = set(drop), {_key(e): e for e in changes}
        kept = [new.pop(_key(e), e) for e in self.entries if _key(e) not in drop and e.config not in drop]
        return Fields(*kept, *new.values(), ignored={**self.ignored, **(ignored or {})})

    def __getitem__(self, key: str) -> Field | Fixed:
        """The entry ``key`` names (a ``Field``'s name, a ``Fixed``'s configuration field), to take into another
        family's table."""
        found = next((e for e in self.entries if _key(e) == key), None)
        if found is None:
            raise KeyError(f"the table has no entry {key!r}")
        return found

    @property
    def fields(self) -> list[Field]:
        return [e for e in self.entries if isinstance(e, Field)]

    def accounted(self) -> set[str]:
        """Every configuration field the table names (a dict's as ``outer.inner``), ignored ones included."""
        return {e.config for e in self.entries} | set(self.ignored)

    def unsupported(self, config) -> list[str]:
        """The configuration's values the family's specs cannot express, each with the reason."""
        problems = []
        for e in self.entries:
            if isinstance(e, Fixed):
                value = e.current(config)
                if value != e.value:
                    problems.append(e.why.format(value=value))
            elif e.names is not None:
                value = e.value(config)
                if value is not None and value not in e.names:
                    problems.append(f"{e.config} '{value}' has no tfspec {e.name} "
                                    f"(supported: {', '.join(sorted(e.names))})")
        return problems

    def write(self, config, writer: SpecWriter) -> Settings:
        """Each field's value from ``config``, registered with ``writer`` as a ``let`` where it is one."""
        text: dict[str, str | None] = {}
        values: dict[str, Any] = {}
        for f in self.fields:
            value = values[f.name] = f.value(config)
            if value is None or not f.setting:
                text[f.name] = None
            elif f.names is not None:
                text[f.name] = f.names.get(value)
            elif f.let:
                # (a tower's nested configuration named whole: text_config.hidden_size; a dict field's key alone)
                cited = f.config if f.config.split(".")[0].endswith("_config") else f.config.rsplit(".", 1)[-1]
                text[f.name] = writer(f.name, value, cited)
            else:
                text[f.name] = number(value)
        return Settings(text, values, config, writer)

    def differences(self, config, other) -> list[str]:
        """The fields in which two configurations differ, as import reads them: ``field: a here, b there``."""
        return [f"{f.config}: {f.value(config)!r} in the configuration, {f.value(other)!r} in the spec"
                for f in self.fields if f.value(config) != f.value(other)]

    def config(self, facts) -> dict:
        """The configuration a spec's ``facts`` give: every field's value, read back by its ``fact``."""
        out: dict = {}
        for e in self.entries:
            if isinstance(e, Fixed):
                if e.exported:
                    put(out, e.config, e.value)
                continue
            value = e.fact(facts)
            if value is not None and e.names is not None:
                value = facts.theirs(e.names, value, e.name)
            if value is not None or (e.null(facts) if callable(e.null) else e.null):
                put(out, e.config, value)
        return out


def _key(entry: Field | Fixed) -> str:
    return entry.name if isinstance(entry, Field) else entry.config


def lookup(config, path: str, default=None):
    """A configuration's field; ``outer.inner`` for one inside a dict field."""
    value: Any = config
    for part in path.split("."):
        value = value.get(part, default) if isinstance(value, dict) else getattr(value, part, default)
    return value


def put(config: dict, path: str, value) -> None:
    """Set a configuration dict's field; ``outer.inner`` inside a dict field, made where it is missing."""
    *outer, last = path.split(".")
    for part in outer:
        config = config.setdefault(part, {})
    config[last] = value
