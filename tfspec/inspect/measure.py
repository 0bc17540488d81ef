"""Measure a compiled model, to check the analysis against what PyTorch actually does.

- FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` over one forward pass.
  It counts matrix products only (``mm``, ``addmm``, ``bmm``, SDPA kernels),
  so it is compared with the analysis's ``matmul`` figure. On the CPU it does
  not see SDPA's fused CPU kernel at all, so the count runs on the ``meta``
  device, where SDPA decomposes into the matrix products it performs.
- Memory: every tensor autograd saves for the backward pass during one
  training-mode forward pass (``saved_tensors_hooks``), each storage once,
  parameters excluded, plus the logits the loss keeps.

Both run on ``meta`` by default: full-size models cost no memory and no time.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch.nn.attention import sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from ..backend.compiler import compile as compile_spec
from ..registry import INPUTS


@dataclass
class Measurement:
    flops: int  # matmul FLOPs as FlopCounterMode counts them
    flops_by_op: dict[str, int]
    saved_bytes: int  # activation memory kept for backward, logits included
    parameters: int = 0  # of the model compiled, multi-token prediction's modules included


def measure(spec, lengths: dict[str, int], *, batch: int = 1, dtype: str = "float32", device: str = "meta",
            attention_backend=None) -> Measurement:
    """Count FLOPs and saved activation bytes of ``spec`` compiled at ``lengths`` (per stack role).

    ``attention_backend``: a ``torch.nn.attention.SDPBackend`` to force (on a real device).
    """
    # the model's own forward, which the analysis counts: multi-token prediction's modules, which only training
    # runs beside it, are not counted (``tfspec.inspect.analysis``)
    model = compile_spec(spec, device=device, dtype=getattr(torch, dtype), seed=0).train()
    parameters = sum(p.numel() for p in model.parameters())
    model.drop_multi_token_prediction()
    inputs = _inputs(model, lengths, batch, device)
    with FlopCounterMode(display=False) as counter:
        model(*inputs)
    by_op = {str(op): n for op, n in counter.get_flop_counts().get("Global", {}).items()}

    backend = sdpa_kernel(attention_backend) if attention_backend is not None else nullcontext()
    with backend:
        kept, out = saved_bytes(model, lambda: model(*inputs))
    logits = out[0] if isinstance(out, tuple) else out
    kept += logits.untyped_storage().nbytes() if spec.head is not None else 0
    return Measurement(counter.get_total_flops(), by_op, kept, parameters)


def saved_bytes(model, forward) -> tuple[int, object]:
    """(bytes autograd keeps for backward while ``forward()`` runs -- each storage once, ``model``'s parameters
    excluded --, what ``forward`` returned). Works for any module: ``benchmarks/bench_hybrid.py`` measures Hugging
    Face's models with it."""
    parameters = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}
    alive = []  # hold saved tensors so storages are not freed and their ids reused

    def pack(t):
        alive.append(t)
        storage = t.untyped_storage()
        if storage._cdata not in parameters:
            saved[storage._cdata] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    return sum(saved.values()), out


def _inputs(model, lengths, batch, device):
    def ids(role):
        stack = next(s for s in model.spec.stacks if s.role == role)
        given = model.spec.embedding(stack.embedding).input
        if given is not None:  # an input kind's tensor (pictures, spectrograms)
            kind, options = INPUTS.of(given)
            return torch.zeros(batch, *kind.shape(options), device=device)
        return torch.zeros(batch, lengths[role], dtype=torch.long, device=device)

    if model.spec.kind == "encoder-decoder":
        return ids("encoder"), ids("decoder")
    role = model.spec.stacks[0].role
    embedding = model.spec.embedding(model.spec.stacks[0].embedding)
    segments = embedding.segments
    if segments:  # token types are given in training, so their ids are kept too
        return ids(role), None, ids(role)
    return (ids(role),)

