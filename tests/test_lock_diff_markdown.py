"""`diff --markdown` / `lock --markdown` go into pull request comments: a hostile lock's names, versions and build
strings must stay plain text in their cells. The output is rendered by PyPI's cmarkgfm (bindings to cmark-gfm, the
renderer github.com uses for comments) with raw HTML let through, and the HTML read back: the same elements as a
harmless lock of the same shape, and every cell holding exactly the text of the lock."""

from __future__ import annotations

import urllib.parse
from collections import Counter
from html.parser import HTMLParser

import cmarkgfm
import pytest
import yaml
from cmarkgfm.cmark import Options
from rocmlock.lockdiff.diff import diff_locks, diff_markdown, lock_packages
from rocmlock.util.text import escape

FORGE = "https://conda.anaconda.org/conda-forge/linux-64"
Row = tuple[str, str, str, str, str]  # name, old version, old build, new version, new build


class _Html(HTMLParser):
    """The elements of rendered HTML (tag and, for links, the target) and the text of each table row's cells."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = Counter()
        self.links: list[str] = []
        self.rows: list[list[str]] = []
        self.headings: list[str] = []
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        if tag == "a":
            self.links.append(dict(attrs).get("href") or "")
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th"):
            self._cell = []
        if tag in ("h1", "h2", "summary"):
            self._heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).replace("\u2060", ""))  # gfm_text's mark after an @
            self._cell = None
        if tag in ("h1", "h2", "summary") and self._heading is not None:
            self.headings.append("".join(self._heading))
            self._heading = None

    def handle_data(self, data: str) -> None:
        for part in (self._cell, self._heading):
            if part is not None:
                part.append(data)


def render(markdown: str) -> _Html:
    html = cmarkgfm.github_flavored_markdown_to_html(
        markdown.replace("[^2]", ""), options=Options.CMARK_OPT_UNSAFE | Options.CMARK_OPT_FOOTNOTES)
    parsed = _Html()  # (the downgrade mark is rocmlock's own, left out: a hostile version is another change type)
    parsed.feed(html)
    parsed.close()
    return parsed


def _lock(env: str, platform: str, rows: list[Row], new: bool) -> str:
    """A pixi.lock v7 text of one environment and platform; each package's name, version and build are its own keys
    (the URL stays harmless), old or new side of ``rows``."""
    entries, refs = [], []
    for i, (name, v0, b0, v1, b1) in enumerate(rows):
        version, build = (v1, b1) if new else (v0, b0)
        url = f"{FORGE}/p{i}-{'new' if new else 'old'}.conda"
        entries.append({"conda": url, "name": name, "version": version, "build": build, "sha256": "1" * 64})
        refs.append({"conda": url})
    body = {env: {"channels": [{"url": "https://conda.anaconda.org/conda-forge/"}], "packages": {platform: refs}}}
    return yaml.safe_dump({"version": 7, "environments": body, "packages": entries}, sort_keys=False)


def markdown(env: str, platform: str, rows: list[Row]) -> str:
    old, new = (lock_packages(_lock(env, platform, rows, side), str(side)) for side in (False, True))
    return diff_markdown(diff_locks(old, new))


HOSTILE_TEXT = [
    "<img src=x onerror=alert(1)>",
    "</details><script>alert(1)</script>",
    "[approve](https://evil.example/approve)",
    "h0_0\\",  # a trailing backslash escaped the cell's closing `|`
    "a|b",
    "www.evil.example",
    "x@evil.example",
    "https://evil.example/x",
    "**bold** _it_ `code` ~~gone~~",
    "&lt;img src=x&gt; &amp;",
    "<!-- comment",
    "line\nbreak\r\t\x1b[31m",
]


def _cases(fold: bool) -> list[tuple[str, str, list[Row], list[Row]]]:
    """(env, platform, hostile rows, harmless rows of the same shape); ``fold``: more than 10 rows, so that the
    platform goes into a ``<summary>`` HTML block."""
    hostile: list[Row] = []
    harmless: list[Row] = []
    for i, text in enumerate(HOSTILE_TEXT):
        # the text as the new version (a version change: both versions shown), and as the old build and the new
        # build of an only-build-string change; as a name too
        hostile += [(f"v{i:02d}", "1.0", "h0_0", text, "h0_0"), (f"b{i:02d}", "1.0", text, "1.0", text + "x"),
                    (f"w{i:02d}", text, "h0_0", "2.0", "h0_0"), (f"n{i:02d}{text}", "1.0", "h0_0", "2.0", "h0_0")]
        harmless += [(f"v{i:02d}", "1.0", "h0_0", "1.5", "h0_0"), (f"b{i:02d}", "1.0", "h1_0", "1.0", "h1_0x"),
                     (f"w{i:02d}", "0.5", "h0_0", "2.0", "h0_0"), (f"n{i:02d}", "1.0", "h0_0", "2.0", "h0_0")]
    if not fold:
        hostile, harmless = hostile[:8], harmless[:8]
    return [("<img src=x>[e](https://evil.example)", "</summary></details><img src=x>|x\\", hostile, harmless)]


def _expected_cells(row: Row) -> list[str]:
    """Name, Before and After as a reader sees them: the lock's text, control characters escaped."""
    name, v0, b0, v1, b1 = (escape(x) for x in row)
    return [name, b0, b1] if v0 == v1 else [name, v0, v1]


@pytest.mark.parametrize("fold", [False, True], ids=["tables", "folded"])
def test_hostile_names_versions_and_builds_render_as_plain_text_in_their_cells(fold: bool) -> None:
    for env, platform, hostile, harmless in _cases(fold):
        bad, good = render(markdown(env, platform, hostile)), render(markdown("e", "linux-64", harmless))
        # the same elements as the harmless lock's: no <img>, <script>, comment-swallowed rows, no extra link
        assert bad.tags == good.tags, (bad.tags - good.tags, good.tags - bad.tags)
        # each package's link to its conda-forge page, its name percent-encoded in the URL
        assert sorted(link for link in bad.links if not link.startswith("#")) == sorted(
            f"https://prefix.dev/channels/conda-forge/packages/{urllib.parse.quote(row[0].lower(), safe='')}"
            for row in hostile)
        # every row four cells, each the lock's text (control characters shown escaped)
        body = bad.rows[1:]
        assert [len(r) for r in bad.rows] == [4] * (len(hostile) + 1)
        assert bad.headings[0] == escape(env) and bad.headings[1] == escape(platform)
        by_name = {r[0]: r for r in body}
        for row in hostile:
            want = _expected_cells(row)
            assert by_name[want[0]][:3] == want, (row, by_name[want[0]])


def test_harmless_names_and_versions_are_printed_as_pixi_diff_to_markdown_prints_them() -> None:
    # the escaping touches only what a conda name, version or build string never holds
    rows: list[Row] = [("_openmp_mutex", "4.5", "2_gnu", "4.5", "3_gnu"),
                       ("libgcc-ng", "13.2.0", "h77fa898_7", "14.1.0", "h77fa898_0"),
                       ("pytorch", "2.5.1", "rocm6.2_py312_0", "1!2.6.0+rocm", "rocm72_gfx942_py312_h1a2b3c4_0")]
    text = markdown("mi300x", "linux-64", rows)
    assert ("|[&#95;openmp_mutex](https://prefix.dev/channels/conda-forge/packages/_openmp_mutex)|2_gnu|3_gnu|"
            "Only build string|") in text  # an `_` that could open emphasis is a reference: it renders the same
    assert ["_openmp_mutex", "2_gnu", "3_gnu", "Only build string"] in render(text).rows
    assert "|libgcc-ng|13.2.0|14.1.0|Major Upgrade|" in text.replace(
        "[libgcc-ng](https://prefix.dev/channels/conda-forge/packages/libgcc-ng)", "libgcc-ng")
    assert "|2.5.1|1!2.6.0+rocm|" in text and "# mi300x\n" in text and "## linux-64\n" in text


def test_a_pipe_in_either_cell_stays_in_it() -> None:
    # a '|' in the Before cell and one in the After cell: each row keeps its four cells
    rows: list[Row] = [("a", "1.0", "x|y", "1.0", "x|z"), ("b", "1|0", "h0_0", "2.0", "h0_0"),
                       ("c", "1.0", "h0_0", "2|0", "h0_0")]
    html = render(markdown("e", "linux-64", rows))
    assert [len(r) for r in html.rows] == [4, 4, 4, 4], html.rows
    cells = {r[0]: r[1:3] for r in html.rows[1:]}
    assert cells == {"a": ["x|y", "x|z"], "b": ["1|0", "2.0"], "c": ["1.0", "2|0"]}
