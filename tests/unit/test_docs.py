"""The documentation speaks to users: no internal tracker numbers in the README, docs/ or the
shipped specs, and every relative link in the README and docs/*.md leads to a file of the
repository."""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# "issue 12", "issues 3 and 4", "Issue #5", "the issue asks": tracker talk, not the reader's
TRACKER = (re.compile(r"\bissues? ?#?\d+", re.IGNORECASE),
           re.compile(r"\bthe issue asks\b", re.IGNORECASE))
# [text](target), ![alt](target), [text](<target with spaces>); a title may follow
LINK = re.compile(r"!?\[[^\]]*\]\(\s*(?:<([^>]*)>|([^)\s]+))(?:\s+[^)]*)?\)")


def user_docs() -> list[Path]:
    """README.md and every text file under docs/ and experiments/ (images are skipped)."""
    files = [ROOT / "README.md"]
    for folder in ("docs", "experiments"):
        files += sorted(p for p in (ROOT / folder).rglob("*") if p.is_file())
    return files


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file; nothing for a binary one."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return
    yield from enumerate(text.splitlines(), 1)


def target(link: re.Match[str]) -> str:
    return link.group(1) if link.group(1) is not None else link.group(2)


def where(path: Path, number: int, what: str) -> str:
    return f"{path.relative_to(ROOT)}:{number}: {what}"


def test_the_docs_and_specs_name_no_tracker_issues():
    found = [where(path, n, m.group(0))
             for path in user_docs() for n, line in text_lines(path)
             for pattern in TRACKER for m in pattern.finditer(line)]
    assert not found, ("say what the feature does or what was measured, not which issue "
                       "asked for it:\n" + "\n".join(found))


def test_the_scan_sees_what_it_should():
    """The checks are only as good as their patterns."""
    def hits(line: str) -> bool:
        return any(p.search(line) for p in TRACKER)
    assert hits("the switch dataplane (issue 3: classes)")
    assert hits("Issue #12's numbers") and hits("issues 13 and 14") and hits("the issue asks 70%")
    assert not hits("a known issue with OVS") and not hits("tissues 3")
    links = [target(m) for m in LINK.finditer(
        "![q](docs/img/q.png) [a](<x y.md>) [b](FIDELITY.md#ecn \"t\") [c](https://e.org/)")]
    assert links == ["docs/img/q.png", "x y.md", "FIDELITY.md#ecn", "https://e.org/"]


def test_every_relative_link_leads_to_a_file_of_the_repository():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for doc in docs:
        for n, line in text_lines(doc):
            for m in LINK.finditer(line):
                to = target(m)
                if re.match(r"[a-z][a-z0-9+.-]*:", to, re.IGNORECASE) or to.startswith("#"):
                    continue  # http(s), mailto and the like; an anchor in the same file
                path = (doc.parent / to.split("#")[0]).resolve()
                if not path.is_relative_to(ROOT) or not path.exists():
                    broken.append(where(doc, n, to))
    assert not broken, "links to nothing in the repository:\n" + "\n".join(broken)
