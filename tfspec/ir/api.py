"""The public entry points, text or a file -> a validated ``Spec`` (or ``Towers``): the front end's stages, then
the IR's lowering and validation passes. A spec returned is always valid, its graph made.

    >>> spec = parse('''
    ... embedding tokens { vocab 100; dim 64 }
    ... decoder x 2 { attention self heads=4 mask=causal; feedforward d_ff=256 }
    ... head tied(tokens)''')
    >>> spec.kind, spec.parameter_count()
    ('decoder-only', 106368)
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ..errors import SpecWarning
from ..front.api import read_spec_file, resolve_text
from ..front.schema import Spec, Towers
from .graph import Graph
from .towers import ONE_STACK, TOWERS, TowersGraph


def parse(text: str, *, file: str = "<spec>", overrides: dict[str, Any] | None = None) -> Spec | Towers:
    """Parse and validate spec text; raises ``SpecError`` listing every problem. A spec of ``tower``s gives
    ``Towers``, each tower a ``Spec``."""
    spec = resolve_text(text, file=file, overrides=overrides)
    lower(spec)  # lowering + validation passes (every tower's): a returned model is always valid
    for diagnostic in spec._warnings:
        warnings.warn(SpecWarning(diagnostic, spec._sources), stacklevel=2)
    return spec


def load(path: str | Path, *, overrides: dict[str, Any] | None = None) -> Spec | Towers:
    """Read and validate a ``.tfs`` file; ``overrides`` replace ``let`` parameters by name. A run directory or a
    checkpoint gives the spec its weights belong to, with the run's own overrides.

    >>> load("examples/gpt2_small.tfs", overrides={"layers": 2, "d_model": 64, "heads": 4}).parameter_count()
    3382080
    """
    text, file, overrides = read_spec_file(path, overrides)
    return parse(text, file=file, overrides=overrides)


def lower(spec: Spec | Towers) -> Graph | TowersGraph:
    """``spec``'s validated graph, made now and kept by it: the spec is given the IR's lowering, which its copies
    keep (``Spec.graph``), so a copy whose graph is cleared (``Towers.model_copy``, ``verify``'s smaller versions)
    is lowered anew when asked for it."""
    spec._lowering = TOWERS if isinstance(spec, Towers) else ONE_STACK
    return spec.graph()
