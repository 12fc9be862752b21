"""Pages checked in headless Chromium: load one, collect its errors, and count what each
plotly figure drew.

How: a copy of the page, beside it (so its relative plotly.min.js resolves), gets a probe
script as the first thing in its <head>. The probe records every uncaught error, failed
resource load (e.g. a missing plotly.min.js), unhandled promise rejection and
console.error; after the load event it writes, into a <pre> at the end of the body,
the errors, plotly's version and, per plotly div, its traces, how many have points,
the points in all (hidden traces included) and its "none" / "no data" / "not observable"
notes.
``chromium --headless --dump-dom`` prints the DOM after load, so the test reads the
probe's JSON from it. No driver package (selenium, playwright, a websocket client) is
needed.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

PROBE = """<script>
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    var where = e.target && (e.target.src || e.target.href);
    errors.push(e.message ? "error: " + e.message : "failed to load " + where);
  }, true);
  window.addEventListener("unhandledrejection", function (e) {
    errors.push("unhandled rejection: " + e.reason);
  });
  var consoleError = console.error;
  console.error = function () {
    errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    return consoleError.apply(console, arguments);
  };
  function size(a) {  // an array, a typed array, or plotly's {dtype, bdata} (not drawn yet)
    if (a && a.bdata) { return atob(a.bdata).length / parseInt(a.dtype.slice(1), 10); }
    return a && typeof a.length === "number" ? a.length : 0;
  }
  window.addEventListener("load", function () { setTimeout(function () {
    var plots = [];
    document.querySelectorAll(".plotly-graph-div").forEach(function (div) {
      var traces = (div.data || []).map(function (trace, i) {
        var full = (div._fullData || [])[i] || {};
        return Math.max(size(full.x), size(full.y), size(trace.x), size(trace.y));
      });
      var notes = ((div._fullLayout || {}).annotations || []).map(function (a) {
        return a.text;
      }).filter(function (t) { return /^(none|no data|not observable)/.test(t || ""); });
      plots.push({
        id: div.id, drawn: !!div.querySelector(".main-svg"), traces: traces.length,
        with_points: traces.filter(function (n) { return n > 0; }).length,
        points: traces.reduce(function (a, b) { return a + b; }, 0), notes: notes,
      });
    });
    var pre = document.createElement("pre");
    pre.id = "pagesim-check";
    pre.textContent = JSON.stringify({
      errors: errors, plotly: window.Plotly ? window.Plotly.version : null, plots: plots,
    });
    document.body.appendChild(pre);
  }, 0); });
})();
</script>
"""

_RESULT = re.compile(r'<pre id="pagesim-check">(.*?)</pre>', re.S)


def find_chromium() -> str | None:
    """A Chromium (or Chrome) executable on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def install_chromium() -> tuple[str | None, str]:
    """Try ``apt-get install -y chromium`` (as root, where apt-get exists); return the
    executable (or None) and, when none, why."""
    if shutil.which("apt-get") is None:
        return None, "chromium is not installed and apt-get is not available"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return None, "chromium is not installed and apt-get needs root"
    try:
        done = subprocess.run(
            ["apt-get", "install", "-y", "chromium"],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"chromium is not installed and apt-get install failed: {err}"
    found = find_chromium()
    if found is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"chromium is not installed and apt-get install failed: {last}"
    return found, ""


def _dump_dom(
    chromium: str, page: Path, probed: str, timeout_s: float, *options: str
) -> subprocess.CompletedProcess:
    """Load ``probed`` (``page``'s text with a probe script) from beside ``page`` (so its
    relative links resolve) in headless Chromium; the DOM after load on stdout."""
    copy = page.with_name(f".probe-{page.name}")
    copy.write_text(probed, encoding="utf-8")
    try:
        return subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--allow-file-access-from-files",
                *options,
                "--virtual-time-budget=10000",
                "--dump-dom",
                copy.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    finally:
        copy.unlink(missing_ok=True)


def check_page(chromium: str, page: Path, timeout_s: float = 60.0) -> dict:
    """Load ``page`` in headless Chromium; return the probe's findings: ``errors``
    (list), ``plotly`` (version or None) and ``plots`` (per plotly div: id, drawn,
    traces, with_points, points, notes)."""
    page = Path(page).resolve()
    text = page.read_text(encoding="utf-8")
    probed = re.sub(r"<head>", "<head>\n" + PROBE, text, count=1)
    done = _dump_dom(chromium, page, probed, timeout_s)
    match = _RESULT.search(done.stdout)
    assert match, f"the probe wrote nothing (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(match.group(1)))


def screenshot(chromium: str, page: Path, out: Path, size: str = "1300,2400") -> Path:
    """A PNG of the top of ``page`` (for a person to look at)."""
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={size}",
            "--virtual-time-budget=10000",
            f"--screenshot={out}",
            Path(page).resolve().as_uri(),
        ],
        capture_output=True,
        timeout=60,
    )
    return out


#: What ``layout`` measures, after the page's load, at the window's width.
LAYOUT_PROBE = r"""<script>
window.addEventListener("load", function () { setTimeout(function () {
  function clipped(el) {  // content wider than its box that the reader cannot scroll to
    var style = getComputedStyle(el);
    var scrolls = /auto|scroll/.test(style.overflowX);
    return el.scrollWidth > el.clientWidth + 1 && !scrolls;
  }
  var wide = [], clippedBoxes = [], broken = [];
  document.querySelectorAll(".md-content pre > code, .md-content table").forEach(function (el) {
    var box = el.tagName === "TABLE" ? (el.closest(".md-typeset__scrollwrap") || el) : el;
    if (el.scrollWidth > box.clientWidth + 1) { wide.push(el.tagName); }
    if (clipped(box)) { clippedBoxes.push(el.textContent.slice(0, 60)); }
  });
  document.querySelectorAll(".md-content td:first-child > code").forEach(function (el) {
    // a name without spaces on two lines was broken inside a word
    if (!/\s/.test(el.textContent) && el.getClientRects().length > 1) {
      broken.push(el.textContent);
    }
  });
  var cut = [];  // a plot's text labels that reach past its figure (drawn cut off)
  document.querySelectorAll(".js-plotly-plot").forEach(function (plot) {
    var box = plot.getBoundingClientRect();
    plot.querySelectorAll(".textpoint text").forEach(function (label) {
      var r = label.getBoundingClientRect();
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 ||
          r.bottom > box.bottom + 1) { cut.push(label.textContent); }
    });
  });
  var pre = document.createElement("pre");
  pre.id = "pagesim-layout";
  pre.textContent = JSON.stringify({
    content_width: (document.querySelector(".md-content") || document.body).clientWidth,
    wide: wide.length, clipped: clippedBoxes, broken_names: broken, cut_labels: cut,
  });
  document.body.appendChild(pre);
}, 0); });
</script>
"""

_LAYOUT = re.compile(r'<pre id="pagesim-layout">(.*?)</pre>', re.S)


def layout(chromium: str, page: Path, width: int = 1300, timeout_s: float = 60.0) -> dict:
    """Load a docs page in headless Chromium ``width`` pixels wide; return
    ``content_width`` (px), ``wide`` (code blocks and tables wider than their box),
    ``clipped`` (those of them a reader cannot scroll: the first characters of each) and
    ``broken_names`` (first-column names in a table, without spaces, that wrap onto a
    second line: broken inside a word) and ``cut_labels`` (plot text labels reaching past
    their figure)."""
    page = Path(page).resolve()
    probed = page.read_text(encoding="utf-8").replace("</body>", LAYOUT_PROBE + "</body>", 1)
    done = _dump_dom(chromium, page, probed, timeout_s, f"--window-size={width},1000")
    match = _LAYOUT.search(done.stdout)
    assert match, f"the layout probe wrote nothing (exit {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(html.unescape(match.group(1)))
