"""The README is the front page and docs/ holds one page per stage: every relative link between them (and to
the READMEs beside the code) reaches a file, every #anchor a heading there, and every docs page is linked from
the README, so a page moved or a heading renamed fails here instead of in a reader's browser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "nodes" / "README.md",
         REPO / "payload" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8")))
            if not re.match(r"^[a-z]+:", t)]  # http(s), mailto: not checked here (no network)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_reaches_a_file_and_its_heading(page):
    assert page.is_file()
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_is_a_front_page_that_links_every_docs_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    linked = {Path(t.partition("#")[0]).name for t in links(REPO / "README.md") if t.startswith("docs/")}
    assert {p.name for p in (REPO / "docs").glob("*.md")} <= linked


def test_the_readme_layout_names_every_folder_of_the_package_and_the_repository():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("## How the code is laid out"):]
    for d in sorted((REPO / "installer" / "h3kit").iterdir()):
        if d.is_dir() and not d.name.startswith(("_", ".")):
            assert f"  {d.name}/" in block, f"installer/h3kit/{d.name}/ is missing from the README's layout"
    for d in ("nodes", "payload", "profiles", "scripts", "tests", "docs"):
        assert f"\n{d}/" in block


# Paths written into the text: every word of an inline `code` span that starts with one of the repository's
# top folders, and every file path (a name with a suffix) in the prose, must name something there. Relative to
# the repository or to the page's own folder (payload/README.md says `tests/test_h3k.c`); `file::test` and
# `file:line` count as the file, a glob must match something. Fenced blocks are left out: they hold commands
# and sample output, with paths on the reader's machine.
TOP_FOLDERS = ("installer", "nodes", "scripts", "tests", "payload", "profiles", "docs", ".ci")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
PROSE_FILE = re.compile(r"(?<![\w/.-])((?:%s)/[\w./-]*\w\.[a-z]{1,4})\b" % "|".join(re.escape(f) for f in TOP_FOLDERS))


def cited_paths(text: str) -> list[str]:
    """The repository paths `text` (a page's markdown) cites, in order, each as written."""
    text = FENCE.sub("", text)
    found = [word for span in CODE_SPAN.findall(text) for word in span.split()
             if word.split("/")[0] in TOP_FOLDERS and "/" in word]
    found += PROSE_FILE.findall(CODE_SPAN.sub("", LINK.sub("", text)))
    return found


def missing_paths(page: Path, root: Path = REPO) -> list[str]:
    """The paths `page` cites that name nothing under `root` or beside the page."""
    def there(base: Path, path: str) -> bool:
        return any(base.glob(path)) if any(c in path for c in "*?[") else (base / path).exists()

    missing = []
    for cited in cited_paths(page.read_text(encoding="utf-8")):
        path = re.split(r"::|:(?=\d)", cited)[0].rstrip(".,;:)'\"")
        if "<" in path or "{" in path or "..." in path:  # a placeholder (tests/<layer>/), not a path
            continue
        if not (there(root, path) or there(page.parent, path)):
            missing.append(cited)
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_cited_path_exists(page):
    assert missing_paths(page) == [], f"{page.relative_to(REPO)} cites paths that are not in the repository"


def test_the_path_check_catches_a_stale_path(tmp_path):
    (tmp_path / "tests" / "plan").mkdir(parents=True)
    (tmp_path / "tests" / "plan" / "test_plan.py").write_text("")
    page = tmp_path / "page.md"
    page.write_text("Run `pytest tests/plan/test_plan.py::test_a` and `tests/plan/test_*.py`; see\n"
                    "tests/test_plan.py and `scripts/gone.py --flag`, not `tests/<layer>/` or [a](tests/x.py).\n"
                    "```\npython scripts/also_gone.py\n```\n")
    assert missing_paths(page, tmp_path) == ["scripts/gone.py", "tests/test_plan.py"]
