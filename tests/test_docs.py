"""The docs stand alone: no pointer into the workspace's shared folder, no broken link.

A user's clone has only this repository, so README, docs and pages must neither send
the reader to `../shared/…` nor link a Markdown file that is not there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = (b"../shared", b"shared/contract")

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
# [text](target "title") and ![alt](target); the target may be wrapped in <…>.
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def public_files() -> list[Path]:
    """Everything a reader of the repository or a user of the pages sees."""
    files = [ROOT / "README.md"]
    for folder in ("docs", "board/web/templates"):
        files += sorted(p for p in (ROOT / folder).rglob("*") if p.is_file())
    return files


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def link_targets(markdown: str) -> list[str]:
    """Link and image targets outside code blocks and code spans."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", markdown))
    return _INLINE.findall(prose) + _REFERENCE.findall(prose)


def broken_links(page: Path) -> list[str]:
    """Relative targets of `page` that name no existing file or folder (anchors ignored)."""
    broken = []
    for target in link_targets(page.read_text(encoding="utf-8")):
        if not target or target.startswith("#") or _SCHEME.match(target):
            continue  # an anchor on the same page, or http:, mailto:, …
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    return broken


@pytest.mark.parametrize("path", public_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_reference_to_the_shared_folder(path: Path) -> None:
    data = path.read_bytes()
    found = [f.decode() for f in FORBIDDEN if f in data]
    assert not found, f"{path.relative_to(ROOT)} mentions {found}: explain it in the docs instead"


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == [], f"{page.relative_to(ROOT)} links missing files"


def test_the_link_check_sees_links(tmp_path: Path) -> None:
    """The checker finds what it should, so a passing run means something."""
    (tmp_path / "there.md").write_text("# There\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok with anchor](there.md#there) ![img](missing.png)\n"
        "[gone](nowhere.md#x) [web](https://example.com/x.md) [same page](#top)\n"
        "`[in code](code.md)`\n\n```\n[in a fence](fence.md)\n```\n\n"
        '[ref]: <ref-missing.md> "title"\n'
    )
    assert broken_links(page) == ["missing.png", "nowhere.md#x", "ref-missing.md"]
    assert link_targets((ROOT / "README.md").read_text(encoding="utf-8"))
