"""The public entry points: text or file -> validated ``Spec``."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ..errors import Diagnostic, SpecError, SpecWarning, shown
from ..files import NotAFile, read_regular
from .resolve import resolve
from .schema import Spec, Towers
from .syntax import parse_module
from ..layout import spec_of
from .. import ir  # noqa: F401 (gives a Spec its graph: see Spec.lowering)


MAX_SPEC_BYTES = 8 << 20  # a spec file; larger ones are refused before they are read


def parse(text: str, *, file: str = "<spec>", overrides: dict[str, Any] | None = None) -> Spec | Towers:
    """Parse and validate spec text; raises ``SpecError`` listing every problem. A spec of ``tower``s gives
    ``Towers``, each tower a ``Spec``.

    >>> spec = parse('''
    ... embedding tokens { vocab 100; dim 64 }
    ... decoder x 2 { attention self heads=4 mask=causal; feedforward d_ff=256 }
    ... head tied(tokens)''')
    >>> spec.kind, spec.parameter_count()
    ('decoder-only', 106368)
    """
    spec = resolve(parse_module(text, file), overrides)
    spec.graph()  # lowering + validation passes (every tower's): a returned model is always valid
    for diagnostic in spec._warnings:
        warnings.warn(SpecWarning(diagnostic, spec._sources), stacklevel=2)
    return spec


def load(path: str | Path, *, overrides: dict[str, Any] | None = None) -> Spec | Towers:
    """Read and validate a ``.tfs`` file; ``overrides`` replace ``let`` parameters by name. A run directory or a
    checkpoint gives the spec its weights belong to, with the run's own overrides.

    >>> load("examples/gpt2_small.tfs", overrides={"layers": 2, "d_model": 64, "heads": 4}).parameter_count()
    3382080
    """
    path = Path(path)
    saved = spec_of(path) if path.is_dir() else None
    if saved is not None:
        path, overrides = saved[0], {**saved[1], **(overrides or {})} or None
    try:
        text = read_regular(path, MAX_SPEC_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise SpecError([Diagnostic("io", f"{shown(path)}: no such file", None)]) from None
    except IsADirectoryError:
        raise SpecError([Diagnostic("io", f"{shown(path)}: is a directory, not a spec file nor a tfspec run",
                                    None)]) from None
    except NotAFile as exc:
        raise SpecError([Diagnostic("io", f"{shown(path)}: {exc.strerror}", None)]) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise SpecError([Diagnostic("io", f"{shown(path)}: cannot read: {reason}", None)]) from None
    return parse(text, file=str(path), overrides=overrides)
