"""The tiny Llama of the README's "Bring your own model": random weights and a byte-level BPE tokenizer
learned from the README, saved into ./tiny-llama as Hugging Face saves them (nothing is downloaded).

    python docs/tiny_llama.py && tfspec import tiny-llama -o tiny_llama.tfs --run tiny-run
"""
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
tokenizer.train_from_iterator([text], trainers.BpeTrainer(
    vocab_size=1000, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False))
torch.manual_seed(0)
config = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, intermediate_size=172, max_position_embeddings=256,
                                  bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
transformers.LlamaForCausalLM(config).save_pretrained("tiny-llama")
transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                     unk_token="<unk>").save_pretrained("tiny-llama")
