"""The part of the resolver that reads the ``head``, the ``pooler`` and multi-token prediction (``mtp``)."""

from __future__ import annotations

from ..errors import did_you_mean, one_of
from ..registry import ACTIVATIONS, INPUTS, POOLS
from . import schema as S
from .expr import Poisoned
from .params import (HEAD_PROJECTIONS, MTP_PARAMS, POOLER_PARAMS, Param, as_int, as_ref, choice, head_params, spec_error,
                     what_it_is)
from .syntax import Call, EmbeddingDecl, HeadDecl, MtpDecl, Name, PoolerDecl, StackDecl


class Heads:
    """Reads the ``head``, the ``pooler`` and ``mtp``. (a part of ``resolve._Resolver``)."""

    # --- head and pooler
    def _head(self, decl: HeadDecl, embeddings: dict, stacks: dict) -> S.Head:
        positional = [a for a in decl.args if a.name is None]
        if not positional and any(a.name == "pool" for a in decl.args):  # the pooled vectors, projected by nothing
            return self._pool_alone(decl, embeddings, stacks)
        if not positional:
            raise spec_error("missing", "head needs a projection: tied(EMBEDDING) or linear", decl.span,
                             "e.g. `head tied(tokens)`, or `head pool=...` for the pooled vectors alone")
        proj = positional[0].value
        func = proj.id if isinstance(proj, Name) else proj.func if isinstance(proj, Call) else None
        proj_args = proj.args if isinstance(proj, Call) else ()
        if func not in HEAD_PROJECTIONS:
            raise spec_error("unknown-keyword", f"unknown head projection '{func or what_it_is(proj)}'", proj.span,
                             did_you_mean(func or "", HEAD_PROJECTIONS) or "expected tied(EMBEDDING) or linear")
        values, spans = self.bind(tuple(a for a in decl.args if a is not positional[0]), head_params(func), "head",
                                  decl.span)
        last = stacks.get("decoder") or stacks.get("encoder")
        tied_to = None
        if func == "tied":
            bound, bspans = self.bind(proj_args, [Param("embedding", as_ref, positional=True)], "tied()", proj.span)
            target = bound["embedding"]
            declared = [i.name for i in self.module.items if isinstance(i, EmbeddingDecl)]
            if target not in declared:
                raise spec_error("unknown-name", f"unknown embedding '{target}'", bspans["embedding"],
                                 did_you_mean(target, declared) or (one_of(declared) if declared else None))
            if target not in embeddings:
                raise Poisoned
            if embeddings[target].input is not None:
                what = INPUTS[embeddings[target].input.name].what
                raise spec_error("structure", f"a head cannot be tied to embedding '{target}': it reads {what}, "
                                 "through no token table", bspans["embedding"], "use linear(N), N the number of classes")
            tied_to = embeddings[target].shares or target  # the table itself, where the embedding reads another's
            out = embeddings[target].vocab
            spans["out"] = proj.span
        else:
            bound, bspans = self.bind(proj_args, [Param("out", as_int, None, positional=True)], "linear()", proj.span)
            out = bound["out"]
            spans["out"] = bspans.get("out", proj.span)
            if out is None:
                if last is None or last.embedding not in embeddings:
                    raise Poisoned
                out = embeddings[last.embedding].vocab
                if out is None:
                    raise spec_error("missing", "head linear over images needs its number of outputs", proj.span,
                                     "write linear(N), N the number of classes")
        if values["transform"] is not None and ACTIVATIONS[values["transform"].name].up_features(1) != 1:
            raise spec_error("value", "a gated activation needs two projections; the head's transform has one",
                             spans["transform"])
        if values["transform"] is not None and _trains(values["transform"]):
            raise spec_error("value", f"{values['transform'].name} trains parameters of its own, which the head's "
                             "transform does not hold", spans["transform"], "use a fixed function (gelu, relu, ...)")
        if not values["transform_bias"] and values["transform"] is None:
            raise spec_error("structure", "head transform_bias= applies to its transform; add transform=ACTIVATION",
                             spans["transform_bias"])
        if values["norm"] is not None and values["transform"] is None:
            raise spec_error("structure", "head norm= applies to its transform; add transform=ACTIVATION",
                             spans["norm"])
        features = None  # a transform into a tied table of another width (ALBERT's head); without one, validate
        if tied_to is not None and last is not None and last.embedding in embeddings and values["transform"]:
            width, table = embeddings[last.embedding].width, embeddings[tied_to].dim
            features = table if table != width else None
        return self.validated(S.Head, {"tied_to": tied_to, "out": out, "bias": values["bias"],
                                       "transform": values["transform"], "transform_norm": values["norm"],
                                       "scale": values["scale"], "softcap": values["softcap"], "features": features,
                                       "pool": values["pool"], "transform_bias": values["transform_bias"]},
                              spans, decl.span, "head", {"span": decl.span})

    def _pool_alone(self, decl: HeadDecl, embeddings: dict, stacks: dict) -> S.Head:
        """``head pool=...``: one vector of each sequence, its stack's width, through no projection."""
        values, spans = self.bind(decl.args, [Param("pool", choice(POOLS), positional=False)],
                                  "a head without a projection", decl.span)
        last = stacks.get("decoder") or stacks.get("encoder")
        if last is None or last.embedding not in embeddings:
            raise Poisoned
        return self.validated(S.Head, {"tied_to": None, "out": embeddings[last.embedding].width, "bias": False,
                                       "pool": values["pool"], "projects": False},
                              spans, decl.span, "head", {"span": decl.span})

    def _pooler(self, decl: PoolerDecl) -> S.Pooler:
        values, spans = self.bind(decl.args, POOLER_PARAMS, "pooler", decl.span)
        if ACTIVATIONS[values["activation"].name].up_features(1) != 1:
            raise spec_error("value", "a gated activation needs two projections; the pooler has one",
                             spans["activation"])
        if _trains(values["activation"]):
            raise spec_error("value", f"{values['activation'].name} trains parameters of its own, which the pooler "
                             "does not hold", spans["activation"], "use a fixed function (tanh, gelu, ...)")
        return S.Pooler(activation=values["activation"], span=decl.span)

    def _mtp(self, decl: MtpDecl, embeddings: dict, stacks: dict, head: S.Head | None,
             pooler: S.Pooler | None) -> S.MultiTokenPrediction:
        """``mtp D``: the decoder-only language model's chain of D modules predicting further tokens."""
        values, spans = self.bind(decl.args, MTP_PARAMS, "mtp", decl.span)
        decoder = stacks.get("decoder")
        declared = {i.role for i in self.module.items if isinstance(i, StackDecl)}
        if set(stacks) != declared:  # a stack with its own errors, already reported
            raise Poisoned
        if "encoder" in stacks or decoder is None:
            raise spec_error("structure", "multi-token prediction predicts a decoder-only model's next tokens; this "
                             "model " + ("has no decoder" if decoder is None else "has an encoder"), decl.span)
        if head is None or pooler is not None or head.pool is not None:
            raise spec_error("structure", "multi-token prediction reads the head's logits at every position: it "
                             "needs a head over the tokens " + ("and no pooler" if pooler is not None else
                                                                "without `pool`" if head is not None else
                                                                "(`head tied(tokens)` or `head linear`)"), decl.span)
        embedding = embeddings.get(decoder.embedding)
        if embedding is None:
            raise Poisoned
        if embedding.vocab is None or head.out != embedding.vocab:
            raise spec_error("structure", "multi-token prediction predicts tokens, which the head's outputs must "
                             f"be: the head has {head.out:,} outputs, embedding '{embedding.name}' "
                             + (f"{embedding.vocab:,} tokens" if embedding.vocab else "reads pictures"), decl.span)
        if embedding.per_layer is not None:
            raise spec_error("structure", f"embedding '{embedding.name}' gives each layer inputs of its own "
                             "(`per_layer`), which a multi-token prediction module's layer has none of", decl.span)
        layer = decoder.repeat - 1 if values["layer"] is None else values["layer"]
        if not 0 <= layer < decoder.repeat:
            raise spec_error("value", f"mtp: layer {layer} is not one of the decoder's {decoder.repeat} layers "
                             f"(0 to {decoder.repeat - 1})", spans["layer"])
        return self.validated(S.MultiTokenPrediction, {"depth": values["depth"], "weight": values["weight"],
                                                       "layer": layer, "norm": values["norm"] or decoder.final_norm},
                              spans, decl.span, "mtp", {"span": decl.span})


def _trains(choice) -> bool:
    """Does the activation a ``Choice`` names train parameters of its own (xIELU)?"""
    activation, options = ACTIVATIONS.of(choice)
    return bool(activation.params(1, options))
