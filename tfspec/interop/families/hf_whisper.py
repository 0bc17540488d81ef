"""Hugging Face ``WhisperForConditionalGeneration`` / ``WhisperModel`` <-> a compiled encoder-decoder spec of
spectrograms.

Whisper (Radford et al. 2022) reads 30 seconds of log-mel spectrogram, ``num_mel_bins`` bins by
``2 · max_source_positions`` frames, through two convolutions with GELU, the second of stride 2 (``embedding audio
{ input audio(mels=..., frames=...) }``), adds fixed sinusoids with the frequencies spaced from 1 to 1/10000
inclusive, every sine first (``sinusoidal(halves=true, endpoint=true)``; the checkpoint holds the table, which
import checks against the spec's), and runs a pre-norm encoder with a final LayerNorm. Its decoder reads tokens with
learned positions (``max_target_positions`` of them), cross-attends to the encoder and ends in a final LayerNorm;
the head is tied to its token table. Every attention's keys have no bias where queries, values and outputs have one
(``key_bias=false``: Hugging Face's ``k_proj``).
"""

from __future__ import annotations

from . import hf_bart
from ..fields import Field, Fields, Fixed
from ..weights import Stacks, TiedHead
from ..document import Block, Document, Statement
from ..family import Family, Requires

KERNEL = 3  # the taps of Whisper's convolutions (fixed in its code)
# token ids generation never emits (first), which no spec setting holds: written back as an import carried them
CARRIED = ("suppress_tokens", "begin_suppress_tokens")


def _source_positions(f) -> int:
    """The vectors its front end makes of ``frames`` frames: Whisper's input is exactly twice as many frames."""
    frames, kernel = f.input_option("frames"), f.input_option("kernel")
    if kernel != KERNEL or frames % 2:
        raise f.refuse(f"its spectrograms are read by convolutions of {kernel} taps over {frames} frames; Whisper's "
                       f"take {KERNEL} taps over an even number of frames (2 · max_source_positions)")
    return frames // 2


def _target_positions(f) -> int | None:
    return f.table_rows(f.spec.embeddings[1].position, f.spec.embeddings[1].dim)


FIELDS = Fields(
    Field("d_model", "d_model", lambda f: f.embedding.dim),
    Field("vocab", "vocab_size", lambda f: f.spec.embeddings[1].vocab),
    Field("mels", "num_mel_bins", lambda f: f.input_option("mels")),
    Field("source_positions", "max_source_positions", _source_positions),
    Field("target_positions", "max_target_positions", _target_positions),
    *hf_bart.STACK_FIELDS,
    *hf_bart.LAYER_FIELDS,
    Fixed("tie_word_embeddings", True, "tie_word_embeddings={value} gives the decoder a head of its own; tfspec "
          "reads the tied models Whisper releases", exported=True),
    Fixed("use_weighted_layer_sum", False, "use_weighted_layer_sum={value} is for audio classification, whose "
          "head tfspec does not import"),
    ignored={"scale_embedding": "transformers' Whisper keeps it but never scales the embeddings with it",
             "encoder_layerdrop": "skips whole layers at random in training (LayerDrop); tfspec trains every layer",
             "decoder_layerdrop": "skips whole layers at random in training (LayerDrop); tfspec trains every layer",
             "suppress_tokens": "tokens generation never emits, which generation reads",
             "begin_suppress_tokens": "tokens generation never emits first, which generation reads",
             "forced_decoder_ids": "tokens generation forces, which generation reads",
             "median_filter_width": "the smoothing of word timestamps, which generation reads",
             "classifier_proj_size": "the audio classification head's width, which tfspec does not import",
             "apply_spec_augment": "SpecAugment masks features in training; tfspec trains on them unmasked",
             "mask_time_prob": "SpecAugment's, in training", "mask_time_length": "SpecAugment's, in training",
             "mask_time_min_masks": "SpecAugment's, in training", "mask_feature_prob": "SpecAugment's, in training",
             "mask_feature_length": "SpecAugment's, in training",
             "mask_feature_min_masks": "SpecAugment's, in training",
             "num_hidden_layers": "an alias of encoder_layers",
             "max_length": "generation's limit, which generation reads"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Whisper's spec from the configuration's settings ``s``: pre-norm stacks, the encoder over a spectrogram's
    frames with sinusoidal positions, the decoder over tokens with learned ones, no key biases, the head tied."""
    norm = "layernorm(eps=1e-5)"
    return Document.of(
        Block("defaults", Statement("residual", "pre"), Statement("norm", norm), Statement("dropout", s.p_dropout),
              Statement("attn_dropout", s.p_attn_dropout), Statement("act_dropout", s.p_act_dropout),
              Statement("init", f"normal(std={s.init_std})")),
        Block("embedding audio", Statement("input", f"audio(mels={s.mels}, frames=2 * {s.source_positions})"),
              Statement("dim", s.d_model), Statement("position", "sinusoidal(halves=true, endpoint=true)")),
        Block("embedding tokens", Statement("vocab", s.vocab), Statement("dim", s.d_model),
              Statement("position", f"learned({s.target_positions})")),
        Block(f"encoder x {s.layers}", Statement("embedding", "audio"),
              Statement("attention", "self", heads=s.heads, key_bias="false"),
              Statement("feedforward", d_ff=s.d_ff, activation=s.activation), Statement("final", norm)),
        Block(f"decoder x {s.decoder_layers}", Statement("embedding", "tokens"),
              Statement("attention", "self", heads=s.decoder_heads, key_bias="false",
                        mask="causal + padding" if padding else "causal"),
              Statement("attention", "cross", heads=s.decoder_heads, key_bias="false"),
              Statement("feedforward", d_ff=s.decoder_d_ff, activation=s.activation), Statement("final", norm)),
        tail=(Statement("head", "tied(tokens)"),) if head else ())


# spectrograms into the encoder, tokens into the decoder
READS_AUDIO = Requires(
    lambda f: len(f.spec.embeddings) == 2 and f.spec.embeddings[0].input is not None
    and f.spec.embeddings[1].input is None,
    "its encoder does not read spectrograms, and its decoder tokens (embedding audio { input audio(...) }, "
    "embedding tokens { vocab ... })")


# BART's layers and final norms, the spectrograms' convolutions in front of the encoder (its sinusoids computed),
# the decoder's own token table and learned positions, the head (proj_out) tied to that table
WEIGHTS = Stacks({"encoder": hf_bart.stack("encoder", **{f"embeddings.{{embedding}}.{conv}": f"encoder.{conv}"
                                                         for conv in ("conv1", "conv2")}),
                  "decoder": hf_bart.stack("decoder", **{
                      "embeddings.{embedding}.tokens": "decoder.embed_tokens",
                      "embeddings.{embedding}.positions": "decoder.embed_positions"})},
                 head=TiedHead("proj_out"))


def _sinusoids(model, prefix: str, state: dict) -> dict:
    """The encoder's sinusoid table, which the checkpoint holds (frozen) and the spec computes."""
    import torch
    embedding = model.embeddings[model.spec.embeddings[0].name]
    table = embedding.positions(torch.arange(embedding.length)[None])[0].detach()
    return {f"{prefix}encoder.embed_positions.weight": table}


EXAMPLES = {
    # Whisper: spectrograms through two convolutions, sinusoids, keys without a bias; heads differing per stack
    "WhisperForConditionalGeneration": dict(model_type="whisper", vocab_size=90, num_mel_bins=12, d_model=16,
                                            encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                                            decoder_attention_heads=4, encoder_ffn_dim=24, decoder_ffn_dim=20,
                                            max_source_positions=10, max_target_positions=24,
                                            activation_function="gelu", pad_token_id=0, bos_token_id=1,
                                            eos_token_id=2, decoder_start_token_id=1, begin_suppress_tokens=[]),
    "WhisperModel": dict(model_type="whisper", vocab_size=90, num_mel_bins=8, d_model=16, encoder_layers=1,
                         decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                         decoder_ffn_dim=32, max_source_positions=6, max_target_positions=20,
                         activation_function="relu", pad_token_id=0, bos_token_id=1, eos_token_id=2,
                         decoder_start_token_id=1, begin_suppress_tokens=[5, 7], suppress_tokens=[9]),
}

COVERAGE = [dict(model_type="whisper", vocab_size=91, num_mel_bins=10, d_model=24, encoder_layers=3,
                 decoder_layers=2, encoder_attention_heads=3, decoder_attention_heads=2, encoder_ffn_dim=40,
                 decoder_ffn_dim=36, max_source_positions=7, max_target_positions=33, dropout=0.2,
                 attention_dropout=0.3, activation_dropout=0.15, init_std=0.05, activation_function="relu",
                 pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)]


WHISPER = Family(
    "Whisper", ("whisper",),
    {"WhisperForConditionalGeneration": {"head": True}, "WhisperModel": {"head": False}},
    "Whisper (Radford et al. 2022): log-mel spectrograms through two convolutions, the second halving the "
    "frames (embedding audio { input audio(mels, frames) }), Whisper's fixed sinusoids, a pre-norm encoder; "
    "a pre-norm decoder of tokens with learned positions cross-attending to it; keys without a bias "
    "(key_bias=false); the head tied to the token table",
    priority=670, fields=FIELDS, document=document, kind="encoder-decoder", requires=(READS_AUDIO,),
    rules=WEIGHTS, computed=_sinusoids, carried=CARRIED)
