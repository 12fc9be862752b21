"""Open a pagesim trace in catapult's trace viewer (the importer behind chrome://tracing)
inside headless Chromium, and print what the viewer's model holds: import warnings,
and per process its counters (samples per series) and threads (slices, async slices
by name, async slices in error). Also writes a screenshot of the timeline (a progress
dialog of the viewer may still cover part of it).

Needs `chromium` and a checkout of https://github.com/catapult-project/catapult (its
tracing/, common/py_vulcanize, common/py_utils and third_party/ folders are enough);
nothing of it is installed, and nothing here is part of the simulator.

    .venv/bin/python bench/trace_in_catapult.py RUN/trace.json[.gz] --catapult DIR [--out PREFIX]
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import re
import subprocess
import sys
from pathlib import Path

# Runs after the viewer's scripts: imports the trace synchronously (the page's own
# import is asynchronous, and headless Chromium does not wait for it), reports the
# model, and shows it in the page's timeline view.
PROBE = """
<script id="pagesim-trace" type="application/json">%s</script>
<script>
window.addEventListener('load', () => setTimeout(() => {
  const report = {};
  try {
    const model = new tr.Model();
    new tr.importer.Import(model).importTraces(
        [document.getElementById('pagesim-trace').textContent]);
    report.warnings = model.importWarnings.map(w => w.type + ': ' + w.message);
    const walk = (slices, acc) => {
      for (const s of slices) {
        acc.count += 1;
        acc.errors += s.error ? 1 : 0;
        acc.names[s.title] = (acc.names[s.title] || 0) + 1;
        walk(s.subSlices || [], acc);
      }
      return acc;
    };
    report.processes = Object.values(model.processes).map(p => ({
      pid: p.pid,
      name: p.name,
      counters: Object.values(p.counters).map(
          c => c.name + ': ' + c.series.map(s => s.name + ' ' + s.samples.length).join(', ')),
      threads: Object.values(p.threads).map(t => ({
        tid: t.tid,
        name: t.name,
        slices: t.sliceGroup.length,
        async: walk(t.asyncSliceGroup.slices, {count: 0, errors: 0, names: {}}),
      })),
    }));
    const view = document.querySelector('tr-ui-timeline-view');
    if (view) view.model = model;

  } catch (e) {
    report.error = String(e.stack || e);
  }
  const pre = document.createElement('pre');
  pre.id = 'pagesim-report';
  pre.textContent = JSON.stringify(report);
  document.body.appendChild(pre);
}, 1500));
</script>
"""
CHROMIUM = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--catapult", type=Path, required=True, help="catapult checkout")
    parser.add_argument("--out", default="runs/catapult-check", help="prefix of files written")
    args = parser.parse_args()
    data = args.trace.read_bytes()
    text = (gzip.decompress(data) if args.trace.suffix == ".gz" else data).decode()
    plain, page = Path(args.out + ".json"), Path(args.out + ".html")
    plain.parent.mkdir(parents=True, exist_ok=True)
    plain.write_text(text)
    trace2html = args.catapult / "tracing" / "bin" / "trace2html"
    subprocess.run(
        [sys.executable, trace2html, plain, "--output", page], check=True, stdout=subprocess.DEVNULL
    )
    viewer = page.read_text()
    # The probe imports the trace itself: keep the page from importing it a second time.
    viewer = re.sub(r'<script id="viewer-data".*?</script>', "", viewer, flags=re.S)
    page.write_text(viewer.replace("</body>", PROBE % text + "</body>"))
    dom = subprocess.run(
        [*CHROMIUM, "--virtual-time-budget=60000", "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=900,
    ).stdout
    found = re.search(r'<pre id="pagesim-report">(.*?)</pre>', dom, re.S)
    if not found:
        print("the viewer produced no report", file=sys.stderr)
        return 1
    report = json.loads(html.unescape(found.group(1)))
    print(json.dumps(report, indent=1))
    shot = Path(args.out + ".png").resolve()
    subprocess.run(
        [*CHROMIUM, "--window-size=1600,1000", "--virtual-time-budget=8000"]
        + [f"--screenshot={shot}", page.resolve().as_uri()],
        capture_output=True,
        timeout=900,
    )
    return 1 if report.get("error") or report.get("warnings") else 0


if __name__ == "__main__":
    sys.exit(main())
