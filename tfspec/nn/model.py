"""The compiled model: embeddings, one or two stacks of generated layers, head and pooler.

Forward signatures by kind (padding masks are bool, True at padded positions):

- decoder-only:    ``model(tokens, padding_mask=None)``
- encoder-only:    ``model(tokens, padding_mask=None, token_types=None)``
- encoder-decoder: ``model(src, tgt, src_padding_mask=None, tgt_padding_mask=None)``,
  also ``model.encode(src, src_padding_mask)`` and ``model.decode(tgt, memory, src_padding_mask, tgt_padding_mask)``

Each returns logits ``(batch, length, out)`` when the spec has a head, hidden
states ``(batch, length, width)`` otherwise; a spec with a pooler returns
``(that, pooled)``.
"""

from __future__ import annotations

from torch import Tensor, nn

from .checks import check_ids, check_memory, check_padding_mask
from .embedding import Embeddings


class Stack(nn.Module):
    """N generated layers (``torch.fx.GraphModule``s; print ``layer.code``) and a final norm."""

    def __init__(self, layers: list[nn.Module], final_norm: nn.Module, masks_padding: bool,
                 memory_masks_padding: bool):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.final_norm = final_norm
        self.masks_padding = masks_padding  # some self-attention reads the padding mask
        self.memory_masks_padding = memory_masks_padding  # some cross-attention reads the memory's

    def forward(self, x: Tensor, padding_mask: Tensor | None = None, memory: Tensor | None = None,
                memory_padding_mask: Tensor | None = None, cache: list[dict] | None = None) -> Tensor:
        """``cache``: one dict per layer (see ``tfspec.decoding``), filled and extended in place."""
        for i, layer in enumerate(self.layers):
            x = layer(x, padding_mask, memory, memory_padding_mask, cache[i] if cache is not None else None)
        return self.final_norm(x)


class CompiledModel(nn.Module):
    """Common parts; the subclasses below define the forward signature of each kind."""

    def __init__(self, spec, embeddings: dict[str, Embeddings], stacks: dict[str, Stack], head: nn.Module | None,
                 pooler: nn.Module | None, stack_embedding: dict[str, str], max_len: dict[str, int | None]):
        super().__init__()
        self.spec = spec
        self.embeddings = nn.ModuleDict(embeddings)
        for role, stack in stacks.items():
            setattr(self, role, stack)
        self.head = head
        self.pooler = pooler
        self.stack_embedding = stack_embedding
        self.max_len = max_len
        self.tied_to = spec.head.tied_to if spec.head is not None else None
        self.check_inputs = True

    @property
    def device(self):
        return next(self.embeddings.parameters()).device

    def embed(self, role: str, name: str, ids: Tensor, token_types: Tensor | None = None, offset: int = 0) -> Tensor:
        embedding: Embeddings = self.embeddings[self.stack_embedding[role]]
        if self.check_inputs:
            check_ids(name, ids, embedding.vocab, self.device, self.max_len[role], offset)
            if token_types is not None:
                if embedding.segments is None:
                    raise ValueError("token_types was given, but the embedding has no segments; "
                                     "add `segments N` to it in the spec")
                check_ids("token_types", token_types, embedding.segments.num_embeddings, self.device,
                          what="token type ids", table="the segments")
                if token_types.shape != ids.shape:
                    raise ValueError(f"token_types must have the shape of {name} {tuple(ids.shape)}, "
                                     f"got {tuple(token_types.shape)}")
        return embedding(ids, token_types, offset)

    def output(self, hidden: Tensor):
        out = hidden
        if self.head is not None:
            tied = self.embeddings[self.tied_to].tokens.weight if self.tied_to is not None else None
            out = self.head(hidden, tied)
        if self.pooler is not None:
            return out, self.pooler(hidden)
        return out

    def extend(self, tokens: Tensor, cache: list[dict], offset: int, memory: Tensor | None = None,
               memory_padding_mask: Tensor | None = None):
        """Decoder logits for ``tokens`` continuing a prefix of ``offset`` positions held in ``cache``.

        ``cache`` has one dict per decoder layer (start with empty ones); each call
        appends the new positions' keys and values. Equals running the decoder over
        the whole sequence when its self-attention never looks ahead (see
        ``tfspec.decoding.cache_supported``). Encoder-decoder models pass ``memory``
        (from ``encode``); cross-attention projects it on the first call only.
        """
        x = self.embed("decoder", "tokens", tokens, offset=offset)
        return self.output(self.decoder(x, None, memory, memory_padding_mask, cache))

    def check_padding(self, name: str, mask, ids: Tensor, ids_name: str, used: bool, where: str) -> None:
        if self.check_inputs:
            check_padding_mask(name, mask, ids, ids_name, used,
                               f"add `padding` to the masks of the {where} (e.g. `mask=causal + padding`)")


class DecoderOnlyModel(CompiledModel):
    def forward(self, tokens: Tensor, padding_mask: Tensor | None = None, token_types: Tensor | None = None):
        """``tokens`` (batch, length) -> logits or hidden states."""
        x = self.embed("decoder", "tokens", tokens, token_types)
        self.check_padding("padding_mask", padding_mask, tokens, "tokens", self.decoder.masks_padding,
                           "decoder's self-attention")
        return self.output(self.decoder(x, padding_mask))


class EncoderOnlyModel(CompiledModel):
    def forward(self, tokens: Tensor, padding_mask: Tensor | None = None, token_types: Tensor | None = None):
        """``tokens`` (batch, length), optional ``token_types`` (segments) -> logits or hidden states."""
        x = self.embed("encoder", "tokens", tokens, token_types)
        self.check_padding("padding_mask", padding_mask, tokens, "tokens", self.encoder.masks_padding,
                           "encoder's self-attention")
        return self.output(self.encoder(x, padding_mask))


class EncoderDecoderModel(CompiledModel):
    def forward(self, src: Tensor, tgt: Tensor, src_padding_mask: Tensor | None = None,
                tgt_padding_mask: Tensor | None = None):
        """``src`` (batch, src_len), ``tgt`` (batch, tgt_len) -> logits or hidden states for ``tgt``."""
        memory = self.encode(src, src_padding_mask)
        return self.decode(tgt, memory, src_padding_mask, tgt_padding_mask)

    def encode(self, src: Tensor, src_padding_mask: Tensor | None = None) -> Tensor:
        """The encoder's output (after its final norm): the decoder's memory."""
        x = self.embed("encoder", "src", src)
        self.check_padding("src_padding_mask", src_padding_mask, src, "src",
                           self.encoder.masks_padding or self.decoder.memory_masks_padding,
                           "encoder's self-attention or the decoder's cross-attention")
        return self.encoder(x, src_padding_mask)

    def decode(self, tgt: Tensor, memory: Tensor, src_padding_mask: Tensor | None = None,
               tgt_padding_mask: Tensor | None = None):
        """Decoder over ``tgt`` attending to ``memory`` -> logits or hidden states."""
        x = self.embed("decoder", "tgt", tgt)
        if self.check_inputs:
            check_memory(memory, tgt.shape[0], self.encoder_width, self.device)
            check_padding_mask("src_padding_mask", src_padding_mask, memory[..., 0], "memory's (batch, src_len)",
                               True, "")
        self.check_padding("tgt_padding_mask", tgt_padding_mask, tgt, "tgt", self.decoder.masks_padding,
                           "decoder's self-attention")
        return self.output(self.decoder(x, tgt_padding_mask, memory, src_padding_mask))

    @property
    def encoder_width(self) -> int:
        return self.embeddings[self.stack_embedding["encoder"]].dim
