"""What each word of the language means, in one sentence: the text an editor shows on hover and beside a
completion (``tfspec lsp``). The words themselves, and what each takes, are ``resolve``'s tables; a test
checks that every one of them has its sentence here.

Keys are ``(place, word)``: a word can mean different things in different places (``norm`` in an embedding
is applied to its output; in a stack it is the sublayers' norm).
"""

from __future__ import annotations

TOP = "top"  # a top-level item
BLOCK = "block"  # a setting of `defaults { }`, a stack or a `layers` section
EMBEDDING = "embedding"  # a setting of `embedding NAME { }`
ATTENTION = "attention"  # an argument of an `attention` statement or call
FEEDFORWARD = "feedforward"
MIXER = "mixer"  # an argument of a `mixer` statement or call
HEAD = "head"
POOLER = "pooler"
MTP = "mtp"  # an argument of the `mtp` item

_RESIDUAL = "how it joins the residual stream: `pre` (x + f(norm(x))), `post` (norm(x + f(x))) or `none`"

DOCS: dict[tuple[str, str], str] = {
    (TOP, "model"): "`model NAME`: the model's name, used by reports and exports (default: the file's name)",
    (TOP, "include"): "`include \"file.tfs\"`: the items of another spec file, as if written here",
    (TOP, "let"): "`let name = expr, ...`: named numbers that later expressions use; `--set name=value` overrides them",
    (TOP, "defaults"): "`defaults { ... }`: settings every stack takes unless it says otherwise",
    (TOP, "embedding"): "`embedding NAME { vocab V; dim D; position ... }`: what a stack reads, token ids or pictures",
    (TOP, "encoder"): "`encoder x N { ... }`: a stack of N layers that sees the whole sequence",
    (TOP, "decoder"): "`decoder x N { ... }`: a stack of N layers, usually causal; reads the encoder through "
                      "cross-attention when there is one",
    (TOP, "head"): "`head tied(EMBEDDING)` or `head linear(N)`: the output projection to logits",
    (TOP, "pooler"): "`pooler ACTIVATION`: BERT's pooler, a dense layer and activation on the first position",
    (TOP, "mtp"): "`mtp D`: DeepSeek-V3's multi-token prediction, D modules trained to predict the tokens after the "
                  "next; training adds their losses, inference does not run them",
    (TOP, "tower"): "`tower NAME { embedding ...; encoder x N { ... }; head ... }`: one tower of a model of several "
                    "(CLIP's text and vision), holding what a model of one holds",
    (TOP, "contrastive"): "`contrastive A B loss=softmax|sigmoid scale=S bias=B`: towers A and B's pooled vectors "
                          "compared by their cosine, times a learned exp(scale) (plus a learned bias): CLIP's and "
                          "SigLIP's head",

    (BLOCK, "residual"): _RESIDUAL,
    (BLOCK, "norm"): "the norm of each sublayer (layernorm, rmsnorm, ...)",
    (BLOCK, "dropout"): "dropout on each sublayer's output, before the residual add",
    (BLOCK, "attn_dropout"): "dropout on the attention probabilities",
    (BLOCK, "act_dropout"): "dropout after the feed-forward's activation",
    (BLOCK, "activation"): "the feed-forward's activation (relu, gelu, swiglu, ...)",
    (BLOCK, "bias"): "whether linear maps have a bias",
    (BLOCK, "position"): "the position scheme applied inside self-attention (rotary, alibi, ...)",
    (BLOCK, "init"): "how weights are initialised (the whole model's; `defaults` only)",
    (BLOCK, "embedding"): "the embedding this stack reads (default: the only one, or the one named like the stack)",
    (BLOCK, "final"): "a norm after the last layer (pre-norm stacks need one)",
    (BLOCK, "final_dropout"): "dropout after the final norm (T5)",
    (BLOCK, "weight_sets"): "how many sets of weights the layers share, each by a run of consecutive layers "
                            "(ALBERT: 1)",
    (BLOCK, "layers"): "`layers every(2) { ... }`: changes for some layers only (a layer schedule)",
    (BLOCK, "attention"): "a multi-head attention sublayer: `attention self heads=8 mask=causal`",
    (BLOCK, "feedforward"): "a position-wise feed-forward sublayer: `feedforward d_ff=2048`",
    (BLOCK, "mixer"): "a sublayer mixing positions other than by attention, with a decoding state of its own: "
                      "`mixer shortconv(3)`",

    (EMBEDDING, "vocab"): "how many token ids the table has rows for",
    (EMBEDDING, "dim"): "the width of each vector (and of the stack, unless `project` maps it)",
    (EMBEDDING, "scale"): "a factor applied to the looked-up vectors (Vaswani et al.: sqrt(d_model))",
    (EMBEDDING, "position"): "the positions added to the embeddings (sinusoidal, learned(N), none, ...)",
    (EMBEDDING, "segments"): "how many token types (BERT's segments A/B) the embedding adds",
    (EMBEDDING, "norm"): "a norm applied to the embeddings (BERT)",
    (EMBEDDING, "dropout"): "dropout on the embeddings",
    (EMBEDDING, "tokens"): "another embedding whose token table this one reads (shared weights)",
    (EMBEDDING, "project"): "a linear map of the embeddings into this width (ALBERT's factorised embedding)",
    (EMBEDDING, "input"): "what the embedding reads instead of token ids: patches(image, patch, ...) for pictures "
                          "(ViT)",
    (EMBEDDING, "per_layer"): "features per layer of its stack, from the token ids and the embeddings, which each "
                              "layer's `kind=per_layer` feed-forward reads (Gemma 4's per-layer embeddings)",
    (EMBEDDING, "per_layer_vocab"): "the rows of the per-layer inputs' token table (default: vocab)",
    (EMBEDDING, "per_layer_norm"): "the norm of the embeddings' projection into the per-layer inputs",

    (ATTENTION, "reads"): "`self` (the stack's own sequence) or `cross` (the encoder's output)",
    (ATTENTION, "heads"): "the number of query heads",
    (ATTENTION, "kind"): "how queries meet keys (dot, additive, linformer(k), latent(...), ...)",
    (ATTENTION, "bias"): "whether the q, k, v projections have a bias",
    (ATTENTION, "out_bias"): "whether the output projection has a bias (default: as `bias`)",
    (ATTENTION, "key_bias"): "whether the keys' projection has a bias, where q and v have one (default: as `bias`; "
                             "Whisper's keys have none)",
    (ATTENTION, "mask"): "which keys each query may see; masks combine with `+` (causal + padding)",
    (ATTENTION, "memory"): "what cross-attention reads: `encoder`",
    (ATTENTION, "attn_dropout"): "dropout on the attention probabilities",
    (ATTENTION, "kv_heads"): "key/value heads, fewer than `heads` for grouped-query attention (1: multi-query)",
    (ATTENTION, "head_dim"): "each head's width (default: width / heads)",
    (ATTENTION, "position"): "this sublayer's position scheme (default: the stack's, for self-attention)",
    (ATTENTION, "qk_norm"): "a norm on each head's queries and keys once projected (Qwen3; OLMo 2's over all heads "
                            "is `steps=full_qk_norm`, Hunyuan's after the positions `steps=rotated_qk_norm`)",
    (ATTENTION, "scale"): "the factor on the scores (default: 1/sqrt(head_dim))",
    (ATTENTION, "steps"): "steps added to its pipeline, combined with `+` (value_residual(0.5): the first layer's "
                          "values mixed into this layer's)",
    (ATTENTION, "kv_from"): "an earlier layer whose attention's keys and values this one attends with, projecting "
                            "queries alone (Gemma 4's layers sharing keys and values)",

    (FEEDFORWARD, "d_ff"): "the hidden width",
    (FEEDFORWARD, "kind"): "dense, or moe(experts, top, ...) for a mixture of experts",
    (FEEDFORWARD, "router"): "a mixture's router parts, combined with `+` (sigmoid + correction + renormalize; "
                             "default: softmax)",
    (FEEDFORWARD, "activation"): "the activation between the projections (gated ones, like swiglu, add a third)",
    (FEEDFORWARD, "bias"): "whether the projections have a bias",
    (FEEDFORWARD, "act_dropout"): "dropout after the activation",

    (MIXER, "kind"): "what it computes and keeps while decoding (shortconv(kernel), ...)",

    (HEAD, "tied"): "`tied(EMBEDDING)`: the logits reuse that embedding's token table (shared weights)",
    (HEAD, "linear"): "`linear(N)`: a projection of its own to N outputs (default: the vocabulary)",
    (HEAD, "bias"): "whether the projection has a bias",
    (HEAD, "transform"): "a dense layer with this activation before the projection (BERT's MLM head)",
    (HEAD, "norm"): "a norm after the transform",
    (HEAD, "transform_bias"): "whether the transform's dense layer has a bias (default true; ModernBERT's has none)",
    (HEAD, "scale"): "a factor on the head's input (T5's tied head: d_model^-0.5)",
    (HEAD, "softcap"): "logits capped to softcap·tanh(logits/softcap) (Gemma 2: 30)",
    (HEAD, "pool"): "one vector per sequence: the `first` position's (a class token) or the `mean`",
    (POOLER, "activation"): "the pooler's activation (default: tanh)",
    (MTP, "depth"): "how many modules, each predicting one token further ahead (DeepSeek-V3: 1)",
    (MTP, "weight"): "λ: training adds λ/D times the sum of the modules' cross-entropies (DeepSeek-V3: 0.3, later 0.1)",
    (MTP, "layer"): "the decoder layer whose kind each module's layer is, with weights of its own (default: the last)",
    (MTP, "norm"): "the norms of the embedding, of the hidden states and before the shared head (default: the "
                   "decoder's final norm)",
    # a sublayer's own wiring, overriding its stack's
    **{(place, word): doc for place in (ATTENTION, FEEDFORWARD, MIXER)
       for word, doc in (("residual", _RESIDUAL), ("norm", "this sublayer's norm"),
                         ("dropout", "dropout on this sublayer's output"))},
}


def doc(place: str, word: str) -> str | None:
    """The sentence for ``word`` where it is written, or None.

    >>> doc("embedding", "vocab")
    'how many token ids the table has rows for'
    """
    return DOCS.get((place, word))
