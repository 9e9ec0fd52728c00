"""Issue 26 (campaign 1, 6, 9): a hostile or broken config.yaml is exit 2 with file:line, never memory,
a RecursionError or silent defaults: parsing is bounded (size, depth, aliases, expanded values, NUL)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

FP = str(Path(__file__).parents[1] / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json")

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, n in zip("abcdefgh", "bcdefghi"))


def _first(err: str) -> str:
    assert "Traceback" not in err and "internal error" not in err, err
    return err.splitlines()[0]


def test_an_anchor_bomb_is_exit_2_with_its_line_in_bounded_memory(h3kit_home):
    """Run in a child under a 1 GiB address-space limit: before the bound, it took 18 GB or hit MemoryError."""
    assert len(BOMB) < 600
    cfg = h3kit_home / "config.yaml"
    cfg.write_text("profile: auto\n" + BOMB)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    proc = subprocess.run([sys.executable, "-m", "h3kit", "apply", "--yes"], capture_output=True, text=True,
                          timeout=120, preexec_fn=limit, env={**os.environ, "H3KIT_HOME": str(h3kit_home)})
    assert proc.returncode == 2, proc.stderr
    first = _first(proc.stderr)
    assert first.startswith(f"error: {cfg}:") and "aliases" in first, first


@pytest.mark.parametrize("text, words", [
    ("overrides:\n  env: " + "{k: " * 5000 + "1" + "}" * 5000 + "\n", "nested more than"),
    ("overrides:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(200)) + "  " * 201 + "v: 1\n",
     "nested more than"),
    ("overrides: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than"),
    ("profile: auto\noverrides: {vae_tile_size: 384}\n\x00\n", "character YAML does not allow"),
    ("profile: auto\n" + "# padding\n" * 200_000, "longer than"),
], ids=["5000-nested-maps", "200-indented-maps", "100000-nested-lists", "nul-byte", "too-long"])
def test_deep_long_or_nul_config_is_exit_2_naming_file_and_line(run_cli, h3kit_home, text, words):
    cfg = h3kit_home / "config.yaml"
    cfg.write_text(text)
    code, out, err = run_cli("plan", "--fingerprint", FP)
    assert code == 2, err
    first = _first(err)
    assert first.startswith(f"error: {cfg}:") and words in first, first
    if "NUL" in text or "\x00" in text:
        assert first.startswith(f"error: {cfg}:3:"), first
    # doctor goes on past a bad config (it is one of its findings) instead of dying of it
    code, out, err = run_cli("doctor", "--fingerprint", FP)
    assert code != 1 and "Traceback" not in err, err
    assert f"{cfg}:" in out and words in out, out


@pytest.mark.parametrize("kind", ["folder", "dangling-link", "link-loop"])
def test_config_that_is_not_a_file_is_exit_2_with_one_sentence(run_cli, h3kit_home, kind):
    cfg = h3kit_home / "config.yaml"
    if kind == "folder":
        cfg.mkdir()
        words = "is a folder"
    elif kind == "dangling-link":
        cfg.symlink_to(h3kit_home / "nowhere.yaml")
        words = "which does not exist"
    else:
        cfg.symlink_to(cfg)
        words = "loop"
    code, out, err = run_cli("plan", "--fingerprint", FP)
    assert code == 2, err
    first = _first(err)
    assert first.startswith(f"error: {cfg}:1:") and words in first, first


def test_a_config_within_the_bounds_still_reads_with_an_alias(run_cli, h3kit_home):
    (h3kit_home / "config.yaml").write_text("profile: auto\nx: &t 384\noverrides:\n  vae_tile_size: *t\n")
    code, out, err = run_cli("plan", "--fingerprint", FP)
    assert code == 2 and "'x' is not a config key" in err  # the alias itself is fine; the stray key is not
    (h3kit_home / "config.yaml").write_text("profile: auto\noverrides: &o\n  vae_tile_size: 384\n")
    assert run_cli("plan", "--fingerprint", FP)[0] == 0


def test_readme_and_code_agree_that_an_unknown_top_level_key_is_refused(run_cli, h3kit_home):
    repo = Path(__file__).resolve().parents[2]
    readme = " ".join(" ".join(p.read_text(encoding="utf-8") for p in [repo / "README.md", *(repo / "docs").glob("*.md")])
                      .split())
    assert "keys are kept and noted" not in readme
    promise = "did you mean 'profile'?"
    assert promise in readme and "a misspelt key is refused" in readme
    cfg = h3kit_home / "config.yaml"
    cfg.write_text("profle: auto\n")
    code, out, err = run_cli("plan", "--fingerprint", FP)
    assert code == 2 and f"{cfg}:1: 'profle' is not a config key; {promise}" in err, err
