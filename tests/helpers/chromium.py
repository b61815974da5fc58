"""Test helpers for the HTML reports: a real headless Chromium, and the DOM it rendered, as a tree.

``dump_dom`` is what Chromium holds after loading the page (``--dump-dom``); ``parse`` turns it into
:class:`Node` values so a test reads what a person would see (an element's text, its attributes,
the order of things) instead of matching the page's source.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError(
        "no headless Chromium on PATH: install Debian's `chromium` package (.ci/run does) to run the HTML report test"
    )


def headless(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def dump_dom(page: Path, tmp: Path) -> str:
    """The DOM Chromium rendered from ``page``, serialised."""
    done = headless(["--dump-dom", page.as_uri()], tmp)
    assert done.returncode == 0, done.stderr
    return done.stdout


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def classes(self) -> list[str]:
        return self.attrs.get("class", "").split()

    def text(self) -> str:
        """The text inside, entities decoded, whitespace runs as one space."""
        parts = [c if isinstance(c, str) else " " if c.tag == "br" else c.text() for c in self.children]
        return " ".join("".join(parts).split())

    def iter(self) -> Iterator[Node]:
        """This node and every element below it, in document order."""
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag: str, cls: str | None = None) -> list[Node]:
        return [n for n in self.iter() if n.tag == tag and (cls is None or cls in n.classes)]

    def find(self, tag: str, cls: str | None = None) -> Node:
        found = self.find_all(tag, cls)
        assert found, f"no <{tag}{' class=' + cls if cls else ''}> on the page"
        return found[0]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(dom: str) -> Node:
    builder = _Builder()
    builder.feed(dom)
    builder.close()
    return builder.root
