"""The README is the front page and docs/ holds one page per stage: every relative link between them (and to
the READMEs beside the code) reaches a file, every #anchor a heading there, and every docs page is linked from
the README, so a page moved or a heading renamed fails here instead of in a reader's browser. The repository
paths the pages cite exist, and so do those the code's docstrings and comments and the data files under
profiles/ cite; a page's count of the reference plans is the fixtures' count."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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


# Modules named by their import path: `h3kit.plan.te_stream`, h3kit.data.catalog.load(). The longest prefix
# that is a module or package of installer/h3kit must be two names or more (h3kit.<something>), so a module
# that moved (h3kit.validate_settings, now h3kit.data.settings) fails; what follows it may be an attribute.
# Not a module: a schema id (h3kit.catalog/1) or a file name (h3kit.cmd, h3kit.log).
MODULE = re.compile(r"(?<![\w./-])(h3kit(?:\.[A-Za-z_]\w*)+)(?![\w/-])")
FILE_SUFFIXES = {"bat", "cmd", "command", "exe", "json", "lock", "log", "md", "py", "sh", "txt", "yaml"}


def cited_modules(text: str) -> list[str]:
    """The h3kit modules `text` names by import path, in order, each as written."""
    return [m for m in MODULE.findall(FENCE.sub("", text)) if m.rsplit(".", 1)[1] not in FILE_SUFFIXES]


def is_module(dotted: str, root: Path = REPO) -> bool:
    parts = dotted.split(".")
    for n in range(len(parts), 1, -1):
        where = root / "installer" / Path(*parts[:n])
        if where.with_suffix(".py").is_file() or (where / "__init__.py").is_file():
            return True
    return False


def source_text(path: Path) -> str:
    """What a file says in words: a page's markdown, a data file whole (its comments and its `source:` texts),
    a Python module's docstrings (module, class, function) and comments, never its code."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return text
    said = [ast.get_docstring(node, clean=False) or "" for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    said += [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    return "\n".join(said)


def missing_paths(page: Path, root: Path = REPO) -> list[str]:
    """The paths `page` cites that name nothing under `root` or beside the page, then the h3kit modules it
    names that are not there."""
    def there(base: Path, path: str) -> bool:
        return any(base.glob(path)) if any(c in path for c in "*?[") else (base / path).exists()

    text = source_text(page)
    missing = []
    for cited in cited_paths(text):
        path = re.split(r"::|:(?=\d)", cited)[0].rstrip(".,;:)'\"")
        if "<" in path or "{" in path or "..." in path:  # a placeholder (tests/<layer>/), not a path
            continue
        if not (there(root, path) or there(page.parent, path)):
            missing.append(cited)
    return missing + [m for m in cited_modules(text) if not is_module(m, root)]


# The code and the data cite paths too: a docstring naming the module a rule lives in, a profile's header
# naming where its keys are explained, the catalog's `source:` naming the file a figure was measured with.
CODE = sorted(p for top in ("installer/h3kit", "nodes") for p in (REPO / top).rglob("*.py")
              if "__pycache__" not in p.parts)
DATA = sorted([*(REPO / "profiles").glob("*.yaml"), *(REPO / "profiles" / "models").glob("*.yaml")])
# A stale path in a data value (not a comment) is the data owner's to change, and is listed here until then;
# the test fails when an entry is gone too, so the list empties as they are fixed.
KNOWN_IN_DATA_VALUES: dict = {}  # a stale path inside a data value (not a comment), kept on purpose: none


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_cited_path_exists(page):
    assert missing_paths(page) == [], f"{page.relative_to(REPO)} cites paths that are not in the repository"


def test_every_path_a_docstring_or_comment_cites_exists():
    stale = {str(p.relative_to(REPO)): found for p in CODE if (found := missing_paths(p))}
    assert not stale, f"docstrings and comments cite paths that are not in the repository: {stale}"


def test_every_path_the_profiles_and_the_catalog_cite_exists():
    stale = {str(p.relative_to(REPO)): found for p in DATA if (found := missing_paths(p))}
    assert stale == KNOWN_IN_DATA_VALUES, ("profiles/ cites paths that are not in the repository (in a comment: "
                                           "fix it; an entry of KNOWN_IN_DATA_VALUES no longer found: drop it)")


def test_the_sources_read_are_the_code_and_the_data():
    assert len(CODE) > 100 and {"te_load.py", "plan_doc.py"} <= {p.name for p in CODE}
    assert {"minimax-h3.yaml", "comfy_nodes.yaml", "cpu-only.yaml"} <= {p.name for p in DATA}


def test_the_path_check_catches_a_stale_path(tmp_path):
    (tmp_path / "tests" / "plan").mkdir(parents=True)
    (tmp_path / "tests" / "plan" / "test_plan.py").write_text("")
    page = tmp_path / "page.md"
    page.write_text("Run `pytest tests/plan/test_plan.py::test_a` and `tests/plan/test_*.py`; see\n"
                    "tests/test_plan.py and `scripts/gone.py --flag`, not `tests/<layer>/` or [a](tests/x.py).\n"
                    "```\npython scripts/also_gone.py\n```\n")
    assert missing_paths(page, tmp_path) == ["scripts/gone.py", "tests/test_plan.py"]


def test_the_path_check_reads_docstrings_comments_and_module_names(tmp_path):
    (tmp_path / "installer" / "h3kit" / "plan").mkdir(parents=True)
    (tmp_path / "installer" / "h3kit" / "plan" / "__init__.py").write_text("")
    (tmp_path / "installer" / "h3kit" / "plan" / "search.py").write_text("")
    module = tmp_path / "installer" / "h3kit" / "plan" / "rule.py"
    module.write_text('"""The rule (nodes/gone.py, `h3kit.plan.search.best`, h3kit.planner)."""\n'
                      "import os  # beside installer/h3kit/plan/search.py and installer/h3kit/old.py\n"
                      'PATH = "scripts/in_code_not_in_words.py"\n\n\n'
                      "def f():\n"
                      '    """Read by h3kit.validate_settings; schema h3kit.catalog/1, the h3kit.cmd file."""\n')
    assert missing_paths(module, tmp_path) == ["nodes/gone.py", "installer/h3kit/old.py", "h3kit.planner",
                                               "h3kit.validate_settings"]
    data = tmp_path / "profile.yaml"
    data.write_text('# keys: installer/h3kit/gone.py\nsource: "nodes/h3kit_te_stream.py; measured"\n')
    assert missing_paths(data, tmp_path) == ["installer/h3kit/gone.py", "nodes/h3kit_te_stream.py"]


# "The 17 reference plans": where a page counts them, it counts the fixtures.
PLAN_COUNT = re.compile(r"\b(\d+) (?:reference|golden) plans\b")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_count_of_the_reference_plans_is_the_fixtures_count(page):
    plans = len(list((REPO / "tests" / "fixtures" / "plans").glob("*.json")))
    said = PLAN_COUNT.findall(page.read_text(encoding="utf-8"))
    assert all(int(n) == plans for n in said), f"{page.relative_to(REPO)} counts {said} reference plans; " \
                                               f"tests/fixtures/plans holds {plans}"
