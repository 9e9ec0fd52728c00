"""The README's install transcript is what `h3kit install` prints, in its order: the progress lines of the block
under "What happens when you double-click" (those ending in "...", after the bootstrap's "[3/3]") come out of
an in-process install in the same order, and the install's closing lines start as the README's do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree

README = Path(__file__).resolve().parents[2] / "README.md"
NOTE = re.compile(r"\s{2,}\(.*\)$")  # the README's aside after a line: "...    (a C compiler, ...)"


def readme_blocks() -> list[list[str]]:
    """The ```text blocks of the README's "What happens when you double-click", each as its lines."""
    text = README.read_text(encoding="utf-8")
    start = text.index("### What happens when you double-click")
    section = text[start:text.index("\n## ", start)]
    return [block.splitlines() for block in re.findall(r"^```text\n(.*?)^```", section, re.S | re.M)]


def progress_lines() -> list[str]:
    """The progress lines the README shows `h3kit install` printing, in order."""
    lines = readme_blocks()[0]
    after = lines[next(i for i, line in enumerate(lines) if line.startswith("[3/3]")) + 1:]
    return [NOTE.sub("", line) for line in after if NOTE.sub("", line).endswith("...")]


def closing_starts() -> list[str]:
    """How the README's three closing lines begin, up to their first figure or quoted path."""
    block = next(b for b in readme_blocks() if b and b[0].startswith("Start ComfyUI:"))
    return [re.split(r'"|\(| \d', line)[0].rstrip() for line in block]


def in_order(wanted: list[str], lines: list[str], match) -> list[str]:
    """`wanted` not found as a subsequence of `lines`: the first one missing and those after it."""
    at = 0
    for i, want in enumerate(wanted):
        at = next((j + 1 for j in range(at, len(lines)) if match(lines[j], want)), None)
        if at is None:
            return wanted[i:]
    return []


def test_the_readme_shows_the_install_steps_and_closing_lines():
    assert progress_lines()[0] == "Fingerprinting this machine..." and len(progress_lines()) >= 3
    assert closing_starts() == ["Start ComfyUI:", "Then open Templates > ComfyUI-h3kit > h3kit_text_to_video",
                                "One clip takes about"]


@pytest.mark.slow
@pytest.mark.native  # the install builds (the session's one build) and deploys the pack
def test_install_prints_the_readme_transcript_in_its_order(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    code, out, err = run_cli("install", "--comfyui", str(comfy), "--yes", "--no-models", "--skip-calibrate")
    assert code == 0, err
    printed = err.splitlines()
    assert in_order(progress_lines(), printed, str.__eq__) == [], f"the install printed, in order: {printed}"
    # "One clip takes about" / "One clip would take about": the README's machine is fast enough, this one need not be
    starts = [s.replace(" takes about", "") for s in closing_starts()]
    assert in_order(starts, out.splitlines(), str.startswith) == [], out
