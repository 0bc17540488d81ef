"""``tfspec report SPEC [SPEC…] -o report.html``: one self-contained page (no request leaves it when it is
viewed) with, for each spec, the Figure-1 diagram, the parameters by block, the cost against sequence length
(FLOPs, activation memory, KV cache), the attention patterns and the verified properties; for several specs,
what differs between them and their costs on one chart.

Pictures are inline: the diagram as SVG, the charts as SVG, the patterns as PNG data. The page's script only
lets a reader switch between the specs' tabs and hover a chart's points for their values.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from dataclasses import dataclass, field

from .analysis import Analysis, AnalysisError, analyse, sweep
from .summary import binary, human_axes, lengths_text, si, spec_labels
from ..files import figure_text

VERIFY_EXAMPLES = 10  # Hypothesis examples per property: a report checks, `tfspec verify` searches harder


@dataclass
class SpecReport:
    """What the page shows for one spec, each part computed (or the reason it is missing)."""

    label: str
    path: str
    spec: object
    analysis: Analysis
    curve: list[Analysis]
    diagram: str | None = None  # SVG markup
    patterns: str | None = None  # PNG, base64
    verified: list | None = None  # tfspec.inspect.verify.Result
    notes: dict[str, str] = field(default_factory=dict)  # section -> why it is missing


def build(paths: list[str], specs: list, *, seq_len: int | None = None, verify: bool = True,
          examples: int = VERIFY_EXAMPLES) -> list[SpecReport]:
    """Every part of the page for each spec; ``AnalysisError`` when a spec cannot be costed at ``seq_len``."""
    labels = spec_labels([s.name for s in specs], paths)
    out = []
    for label, path, spec in zip(labels, paths, specs):
        analysis = analyse(spec, seq_len=seq_len)
        report = SpecReport(label, path, spec, analysis, sweep(spec))
        _diagram(report)
        _patterns(report)
        if verify:
            _verify(report, examples)
        else:
            report.notes["verify"] = "not run (--no-verify)"
        out.append(report)
    return out


def _diagram(report: SpecReport) -> None:
    import graphviz

    from .diagram import INSTALL_HINT, to_graphviz

    try:
        svg = to_graphviz(report.spec).pipe(format="svg").decode("utf-8")
    except graphviz.ExecutableNotFound:
        report.notes["diagram"] = INSTALL_HINT
        return
    report.diagram = svg[svg.index("<svg"):]  # without the XML prologue and doctype, which HTML does not take


def _patterns(report: SpecReport) -> None:
    import matplotlib.pyplot as plt

    from .patterns import attention_patterns, pattern_figure

    try:
        patterns = attention_patterns(report.spec)
    except AnalysisError as exc:
        report.notes["patterns"] = str(exc)
        return
    if not patterns:
        report.notes["patterns"] = "no attention to draw"
        return
    buffer = io.BytesIO()
    fig = pattern_figure(patterns, f"{report.spec.name}: which key each query sees")
    try:
        fig.savefig(buffer, format="png", dpi=110)
    finally:
        plt.close(fig)
    report.patterns = base64.b64encode(buffer.getvalue()).decode("ascii")


def _verify(report: SpecReport, examples: int) -> None:
    from ..backend.compiler import compile as compile_spec
    from .verify import small_version, verify

    small, changes = small_version(report.spec)
    report.verified = verify(compile_spec(small, seed=0), examples=examples, seed=0)
    report.notes["verify"] = ("checked at test size" + (f" ({', '.join(changes)})" if changes else "") +
                              f", {examples} examples per property")


def spec_html(spec) -> str:
    """What a notebook shows for a ``Spec`` or a compiled model: the check line, the diagram (where Graphviz is
    installed) and the parameters by block, in a fragment of HTML."""
    from .summary import summary_line

    report = SpecReport(spec.name, spec.name, spec, analyse(spec), [])
    _diagram(report)
    diagram = f'<div style="max-width:720px">{report.diagram}</div>' if report.diagram is not None else ""
    line = summary_line(spec.name, spec).split(": ", 1)[1]  # without the path a file would have
    return (f"<div><p><code>{_e(line)}</code></p>{diagram}"
            f"<details><summary>parameters by block</summary>{_parameters(report.analysis)}</details></div>")


# ---------------------------------------------------------------- charts
def _chart(curves: dict[str, list[Analysis]]) -> str:
    """FLOPs, activation memory and KV cache against sequence length, one line per spec: inline SVG whose
    points carry their values (``data-tip``) for the page's hover."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("forward FLOPs", lambda a: a.total.flops, si),
              ("activation memory kept for backward", lambda a: a.total.memory, binary),
              ("decoder KV cache", lambda a: a.kv_cache_bytes, binary)]
    if not any(a.kv_cache_bytes for analyses in curves.values() for a in analyses):
        panels = panels[:2]
    plt.rcParams["svg.fonttype"] = "none"  # text as text: small, selectable
    plt.rcParams["svg.hashsalt"] = "tfspec"  # the same ids each time: a report is reproducible
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    tips = []
    for ax, (title, value, unit) in zip(axes[0], panels):
        for (label, analyses), color in zip(curves.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4):
            lengths = [max(a.lengths.values()) for a in analyses]
            values = [value(a) for a in analyses]
            line, = ax.plot(lengths, values, "o-", color=color, label=figure_text(label), markersize=4)
            line.set_gid(f"series-{len(tips)}")
            tips.append([f"{label}, n = {n:,}: {unit(v)}" for n, v in zip(lengths, values)])
        human_axes(ax, bytes_=unit is binary)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    svg = buffer.getvalue()
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg[svg.index("<svg"):], flags=re.S)  # matplotlib's RDF
    return f'<div class="chart" data-tips="{html.escape(json.dumps(tips))}">{svg}</div>'


# ---------------------------------------------------------------- the page
def _e(text) -> str:
    return html.escape(str(text))


def _table(header: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{_e(c)}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _parameters(a: Analysis) -> str:
    total = a.total.params
    rows = [[r.stack or "—", r.label, f"{r.repeat}", f"{r.cost.params:,}", f"{r.cost.params / total:.1%}"]
            for r in a.rows if r.cost.params]
    rows.append(["", "total", "", f"{total:,}", "100%"])
    active = (f'<p>{a.active_params:,} parameters active per position (a mixture of experts runs some of its '
              f"experts).</p>" if a.active_params and a.active_params != total else "")
    return _table(["stack", "block", "layers", "parameters", "share"], rows, {2, 3, 4}) + active


def _costs(a: Analysis, curve: list[Analysis]) -> str:
    rows = [[f"{max(c.lengths.values()):,}", si(c.total.flops, "FLOPs"), binary(c.total.memory),
             binary(c.kv_cache_bytes) if c.kv_cache_bytes else "—"] for c in curve]
    at = (f"<p>At {lengths_text(a)} (batch {a.batch}, {a.dtype}): {si(a.total.flops, 'FLOPs')} forward, "
          f"{binary(a.total.memory)} of activations kept for backward"
          + (f", a KV cache of {binary(a.kv_cache_bytes)}" if a.kv_cache_bytes else "")
          + (f" ({binary(a.kv_cache_multi_head_bytes)} with multi-head attention of the same heads)"
             if a.kv_cache_multi_head_bytes != a.kv_cache_bytes else "")
          + (f"; mixer states of {binary(a.state_bytes)} whatever the length" if a.state_bytes else "")
          + (f"; with attention in every layer its decoding state would be {binary(a.all_attention_bytes)}, not "
             f"{binary(a.kv_cache_bytes + a.state_bytes)}" if a.all_attention_bytes else "") + ".</p>")
    table = _table(["sequence length", "forward", "activations", "KV cache"], rows, {0, 1, 2, 3}) if rows else ""
    return at + (_chart({a.name: curve}) if curve else "<p>No sweep length fits.</p>") + table


def _verified(report: SpecReport) -> str:
    if report.verified is None:
        return f"<p class=note>{_e(report.notes.get('verify', ''))}</p>"
    marks = {"held": "held", "violated": "violated", "not applicable": "n/a"}
    rows = "".join(f'<tr class="{r.status.replace(" ", "-")}"><td>{marks[r.status]}</td><td>{_e(r.name)}</td>'
                   f"<td>{_e(r.detail)}</td></tr>" for r in report.verified)
    return (f"<p class=note>{_e(report.notes['verify'])}</p><table><thead><tr><th>result</th><th>property</th>"
            f"<th>detail</th></tr></thead><tbody>{rows}</tbody></table>")


def _section(key: str, title: str, body: str) -> str:
    return f'<section data-section="{key}"><h3>{_e(title)}</h3>{body}</section>'


def _spec_page(index: int, r: SpecReport) -> str:
    from .summary import summary_line

    diagram = (f'<div class="diagram">{r.diagram}</div>' if r.diagram is not None
               else f"<p class=note>{_e(r.notes['diagram'])}</p>")
    patterns = (f'<img alt="attention patterns of {_e(r.spec.name)}" src="data:image/png;base64,{r.patterns}">'
                if r.patterns is not None else f"<p class=note>{_e(r.notes['patterns'])}</p>")
    return (f'<article id="spec-{index}" class="spec"{"" if index == 0 else " hidden"}>'
            f"<h2>{_e(r.spec.name)}</h2><p class=summary>{_e(summary_line(r.path, r.spec))}</p>"
            + _section("diagram", "Architecture", diagram)
            + _section("parameters", "Parameters by block", _parameters(r.analysis))
            + _section("cost", "Cost against sequence length", _costs(r.analysis, r.curve))
            + _section("patterns", "Attention patterns", patterns)
            + _section("verify", "Verified properties", _verified(r))
            + "</article>")


def _comparison(reports: list[SpecReport]) -> str:
    from .diff import architecture_changes

    first = reports[0]
    parts = []
    for other in reports[1:]:
        changes = architecture_changes(first.spec, other.spec)
        items = "".join(f"<li>{_e(c)}</li>" for c in changes) or "<li>no architectural differences</li>"
        a, b = first.analysis.total, other.analysis.total
        totals = _table(["", first.label, other.label],
                        [["parameters", f"{a.params:,}", f"{b.params:,}"],
                         ["forward FLOPs", si(a.flops), si(b.flops)],
                         ["activations", binary(a.memory), binary(b.memory)]], {1, 2})
        parts.append(f"<h3>{_e(first.label)} → {_e(other.label)}</h3><div class=side><ul>{items}</ul>{totals}</div>")
    curves = {r.label: r.curve for r in reports if r.curve}
    chart = _chart(curves) if curves else "<p>No sweep length fits every spec.</p>"
    return ('<article id="compare" class="spec" hidden><h2>Compared</h2>'
            + _section("diff", "What differs", "".join(parts))
            + _section("curves", "Costs on one chart", chart) + "</article>")


STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#fafbfc}
header{background:#1f4e79;color:#fff;padding:14px 28px}header h1{margin:0;font-size:20px}
nav{display:flex;gap:6px;padding:10px 28px;background:#e8eef5;flex-wrap:wrap}
nav button{border:1px solid #9db3cc;background:#fff;border-radius:4px;padding:4px 12px;cursor:pointer;font:inherit}
nav button[aria-selected=true]{background:#1f4e79;color:#fff}
main{padding:8px 28px 40px}section{background:#fff;border:1px solid #dde3ea;border-radius:6px;padding:6px 18px 14px;
margin:14px 0}h3{margin:8px 0}.diagram svg{max-width:100%;height:auto;max-height:1100px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border-bottom:1px solid #e3e7ec;padding:3px 10px;
text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}.note{color:#5a6472;font-size:13px}
tr.violated td:first-child{color:#b00020;font-weight:600}tr.held td:first-child{color:#1b7f3b}
img{max-width:100%}.chart{position:relative}.chart svg{max-width:100%;height:auto}
.tip{position:absolute;background:#1d2330;color:#fff;font-size:12px;padding:2px 6px;border-radius:3px;
pointer-events:none;white-space:nowrap}.side{display:flex;gap:32px;flex-wrap:wrap}.summary{font-family:monospace}
"""

SCRIPT = """
document.querySelectorAll('nav button').forEach(function (button) {
  button.addEventListener('click', function () {
    document.querySelectorAll('nav button').forEach(function (b) { b.setAttribute('aria-selected', b === button); });
    document.querySelectorAll('article.spec').forEach(function (a) { a.hidden = a.id !== button.dataset.target; });
  });
});
document.querySelectorAll('.chart').forEach(function (chart) {
  var tips = JSON.parse(chart.dataset.tips), tip = document.createElement('div');
  tip.className = 'tip'; tip.hidden = true; chart.appendChild(tip);
  tips.forEach(function (labels, series) {
    var group = chart.querySelector('#series-' + series);
    if (!group) return;
    group.querySelectorAll('use').forEach(function (mark, index) {  // the markers, in the points' order
      var label = labels[Math.min(index, labels.length - 1)];
      mark.addEventListener('mouseenter', function (event) {
        var box = chart.getBoundingClientRect();
        tip.textContent = label; tip.hidden = false;
        tip.style.left = (event.clientX - box.left + 10) + 'px'; tip.style.top = (event.clientY - box.top - 24) + 'px';
      });
      mark.addEventListener('mouseleave', function () { tip.hidden = true; });
    });
  });
});
"""


def page(reports: list[SpecReport]) -> str:
    """The HTML page."""
    tabs = [(f"spec-{i}", r.label) for i, r in enumerate(reports)]
    if len(reports) > 1:
        tabs.append(("compare", "compared"))
    nav = "".join(f'<button data-target="{t}" aria-selected="{str(i == 0).lower()}">{_e(label)}</button>'
                  for i, (t, label) in enumerate(tabs))
    body = "".join(_spec_page(i, r) for i, r in enumerate(reports))
    if len(reports) > 1:
        body += _comparison(reports)
    from ..version import __version__

    title = ", ".join(r.spec.name for r in reports)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}: tfspec report</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; img-src data:; '
            f"style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
            f"<style>{STYLE}</style></head><body><header><h1>{_e(title)}</h1></header><nav>{nav}</nav>"
            f"<main>{body}</main><footer class=note style=\"padding:0 28px 20px\">tfspec {__version__}</footer>"
            f"<script>{SCRIPT}</script></body></html>\n")
