"""The part of the resolver that reads ``embedding`` items: token tables, the inputs of other kinds (pictures cut
into patches), tables shared between stacks."""

from __future__ import annotations

from ..errors import did_you_mean, one_of
from ..registry import INPUTS
from . import schema as S
from .params import EMBEDDING_SETTINGS, FAILED, TOKEN_SETTINGS
from .syntax import EmbeddingDecl


class Embeddings:
    """Reads ``embedding`` items (a part of ``resolve._Resolver``)."""

    def _embeddings(self, decls: list[EmbeddingDecl], defaults: dict) -> dict[str, S.Embedding]:
        out: dict[str, S.Embedding] = {}
        for decl in decls:
            if decl.name in out:
                self.errors.error("duplicate", f"embedding '{decl.name}' is defined twice", decl.name_span)
                continue
            settings = self._settings(decl.body, EMBEDDING_SETTINGS, f"embedding '{decl.name}'")
            values = {k: v for k, (v, _) in settings.items()}
            spans = {k: s for k, (_, s) in settings.items()}
            if any(v is FAILED for v in values.values()):
                continue
            if "tokens" in values and not self._shared_tokens(decl, values, spans, out):
                continue
            if "input" in values and not self._input(decl, values, spans):
                continue
            missing = [k for k in (("dim",) if "input" in values else ("vocab", "dim")) if k not in values]
            for k in missing:
                self.errors.error("missing", f"embedding '{decl.name}' needs '{k}'", decl.name_span, f"add `{k} N` to its body")
            if missing:
                continue
            values.setdefault("position", S.Choice(name="none"))
            values.setdefault("norm", S.Choice(name="none"))
            values.setdefault("dropout", defaults["dropout"])
            emb = self.attempt(lambda: self.validated(S.Embedding, values, spans, decl.span, f"embedding '{decl.name}'",
                                                      {"name": decl.name, "span": decl.name_span}))
            if emb is not None:
                out[decl.name] = emb
        return out

    def _input(self, decl: EmbeddingDecl, values: dict, spans: dict) -> bool:
        """An embedding of an input kind (``input patches(...)``) has none of a token table's settings. False:
        refused (reported)."""
        ok = True
        for key in TOKEN_SETTINGS:
            if key in values:
                what = INPUTS[values["input"].name].what
                self.errors.error("structure", f"embedding '{decl.name}' reads {what}, which have no token table: "
                                  f"`{key}` does not apply", spans[key], f"drop `{key}`, or `input` for tokens")
                ok = False
        return ok

    def _shared_tokens(self, decl: EmbeddingDecl, values: dict, spans: dict, earlier: dict) -> bool:
        """``tokens OTHER``: the token table of an embedding defined above (BART's two embeddings read one); its
        vocab and dim, which this one need not repeat and may not change. False: refused (reported)."""
        source = values["tokens"]
        if source not in earlier:
            defined = [d.name for d in self.module.items if isinstance(d, EmbeddingDecl)]
            where = "defined below this one; define it first" if source in defined else (
                did_you_mean(source, list(earlier)) or one_of(list(earlier)) if earlier else "define it first")
            self.errors.error("unknown-name", f"tokens {source}: no embedding '{source}' above this one",
                              spans["tokens"], where)
            return False
        if earlier[source].shares is not None:
            self.errors.error("structure", f"tokens {source}: '{source}' reads the tokens of "
                              f"'{earlier[source].shares}'", spans["tokens"], f"write `tokens {earlier[source].shares}`")
            return False
        for key in ("vocab", "dim"):
            mine, theirs = values.get(key), getattr(earlier[source], key)
            if mine is not None and mine != theirs:
                self.errors.error("value", f"embedding '{decl.name}' has {key} {mine}, but the token table of "
                                  f"'{source}' it reads has {theirs}", spans[key], f"drop `{key}`: it is the table's")
                return False
            values[key] = theirs
        values["shares"] = values.pop("tokens")
        return True
