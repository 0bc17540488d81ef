"""The Hugging Face families tfspec reads and writes, one entry each: how a configuration becomes a spec, which
model classes it covers, and the functions that copy weights each way.

``import_config(config)`` writes the spec a configuration describes (a ``config.json`` path, a directory, a
dict or a ``transformers`` configuration); ``from_pretrained(directory)`` compiles it and copies the
checkpoint's weights in, through the family's weight mapping, which refuses any tensor or configuration field
it cannot account for. Nothing is downloaded: a directory is read with ``local_files_only``.

    >>> text = import_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100,
    ...                       "n_positions": 32})
    >>> "let d_model = 64, heads = 4, layers = 2, vocab = 100, context = 32" in text
    True
"""

from __future__ import annotations

import copy
import importlib
import math
import os
import pkgutil
import re
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ...files import as_os_error, loads_json, read_json, read_regular, safe_reason
from ...errors import quoted, shown
from ...front import schema as S
from ..family import Family
from ..fields import lookup, size_problem
from ..writer import citations
from ..mapping import InteropError
from .. import mtp, nested


def _discovered() -> tuple[Family, ...]:
    """The families every module of this package (``hf_*.py``) declares (a ``Family`` it names whose ``module`` is
    its own, not one it takes from another module to derive from), in the order export tries them: by each family's
    ``priority``, lower first (one that describes a spec as exactly as another, more general one comes before it:
    BERT before BigBird, whose full attention is BERT's), then by module, a module's in the order it declares
    them."""
    found: dict[int, tuple] = {}
    for module in MODULES:
        name = module.__name__.rsplit(".", 1)[-1]
        for order, value in enumerate(vars(module).values()):
            if isinstance(value, Family) and value.module == name:
                found.setdefault(id(value), (value.priority, name, order, value))
    return tuple(entry[-1] for entry in sorted(found.values(), key=lambda entry: entry[:3]))


# every module of this package that declares families (``hf_*.py``)
MODULES = tuple(importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
                if info.name.startswith("hf_"))
# every family, in the order export tries them (the first whose configuration describes the spec exactly wins)
FAMILIES: tuple[Family, ...] = _discovered()


def examples() -> dict[str, dict]:
    """Every family module's tiny configuration of each of its classes (its ``EXAMPLES``), by class: what the tests
    build, save and compare with Hugging Face's, a new family's beside the rest."""
    found: dict[str, dict] = {}
    for module in MODULES:
        for cls, values in getattr(module, "EXAMPLES", {}).items():
            if cls in found:  # (one class's example in two modules: the tests would build only one)
                raise ValueError(f"{module.__name__} gives an example of {cls}, which another module gives too")
            found[cls] = values
    return found


def coverage() -> dict[str, list[dict]]:
    """Every family module's configurations that together set each field of its table away from its default (its
    ``COVERAGE``), by module: the tests import each and export it back."""
    return {module.__name__.rsplit(".", 1)[-1]: list(module.COVERAGE) for module in MODULES
            if hasattr(module, "COVERAGE")}


# model types that are a family's architecture under a name of their own, read as that family's (its model_type),
# with the note an imported spec states
READ_AS = {
    "kimi_k2": ("deepseek_v3", "Kimi K2 (Moonshot AI) is DeepSeek-V3's architecture under model_type 'kimi_k2' "
                               "(its architectures name DeepseekV3ForCausalLM, its code is DeepSeek-V3's): read as "
                               "DeepSeek-V3, and exported as deepseek_v3"),
}

# multimodal model types whose text model tfspec reads (its own family's) while the whole model's other towers wait:
# each imports its text model alone with ``--tower text``, exported as that family's class
@dataclass(frozen=True)
class TextAlone:
    """``cls``: the whole model's class; ``text``: where its text model's configuration and tensors are;
    ``others``: what of the whole model tfspec does not read yet."""

    cls: str
    text: nested.Nested
    others: str


def _language_model(default: str, renames=(("model.language_model.", "model."), ("lm_head.", "lm_head."))):
    return nested.Nested("text_config", "text", "text_", default, renames)


TEXT_ALONE = {
    "gemma4": TextAlone("Gemma4ForConditionalGeneration", _language_model("gemma4_text"),
                        "Gemma 4's vision and audio towers"),
    "llama4": TextAlone("Llama4ForConditionalGeneration", _language_model(
        "llama4_text", (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."))),
        "Llama 4's vision tower (its pixel-shuffle adapter)"),
    "qwen3_5": TextAlone("Qwen3_5ForConditionalGeneration", _language_model("qwen3_5_text"),
                         "Qwen3.5's vision tower"),
    "qwen3_5_moe": TextAlone("Qwen3_5MoeForConditionalGeneration", _language_model("qwen3_5_moe_text"),
                             "Qwen3.5-MoE's vision tower"),
}

# model types a user is likely to bring that tfspec does not read yet: the closest family it reads, and what differs
CLOSEST = {
    "qwen3_vl": ("qwen2_5_vl", "Qwen2.5-VL's towers, but DeepStack features (vision layers' outputs added into the "
                               "first text layers) and interleaved M-RoPE"),
    "qwen3_vl_moe": ("qwen2_5_vl", "Qwen2.5-VL's towers, but DeepStack features, interleaved M-RoPE and Qwen3-MoE's "
                                   "mixtures in the text model"),
    "kimi_linear": ("qwen3_next", "a hybrid as Qwen3-Next is, but Kimi Delta Attention (a gated delta rule decaying "
                                  "per channel) and latent attention (MLA) layers"),
    "deepseek_v4": ("deepseek_v32", "DeepSeek's mixtures and latent attention, but widened residual streams "
                                    "(hyper-connections) and compressed attention"),
    "gemma3n": ("gemma3", "Gemma 3's text model, but per-layer inputs, AltUp and LAuReL blocks, and audio and "
                          "MobileNet vision towers"),
    "mllama": ("llava", "a vision tower read by cross-attention layers, not by image tokens in the prompt"),
}

# model types a user is likely to bring that the language cannot express exactly, and why
NOT_EXPRESSIBLE = {
    "rwkv": "RWKV mixes positions with a recurrence (time mixing), which is not among tfspec's mixers",
}


def family_of(model_type: str) -> Family:
    """The family of a configuration's ``model_type`` (another family's architecture under its own name, as
    ``READ_AS`` says, is that family's); an ``InteropError`` naming the supported ones otherwise."""
    model_type = READ_AS.get(model_type, (model_type,))[0]
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    if model_type in TEXT_ALONE:
        alone = TEXT_ALONE[model_type]
        raise InteropError(f"model_type '{model_type}' ({alone.cls}): tfspec does not read {alone.others} yet; its "
                           f"text model imports alone with --tower text (tfspec.from_pretrained(DIR, tower=\"text\"))")
    if model_type in NOT_EXPRESSIBLE:
        raise InteropError(f"model_type '{model_type}' cannot be imported exactly: {NOT_EXPRESSIBLE[model_type]}")
    raise InteropError(f"model_type '{quoted(model_type)[1:-1]}' is not a family tfspec reads\n"
                       f"  {_closest(model_type)}\n"
                       "  the families it reads, each with its classes: tfspec import --list")


def _closest(model_type: str) -> str:
    """The family tfspec reads closest to ``model_type``, and how it is close: what differs where ``CLOSEST``
    says; else the one whose configuration shares the most fields with its transformers configuration; else by
    name."""
    if model_type in CLOSEST:
        other, differs = CLOSEST[model_type]
        return f"the closest family tfspec reads, {family_of(other).name} ({other}), differs: {differs}"
    mapping = _transformers().CONFIG_MAPPING
    if model_type in mapping:
        theirs = _field_names(model_type)
        shared = {t: len(theirs & _field_names(t)) / len(theirs | _field_names(t))
                  for f in FAMILIES for t in f.model_types if t in mapping}
        best = max(shared, key=shared.get)
        return (f"the closest by its configuration's fields is {family_of(best).name} ({best}), whose configuration "
                f"has {len(theirs & _field_names(best))} of its {len(theirs)} fields")
    import difflib
    named = difflib.get_close_matches(model_type, [t for f in FAMILIES for t in f.model_types], n=1, cutoff=0.6)
    return (f"the closest by name is {family_of(named[0]).name} ({named[0]}), which may not be the same architecture"
            if named else "transformers does not know it either: is the name spelt as its config.json spells it?")


_FIELD_NAMES: dict[str, frozenset] = {}


@contextmanager
def _quiet() -> Iterator[None]:
    """transformers' notes on a configuration it builds (its token ids beyond a tiny vocabulary, ...) left unsaid:
    a default configuration's, or each candidate's an export tries."""
    transformers = _transformers()
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def _field_names(model_type: str) -> frozenset:
    """The fields of ``model_type``'s default transformers configuration (its own, not every configuration's), a
    nested configuration's as ``text_config.hidden_size``."""
    if model_type not in _FIELD_NAMES:
        transformers = _transformers()
        base = set(transformers.PretrainedConfig().to_dict())
        try:
            with _quiet():
                values = transformers.CONFIG_MAPPING[model_type]().to_dict()
        except Exception:  # noqa: BLE001 - a configuration that needs arguments to build: compared by none
            values = {}
        fields = {key for key in values if key not in base}
        fields |= {f"{key}.{inner}" for key, value in values.items() if key.endswith("_config")
                   and isinstance(value, dict) for inner in value if inner not in base}
        _FIELD_NAMES[model_type] = frozenset(fields)
    return _FIELD_NAMES[model_type]


def _parsed(source):
    """A configuration as parsed JSON: read from a directory's ``config.json`` or a path (a dict as it is)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        path = path / "config.json" if path.is_dir() else path
        try:
            data = loads_json(read_regular(path, 64 << 20).decode("utf-8"))
        except FileNotFoundError:
            raise InteropError(f"{shown(path)}: no such file (a Hugging Face model directory has a "
                               "config.json)") from None
        except OSError as exc:  # a FIFO, a device, a directory, a file past the bound
            raise InteropError(f"{shown(path)}: {exc.strerror or exc}") from None
        except ValueError as exc:  # not UTF-8, not JSON, nested past JSON_DEPTH
            raise InteropError(f"{shown(path)}: not a readable JSON configuration: {exc}") from None
        source = _special_floats(data)
    return source


def _special_floats(value):
    """A parsed config.json with transformers' tags for the floats JSON cannot write (``{"__float__": "Infinity"}``,
    which ``save_pretrained`` writes for Mamba-2's unbounded time step) read as those floats."""
    if isinstance(value, dict):
        if set(value) == {"__float__"} and value["__float__"] in ("NaN", "Infinity", "-Infinity"):
            return float(value["__float__"].replace("Infinity", "inf"))
        return {k: _special_floats(v) for k, v in value.items()}
    return [_special_floats(v) for v in value] if isinstance(value, list) else value


# layer kinds under their older names (Nemotron-H's config.json files before transformers renamed them), read as
# transformers 5.24 reads them for every family; transformers 5.17 refuses Nemotron-H's
LEGACY_LAYER_TYPES = {"mamba": "linear_attention", "attention": "full_attention"}
LAYER_TYPE_FIELDS = {"layer_types", "layers_block_type", "mtp_layer_types", "mtp_layers_block_type"}


def pictures(source, outputs: dict):
    """A vision-language model's ``vision=`` input from its Hugging Face processor's ``outputs`` (``source``: its
    directory, ``config.json`` or configuration): the processor stays Hugging Face's, each family's pictures become
    what its compiled model reads (Qwen2.5-VL's flattened patches pictures again, Pixtral's cut to their sizes).

        batch = AutoProcessor.from_pretrained(path)(images=pictures, text=prompts, return_tensors="pt")
        model(text=batch["input_ids"], text_padding_mask=batch["attention_mask"] == 0,
              vision=tfspec.interop.pictures(path, batch))
    """
    config = read_config(source)
    family = family_of(config.model_type)
    if not family.towers:
        raise InteropError(f"{family.name} reads no pictures: its models are text models")
    return family.processor_pictures(config, dict(outputs))


def read_config(source) -> Any:
    """A ``transformers`` configuration from a directory, a ``config.json`` path, a dict or a configuration."""
    transformers = _transformers()
    if isinstance(source, transformers.PretrainedConfig):
        return source
    source = _parsed(source)
    unusable = _non_finite(source)
    if unusable is not None:  # JSON's NaN, Infinity and 1e400 (inf): transformers takes some of them
        raise InteropError(f"{unusable[0]} is {unusable[1]}, not a number a model can use")
    if not isinstance(source, dict):
        raise InteropError(f"expected a configuration (a dict, a config.json, a directory), got {type(source).__name__}")
    if "model_type" not in source:
        raise InteropError("the configuration has no model_type, so its family is unknown")
    problem = _nesting_problem(source) or size_problem(source)
    if problem is not None:
        raise InteropError(problem)
    if source["model_type"] in READ_AS:  # another family's architecture under a name of its own (Kimi K2)
        source = {**source, "model_type": READ_AS[source["model_type"]][0]}
    if source["model_type"] not in TEXT_ALONE:  # (whose text model alone is read)
        family_of(source["model_type"])  # an unsupported type is named before transformers sees it
    refused = [f"{key}: {why}" for key, why in REFUSED_FIELDS.items() if source.get(key) is not None]
    if refused:
        raise InteropError("the configuration asks for what tfspec does not read: " + "; ".join(refused))
    # a copy: transformers writes into nested dicts (Bamba's rope_parameters gains its partial_rotary_factor)
    values = copy.deepcopy({k: v for k, v in source.items() if k != "model_type" and k not in LOADER_FIELDS})
    for key in LAYER_TYPE_FIELDS.intersection(values):
        if isinstance(values[key], list):
            values[key] = [LEGACY_LAYER_TYPES.get(t, t) if isinstance(t, str) else t for t in values[key]]
    try:
        return transformers.AutoConfig.for_model(source["model_type"], **values)
    except (TypeError, ValueError, ArithmeticError, AttributeError, LookupError) as exc:
        # (transformers' own checks and derivations: Exaone 4's sliding_window null divides by 0, a Mamba's
        # layer_types is a property without a setter, id2label a number)
        raise InteropError(f"transformers cannot read this {source['model_type']} configuration: {exc}") from None
    except Exception as exc:  # huggingface_hub's StrictDataclassFieldValidationError: a field of the wrong type
        if "StrictDataclass" not in type(exc).__name__:
            raise
        if "ClassValidation" in type(exc).__name__:  # a check across fields (Nemotron-H's layer kinds): its reason
            cause = exc.__cause__ or exc
            raise InteropError(f"transformers cannot read this {source['model_type']} configuration: {cause}") from None
        field = getattr(exc, "field", None) or str(exc).split("'")[1]
        types = re.findall(r"<class '(\w+)'>", str(exc)) or re.findall(r"expected (\w+)", str(exc))
        expected = f"; transformers expects {' or '.join(dict.fromkeys(types))}" if types else ""
        raise InteropError(f"config.json's field {field} is {quoted(source.get(field))}{expected}") from None


def _nesting_problem(values: dict, where: str = "") -> str | None:
    """Why a parsed configuration's ``model_type``s or nested ``*_config``s are not what a configuration holds (a
    list for a name, a number for a tower's configuration), naming the field; None where they are."""
    kind = values.get("model_type")
    if kind is not None and not isinstance(kind, str):
        return f"config.json's field {where}model_type is {quoted(kind)}; a family's name (a string) is expected"
    named = values.get("architectures")
    if named is not None and not (isinstance(named, list) and all(isinstance(n, str) for n in named)):
        return f"config.json's field {where}architectures is {quoted(named)}; a list of class names is expected"
    for key, value in values.items():
        if key.endswith("_config") and key not in REFUSED_FIELDS and value is not None:
            if isinstance(value, dict):
                found = _nesting_problem(value, f"{where}{key}.")
                if found is not None:
                    return found
            elif not isinstance(value, _transformers().PretrainedConfig):
                return f"config.json's field {where}{key} is {quoted(value)}; a nested configuration (an object) " \
                       "is expected"
    return None


# Fields of a config.json that choose how transformers loads or runs a model, not what it computes: its attention
# and expert kernels (a name with a '/' is a hub repository of native code that transformers downloads and
# loads), the precision it loads in, which weights file it reads, device and parallel plans, fused modules, code
# of the directory's own. tfspec reads every checkpoint in float32 on transformers' eager, local path, so these are
# dropped before transformers sees the configuration.
LOADER_FIELDS = frozenset({
    "attn_implementation", "_attn_implementation", "_attn_implementation_internal", "_attn_implementation_autoset",
    "experts_implementation", "_experts_implementation", "_experts_implementation_internal",
    "dtype", "torch_dtype", "transformers_weights", "use_kernels", "kernel_config", "fusion_config",
    "tp_plan", "base_model_tp_plan", "pp_plan", "base_model_pp_plan", "device_map", "auto_map",
    "trust_remote_code", "custom_pipelines"})
# Fields that change what the checkpoint's numbers mean: refused, with the reason.
REFUSED_FIELDS = {
    "quantization_config": "quantized weights (bitsandbytes, GPTQ, AWQ, FP8, ...), which tfspec does not read; "
                           "import the model's unquantized weights",
}


# fields where Infinity means "no bound" (Mamba-2's time step limit, written [0.0, Infinity]; Nemotron-H's older name)
UNBOUNDED = {"time_step_limit.1", "mamba_dt_limit.1"}


def _non_finite(value, where: str = "") -> tuple[str, str] | None:
    """(field, 'NaN' or 'inf') for the first non-finite number in a parsed config.json (JSON's NaN, Infinity, 1e400)
    other than an upper bound of ``UNBOUNDED``."""
    if isinstance(value, float) and not math.isfinite(value) and not (value == math.inf and where in UNBOUNDED):
        return where or "the configuration", "NaN" if math.isnan(value) else "infinite"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def model_class(config, family: Family) -> str:
    """The Hugging Face class a configuration names (``architectures``), or the family's default."""
    named = list(getattr(config, "architectures", None) or ())
    for name in named:
        if name in family.classes:
            return name
    if named:
        raise InteropError(f"{', '.join(named)}: not a {family.name} class tfspec reads "
                           f"(it reads {', '.join(family.classes)})")
    return next(iter(family.classes))


def import_config(source, *, name: str | None = None, padding: bool = True, tower: str | None = None,
                  _within: str | None = None) -> str:
    """The readable spec a Hugging Face configuration describes (see the module's docstring); ``tower``: only that
    tower of a model of towers, where it is a model of its own (Gemma 3's ``text``: its text model, from the
    multimodal checkpoint's ``text_config``)."""
    config = read_config(source)
    if tower is not None:
        text, cls = tower_of(config, tower)
        within = (f"The {tower} model ({text.where}) of a Hugging Face {cls} configuration "
                  f"(model_type '{config.model_type}'), alone.")
        return import_config(_alone(config, text), name=name or _spec_name(source, config), padding=padding,
                             _within=within)
    family = family_of(config.model_type)
    with _fields_read(family):
        problems = family.unsupported(config)
    if problems:
        raise InteropError(f"this {family.name} configuration cannot be expressed exactly: " + "; ".join(problems))
    cls = model_class(config, family)
    options = {**family.classes[cls], **family.checkpoint_options(tensor_names(source))}
    declared = _declared_type(source)
    read_as = f"model_type '{declared}', read as '{config.model_type}'" if declared in READ_AS else \
        f"model_type '{config.model_type}'"
    heading = (f"Imported by tfspec from a Hugging Face {cls} configuration ({read_as}).",
               family.conventions + ".") + ((READ_AS[declared][1] + ".",) if declared in READ_AS else ()) + \
        ((_within,) if _within else ())
    from ...front.fmt import format_text

    with _fields_read(family):
        text = family.spec_text(config, **options, padding=padding, name=name or _spec_name(source, config),
                                heading=heading)
    text = format_text(text, "<imported>")  # in canonical form: what `tfspec fmt --check` accepts
    _check_imported(text, config, family)
    return text


@contextmanager
def _fields_read(family: Family) -> Iterator[None]:
    """A field the family reads that a configuration lacks (a tower's configuration of another family: a T5Config
    as a vision_config has no image_size) is an ``InteropError`` naming it; other errors are left as they are."""
    try:
        yield
    except AttributeError as exc:
        holder = getattr(exc, "obj", None)
        if not isinstance(holder, _transformers().PretrainedConfig):
            raise
        raise InteropError(f"this {family.name} configuration has no {exc.name} in its {type(holder).__name__} "
                           f"(model_type '{holder.model_type}'), where {family.name} reads one") from None


def _check_imported(text: str, config, family: Family) -> None:
    """An imported spec that does not check (a configuration of 0 heads, a width the heads do not divide) is an
    ``InteropError`` naming the configuration's fields behind it, not the spec's line: the user wrote config.json."""
    from ...errors import SpecError
    from ...ir.api import parse

    try:
        parse(text, file="<imported>")
    except SpecError as exc:
        first = exc.first
        span, lines = first.span, text.split("\n")
        written = ""
        if span is not None and span.file == "<imported>" and 0 < span.line <= len(lines):
            line = lines[span.line - 1]
            written = line[span.column - 1:span.end_column - 1] if span.end_line == span.line else line[span.column - 1:]
        cited = citations(text)
        fields = [cited[n] for n in dict.fromkeys(re.findall(r"[A-Za-z_]\w*", written)) if n in cited]
        if not fields:
            raise InteropError(f"this {family.name} configuration describes a model that does not check: "
                               f"{first.message} (at '{written.strip()[:80]}' of the imported spec)") from None
        values = [f"{f} is {quoted(lookup(config, f))}" for f in fields]
        raise InteropError(f"config.json's field{'s' if len(fields) > 1 else ''} {' and '.join(values)}: "
                           f"{first.message}") from None


def tower_of(config, tower: str) -> tuple:
    """(the ``Nested`` description of ``tower`` in ``config``'s model, where it is a model of its own; the whole
    model's class); an ``InteropError`` naming the ones that are otherwise."""
    alone = TEXT_ALONE.get(config.model_type)
    if alone is not None:
        family_name, nested_tower, cls = alone.cls, alone.text, alone.cls
    else:
        family = family_of(config.model_type)
        if not family.towers:
            raise InteropError(f"--tower {tower}: a {family.name} model is one model, not towers")
        nested_tower = family.alone or getattr(family.fields, "nested", None)
        family_name, cls = family.name, model_class(config, family)
    if nested_tower is None or nested_tower.tower != tower:
        named = f"only tower {nested_tower.tower} ({nested_tower.where}) is" if nested_tower is not None \
            else "none of its towers is"
        raise InteropError(f"--tower {tower}: {named} a model of its own in a {family_name} configuration")
    return nested_tower, cls


def _alone(config, text: nested.Nested):
    """The configuration of ``config``'s tower ``text`` as a model of its own: the whole model ties its head by
    its own ``tie_word_embeddings`` (transformers' rule), which the tower's may state otherwise."""
    inner = copy.deepcopy(lookup(config, text.where))
    if inner is None:
        raise InteropError(f"the configuration has no {text.where}, where its {text.tower} model is")
    if text.read_as is not None:
        inner = read_config({**inner.to_dict(), "model_type": text.read_as})
    if hasattr(config, "tie_word_embeddings") and hasattr(inner, "tie_word_embeddings"):
        inner.tie_word_embeddings = config.tie_word_embeddings
    return inner


def _declared_type(source) -> str | None:
    """The model_type a configuration (a dict, a path or a directory) declares, before ``READ_AS`` reads it as
    another family's."""
    if isinstance(source, _transformers().PretrainedConfig):
        return source.model_type
    parsed = _parsed(source)
    return parsed.get("model_type") if isinstance(parsed, dict) else None


def tensor_names(source) -> set[str]:
    """The names of the tensors a model directory's checkpoint holds (empty without one)."""
    if not isinstance(source, (str, Path)) or not Path(source).is_dir():
        return set()
    path = Path(source)
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (path / index).exists():
            try:
                return set(read_json(path / index, INDEX_BYTES)["weight_map"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise InteropError(f"{shown(path / index)}: not a readable weight index: {reason}") from None
    if (path / "model.safetensors").exists():
        from ...files import open_regular
        try:
            with open_regular(path / "model.safetensors") as handle:  # names from the header: no torch, no FIFO
                return set(_safetensors_types(handle, path / "model.safetensors"))
        except OSError as exc:
            raise InteropError(f"{shown(path / 'model.safetensors')}: {exc.strerror or exc}") from None
    return set()


def from_pretrained(directory, *, device=None, tower: str | None = None):
    """The compiled model of a Hugging Face model directory, with its weights, in eval mode; ``tower``: only that
    tower of a model of towers, where it is a model of its own (``import_config``'s), exported as its own
    family's class."""
    from ...ir.api import parse
    from ...backend.compiler import compile as compile_spec

    path = Path(directory)
    if not path.is_dir():
        raise InteropError(f"{shown(path)}: not a directory (a Hugging Face model directory holds config.json and "
                           "weights)")
    if not any((path / f).exists() for f in ("model.safetensors", "model.safetensors.index.json",
                                             "pytorch_model.bin", "pytorch_model.bin.index.json")):
        raise InteropError(f"{shown(path)}: no weights (model.safetensors or pytorch_model.bin); "
                           "tfspec.import_config reads the configuration alone")
    config = read_config(path)
    text = import_config(path, tower=tower)
    family = family_of(config.model_type) if tower is None else None
    stored = stored_types(path)  # every file transformers would open is checked first: none is a FIFO
    model = compile_spec(parse(text, file=str(path / "config.json")), seed=0)
    transformers = _transformers()
    import torch

    cls = getattr(transformers, model_class(config, family) if tower is None else tower_of(config, tower)[1])
    eager = {"experts_implementation": "eager"} if hasattr(config, "_experts_implementation") else {}
    try:  # the configuration read above (its loader fields dropped), the eager path, float32, nothing fetched
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' notes on a foreign pickle's protocol: refused below
            reference, info = cls.from_pretrained(path, config=config, local_files_only=True, output_loading_info=True,
                                                  attn_implementation="eager", dtype=torch.float32, **eager)
    except Exception as exc:  # noqa: BLE001 - a damaged or hostile file: torch, safetensors, zipfile, pickle ...
        raise InteropError(f"{shown(path)}: transformers cannot load it: {safe_reason(exc)}") from None
    # transformers fills a missing tensor with random values and only warns: a damaged checkpoint is refused here
    damaged = {k: sorted(map(str, v)) for k, v in info.items() if k != "error_msgs" and v}
    if damaged or info.get("error_msgs"):
        details = [f"  {kind.replace('_', ' ')}: {', '.join(names[:8])}" + (" …" if len(names) > 8 else "")
                   for kind, names in damaged.items()] + [f"  {m}" for m in info.get("error_msgs", [])]
        raise InteropError(f"{shown(path)}: the checkpoint does not match its config.json:\n" + "\n".join(details))
    _check_values(path, reference, stored)
    if tower is not None:  # the tower alone, through its own family: exported back as that family's class
        text, _ = tower_of(config, tower)
        inner = _alone(config, text)
        text.load(model, reference, inner)
        model.hf_class, model.hf_carried = model_class(inner, family_of(inner.model_type)), {}
        return (model.to(device) if device is not None else model).eval()
    family.load(model, reference)
    model.hf_class = type(reference).__name__  # what it was: exported back as the same class
    model.hf_carried = family.carried_values(config)
    return (model.to(device) if device is not None else model).eval()


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
# what transformers may open beside the weights when it loads a model class
OTHER_FILES = ("config.json", "generation_config.json")
INDEX_BYTES = 64 << 20  # the largest weight index read (a 1T-parameter model's is a few MB)


def stored_types(directory) -> dict[str, str]:
    """Each stored tensor's type as its file declares it (``"F32"``, ``"I32"``, ...), by name, from the
    safetensors files' headers (a ``pytorch_model.bin`` declares none: {}), once every file transformers would
    open is known to be a regular file: a FIFO in a weight file's place would block the loader forever."""
    from ...files import open_regular

    path = Path(directory)
    names = [n for n in WEIGHT_FILES + OTHER_FILES if os.path.lexists(path / n)]
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if index in names:
            try:
                weight_map = read_json(path / index, INDEX_BYTES)["weight_map"]
                names += sorted({str(v) for v in weight_map.values()})
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
                raise InteropError(f"{shown(path / index)}: not a readable weight index ({reason})") from None
    types: dict[str, str] = {}
    for name in dict.fromkeys(names):
        file = path / name
        if Path(name).name != name:
            raise InteropError(f"{shown(path)}: its weight index names {shown(name)!r}, not a file of the directory")
        try:
            with open_regular(file) as handle:
                if name.endswith(".safetensors"):
                    types.update(_safetensors_types(handle, file))
        except FileNotFoundError:
            if name in WEIGHT_FILES + OTHER_FILES:
                continue  # a dangling link: transformers does not read it either
            raise InteropError(f"{shown(file)}: missing (its weight index names it)") from None
        except OSError as exc:
            raise InteropError(f"{shown(file)}: {exc.strerror or exc}") from None
    return types


def _safetensors_types(handle, file: Path) -> dict[str, str]:
    """{tensor: dtype} of an open safetensors file's header (8 bytes of length, then that much JSON)."""
    import struct

    head = handle.read(8)
    size = struct.unpack("<Q", head)[0] if len(head) == 8 else None
    if size is None or size > min(100 << 20, os.fstat(handle.fileno()).st_size - 8):
        raise InteropError(f"{shown(file)}: not a safetensors file (its header's length is not possible)")
    try:
        header = loads_json(handle.read(size))
        return {k: str(v["dtype"]) for k, v in header.items() if k != "__metadata__"}
    except (ValueError, TypeError, KeyError, AttributeError):
        raise InteropError(f"{shown(file)}: not a safetensors file (its header is not JSON naming tensors)") from None


FLOAT_TYPES = {"F64", "F32", "F16", "BF16"}


def _check_values(path: Path, reference, stored: dict[str, str]) -> None:
    """Every floating-point tensor of the loaded reference is finite and was stored as floating point: an Inf,
    a NaN or an integer tensor read as weights (I32 bits where F32 was meant) is refused by name, before any
    training or export would carry it on."""
    import torch

    mistyped, broken = [], []
    for name, tensor in reference.state_dict().items():
        if not tensor.is_floating_point():
            continue
        prefix = f"{reference.base_model_prefix}."  # a base model's tensors saved from its causal LM, or back
        declared = stored.get(name, stored.get(prefix + name, stored.get(name.removeprefix(prefix))))
        if declared is not None and declared not in FLOAT_TYPES:
            mistyped.append(f"{name} ({declared})")
        elif not bool(torch.isfinite(tensor).all()):
            broken.append(name)
    if mistyped:
        raise InteropError(f"{shown(path)}: weights stored as integers, not floating point: "
                           f"{', '.join(mistyped[:8])}"
                           + (f" and {len(mistyped) - 8} more" if len(mistyped) > 8 else ""))
    if broken:
        raise InteropError(f"{shown(path)}: non-finite weights (inf or NaN) in {', '.join(broken[:8])}"
                           + (f" and {len(broken) - 8} more" if len(broken) > 8 else ""))


def tokenizer_of(directory, model):
    """The ``tokenizer.json`` of a model directory as a vocabulary (special ids from its ``config.json``), or None
    without one, or for a model that reads no token ids (pictures); a tokenizer with more tokens than ``model``'s
    token table has rows is refused (the table of the stack last in the model: a decoder's, Whisper's; of a model of
    towers, the tower of tokens a connector feeds, else its first tower of tokens)."""
    from ...run.data import DataError, TokenizerVocabulary

    path = Path(directory) / "tokenizer.json"
    spec = model.spec
    if isinstance(spec, S.Towers):
        fed = [c.target for c in spec.connectors]
        spec = next((t.spec for t in sorted(spec.towers, key=lambda t: t.name not in fed)
                     if t.spec.embedding(t.spec.stacks[-1].embedding).vocab is not None), None)
        if spec is None:
            return None
    tables = [spec.embedding(s.embedding).vocab for s in spec.stacks]
    if not path.is_file() or tables[-1] is None:
        return None
    try:
        config = read_json(Path(directory) / "config.json")
        vocab = TokenizerVocabulary.load(path, config if isinstance(config, dict) else {})
    except (OSError, ValueError, DataError) as exc:
        raise InteropError(str(exc)) from None
    rows = tables[-1]
    if vocab.size > rows:
        raise InteropError(f"{shown(path)}: {vocab.size:,} tokens, but the model's embedding has {rows:,} rows")
    return vocab


def _spec_name(source, config) -> str:
    """A model name for the spec: the directory's (as an identifier), else the model type's."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        stem = (path if path.is_dir() else path.parent).resolve().name
        ident = re.sub(r"\W", "_", stem).strip("_")
        if ident and not ident[0].isdigit():
            return ident
    return re.sub(r"\W", "_", config.model_type)


def configurations_without_torch() -> None:
    """Have transformers load, where nothing has loaded it or torch yet, as it does where torch is not
    installed: its configurations are all that reading one needs, and importing torch would be most of the
    time of ``tfspec import`` without weights. Only for a process that runs that one command and exits (the
    command line's own): torch cannot be imported in it afterwards."""
    if "transformers" in sys.modules or "torch" in sys.modules:
        return
    sys.modules["torch"] = None  # importlib's mark of an absent module: transformers' check finds no torch
    advisory = os.environ.get("TRANSFORMERS_NO_ADVISORY_WARNINGS")
    os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"  # not its advice that models are unavailable
    try:
        importlib.import_module("transformers")
    except ImportError:  # reported where it is needed
        pass
    finally:
        if advisory is None:
            del os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"]
        else:
            os.environ["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = advisory


def _transformers():
    try:
        import transformers
    except ImportError:
        raise InteropError("reading Hugging Face models needs the transformers package: "
                           "pip install transformers") from None
    return transformers


def _without_foreign_token_ids(values: dict) -> dict:
    """``values`` with each special id its class would default to outside the vocabulary (GPT-2's 50256 in a
    model of 40 ids) set to None: the model has no such token, and transformers would warn about it."""
    defaults = _transformers().AutoConfig.for_model(values["model_type"])
    vocab = values.get("vocab_size", getattr(defaults, "vocab_size", None))
    foreign = {key: None for key in defaults.to_dict() if key.endswith("_token_id") and key not in values
               and isinstance(getattr(defaults, key), int) and vocab is not None and getattr(defaults, key) >= vocab}
    required = [key for key in foreign if key in REQUIRED_TOKEN_IDS.get(values["model_type"], ())]
    if required:
        raise InteropError(f"{values['model_type']}'s {', '.join(required)} ({getattr(defaults, required[0])} by "
                           f"default) is outside this model's {vocab:,}-token vocabulary, and transformers needs "
                           "one: export a run with its tokenizer, or give token_ids")
    return {**values, **foreign}


# token ids a family's configuration cannot leave unset (Marian's decoder starts from one; it has no default in range)
REQUIRED_TOKEN_IDS = {"marian": ("decoder_start_token_id",)}


def hf_equivalent(model, prefer: str | None = None, token_ids: dict[str, int] | None = None,
                  carried: dict | None = None) -> tuple[Family, str, Any]:
    """The family, Hugging Face class and configuration that compute what the compiled ``model`` computes.

    Each family reads the spec's settings into its configuration (``hf_config``); the spec that configuration
    describes must then agree with ``model``'s in every architectural fact, so nothing is approximated. With
    no family agreeing, an ``InteropError`` names the closest one's differences. ``prefer``: a class to try
    first (the one a model was imported from: BigBird with full attention is also exactly a BERT). ``carried``:
    what an import carried (``Family.carried``), written back where it still says what the spec does."""
    from ..mapping import architecture_problems
    from ...front.schema import Towers

    towers = isinstance(model.spec, Towers)  # (a model of towers: families of towers alone describe it)
    padding = any(getattr(part, s.role).masks_padding for part in model.parts().values() for s in part.spec.stacks)
    from ..facts import OtherKind

    # (how far it got, family, differences, special tokens its configuration names otherwise than the vocabulary)
    tried: list[tuple[int, str, list[str], list[str]]] = []
    # each way a family writes its configuration once (Llama's and Mistral's are one function; SmolVLM's is its own)
    preferred = [(f.module, f.hf_config) for f in FAMILIES if prefer in f.classes]
    for module, writes in dict.fromkeys(preferred + [(f.module, f.hf_config) for f in FAMILIES if f.towers == towers]):
        candidate = next(f for f in FAMILIES if f.module == module and f.hf_config is writes)
        try:
            values = candidate.hf_config(model.spec)
        except InteropError as exc:
            tried.append((0 if isinstance(exc, OtherKind) else 1, candidate.name, [str(exc)], []))
            continue
        # a special token the spec's own configuration names otherwise than the run's vocabulary (RoBERTa's
        # positions start after its pad: pad_token_id 1), which the exported configuration cannot honour both ways
        conflicts = [f"its configuration needs {key} = {values[key]} (what the spec's architecture implies), and "
                     f"the run's vocabulary has {key} = {value}" for key, value in (token_ids or {}).items()
                     if key in values and values[key] != value]
        values = _without_foreign_token_ids({**values, **_still_true(candidate, values, carried or {}),
                                             **(token_ids or {})})
        values = _nested(values)
        with _quiet():
            config = read_config(values)
        family = family_of(config.model_type)
        has = {} if towers else {"head": model.head is not None, "pooler": getattr(model, "pooler", None) is not None}
        classes = sorted((c for c, options in family.classes.items()
                          if all(has[k] == v for k, v in options.items() if k in has)), key=lambda c: c != prefer)
        if not classes:
            tried.append((1, family.name, [f"no {family.name} class has " + " and ".join(
                f"{'a' if v else 'no'} {k}" for k, v in has.items())], []))
            continue
        problems = family.unsupported(config)
        if not problems:
            expected = family.spec_text(config, **family.classes[classes[0]], **family.model_options(model),
                                        padding=padding)
            problems = architecture_problems(model.spec, expected, classes[0])
        if not problems:
            own = getattr(_transformers(), classes[0]).config_class.model_type  # XLM-RoBERTa's, not RoBERTa's
            config = config if own == config.model_type else read_config({**values, "model_type": own})
            config.architectures = [classes[0]]
            return family, classes[0], config
        tried.append((2, family.name, problems, conflicts))
    # the furthest, fewest differences; on a tie, one whose differences its special tokens explain (RoBERTa's
    # positions after a pad the vocabulary puts elsewhere)
    _, closest, problems, conflicts = min(tried, key=lambda t: (-t[0], len(t[2]), not t[3]))
    problems = conflicts + problems
    more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    raise InteropError(f"spec '{model.spec.name}' has no Hugging Face equivalent; the closest family, {closest}, "
                       "differs: " + "; ".join(problems[:5]) + more)


def _nested(values: dict) -> dict:
    """``values`` with each dotted key (a carried ``rope_parameters.mrope_section``) put inside its dict field."""
    from ..fields import put
    out = {key: (dict(value) if isinstance(value, dict) else value) for key, value in values.items() if "." not in key}
    for key, value in values.items():
        if "." in key:
            put(out, key, value)
    return out


def _still_true(family: Family, values: dict, carried: dict) -> dict:
    """The carried values that agree with the configuration a spec gives: a field it does not write, or another
    spelling of the name it writes (``swish`` for ``silu``)."""
    names = {f.config: f.names for f in family.fields.fields if f.names is not None}
    return {key: value for key, value in carried.items() if key not in values or (
        key in names and names[key].get(value) is not None and names[key].get(value) == names[key].get(values[key]))}


def _tied_on_construction(reference) -> bool:
    """Did the reference tie its output embeddings to its input embeddings when it was built?"""
    output, embedding = reference.get_output_embeddings(), reference.get_input_embeddings()
    return output is not None and output.weight is embedding.weight


def export_pretrained(model, directory, prefer: str | None = None, token_ids: dict[str, int] | None = None) -> str:
    """Write ``model`` as a Hugging Face model directory (``config.json``, ``model.safetensors``) that
    ``transformers``' ``from_pretrained`` loads; returns the class it is (``prefer``'s where it fits; by
    default the class ``from_pretrained`` read it from). ``token_ids``: configuration fields naming special
    tokens (``eos_token_id`` ...), which ``generate`` reads."""
    family, cls, config = hf_equivalent(model, prefer or getattr(model, "hf_class", None), token_ids,
                                        getattr(model, "hf_carried", None))
    transformers = _transformers()
    reference = getattr(transformers, cls)(config)
    if getattr(model, "head", None) is not None and not model.head.tied and _tied_on_construction(reference):
        import torch  # a head of its own, which the reference tied on construction: untie it before loading
        output = reference.get_output_embeddings()
        output.weight = torch.nn.Parameter(output.weight.detach().clone())
    # multi-token prediction's tensors, which the model class leaves out, go beside its own in the checkpoint
    held, ahead = mtp.split(model, family.export(model))
    try:
        reference.load_state_dict(held, strict=True)
    except RuntimeError as exc:
        raise InteropError(f"{cls} does not take these weights: {exc}") from None
    try:
        reference.save_pretrained(str(directory))
        mtp.write(directory, ahead)
    except Exception as exc:  # safetensors' I/O errors name no file: it is the weights' file
        if type(exc).__name__ != "SafetensorError":
            raise
        raise as_os_error(exc, Path(directory) / "model.safetensors") from None
    return cls


# a family of towers reads its nested configurations through the others (``tfspec.interop.nested``)
nested.CATALOG = nested.Catalog(FAMILIES, family_of, read_config)
