"""A real dashboard process and a real headless Chromium for the dashboard tests.

:func:`serve_dashboard` starts ``autotune dashboard`` as a user does (a subprocess on a free
port) and waits until its API answers; :func:`render` loads a page in headless Chromium, lets the
page run its scripts and fetch its data (``--virtual-time-budget``: virtual time stands still
while requests are pending), and returns the DOM it rendered; :class:`Page` reads that DOM.

Chromium comes from the system (Debian's ``chromium``; ``.ci/run`` installs it). Without it the
browser tests skip, saying so, unless ``AUTOTUNE_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets): then
they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser

import httpx
import pytest
from study._helpers import REPO, autotune_argv, free_port

#: Where to look for Chromium (``AUTOTUNE_CHROMIUM`` first, then these on the PATH).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str:
    """The Chromium binary; a skip (a failure under ``AUTOTUNE_REQUIRE_BROWSER=1``) without."""
    given = os.environ.get("AUTOTUNE_CHROMIUM")
    found = given if given and shutil.which(given) else None
    for name in CHROMIUM_NAMES:
        found = found or shutil.which(name)
    if found:
        return found
    why = "no Chromium found (apt-get install chromium, or set AUTOTUNE_CHROMIUM)"
    if os.environ.get("AUTOTUNE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"AUTOTUNE_REQUIRE_BROWSER=1 but {why}")
    pytest.skip(why)


@contextmanager
def serve_dashboard(*args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``autotune dashboard ARGS`` on a free port, answering; stopped on exit."""
    port = free_port()
    proc = subprocess.Popen(
        [*autotune_argv(), "dashboard", *args, "--port", str(port)],
        cwd=REPO,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"the dashboard exited with {proc.returncode}:\n{out}\n{err}")
            try:
                if httpx.get(f"{url}/api/meta", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("the dashboard did not answer within 60 s")
            time.sleep(0.2)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def render(chromium: str, url: str, *, budget_ms: int = 30_000) -> Page:
    """The DOM that headless Chromium rendered from ``url``, once its scripts settled."""
    with tempfile.TemporaryDirectory(prefix="autotune-chromium-") as profile:
        argv = [
            chromium,
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--window-size=1600,1200",
            f"--virtual-time-budget={budget_ms}",
            "--dump-dom",
            url,
        ]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to run as root
        run = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0 and "<body" in run.stdout, (
        f"chromium exited with {run.returncode} on {url}:\n{run.stderr[-3000:]}"
    )
    return Page(run.stdout)


_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}


class Page(HTMLParser):
    """A rendered DOM, read as text: its tables, each element's text by id, plot axis titles."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.html = html
        self.texts: list[str] = []
        #: Each table: its header cells, then its rows of cells (texts).
        self.tables: list[tuple[list[str], list[list[str]]]] = []
        #: Text under each element with an id (the element's own and its descendants').
        self.by_id: dict[str, list[str]] = {}
        #: Plotly's y-axis titles, each with the ids of the elements around it.
        self.ytitles: list[tuple[str, tuple[str, ...]]] = []
        #: Every element: its tag, its classes and the ids of the elements around it.
        self.elements: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []
        self._stack: list[tuple[str, str | None, str]] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self.feed(html)
        self.close()

    @property
    def text(self) -> str:
        return " ".join(self.texts)

    def text_of(self, element_id: str) -> str:
        return " ".join(self.by_id.get(element_id, []))

    def count(self, tag: str, cls: str, *, inside: str) -> int:
        """How many ``tag`` elements of class ``cls`` the element ``inside`` (an id) holds."""
        return sum(t == tag and cls in c and inside in i for t, c, i in self.elements)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        ids = tuple(i for _, i, _ in self._stack if i)
        self.elements.append((tag, tuple((a.get("class") or "").split()), ids))

    def table_with(self, header: str) -> tuple[list[str], list[dict[str, str]]]:
        """The first table with a header cell ``header``: its headers and its rows by header."""
        for heads, rows in self.tables:
            if header in heads:
                full = [row for row in rows if len(row) == len(heads)]
                return heads, [dict(zip(heads, row, strict=True)) for row in full]
        raise AssertionError(f"no table with a column {header!r}; tables: {self.tables}")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        ids = tuple(i for _, i, _ in self._stack if i)
        self.elements.append((tag, tuple((a.get("class") or "").split()), ids))
        if tag in _VOID:
            return
        self._stack.append((tag, a.get("id"), a.get("class") or ""))
        if tag == "table":
            self.tables.append(([], []))
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        while self._stack:
            open_tag, _, _ = self._stack.pop()
            if open_tag == tag:
                break
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            # a header's first text is its label (a sort label's hidden "sorted ..." follows)
            pieces = self._cell[:1] if tag == "th" else self._cell
            self._row.append(" ".join(" ".join(pieces).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self.tables:
            heads, rows = self.tables[-1]
            if not heads and self._row and self._row_is_header:
                heads.extend(self._row)
            elif self._row:
                rows.append(self._row)
            self._row = None

    @property
    def _row_is_header(self) -> bool:
        return any(tag == "thead" for tag, _, _ in self._stack)

    def handle_data(self, data: str) -> None:
        if not data.strip():
            return
        self.texts.append(data.strip())
        if self._cell is not None:
            self._cell.append(data)
        ids = tuple(i for _, i, _ in self._stack if i)
        for element_id in ids:
            self.by_id.setdefault(element_id, []).append(data.strip())
        if self._stack and "ytitle" in self._stack[-1][2].split():
            self.ytitles.append((data.strip(), ids))
