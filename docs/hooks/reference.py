"""mkdocs hook: the scenario reference page is rendered from the JSON schema at build
time (sim.config.schema_reference), so no field is ever described by hand twice."""

from __future__ import annotations

MARKER = "<!-- scenario reference: generated from the JSON schema at build time -->"


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    from sim.config.schema_reference import scenario_reference

    return markdown.replace(MARKER, scenario_reference())
