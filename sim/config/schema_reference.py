"""The scenario reference as Markdown, rendered from the JSON schema
(:func:`sim.config.json_schema.scenario_json_schema`) so the documentation can never
drift from the fields pagesim validates: one section per top-level field, one table row
per field with its type, default and description; a choice between sections (arrival
kinds, length distributions, policy choices) lists each alternative's fields."""

from __future__ import annotations

import json

from sim.config.json_schema import scenario_json_schema

#: Deepest nesting rendered (the schema has no deeper sections than this).
MAX_DEPTH = 6


def scenario_reference() -> str:
    """Markdown for every field of a scenario, top-level sections in schema order."""
    schema = scenario_json_schema()
    defs = schema["$defs"]
    out = [_reflow(schema.get("description", "")), ""]
    for name, prop in schema["properties"].items():
        out += _section(name, prop, defs)
    return "\n".join(out).rstrip() + "\n"


def _section(name: str, prop: dict, defs: dict) -> list[str]:
    lines = [f"## `{name}`", "", _reflow(prop.get("description", "")), ""]
    rows: list[tuple[str, str, str, str]] = []
    _rows(name, prop, defs, rows, 0)
    if rows:
        lines += ["| field | type | default | what it is |", "|---|---|---|---|"]
        lines += [f"| {_field(p)} | {t} | {d} | {text} |" for p, t, d, text in rows]
        lines.append("")
    return lines


def _field(path: str) -> str:
    """A row's field: the dotted name as code (kept on one line by the site's style), the
    alternatives it belongs to after it as text."""
    name, sep, where = path.partition(" (")
    return f"`{name}`" + (f" ({where}" if sep else "")


def _rows(path: str, prop: dict, defs: dict, rows: list, depth: int) -> None:
    """Append a row for ``path`` and, for a section, for each of its fields."""
    target = _deref(prop, defs)
    sections = [("", target)] if "properties" in target else _alternatives(prop, defs)
    if depth:
        kind = "section" if sections else _type(prop, defs)
        rows.append((path, kind, _default(prop), _cell(prop, target)))
    if depth > MAX_DEPTH or not sections:
        return
    for name, (labels, sub) in _merged_fields(sections).items():
        where = "" if len(labels) == len(sections) else f" ({_labels(labels)})"
        _rows(f"{path}.{name}{where}", sub, defs, rows, depth + 1)


def _labels(labels: list[str]) -> str:
    """``kind: a, kind: b`` as ``kind: a, b``."""
    kinds = [label.removeprefix("kind: ") for label in labels if label.startswith("kind: ")]
    others = [label for label in labels if not label.startswith("kind: ")]
    return ", ".join(([f"kind: {', '.join(kinds)}"] if kinds else []) + others)


def _merged_fields(sections: list[tuple[str, dict]]) -> dict[str, tuple[list[str], dict]]:
    """Each field of any of ``sections`` once: the labels of the sections that have it
    and its first definition (a field shared by every section is unlabelled)."""
    merged: dict[str, tuple[list[str], dict]] = {}
    for label, section in sections:
        for name, sub in section["properties"].items():
            labels, first = merged.setdefault(name, ([], sub))
            labels.append(label)
    return merged


def _deref(prop: dict, defs: dict) -> dict:
    ref = prop.get("$ref")
    return defs[ref.split("/")[-1]] if ref else prop


def _alternatives(prop: dict, defs: dict) -> list[tuple[str, dict]]:
    """The sections a choice may be, each with a label (its kind or title)."""
    found: list[tuple[str, dict]] = []
    for key in ("anyOf", "oneOf"):
        for option in prop.get(key, ()):
            target = _deref(option, defs)
            if "properties" in target:
                kind = (target["properties"].get("kind") or {}).get("const")
                label = f"kind: {kind}" if kind else target.get("title", "object")
                if all(label != seen for seen, _ in found):
                    found.append((label, target))
            else:
                found += [a for a in _alternatives(target, defs) if a not in found]
    return found


def _type(prop: dict, defs: dict) -> str:
    target = _deref(prop, defs)
    if "enum" in target:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in target["enum"])
    if "const" in target:
        return f"`{json.dumps(target['const'])}`"
    if "type" in target:
        kind = target["type"]
        kinds = kind if isinstance(kind, list) else [kind]
        return " or ".join(kinds)
    parts = []
    for key in ("anyOf", "oneOf"):
        for option in target.get(key, ()):
            text = _type(option, defs)
            if text and text not in parts:
                parts.append(text)
    return " or ".join(parts) if parts else "any"


def _default(prop: dict) -> str:
    if "default" not in prop:
        return ""
    text = json.dumps(prop["default"])
    return f"`{text}`" if len(text) <= 40 else "(see text)"


def _cell(prop: dict, target: dict) -> str:
    text = prop.get("description") or target.get("description") or ""
    return _reflow(text).replace("|", "\\|").replace("\n", " ")


def _reflow(text: str) -> str:
    """Docstring text as one Markdown paragraph per blank-line-separated block, with
    reStructuredText's double backquotes as Markdown code."""
    blocks = [" ".join(part.split()) for part in text.split("\n\n")]
    return "\n\n".join(b for b in blocks if b).replace("``", "`")


def _main() -> None:  # pragma: no cover - a manual look at the output
    print(scenario_reference())


if __name__ == "__main__":  # pragma: no cover
    _main()
