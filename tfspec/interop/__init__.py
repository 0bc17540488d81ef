"""Weight interop with reference implementations: copy weights in, and export a state dict back out.

- ``torch_transformer``: ``torch.nn.Transformer``
- ``hf_bert``: Hugging Face ``BertModel`` / ``BertForMaskedLM``
- ``hf_gpt2``: Hugging Face ``GPT2Model`` / ``GPT2LMHeadModel``
- ``hf_llama``: Hugging Face ``LlamaForCausalLM`` / ``MistralForCausalLM`` (and base models)
- ``hf_gpt_neox``: Hugging Face ``GPTNeoXForCausalLM`` / ``GPTNeoXModel`` (Pythia)
- ``hf_t5``: Hugging Face ``T5ForConditionalGeneration`` / ``T5Model`` (v1.0 and v1.1)
- ``hf_big_bird``: Hugging Face ``BigBirdModel`` / ``BigBirdForMaskedLM``

Each mapping is a list of ``Rule``s; every tensor on both sides must be
covered by a rule, and every shape must agree, or an ``InteropError`` lists
what is unmapped or mismatched (nothing is copied then). The spec's
architecture is checked against the reference's configuration too (heads,
norm placement, activation, eps), since equal shapes do not make equal models. The newer
mappings write the spec a reference's configuration describes (``spec_text(config)``) and
compare every architectural fact with ``tfspec.diff`` (``mapping.architecture_problems``).
"""

from .mapping import InteropError, Rule

__all__ = ["InteropError", "Rule"]
