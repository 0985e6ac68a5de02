"""The explorer in a real browser: `probe app` on a free localhost port, every page opened in headless
Chromium (Debian's /usr/bin/chromium, driven by Playwright), each waited on until a plotly chart has
rendered, then screenshotted (into a temporary folder, and into artifacts/screenshots/ when the
environment variable PROBE_SCREENSHOTS is set)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from helpers import running_app

from probe.explorer import PAGES as EXPLORER_PAGES

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "screenshots"
# 2 examples per length bucket keep them quick; extrapolation tunes on 5 validation examples per unseen length
QUERIES = {"compare": "?n=2", "distances": "?per_bucket=2", "positions": "?per_bucket=2", "extrapolation": "?valid=5"}
CHARTLESS = ("pretraining", "reproduction")  # on task runs these pages draw no chart: opened by URL below
# (page, path and query): every page of the explorer that draws a chart on the fixture's task runs
PAGES = tuple((name, name + QUERIES.get(name, "")) for name in EXPLORER_PAGES if name not in CHARTLESS)
# (path, the page's URL once open, its heading): the root opens Models; Reproduction has no chart here
OPENED_BY_URL = (("", "models", "Models"), ("reproduction", "reproduction", "Reproduction"))
PAGE_TIMEOUT = 90_000  # ms
# pages that draw nothing until their button is pressed: its name
ASKED = {"compare": "Compare", "distances": "Measure", "positions": "Measure", "extrapolation": "Measure"}
SETTLED = """() => !document.querySelector('[data-testid="stSpinner"], [data-testid="stSkeleton"]')
    && [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
        .every(chart => chart.querySelector('.js-plotly-plot .plot-container'))"""
SCROLL_HEIGHT = """() => Math.max(document.documentElement.scrollHeight,
    ...[...document.querySelectorAll('*')].filter(e => e.scrollHeight > e.clientHeight + 1
        && ['auto', 'scroll'].includes(getComputedStyle(e).overflowY)).map(e => e.scrollHeight))"""

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"no Chromium at {CHROMIUM} (Debian's `apt-get install chromium`; .ci/run installs it)",
)


def assert_opened(page, url: str) -> None:
    """The page opened at its own URL, without Streamlit's "Page not found" dialog (which a URL naming
    st.navigation's default page used to get)."""
    dialogs = page.locator('[data-testid="stDialog"]')
    assert page.url == url and dialogs.count() == 0, (page.url, dialogs.all_inner_texts())


def test_every_page_renders_a_plotly_chart_in_chromium(checkpoints, tmp_path):  # noqa: F811
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[test]'", pytrace=False)

    shots = tmp_path / "screenshots"
    shots.mkdir()
    with (
        running_app([sys.executable, "-m", "probe.cli"], checkpoints, tmp_path / "probe-app.log") as (_, served, _),
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for name, path in PAGES:
                page.goto(f"{served}/{path}")
                if name in ASKED:  # a page that computes only when asked: its button, once it is there
                    page.get_by_role("button", name=ASKED[name]).click(timeout=PAGE_TIMEOUT)
                page.wait_for_selector(".js-plotly-plot .plot-container", state="visible", timeout=PAGE_TIMEOUT)
                assert_opened(page, f"{served}/{path}")
                for _ in range(2):  # settled twice, half a second apart: the script has finished, every chart drawn
                    page.wait_for_timeout(500)
                    page.wait_for_function(SETTLED, timeout=PAGE_TIMEOUT)
                assert page.locator('[data-testid="stException"]').count() == 0, f"{name}: a Python exception"
                # Streamlit scrolls inside its main container, so a "full page" is one viewport: grow the
                # viewport to the content's height instead (capped) and shoot that.
                height = page.evaluate(SCROLL_HEIGHT)
                page.set_viewport_size({"width": 1400, "height": max(1000, min(height + 40, 12_000))})
                page.wait_for_timeout(500)  # plotly re-lays out its charts on resize
                page.screenshot(path=str(shots / f"{name}.png"))
                page.set_viewport_size({"width": 1400, "height": 1000})
            for path, url, heading in OPENED_BY_URL:
                page.goto(f"{served}/{path}")
                page.get_by_role("heading", name=heading, exact=True).wait_for(timeout=PAGE_TIMEOUT)
                assert_opened(page, f"{served}/{url}")
        finally:
            browser.close()

    saved = sorted(p.name for p in shots.iterdir())
    assert saved == sorted(f"{name}.png" for name, _ in PAGES)
    if os.environ.get("PROBE_SCREENSHOTS"):
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for shot in shots.iterdir():
            shutil.copy(shot, ARTIFACTS / shot.name)
