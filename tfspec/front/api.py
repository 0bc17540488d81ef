"""The front end's entry points: text or a file -> a resolved ``Spec`` (or ``Towers``), before the IR lowers and
validates it. ``tfspec.parse`` and ``tfspec.load`` (``tfspec.ir.api``) run these, then the IR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import Diagnostic, SpecError, shown
from ..files import NotAFile, read_regular
from .resolve import resolve
from .schema import Spec, Towers
from .syntax import parse_module
from ..layout import spec_of


MAX_SPEC_BYTES = 8 << 20  # a spec file; larger ones are refused before they are read


def resolve_text(text: str, *, file: str = "<spec>", overrides: dict[str, Any] | None = None) -> Spec | Towers:
    """Spec text through the front end's stages (syntax, then resolution against the registries), not yet lowered:
    a ``SpecError`` listing every problem they find. ``tfspec.parse`` lowers and validates the result."""
    return resolve(parse_module(text, file), overrides)


def read_spec_file(path: str | Path, overrides: dict[str, Any] | None = None) -> tuple[str, str, dict | None]:
    """(text, file name, overrides) of a ``.tfs`` file, or of the spec a run directory or checkpoint holds (with the
    run's own overrides under ``overrides``): a ``SpecError`` for a path that is not a readable spec file."""
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
    return text, str(path), overrides
