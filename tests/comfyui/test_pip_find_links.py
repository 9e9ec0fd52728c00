"""Issue 35 (4): a wheel folder that is not there is named, not read as pip's pin conflict.

Recorded output (tests/fixtures/pip/), pip 26.3 of the test venv with PIP_CONFIG_FILE=/dev/null and no
PIP_FIND_LINKS:
- find-links-missing.txt: `pip install --no-index --find-links /nonexistent/wheels somepkg`;
- find-links-missing-conflict.txt: `pip install --dry-run -r requirements.txt -c constraints.txt --no-index
  --find-links <wheelhouse> --find-links /home/me/wheels` with the wheelhouse of tests/support
  (comfy_setup_support.fill_wheelhouse), torchvision==0.28.0+cpu asked for and torch==2.14.1+cpu pinned: the
  torch wheels the missing folder was meant to hold are absent, so pip's answer is a dependency conflict.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from comfy_setup_support import ctx, pip_only_from
from h3kit.comfyui.setup.pip import install_requirements
from h3kit.core import tools
from h3kit.core.errors import BadInput, NotReady

PIP = Path(__file__).parents[1] / "fixtures" / "pip"


@pytest.mark.parametrize("record, folder", [("find-links-missing.txt", "/nonexistent/wheels"),
                                            ("find-links-missing-conflict.txt", "/home/me/wheels")])
def test_pips_ignored_location_is_named_before_what_it_caused(record, folder):
    sentence, fix = tools.classify("pip", (PIP / record).read_text(encoding="utf-8"))
    assert sentence == f"the wheel folder {folder} does not exist, so pip looked for the packages without it."
    assert "two pins conflict" not in sentence and "H3KIT_PIP_FIND_LINKS" in fix


def test_a_missing_h3kit_pip_find_links_folder_is_one_sentence_before_pip_runs(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(tools.subproc, "run", lambda argv, **kw: ran.append(argv))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    opts = pip_only_from(f"{wheels}{os.pathsep}{tmp_path / 'gone'}", monkeypatch)
    (tmp_path / "r.txt").write_text("torchvision==0.28.0+cpu\n")
    (tmp_path / "c.txt").write_text("torch==2.14.1+cpu\n")
    with pytest.raises(BadInput) as err:
        install_requirements(ctx(), sys.executable, tmp_path / "r.txt", tmp_path / "c.txt", opts, timeout=60)
    assert err.value.message == f"H3KIT_PIP_FIND_LINKS names the wheel folder {tmp_path / 'gone'}, which does not exist."
    assert err.value.exit_code == 2 and "H3KIT_PIP_FIND_LINKS" in err.value.fix and ran == []


def test_links_that_are_there_or_urls_are_not_refused(tmp_path):
    opts = tools.PipOptions([str(tmp_path), tmp_path.as_uri(), "https://download.example/wheels/"],
                            links_from="H3KIT_PIP_FIND_LINKS")
    assert opts.missing_links() == []
    opts.check_links()
    gone = tools.PipOptions([(tmp_path / "gone").as_uri()], links_from="H3KIT_PIP_FIND_LINKS")
    assert gone.missing_links() == [(tmp_path / "gone").as_uri()]
    assert tools.PipOptions.from_env({"H3KIT_PIP_FIND_LINKS": str(tmp_path)}).links_from == "H3KIT_PIP_FIND_LINKS"


def test_real_pip_ignoring_a_folder_given_another_way_is_named(tmp_path, monkeypatch):
    """Links not from H3KIT_PIP_FIND_LINKS are not checked beforehand; pip's own warning still names them."""
    pip_only_from(tmp_path, monkeypatch)
    opts = tools.PipOptions([str(tmp_path / "gone")], no_index=True)
    with pytest.raises(NotReady) as err:
        tools.run_pip(ctx(), sys.executable, ["install", "--dry-run", "h3kit-no-such-package"], "Installing it",
                      timeout=120, opts=opts)
    assert err.value.message == (f"Installing it failed: the wheel folder {tmp_path / 'gone'} does not exist, "
                                 "so pip looked for the packages without it.")
