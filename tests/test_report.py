"""`tfspec report`: the page is checked in a real headless browser (the system's Chromium, driven by
Playwright): it loads with no console error and no request leaving the file, every section renders what the
analysis computed, the tabs and a chart's hover work, and a screenshot is taken."""

from __future__ import annotations

import re
import shutil

import pytest

import tfspec
from tfspec.cli import main
from tfspec.inspect.analysis import analyse
from tfspec.inspect.verify import PROPERTIES

BROWSER = next((path for name in ("chromium", "chromium-browser", "google-chrome") if (path := shutil.which(name))),
               None)
SMALL = ["--set", "layers=2", "--set", "d_model=64", "--set", "heads=4"]


def test_the_report_page_is_self_contained_html(tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", "examples/gpt1.tfs", "examples/gpt2_small.tfs", *SMALL, "--no-verify", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<link" not in text and 'src="data:image/png;base64,' in text
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)  # nothing to fetch (namespaces are names)
    for section in ("diagram", "parameters", "cost", "patterns", "verify", "diff", "curves"):
        assert f'data-section="{section}"' in text
    assert "decoder: residual post-norm → pre-norm (every sublayer)" in text  # the side-by-side diff


def test_report_refusals(tmp_path, capsys):
    assert main(["report", "examples/gpt1.tfs", "-o", str(tmp_path / "report.txt")]) == 2
    assert "a report is an HTML page" in capsys.readouterr().err
    assert main(["report", "examples/gpt1.tfs", "-o", str(tmp_path / "missing" / "r.html")]) == 2
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(BROWSER is None, reason="no Chromium here (make test installs Debian's chromium as root)")
def test_the_report_renders_in_a_browser(tmp_path):
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    out = tmp_path / "report.html"
    assert main(["report", "examples/vaswani_base.tfs", "examples/gpt2_small.tfs", *SMALL, "--examples", "3",
                 "-o", str(out)]) == 0
    vaswani = tfspec.load("examples/vaswani_base.tfs", overrides={"layers": 2, "d_model": 64, "heads": 4})
    blocks = [r for r in analyse(vaswani).rows if r.cost.params]

    problems, requests = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=BROWSER, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(out.as_uri())
            page.wait_for_load_state("load")
            first = page.locator("#spec-0")
            assert first.is_visible() and page.locator("#spec-1").is_hidden()
            # the diagram: Graphviz's nodes, one per block and more
            assert first.locator("[data-section=diagram] svg g.node").count() >= len(blocks)
            rows = first.locator("[data-section=parameters] tbody tr")
            assert rows.count() == len(blocks) + 1  # and the total
            assert rows.last.inner_text().split()[-2] == f"{vaswani.parameter_count():,}"
            assert first.locator("[data-section=cost] svg path").count() > 10  # the charts' lines and axes
            picture = first.locator("[data-section=patterns] img")
            assert picture.evaluate("img => img.complete && img.naturalWidth > 200")
            verified = first.locator("[data-section=verify] tbody tr")
            assert verified.count() == len(PROPERTIES)
            assert first.locator("[data-section=verify] tr.violated").count() == 0
            assert "causality" in first.locator("[data-section=verify]").inner_text()

            # a chart's points tell their values on hover
            marker = first.locator("[data-section=cost] .chart #series-0 use").first
            marker.hover(force=True)
            tip = first.locator("[data-section=cost] .chart .tip")
            assert tip.is_visible() and "n = 64:" in tip.inner_text()

            # the tabs: the comparison shows the two specs' differences and one chart of both
            page.get_by_role("button", name="compared").click()
            assert page.locator("#compare").is_visible() and first.is_hidden()
            compared = page.locator("#compare").inner_text()
            assert "vaswani_base → gpt2_small" in compared and "removed" in compared
            assert page.locator("#compare [data-section=curves] .chart #series-1").count() == 1
            page.get_by_role("button", name="vaswani_base").click()
            assert first.is_visible()

            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 50_000
        finally:
            browser.close()
    assert problems == []
    assert requests == [out.as_uri()]  # nothing but the page itself: no network when it is viewed
