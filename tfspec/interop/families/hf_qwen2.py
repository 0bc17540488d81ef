"""Hugging Face ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM`` and ``SmolLM3ForCausalLM`` (and their base models) <->
a compiled spec.

All three are Llama's layout (the same tensor names, ``hf_llama``'s weight rules) with layers that
differ, which the spec writes as a layer schedule: Qwen2's ``layer_types`` put a sliding window on some layers
(``layers 3 { self_attn mask=causal + padding }``), SmolLM3's ``no_rope_layers`` leave rotary out of every
4th (``layers every(4, from=3) { position none }``). Qwen2 biases its q/k/v projections but not its output
projection; Qwen3 normalises each head's queries and keys (``qk_norm=rmsnorm``, weights ``q_norm``/``k_norm``). ``spec_text(config)`` writes the spec, its stack's own block the most common kind of layer;
export reads each layer back into ``layer_types`` (and ``no_rope_layers``), and loading compares the model's
spec with the configuration's fact by fact, so a layer that differs is an ``InteropError``.
"""

from __future__ import annotations

from . import hf_llama
from ...registry import NORMS
from ..facts import Facts
from ..fields import Field, Fields
from ..mapping import layer_modules, rule
from ..writer import SpecWriter, causal_masks, schedule
from ..family import Family

SLIDING, FULL = "sliding_attention", "full_attention"


def _window(config):
    """The sliding window of the layers that slide (None: none does)."""
    window = getattr(config, "sliding_window", None)
    sliding = SLIDING in (getattr(config, "layer_types", None) or [])
    return int(window) if window is not None and sliding and getattr(config, "use_sliding_window", False) else None


def _layer_windows(config) -> list[bool]:
    """Per layer: does it slide?"""
    window = _window(config)
    return [window is not None and t == SLIDING for t in config.layer_types]


def _shared(*, exclude: set[str]) -> list:
    return [e for e in hf_llama.FIELDS.entries if getattr(e, "name", None) not in exclude
            and getattr(e, "config", None) not in exclude]


def _head_dim(f) -> int | None:
    """head_dim, exported only where it is not hidden_size / num_attention_heads (these configurations have
    no such field by default)."""
    shape = f.geometry("decoder")
    return shape.head_dim if shape.head_dim != shape.width // shape.heads else None


def _max_window_layers(windows: list) -> int | None:
    """Qwen2's other way to say which layers slide, written where it says the same as ``layer_types``: full
    layers first, sliding ones from this index on (None: it does not, and ``layer_types`` alone says it)."""
    first = next((i for i, w in enumerate(windows) if w is not None), None)
    if first is None or any(w is None for w in windows[first:]):
        return None
    return first


SCHEDULE_FIELDS = [
    Field("head_dim", "head_dim", _head_dim, read=hf_llama.written_head_dim),
    Field("window", "sliding_window", lambda f: f.one_window("decoder"), read=_window),
    # which layers slide, as spec_text reads it from these three (a layer schedule, not one setting)
    Field("use_sliding_window", "use_sliding_window", lambda f: f.one_window("decoder") is not None or None,
          read=lambda c: bool(getattr(c, "use_sliding_window", False)), setting=False),
    Field("max_window_layers", "max_window_layers", lambda f: _max_window_layers(f.layer_windows("decoder")),
          read=lambda c: getattr(c, "max_window_layers", None) if _window(c) is not None else None, setting=False),
    Field("layer_types", "layer_types", lambda f: [SLIDING if w is not None else FULL
                                                   for w in f.layer_windows("decoder")],
          read=lambda c: [t if _window(c) is not None else FULL for t in c.layer_types], setting=False),
]

QWEN2_FIELDS = Fields(*_shared(exclude={"head_dim", "window", "attention_bias", "mlp_bias", "pretraining_tp"}),
                      *SCHEDULE_FIELDS,
                      ignored=hf_llama.FIELDS.ignored)
SMOLLM3_FIELDS = Fields(
    *_shared(exclude={"head_dim", "window", "pretraining_tp"}), *SCHEDULE_FIELDS,
    Field("no_rope_layers", "no_rope_layers", lambda f: [int(f.rotates(a.position))
                                                         for a in f.layer_attentions("decoder")],
          read=lambda c: None),
    ignored={**hf_llama.FIELDS.ignored,
             "no_rope_layer_interval": "how no_rope_layers is derived when a configuration leaves it out; "
                                       "tfspec reads no_rope_layers"})
QWEN3_FIELDS = Fields(
    *_shared(exclude={"head_dim", "window", "pretraining_tp", "mlp_bias"}),
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),  # Qwen3's default is 128, not width/heads
    *SCHEDULE_FIELDS[1:], ignored=hf_llama.FIELDS.ignored)
FIELDS = QWEN2_FIELDS  # the Qwen2 family's table; SmolLM3's and Qwen3's modules name theirs
TABLES = {"qwen2": QWEN2_FIELDS, "qwen3": QWEN3_FIELDS, "smollm3": SMOLLM3_FIELDS}


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Qwen2, Qwen3 or SmolLM3 configuration describes, its layers scheduled as they differ."""
    smollm3 = config.model_type == "smollm3"
    w = SpecWriter()
    s = TABLES[config.model_type].write(config, w)
    rotary = hf_llama.rotary(s)

    def masks(slides: bool) -> str:
        return causal_masks(s.window if slides else None, padding)

    ropes = [bool(r) for r in config.no_rope_layers] if smollm3 else [True] * config.num_hidden_layers
    base, sections = schedule(list(zip(_layer_windows(config), ropes)))
    # Qwen2 biases q, k and v but not the output; SmolLM3 and Qwen3 have Llama's one switch for both
    attention = {"bias": "true", "out_bias": "false"} if config.model_type == "qwen2" else \
        {"bias": s.attention_bias, "qk_norm": f"rmsnorm(eps={s.eps})" if config.model_type == "qwen3" else None}
    document = (hf_llama.document(s, padding=padding, head=head)
                .change("decoder", "position", rotary if base[1] else "none")
                .change("decoder", "attention", mask=masks(base[0]), **attention)
                .change("decoder", "feedforward", bias=s.mlp_bias if smollm3 else "false"))
    for layers, (slides, rope) in sections:
        changes = ([f"self_attn mask={masks(slides)}"] if slides != base[0] else []) + \
                  ([f"position {rotary if rope else 'none'}"] if rope != base[1] else [])
        document = document.add("decoder", f"layers {layers} {{ {'; '.join(changes)} }}")
    return w.text(document.text(name), list(heading))


def hf_config(spec, model_type: str = "qwen2") -> dict:
    """The Qwen2 configuration ``spec`` would be, its ``layer_types`` read from each layer."""
    f = Facts(spec, "Qwen2")
    f.kind("decoder-only")
    return {"model_type": model_type, **QWEN2_FIELDS.config(f)}


def hf_config_qwen3(spec) -> dict:
    """The Qwen3 configuration ``spec`` would be, its ``layer_types`` read from each layer."""
    f = Facts(spec, "Qwen3")
    f.kind("decoder-only")
    if NORMS[f.attention("decoder").qk_norm.name].absent:  # (its kind is compared with Qwen3's after)
        raise f.refuse("its queries and keys are not normed, as Qwen3's are (by rmsnorm)")
    return {"model_type": "qwen3", **QWEN3_FIELDS.config(f)}


def qwen3_rules(model, prefix: str, state: dict, lm: bool):
    """Llama's weight rules, and each layer's query and key norms."""
    rules, aliases = hf_llama.weight_rules(model, prefix, state, lm)
    attention = layer_modules(model)["attention"]
    for i in range(len(model.decoder.layers)):
        rules += [rule(f"decoder.layers.{i}.{attention}.{n}.weight", f"{prefix}layers.{i}.self_attn.{n}.weight")
                  for n in ("q_norm", "k_norm")]
    return rules, aliases


def hf_config_smollm3(spec) -> dict:
    """The SmolLM3 configuration ``spec`` would be: ``layer_types`` and ``no_rope_layers`` from each layer."""
    f = Facts(spec, "SmolLM3")
    f.kind("decoder-only")
    return {"model_type": "smollm3", **SMOLLM3_FIELDS.config(f)}


def from_hf_qwen2(model, reference) -> None:
    """Copy a ``Qwen2ForCausalLM``/``SmolLM3ForCausalLM`` (or base model)'s weights into ``model``; the spec must be
    the architecture the reference's configuration describes, layer by layer."""
    smollm3 = reference.config.model_type == "smollm3"
    hf_llama.load_decoder(model, reference, SMOLLM3_FIELDS if smollm3 else QWEN2_FIELDS,
                          hf_config_smollm3 if smollm3 else hf_config, spec_text, hf_llama.weight_rules)


def to_hf_qwen2(model) -> dict:
    """A state dict for ``Qwen2ForCausalLM``/``SmolLM3ForCausalLM`` (spec with a head) or the base model."""
    return hf_llama.export_decoder(model, hf_llama.weight_rules, "Hugging Face Qwen2/SmolLM3")


def from_hf_qwen3(model, reference) -> None:
    """Copy a ``Qwen3ForCausalLM`` (or ``Qwen3Model``)'s weights into ``model``, as ``from_hf_qwen2`` does."""
    hf_llama.load_decoder(model, reference, QWEN3_FIELDS, hf_config_qwen3, spec_text, qwen3_rules)


def to_hf_qwen3(model) -> dict:
    """A state dict for ``Qwen3ForCausalLM`` (spec with a head) or ``Qwen3Model``."""
    return hf_llama.export_decoder(model, qwen3_rules, "Hugging Face Qwen3")


EXPORT_PRIORITY = 200  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("Qwen2", ("qwen2",),
           {"Qwen2ForCausalLM": {"head": True}, "Qwen2Model": {"head": False}},
           "Qwen2: Llama's block with biased q/k/v projections; layer_types give some layers a sliding window "
           "(a layer schedule)",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_qwen2,
           export=to_hf_qwen2),
)
