"""Every relative link in README.md and docs/ resolves: its file exists and its ``#anchor`` names a
heading of that file, by GitHub's slug rules. Fails with the file:line of each broken link.

Links inside fenced code blocks and inline code are not links; ``http(s):`` and ``mailto:``
targets are not checked (no network here).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
#: ``[text](target)`` and ``![alt](target)``; the target may carry a ``"title"``
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: ``[label]: target`` reference definitions
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (markup stripped) lower-cased, every character
    but letters, digits, ``_``, ``-`` and spaces dropped, each space a ``-`` (github-slugger)."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in "_- ")
    return text.replace(" ", "-")


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of ``path`` outside fenced code blocks, inline code blanked."""
    out, fence = [], None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            out.append((n, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
    return out


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors a page has: its headings' slugs (a repeated one gets ``-1``, ``-2``, ... as on
    GitHub) and any ``<a name=...>`` / ``<a id=...>``."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fence = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = FENCE.match(line)
        if m:
            fence = m.group(1) if fence is None else (None if m.group(1) == fence else fence)
            continue
        if fence is not None:
            continue
        found.update(HTML_ANCHOR.findall(line))
        h = HEADING.match(line)
        if h:
            slug = github_slug(h.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link on the page, outside code."""
    out = []
    for n, line in prose_lines(path):
        out += [(n, t) for t in INLINE_LINK.findall(line)]
        ref = REF_DEF.match(line)
        if ref:
            out.append((n, ref.group(1)))
    return out


def broken(path: Path, target: str) -> str | None:
    """Why ``target`` (a link on ``path``) does not resolve, or None."""
    if EXTERNAL.match(target):
        return None
    file_part, _, anchor = target.partition("#")
    dest = (path.parent / unquote(file_part)).resolve() if file_part else path
    shown = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest
    if not dest.exists():
        return f"no file {shown}"
    if anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
        return f"no heading #{anchor} in {shown}"
    return None


def test_every_relative_link_resolves():
    bad = [
        f"{path.relative_to(ROOT)}:{n}: ({target}) {why}"
        for path in PAGES
        for n, target in links(path)
        if (why := broken(path, target))
    ]
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_the_pages_have_links_to_check():
    """The check reads what it should: README links every doc page it lists, with anchors."""
    readme = dict.fromkeys(t for _, t in links(ROOT / "README.md"))
    assert "docs/testbed.md#cost" in readme
    for doc in ("testbed", "cluster-guide", "trl", "configuration", "statistics"):
        assert f"docs/{doc}.md" in readme, doc


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Quick start", "quick-start"),
        (
            "9.1 verl learns on a CPU: `configs/verl-cpu-testbed.yaml`",
            "91-verl-learns-on-a-cpu-configsverl-cpu-testbedyaml",
        ),
        (
            "3. Team setup: Ray cluster, MLflow server on PostgreSQL, Optuna on PostgreSQL",
            "3-team-setup-ray-cluster-mlflow-server-on-postgresql-optuna-on-postgresql",
        ),
        (
            "Three trainers, one yardstick: the testbed, verl and TRL",
            "three-trainers-one-yardstick-the-testbed-verl-and-trl",
        ),
        (
            "The objective (Eq. 11) and the dual clip (§4.1)",
            "the-objective-eq-11-and-the-dual-clip-41",
        ),
        ("Calibration δ = |f(r_min)| (§4.1)", "calibration-δ--fr_min-41"),
        ("TRL on one node (`backend: trl`)", "trl-on-one-node-backend-trl"),
    ],
)
def test_github_slug(heading, slug):
    assert github_slug(heading) == slug


def test_a_broken_link_is_named_with_its_line(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A part\n")
    page.write_text(
        "# Page\n\n[ok](other.md#a-part) [ok](#page) [web](https://example.com/x)\n"
        "```\n[not a link](missing.md)\n```\n"
        "[gone](missing.md) and `[code](missing.md)`\n[bad anchor](other.md#no-such-part)\n"
    )
    found = [(n, t, broken(page, t)) for n, t in links(page)]
    assert [(n, t) for n, t, why in found if why] == [
        (7, "missing.md"),
        (8, "other.md#no-such-part"),
    ]
    assert [why for _, _, why in found if why] == [
        f"no file {tmp_path / 'missing.md'}",
        f"no heading #no-such-part in {tmp_path / 'other.md'}",
    ]


def test_readme_lists_every_shipped_spec():
    """README's "Shipped specs" has one row per file in configs/, and no row for a missing one."""
    section = (ROOT / "README.md").read_text().split("## Shipped specs", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `(configs/[^`]+)` \|", section, re.M)
    shipped = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").glob("*.yaml"))
    assert sorted(listed) == shipped
