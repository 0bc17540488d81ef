"""`tfspec render`: the architecture drawn with Graphviz, as the paper's Figure 1."""

from __future__ import annotations

from ..errors import shown
from ..ir.api import load
from .common import overrides, print_json, UsageError, with_json, with_set, writable


def add(sub) -> None:
    """The `render` command's arguments."""
    render = with_json(with_set(sub.add_parser("render", help="draw the architecture (Figure 1 style) with Graphviz")))
    render.add_argument("file", metavar="FILE")
    render.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output file; the suffix picks the format: .svg, .png, .pdf or .dot")
    render.add_argument("--expand", action="store_true", help="draw every layer instead of one inside 'N×'")
    render.add_argument("--detail", action="store_true", help="show tensor shapes on edges, dropout, norm options")
    render.set_defaults(run=run)


def run(args) -> int:
    from ..inspect.diagram import RenderError, render

    spec = load(args.file, overrides=overrides(args))
    writable(args.output, "-o")
    try:
        path = render(spec, args.output, expand=args.expand, detail=args.detail)
    except RenderError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print_json({"output": str(path), "name": spec.name})
    else:
        print(f"wrote {shown(path)}")
    return 0
