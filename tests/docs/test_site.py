"""The documentation site: built strictly (a broken link, a missing page or snippet is an
error), every page opens in headless Chromium without an error, and the scenario
reference, generated from the JSON schema, names every field pagesim validates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from sim.config.scenario import Scenario
from sim.config.schema_reference import scenario_reference
from tests.browser import check_page

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _section_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted paths of ``model``'s fields and of its nested sections' fields (a field
    whose type is one pydantic model; choices between models are the schema's)."""
    paths = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            paths += _section_fields(kind, f"{path}.")
    return paths


def test_the_reference_names_every_field_of_every_section():
    reference = scenario_reference()
    missing = [p for p in _section_fields(Scenario) if f"`{p}" not in reference]
    assert not missing and len(_section_fields(Scenario)) > 60, missing


def test_every_page_builds_and_opens_without_an_error(site, chromium):
    pages = sorted(
        p for p in site.rglob("*.html") if "assets" not in p.parts and p.name != "404.html"
    )  # a server's page, with absolute links
    names = {str(p.relative_to(site)) for p in pages}
    assert {
        "index.html",
        "getting-started.html",
        "reference/scenario.html",
        "architecture.html",
        "benchmarks.html",
    } <= names
    assert not (site / "hooks").exists()
    for page in pages:
        found = check_page(chromium, page)
        assert found["errors"] == [], (page, found["errors"])
    reference = (site / "reference" / "scenario.html").read_text()
    assert "cache.prefix_caching" in reference and "workload.arrival.rate_rps" in reference
    architecture = (site / "architecture.html").read_text()
    assert "Where a change goes" in architecture  # ARCHITECTURE.md, included whole


def test_wide_tables_and_commands_scroll_and_names_stay_whole(site, chromium):
    """On a laptop-sized window nothing wider than the content column is cut off (it
    scrolls), a field name in a table never breaks inside a word, and on a wide screen
    the column grows with the window (Material's default stops at 61rem)."""
    from tests.browser import layout

    pages = sorted(p for p in site.rglob("*.html") if "assets" not in p.parts)
    for page in pages:
        found = layout(chromium, page, width=1300)
        assert found["clipped"] == [] and found["broken_names"] == [], (page.name, found)
    wide = layout(chromium, site / "benchmarks.html", width=1920)
    assert wide["content_width"] >= 1200, wide
