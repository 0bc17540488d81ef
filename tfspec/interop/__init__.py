"""Hugging Face (and ``torch.nn.Transformer``) models in and out of tfspec.

    import tfspec
    text = tfspec.import_config("path/to/model")       # the readable spec a config.json describes
    model = tfspec.from_pretrained("path/to/model")    # compiled, with the checkpoint's weights

    from tfspec.interop import from_hf_bert, to_hf_bert
    from_hf_bert(model, reference)                     # copy a loaded BertModel's weights into a compiled spec
    reference.load_state_dict(to_hf_bert(model))       # and back

Families (``families.FAMILIES``): BERT, GPT-2, Llama, Mistral, GPT-NeoX, T5, BigBird; one module each
(``hf_bert``, ``hf_gpt2``, ``hf_llama`` for Llama and Mistral, ``hf_gpt_neox``, ``hf_t5``, ``hf_big_bird``)
with one table of its configuration fields (``FIELDS``: which spec setting each is, read by import's
``spec_text`` and export's ``hf_config`` alike; see ``fields``) and one mapping of every tensor (``Rule``s,
read by ``from_hf_*`` and ``to_hf_*`` alike);
``torch_transformer`` for ``torch.nn.Transformer``. Copying in checks every tensor on both sides and
compares the spec with the one the reference's configuration describes, fact by fact
(``mapping.architecture_problems``): anything unmapped, mismatched or not expressible is an
``InteropError`` listing it, and nothing is copied.
"""

from .families import FAMILIES, from_pretrained, import_config
from .hf_bert import from_hf_bert, to_hf_bert
from .hf_big_bird import from_hf_big_bird, to_hf_big_bird
from .hf_gpt2 import from_hf_gpt2, to_hf_gpt2
from .hf_gpt_neox import from_hf_gpt_neox, to_hf_gpt_neox
from .hf_llama import from_hf_llama, to_hf_llama
from .hf_t5 import from_hf_t5, to_hf_t5
from .mapping import InteropError, Rule
from .torch_transformer import from_torch_transformer, to_torch_transformer

__all__ = ["FAMILIES", "InteropError", "Rule", "from_hf_bert", "from_hf_big_bird", "from_hf_gpt2",
           "from_hf_gpt_neox", "from_hf_llama", "from_hf_t5", "from_pretrained", "from_torch_transformer",
           "import_config", "to_hf_bert", "to_hf_big_bird", "to_hf_gpt2", "to_hf_gpt_neox", "to_hf_llama",
           "to_hf_t5", "to_torch_transformer"]
