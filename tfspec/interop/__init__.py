"""Hugging Face (and ``torch.nn.Transformer``) models in and out of tfspec.

    import tfspec
    text = tfspec.import_config("path/to/model")       # the readable spec a config.json describes
    model = tfspec.from_pretrained("path/to/model")    # compiled, with the checkpoint's weights

    from tfspec.interop import from_hf_bert, to_hf_bert
    from_hf_bert(model, reference)                     # copy a loaded BertModel's weights into a compiled spec
    reference.load_state_dict(to_hf_bert(model))       # and back

Families (``families.FAMILIES``, 80 of them; ``tfspec import --list``): each a declared ``family.Family`` in the
module in ``families/`` that reads and writes it (``hf_bert``; ``hf_llama`` for Llama and Mistral), most derived
from another by their differences, found by walking that package, holding its whole
contract: its model types and classes, its table of configuration fields (``FIELDS``: which spec setting each
is, read by import's ``spec_text`` and export's ``hf_config`` alike; see ``fields``), and one mapping of every
tensor (``Rule``s, read by its ``load`` and ``export`` alike);
``torch_transformer`` for ``torch.nn.Transformer``. Copying in checks every tensor on both sides and
compares the spec with the one the reference's configuration describes, fact by fact
(``mapping.architecture_problems``): anything unmapped, mismatched or not expressible is an
``InteropError`` listing it, and nothing is copied.
"""

import importlib

# Each name from the module that defines it, imported when first used: reading a configuration (``tfspec import``)
# never loads torch, which the weight mappings need.
_HOMES = {"FAMILIES": "families", "from_pretrained": "families", "import_config": "families", "pictures": "families",
          "InteropError": "mapping", "Rule": "mapping",
          "from_torch_transformer": "torch_transformer", "to_torch_transformer": "torch_transformer",
          "from_hf_bert": "families.hf_bert"}  # (BERT's load, or with initialise=True another architecture's start)
# ``from_hf_llama(model, reference)`` / ``to_hf_llama(model)``: a family's ``load`` and ``export``, by model type
_FAMILY_WAYS = {f"{way}_hf_{model_type}": (model_type, "load" if way == "from" else "export")
                for way in ("from", "to") for model_type in ("bert", "big_bird", "gpt2", "gpt_neox", "llama", "t5")
                if f"{way}_hf_{model_type}" not in _HOMES}

__all__ = sorted({*_HOMES, *_FAMILY_WAYS})


def __getattr__(name: str):
    if name in _FAMILY_WAYS:
        model_type, way = _FAMILY_WAYS[name]
        value = getattr(importlib.import_module(f"{__name__}.families").family_of(model_type), way)
    elif name in _HOMES:
        value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
