"""A spec as data: the blocks a family's spec is made of, each a list of statements, which a family derives from
its base's by stating what differs, as Hugging Face's ``modular_*.py`` derives a model from another's.

    >>> base = Document.of(Block("defaults", Statement("residual", "pre"), Statement("norm", "layernorm(eps=eps)")),
    ...                    Block("decoder x layers", Statement("attention", "self", heads="heads", mask="causal"),
    ...                          Statement("feedforward", d_ff="4 * d_model", activation="gelu")))
    >>> mpt = (base.change("defaults", "norm", "layernorm(eps=eps, bias=false)")
    ...            .change("decoder", "attention", bias="false")
    ...            .add("decoder", Statement("position", "alibi"), before="attention"))
    >>> print(mpt.text("mpt"), end="")
    model mpt
    <BLANKLINE>
    defaults {
      residual pre
      norm layernorm(eps=eps, bias=false)
    }
    <BLANKLINE>
    decoder x layers {
      position alibi
      attention self heads=heads mask=causal bias=false
      feedforward d_ff=4 * d_model activation=gelu
    }

A block is named by the first word of its header (``decoder`` for ``decoder x layers``) or by the whole header
(``embedding tokens``); a statement by its name (``attention``), the first of that name in its block. The text is the
language's own canonical form, which the front end's formatter checks when an imported spec is written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Statement:
    """``name`` then its positional ``args`` then its ``options`` (``key=value``, in order), each value as the
    language writes it; ``comment``: written after it."""

    name: str
    args: tuple[str, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    comment: str = ""

    def __init__(self, name: str, *args: str, comment: str = "", **options: str | None) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", tuple(str(a) for a in args))
        object.__setattr__(self, "options", tuple((k, str(v)) for k, v in options.items() if v is not None))
        object.__setattr__(self, "comment", comment)

    def changed(self, *args: str, comment: str | None = None, **options: str | None) -> "Statement":
        """The statement with ``args`` in place of its positional ones (where given) and ``options`` set: a new key
        after the others, an existing one in its place, None removing it; ``comment`` in place of its own."""
        values = dict(self.options)
        for key, value in options.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = str(value)
        return Statement(self.name, *(args or self.args), comment=self.comment if comment is None else comment,
                         **values)

    def inserted(self, before: str, **options: str | None) -> "Statement":
        """The statement with ``options`` added before its option ``before`` (where its kind reads them first:
        an attention's ``kind=`` before its ``mask=``)."""
        keys = [k for k, _ in self.options]
        if before not in keys:
            raise KeyError(f"statement {self.name!r} has no option {before!r}")
        values = list(self.options)
        at = keys.index(before)
        values[at:at] = [(k, str(v)) for k, v in options.items() if v is not None]
        return Statement(self.name, *self.args, comment=self.comment, **dict(values))

    def text(self) -> str:
        words = [self.name, *self.args, *(f"{k}={v}" for k, v in self.options)]
        return " ".join(words) + (f"  # {self.comment}" if self.comment else "")


@dataclass(frozen=True)
class Block:
    """``header { statements }`` (``defaults``, ``embedding tokens``, ``decoder x layers``, ``connect vision ->
    text``); a statement may also be a line of the wiring form as written (``x = x + attention(norm(x))``);
    ``comment``: a line of its own before it."""

    header: str
    body: tuple[Statement | str, ...]
    comment: str = ""

    def __init__(self, header: str, *body: Statement | str, comment: str = "") -> None:
        object.__setattr__(self, "header", header)
        object.__setattr__(self, "body", tuple(body))
        object.__setattr__(self, "comment", comment)

    def named(self, name: str) -> bool:
        return name in (self.header, self.header.split()[0])

    def index(self, statement: str) -> int:
        """Where the first statement called ``statement`` stands."""
        for i, item in enumerate(self.body):
            if isinstance(item, Statement) and item.name == statement:
                return i
        raise KeyError(f"block {self.header!r} has no statement {statement!r}")

    def text(self) -> str:
        texts = [item.text() if isinstance(item, Statement) else item for item in self.body]
        lines = [line for text in texts for line in text.split("\n")]  # (a wiring line may be continued)
        above = f"# {self.comment}\n" if self.comment else ""
        return above + f"{self.header} {{\n" + "".join(f"  {line}\n" for line in lines) + "}\n"


@dataclass(frozen=True)
class Tower:
    """``tower NAME { ... }``: a model of one stack or two inside a model of towers, its own ``document``'s blocks
    and top-level statements."""

    name: str
    document: "Document"

    def text(self) -> str:
        lines = self.document.body().rstrip("\n").split("\n")
        return f"tower {self.name} {{\n" + "".join(f"  {line}\n" if line else "\n" for line in lines) + "}\n"


@dataclass(frozen=True)
class Document:
    """A spec's blocks in order, and its top-level items after them: statements (``head tied(tokens)``, ``pooler
    tanh``, ``contrastive text vision``), towers, and blocks of their own (a connector's)."""

    blocks: tuple[Block, ...]
    tail: tuple[Statement | Tower | Block | str, ...] = ()

    @classmethod
    def of(cls, *blocks: Block, tail: tuple[Statement | Tower | Block | str, ...] = ()) -> "Document":
        return cls(tuple(blocks), tuple(tail))

    def tower(self, name: str) -> "Document":
        """The document of its tower ``name``."""
        for item in self.tail:
            if isinstance(item, Tower) and item.name == name:
                return item.document
        raise KeyError(f"the document has no tower {name!r}")

    def _block(self, name: str) -> int:
        for i, block in enumerate(self.blocks):
            if block.named(name):
                return i
        raise KeyError(f"the document has no block {name!r}")

    def _with(self, name: str, body: list) -> "Document":
        i = self._block(name)
        blocks = list(self.blocks)
        blocks[i] = Block(blocks[i].header, *body, comment=blocks[i].comment)
        return replace(self, blocks=tuple(blocks))

    def change(self, block: str, statement: str, *args: str, comment: str | None = None,
               **options: str | None) -> "Document":
        """``block``'s statement ``statement`` with ``args`` in place of its positional ones and ``options`` set
        (None removes one; ``Statement.changed``)."""
        body = list(self.blocks[self._block(block)].body)
        i = self.blocks[self._block(block)].index(statement)
        body[i] = body[i].changed(*args, comment=comment, **options)
        return self._with(block, body)

    def insert(self, block: str, statement: str, before: str, **options: str | None) -> "Document":
        """``block``'s statement ``statement`` with ``options`` added before its option ``before``."""
        body = list(self.blocks[self._block(block)].body)
        i = self.blocks[self._block(block)].index(statement)
        body[i] = body[i].inserted(before, **options)
        return self._with(block, body)

    def change_tail(self, statement: str, *args: str, **options: str | None) -> "Document":
        """The top-level statement ``statement`` (``head``) changed as ``Statement.changed`` says."""
        tail = list(self.tail)
        i = next((i for i, s in enumerate(tail) if isinstance(s, Statement) and s.name == statement), None)
        if i is None:
            raise KeyError(f"the document has no top-level {statement!r}")
        tail[i] = tail[i].changed(*args, **options)
        return replace(self, tail=tuple(tail))

    def put(self, block: str, statement: Statement) -> "Document":
        """``block`` with ``statement`` in place of its statement of that name."""
        body = list(self.blocks[self._block(block)].body)
        body[self.blocks[self._block(block)].index(statement.name)] = statement
        return self._with(block, body)

    def drop(self, block: str, statement: str) -> "Document":
        """``block`` without its statement ``statement``."""
        body = list(self.blocks[self._block(block)].body)
        del body[self.blocks[self._block(block)].index(statement)]
        return self._with(block, body)

    def add(self, block: str, statement: Statement | str, *, before: str | None = None) -> "Document":
        """``block`` with ``statement`` added at its end, or ``before`` the statement of that name."""
        found = self.blocks[self._block(block)]
        body = list(found.body)
        body.insert(found.index(before) if before else len(body), statement)
        return self._with(block, body)

    def add_lines(self, block: str, lines: str) -> "Document":
        """``block`` with each of ``lines`` (statements as the language writes them, a line each: a family's
        ``layers`` sections) added at its end."""
        document = self
        for line in lines.split("\n"):
            if line.strip():
                document = document.add(block, line.strip())
        return document

    def with_tail(self, *lines: Statement | str) -> "Document":
        """The document with ``lines`` after its blocks (a head: ``head tied(tokens)``)."""
        return replace(self, tail=tuple(lines))

    def body(self) -> str:
        """Its blocks and top-level items, a blank line between each (a tower's inside, a spec's after its
        ``model`` line)."""
        items = [item if isinstance(item, str) else item.text() for item in (*self.blocks, *self.tail)]
        return "\n".join(item.rstrip("\n") + "\n" for item in items)

    def text(self, name: str) -> str:
        """The spec ``model NAME``, its blocks and its top-level items, as the language's canonical form writes
        them."""
        return f"model {name}\n\n" + self.body()
