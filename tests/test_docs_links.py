"""Every relative link of README.md and docs/ resolves: the file exists and the anchor names one of
its headings (issue 84). `make docs` checks the links between docs/ pages too (mkdocs --strict);
README.md lies outside the site, so only this test checks it. Anchors follow GitHub's rule, which
the site's mkdocs.yml uses as well."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercased, every character but letters, digits, spaces,
    hyphens and underscores dropped, each space a hyphen (repeated hyphens kept)."""
    text = re.sub(r"`|\*\*?|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """The file's lines outside fenced code blocks, numbered from 1."""
    out, fenced = [], False
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((i, line))
    return out


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = github_anchor(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
        found.update(re.findall(r'<a\s+(?:id|name)="([^"]+)"', line))
    return found


def broken_links(path: Path) -> list[str]:
    bad = []
    for number, line in prose_lines(path):
        for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = m.group(1) or m.group(2)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            if not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{where}: no heading with that anchor in {dest.relative_to(ROOT)}")
    return bad


def test_github_anchor_follows_githubs_rule():
    assert github_anchor("Gemma's students, 3 seeds: 90.07 ± 0.16 (2026-12-05)") == (
        "gemmas-students-3-seeds-9007--016-2026-12-05"
    )
    assert github_anchor("`make demo` with the width-192 student") == "make-demo-with-the-width-192-student"


@pytest.mark.parametrize(
    "page", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
)
def test_every_relative_link_resolves(page):
    assert broken_links(ROOT / page) == []


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "b.md").write_text("# Real heading\n")
    (tmp_path / "a.md").write_text(
        "[ok](b.md#real-heading) [gone](c.md) [wrong](b.md#other)\n```\n[in code](x.md)\n```\n"
    )
    assert broken_links(tmp_path / "a.md") == [
        "a.md:1: c.md: no such file",
        "a.md:1: b.md#other: no heading with that anchor in b.md",
    ]
