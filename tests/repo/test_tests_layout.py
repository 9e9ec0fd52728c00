"""The suite's own shape: every test file sits in the folder of what it tests, so the grouping stays.

One folder per layer of installer/h3kit (tests/plan for h3kit.plan, ...), plus tests/nodes for the code
that runs in ComfyUI's Python (nodes/ and installer/h3kit/bundled/), tests/real_comfyui for files that
need a real ComfyUI as a whole, tests/scripts for scripts/ and install.sh, and tests/repo for checks of the
repository itself. tests/support and tests/fixtures hold what tests share and no tests. docs/development.md
("Where a test goes") says the same for a newcomer.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path


TESTS = Path(__file__).resolve().parents[1]
PKG = TESTS.parent / "installer" / "h3kit"
OUTSIDE_THE_LAYERS = {"nodes", "real_comfyui", "scripts", "repo"}
SHARED = {"support", "fixtures"}
# Paths written for a test file at the top of tests/: from tests/<layer>/ they miss by one folder.
TOP_LEVEL_PATHS = re.compile(r'Path\(__file__\)(\.resolve\(\))?\.parent(\.parent\b|\s*/\s*"(fixtures|comfy_h3)")')


def _layers() -> set[str]:
    """The subpackages of installer/h3kit that are layers (bundled/ is tested under tests/nodes)."""
    return {p.parent.name for p in PKG.glob("*/__init__.py")} - {"bundled"}


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)


def test_no_test_file_sits_at_the_top_of_tests():
    top = [p.name for p in TESTS.glob("test_*.py")]
    assert not top, f"move these into the folder of the layer they test (docs/development.md): {top}"


def test_every_test_file_is_in_a_layer_folder_or_one_of_the_named_others():
    allowed = _layers() | OUTSIDE_THE_LAYERS
    assert {"core", "plan", "comfyui", "cli"} <= allowed  # the layers are read from the package itself
    misplaced = [str(p.relative_to(TESTS)) for p in _test_files()
                 if len(p.relative_to(TESTS).parts) != 2 or p.parent.name not in allowed]
    assert not misplaced, f"not in tests/<layer>/ (one of {sorted(allowed)}): {misplaced}"


def test_support_and_fixtures_hold_no_tests():
    inside = [str(p.relative_to(TESTS)) for p in _test_files() if p.relative_to(TESTS).parts[0] in SHARED]
    assert not inside, f"tests belong in a layer folder, not with the shared files: {inside}"


def test_no_two_test_files_share_a_name():
    """The folders have no __init__.py, so pytest imports each test file by its bare name: two files with one
    name in different folders would stop the collection."""
    by_name = defaultdict(list)
    for p in _test_files():
        by_name[p.name].append(str(p.relative_to(TESTS)))
    assert not {n: ps for n, ps in by_name.items() if len(ps) > 1}


def test_no_test_file_reaches_for_tests_or_the_repository_one_folder_too_high():
    """A test merged or written as if it sat at the top of tests/ looks for tests/<layer>/fixtures."""
    stale = [f"{p.relative_to(TESTS)}:{n}" for p in _test_files()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if TOP_LEVEL_PATHS.search(line)]
    assert not stale, ("tests/ is Path(__file__).parents[1] from a test file, the repository parents[2] "
                       f"(or conftest.FIXTURES / conftest.REPO): {stale}")
