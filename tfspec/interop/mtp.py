"""Multi-token prediction in Hugging Face checkpoints, as DeepSeek-V3, DeepSeek-V3.2 and GLM-4.5 store it: the
configuration's ``num_nextn_predict_layers`` (``num_mtp_layers``) modules after the ``L`` layers, module k as
layer ``L + k`` of the checkpoint -- its ``enorm``, ``hnorm``, ``eh_proj`` and ``shared_head.norm`` beside a
decoder layer's own tensors, and copies of the token table (``embed_tokens``) and head (``shared_head.head``),
which tfspec shares with the model as the paper does. Hugging Face's causal LM leaves these tensors out when it
loads (its ``MtpModel`` reads them for speculative decoding), so import reads them from the checkpoint's files
and export writes them there.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from ..errors import shown
from ..ir import nodes as ir
from .fields import Field
from .mapping import InteropError, Rule, rule

def field(default: int) -> Field:
    """``num_nextn_predict_layers``, where the configuration class's default is ``default`` (DeepSeek-V3's and
    GLM-4.5's 1; DeepSeek-V3.2's class has none: 0): export writes what differs from it, and a base model's is left
    to the configuration, as the base model has no head to predict with."""
    def fact(f):
        depth = next((n.spec.depth for n in f.g.of(ir.MultiTokenPrediction)), 0)
        return None if f.spec.head is None or depth == default == 0 else depth

    return Field("mtp", "num_nextn_predict_layers", fact, let=False,
                 read=lambda c: getattr(c, "num_mtp_layers", None) or getattr(c, "num_nextn_predict_layers", None) or 0)


def with_modules(document, s, head: bool):
    """``document`` with the spec's ``mtp`` item after its head, from a family's settings ``s`` (none for a base
    model: it has no head)."""
    if not (head and s.value("mtp")):
        return document
    return document.with_tail(*document.tail, "# num_nextn_predict_layers: multi-token prediction's modules, which "
                                              f"training runs and inference does not\nmtp {s.value('mtp')}")


def prefixes(model, prefix: str) -> tuple[str, ...]:
    """The checkpoint's prefix of each module (``model.layers.61.``); none without the modules."""
    if getattr(model, "mtp", None) is None:
        return ()
    return tuple(f"{prefix}layers.{model.mtp.first_layer + k}." for k in range(len(model.mtp)))


def rules(model, prefix: str, state: dict, layer_rules) -> tuple[list[Rule], dict[str, str]]:
    """Each module's tensors: its layer's by ``layer_rules(ours, theirs)`` (a decoder layer's rules, between our
    layer's prefix and the checkpoint's), its norms and projection; and the token table and head it shares, as
    aliases (equal to the model's, never copied)."""
    out, aliases = [], {}
    head = "embeddings.tokens.tokens.weight" if model.tied_to is not None else "head.weight"
    for k, theirs in enumerate(prefixes(model, prefix)):
        ours = f"mtp.{k}"
        out += layer_rules(f"{ours}.layer", theirs.rstrip("."))
        out += [rule(f"{ours}.{a}.weight", f"{theirs}{b}.weight")
                for a, b in (("enorm", "enorm"), ("hnorm", "hnorm"), ("proj", "eh_proj"), ("norm", "shared_head.norm"))]
        aliases.update({f"{theirs}embed_tokens.weight": "embeddings.tokens.tokens.weight",
                        f"{theirs}shared_head.head.weight": head})
    return out, aliases


def checkpoint_tensors(reference, model, prefix: str) -> dict:
    """The modules' tensors in the files the reference was loaded from (``config.name_or_path``); empty where it
    was not loaded from a directory of safetensors, or they hold none."""
    ahead = prefixes(model, prefix)
    directory = Path(getattr(reference.config, "name_or_path", "") or "")
    if not ahead or not directory.is_dir():
        return {}
    from safetensors import safe_open

    files = sorted(directory.glob("*.safetensors"))
    found = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as handle:
                found.update({k: handle.get_tensor(k) for k in handle.keys() if k.startswith(ahead)})
        except Exception as exc:  # noqa: BLE001 - safetensors' errors have their own types
            raise InteropError(f"{shown(file)}: cannot read its multi-token prediction tensors: {exc}") from None
    return found


def without_missing(model, state: dict, names: list[Rule], aliases: dict, prefix: str, reference: str
                    ) -> tuple[list[Rule], dict, tuple[str, ...]]:
    """The rules, aliases and our tensors left as initialised (``load_state``'s ``outside``) where a checkpoint
    holds no tensor of the modules at all (a model saved by Hugging Face, which leaves them out): they are
    training's, so the model still loads, and says so. One holding some is damaged, and refused by
    ``load_state``."""
    ahead = prefixes(model, prefix)
    if not ahead or any(k.startswith(ahead) for k in state):
        return names, aliases, ()
    warnings.warn(f"the {reference} checkpoint holds no multi-token prediction weights ({ahead[0]}*): those "
                  "modules keep their initial weights (training trains them; inference does not run them)",
                  stacklevel=3)
    return ([r for r in names if not r.theirs[0].startswith(ahead)],
            {k: v for k, v in aliases.items() if not k.startswith(ahead)}, ("mtp.",))


def split(model, state: dict, prefix: str = "model.") -> tuple[dict, dict]:
    """An exported state dict as what Hugging Face's model holds and the modules' tensors, which it leaves out."""
    ahead = prefixes(model, prefix)
    if not ahead:
        return state, {}
    return ({k: v for k, v in state.items() if not k.startswith(ahead)},
            {k: v for k, v in state.items() if k.startswith(ahead)})


def write(directory, tensors: dict) -> None:
    """Add the modules' tensors to a directory ``save_pretrained`` wrote: into ``model.safetensors``, or as a
    shard of their own named in the index."""
    if not tensors:
        return
    import json

    from safetensors.torch import load_file, save_file

    path = Path(directory)
    index = path / "model.safetensors.index.json"
    if index.exists():
        shard = "model-mtp.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / shard), metadata={"format": "pt"})
        data = json.loads(index.read_text())
        data["weight_map"].update({k: shard for k in tensors})
        index.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return
    single = path / "model.safetensors"
    held = load_file(str(single))
    save_file({**held, **{k: v.contiguous() for k, v in tensors.items()}}, str(single), metadata={"format": "pt"})
