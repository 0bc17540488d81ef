"""Writing the spec a reference configuration describes, readably: named ``let`` parameters citing their source.

    >>> w = SpecWriter()
    >>> f"dim {w('d_model', 64, 'hidden_size')}; heads={w('heads', 4, 'num_attention_heads')}"
    'dim d_model; heads=heads'
    >>> w("unused", 0.1, "hidden_dropout")
    'unused'
    >>> print(w.text("model m\\ndecoder x 1 { attention self heads=heads; feedforward d_ff=4 * d_model }",
    ...              ["A comment."]), end="")
    # A comment.
    # From the configuration: d_model = hidden_size, heads = num_attention_heads.
    model m
    <BLANKLINE>
    let d_model = 64, heads = 4
    <BLANKLINE>
    decoder x 1 { attention self heads=heads; feedforward d_ff=4 * d_model }
"""

from __future__ import annotations

import re
import textwrap


def causal_masks(window: int | None = None, padding: bool = True) -> str:
    """A decoder's self-attention masks: causal, within ``window`` keys where it slides, and padded keys hidden
    where ``padding``.

    >>> causal_masks(4096), causal_masks(padding=False)
    ('causal + window(4096) + padding', 'causal')
    """
    return " + ".join(["causal"] + ([f"window({window})"] if window else []) + (["padding"] if padding else []))


def router(*parts: str | None) -> str | None:
    """A mixture's ``router=`` from the parts a configuration gives (None or empty: not given); None where it gives
    none (a softmax's top experts, weighed as they are).

    >>> router("sigmoid", None, "scale(2.5)"), router(None)
    ('sigmoid + scale(2.5)', None)
    """
    return " + ".join(p for p in parts if p) or None


def number(x) -> str:
    """A value as a spec writes it, exactly: 768, 1e-12, 10000.0 -> 10000.0, True -> true."""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    return repr(float(x))


class SpecWriter:
    """Collects ``let`` parameters while a spec's body is written; ``text`` puts them at the top."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.fields: dict[str, str] = {}

    def __call__(self, name: str, value, field: str | None = None) -> str:
        """Name ``value`` (from configuration ``field``) as ``let name``; returns the name to write."""
        written = number(value)
        if self.values.get(name, written) != written:
            raise ValueError(f"let {name} is {self.values[name]} and {written}")
        self.values[name] = written
        if field:
            self.fields.setdefault(name, field)
        return name

    def written(self, name: str, text: str, field: str | None = None) -> None:
        """Name an expression already written as spec text (another writer's ``let``, renamed)."""
        if self.values.get(name, text) != text:
            raise ValueError(f"let {name} is {self.values[name]} and {text}")
        self.values[name] = text
        if field:
            self.fields.setdefault(name, field)

    def forget(self, name: str) -> None:
        """Leave out a ``let`` the spec turned out not to use (a base model's logit cap)."""
        self.values.pop(name, None)
        self.fields.pop(name, None)

    def text(self, body: str, heading: list[str]) -> str:
        """``heading`` as comments, the cited fields, then ``body``'s first line (``model NAME``), the lets
        and the rest of ``body``."""
        from ..front.syntax import names, parse_module

        # a parameter the body does not read (a dropout a family's spec leaves out) is not written: a spec's
        # unused `let` is a warning
        read = {n.id for n in names(parse_module(body + "\n" + "\n".join(f"let _{n} = {v}" for n, v in
                                                                           self.values.items())).items)}
        for name in [n for n in self.values if n not in read]:
            self.forget(name)
        comments = list(heading)
        if self.fields:
            comments.append("From the configuration: " + ", ".join(f"{n} = {f}" if f != n else n for n, f in self.fields.items())
                            + ".")
        lines = [line for c in comments for line in textwrap.wrap(c, 100, initial_indent="# ",
                                                                   subsequent_indent="#   ")]
        first, _, rest = body.partition("\n")
        rest = rest.strip("\n")
        lets: list[list[str]] = [[]]
        for item in (f"{n} = {v}" for n, v in self.values.items()):  # whole items per line, 100 characters
            if lets[-1] and len(", ".join(lets[-1] + [item])) > 96:
                lets.append([])
            lets[-1].append(item)
        lets = ["let " + ", ".join(items) for items in lets if items]
        return "\n".join(lines + [first, ""] + lets + ([""] + rest.rstrip("\n").split("\n") if rest else [])) + "\n"


def citations(text: str) -> dict[str, str]:
    """The configuration field each ``let`` of a spec ``SpecWriter.text`` wrote cites, from its heading.

    >>> citations("# A comment.\\n# From the configuration: d_model = hidden_size, heads =\\n#   num_heads, eps.\\nmodel m")
    {'d_model': 'hidden_size', 'heads': 'num_heads', 'eps': 'eps'}
    """
    heading = []
    for line in text.split("\n"):
        if not line.startswith("#"):
            break
        heading.append(line[1:].strip())
    found = re.search(r"From the configuration: (.*?)\.$", " ".join(heading))
    if found is None:
        return {}
    return {item.split(" = ")[0]: item.split(" = ")[-1] for item in found.group(1).split(", ")}


def schedule(per_layer: list, own=lambda value: True) -> tuple[object, list[tuple[str, object]]]:
    """A stack's per-layer values as a layer schedule: the most common of those that may be the stack's ``own``
    (the first of equals) and, for each other value, the ``layers`` selection of its layers.

    >>> schedule(["sliding", "sliding", "sliding", "full"])
    ('sliding', [('3', 'full')])
    >>> schedule([1, 0, 1, 0, 1, 0]), schedule([0, 0, 1, 1, 1, 1]), schedule([0, 1, 1], own=lambda v: v == 0)
    ((1, [('every(2, from=1)', 0)]), (1, [('range(0, 2)', 0)]), (0, [('range(1, 3)', 1)]))
    """
    base = max((v for v in dict.fromkeys(per_layer) if own(v)), key=per_layer.count)
    return base, [(selection([i for i, v in enumerate(per_layer) if v == value], len(per_layer)), value)
                  for value in dict.fromkeys(per_layer) if value != base]


def every_step(flags: list[bool], otherwise: int) -> int:
    """The step a configuration's "every step-th layer" field has where ``flags`` (per layer) are exactly its
    layers i with (i + 1) % step == 0, or ``otherwise`` where no step gives them (its list says which then).

    >>> every_step([False, True, False, True], 1), every_step([True, False, False], 1)
    (2, 1)
    """
    return next((step for step in range(1, len(flags) + 1)
                 if flags == [(i + 1) % step == 0 for i in range(len(flags))]), otherwise)


def selection(layers: list[int], repeat: int) -> str:
    """How a ``layers`` section writes a set of layers: ``range(a, b)``, ``every(step, from=a)`` or numbers."""
    steps = {b - a for a, b in zip(layers, layers[1:])}
    if len(layers) > 1 and steps == {1}:
        return f"range({layers[0]}, {layers[-1] + 1})"
    if len(layers) > 1 and len(steps) == 1 and layers[-1] + min(steps) >= repeat:
        return f"every({min(steps)}" + (f", from={layers[0]})" if layers[0] else ")")
    return " ".join(map(str, layers))
