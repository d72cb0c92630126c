"""Measures the built site in a real headless browser (issue 44): a code block or a table wider than the page's
content box at 1280 px is cut at the right edge, whatever the static estimates of render_check.py say.

One browser run loads every page, each in a 1280 px wide frame of a page written into the site for the run (served
from 127.0.0.1 so the frames are same-origin), and reads the widths the browser laid out. Debian's ``chromium``
runs headless here; the fonts are whatever the machine has (the theme's Roboto comes from Google Fonts, which CI
cannot reach, so DejaVu Sans stands in: wider, so a page that fits here fits with Roboto too).
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

WIDTH = 1280
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_PAGE = "_rocmlock_width_check.html"
_RESULT = re.compile(r'<pre id="width-result">(.*?)</pre>', re.DOTALL)
# For every frame: the content box's width, each code block wider than its box (its first wide line) and each
# table wider than the content box.
_SCRIPT = """
const pages = %s;
const frames = pages.map(p => {
  const f = document.createElement('iframe');
  f.style.width = '%dpx'; f.style.height = '600px'; f.style.border = '0'; f.src = p;
  document.body.appendChild(f);
  return new Promise(resolve => f.addEventListener('load', () => resolve(f)));
});
Promise.all(frames).then(loaded => {
  const out = {};
  loaded.forEach((f, i) => {
    const doc = f.contentDocument;
    const box = doc.querySelector('.md-content .md-typeset');
    const found = [];
    if (!box) { found.push('no content box (.md-content .md-typeset): not a page of the theme?'); }
    else {
      const width = box.clientWidth;
      doc.querySelectorAll('.md-content pre > code').forEach(code => {
        if (code.scrollWidth > code.clientWidth + 1) {
          const line = code.textContent.split('\\n').reduce((a, b) => b.length > a.length ? b : a, '');
          found.push(`a code block is ${code.scrollWidth} px wide in a ${code.clientWidth} px box: ` +
                     `${line.slice(0, 60)}`);
        }
      });
      doc.querySelectorAll('.md-content table').forEach(table => {
        const w = Math.ceil(table.getBoundingClientRect().width);
        if (w > width + 1) {
          const head = Array.from(table.querySelectorAll('th')).map(th => th.textContent.trim()).join(' | ');
          found.push(`a table is ${w} px wide in a ${width} px content box: ${head.slice(0, 60)}`);
        }
      });
    }
    out[pages[i]] = found;
  });
  const pre = document.createElement('pre'); pre.id = 'width-result'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
"""


def find_browser() -> str | None:
    """The headless browser to measure with: ``$ROCMLOCK_DOCS_BROWSER``, else the first of :data:`BROWSERS` on PATH."""
    named = os.environ.get("ROCMLOCK_DOCS_BROWSER")
    if named:
        return shutil.which(named) or named
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def measure(site_dir: Path, pages: list[str], browser: str, width: int = WIDTH) -> dict[str, list[str]]:
    """What overflows on each of ``pages`` (paths of the built site, ``health/``), laid out ``width`` px wide.

    Raises RuntimeError when the browser does not run or returns no result.
    """
    page = site_dir / _PAGE
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_Quiet, directory=str(site_dir)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        script = _SCRIPT % (json.dumps(["/" + p for p in pages]), width)
        page.write_text(f"<!doctype html><html><body style='margin:0'><script>{script}</script></body></html>")
        with tempfile.TemporaryDirectory(prefix="rocmlock-docs-browser.") as profile:
            run = subprocess.run(
                [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 f"--user-data-dir={profile}", f"--window-size={width + 40},900", "--virtual-time-budget=30000",
                 "--dump-dom", f"http://127.0.0.1:{server.server_address[1]}/{_PAGE}"],
                capture_output=True, text=True, timeout=300, check=False)
    finally:
        server.shutdown()
        server.server_close()
        page.unlink(missing_ok=True)
    found = _RESULT.search(run.stdout)
    if not found:
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{browser} (exit {run.returncode}) measured nothing: {tail[:200]}")
    result: dict[str, list[str]] = json.loads(html.unescape(found.group(1)))
    return result
