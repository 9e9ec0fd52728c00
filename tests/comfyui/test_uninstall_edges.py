"""Uninstall after a crash, through another spelling of the ComfyUI path, and of a pack ComfyUI-Manager disabled."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.comfyui.deploy import STAGING_MARK, STAGING_SUFFIX

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"

INSTALL = ("install", "--yes", "--skip-calibrate", "--no-models", "--json")


def _install(run_cli, comfy: Path) -> dict:
    code, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert code == 0, err
    return json.loads(out)


def _crashed_staging(comfy: Path) -> Path:
    """What a fresh install killed while staging leaves: a marked, half-written staging folder, no record."""
    stale = comfy / "custom_nodes" / ("ComfyUI-h3kit" + STAGING_SUFFIX)
    (stale / "h3k_native").mkdir(parents=True)
    (stale / STAGING_MARK).write_text("h3kit staging folder: safe to delete\n")
    (stale / "h3k_native" / "half.py").write_text("# half written")
    return stale


# -- 5: a crash's staging folder ---------------------------------------------------------------------


def test_dry_run_lists_a_crashed_installs_staging_folder_and_uninstall_removes_it(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    before = comfy_tree.snapshot(comfy)
    stale = _crashed_staging(comfy)
    crashed = comfy_tree.snapshot(comfy)
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--dry-run")
    assert code == 0, err
    assert str(stale) in out and "(none found)" not in out
    assert comfy_tree.snapshot(comfy) == crashed  # a dry run changes nothing
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["staging_cleaned"] == [str(stale)]
    assert comfy_tree.snapshot(comfy) == before


def test_dry_run_with_a_record_lists_the_staging_folder_too(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    _install(run_cli, comfy)
    stale = _crashed_staging(comfy)
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["staging_cleaned"] == [str(stale)] and stale.is_dir()
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--dry-run")
    assert f"would remove the staging folder an interrupted install left: {stale}" in out


def test_a_folder_with_the_staging_name_but_no_mark_is_not_ours(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    theirs = comfy / "custom_nodes" / ("ComfyUI-h3kit" + STAGING_SUFFIX)
    theirs.mkdir()
    (theirs / "mine.txt").write_text("mine")
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes")
    assert code == 2 and "no install record" in err
    assert (theirs / "mine.txt").read_text() == "mine"


# -- 6: one ComfyUI, however its path is spelled; remembered in config.yaml ----------------------------


def _linked_comfyui(tmp_path: Path) -> tuple[Path, Path]:
    real = comfy_tree.make_comfyui(tmp_path / "disk" / "ComfyUI")
    link = tmp_path / "ComfyUI-link"
    os.symlink(real, link, target_is_directory=True)
    return real, link


def test_install_through_a_link_uninstall_by_the_real_path(tmp_path, run_cli):
    real, link = _linked_comfyui(tmp_path)
    before = comfy_tree.snapshot(real)
    _install(run_cli, link)
    code, out, err = run_cli("uninstall", "--comfyui", str(real), "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["kept"] == [] and comfy_tree.snapshot(real) == before


def test_install_by_the_real_path_then_apply_and_uninstall_through_a_link(tmp_path, run_cli):
    real, link = _linked_comfyui(tmp_path)
    before = comfy_tree.snapshot(real)
    first = _install(run_cli, real)
    again = _install(run_cli, link)  # the same install, upgraded in place: one record
    assert again["manifest"] == first["manifest"] and again["backed_up"] == []
    code, out, err = run_cli("apply", "--comfyui", str(link), "--json")
    assert code == 0, err
    code, out, err = run_cli("uninstall", "--comfyui", str(link), "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["backed_up"] == [] and comfy_tree.snapshot(real) == before


def test_a_record_an_older_h3kit_named_after_the_link_is_still_found(tmp_path, run_cli):
    from h3kit.comfyui import manifest as mf
    from h3kit.core.paths import locations

    real, link = _linked_comfyui(tmp_path)
    before = comfy_tree.snapshot(real)
    doc = _install(run_cli, link)
    state = locations().state_dir
    old_name = state / "manifests" / f"{mf.slug_for(link, legacy=True)}.json"
    Path(doc["manifest"]).rename(old_name)  # where h3kit 0.1.0 kept it
    code, out, err = run_cli("uninstall", "--comfyui", str(real), "--yes", "--json")
    assert code == 0, err
    assert comfy_tree.snapshot(real) == before and not old_name.exists()


def test_install_saves_comfyui_path_keeping_comments_and_apply_then_needs_no_flag(tmp_path, run_cli, monkeypatch):
    from h3kit.core.paths import locations

    monkeypatch.delenv("COMFYUI_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    comfy = comfy_tree.make_comfyui(tmp_path / "somewhere odd" / "ComfyUI")
    config = locations().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("# my notes\nprofile: auto  # keep this\n", encoding="utf-8")
    doc = _install(run_cli, comfy)
    text = config.read_text(encoding="utf-8")
    assert "# my notes\n" in text and "profile: auto  # keep this" in text
    assert f"comfyui_path: {comfy}" in text or f"comfyui_path: '{comfy}'" in text
    assert any("saved comfyui_path" in n for n in doc["notes"])
    code, out, err = run_cli("apply", "--json")
    assert code == 0, err
    assert json.loads(out)["comfyui"] == str(comfy)
    code, out, err = run_cli("uninstall", "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["comfyui"] == str(comfy)


def test_a_comfyui_path_the_user_set_to_another_comfyui_is_kept(tmp_path, run_cli):
    from h3kit.core.paths import locations

    mine = comfy_tree.make_comfyui(tmp_path / "mine")
    other = comfy_tree.make_comfyui(tmp_path / "other")
    config = locations().config_file
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f"comfyui_path: '{mine}'\n", encoding="utf-8")
    doc = _install(run_cli, other)
    assert config.read_text(encoding="utf-8") == f"comfyui_path: '{mine}'\n"
    assert any("names another ComfyUI" in n and str(mine) in n for n in doc["notes"])


# -- 7: a pack ComfyUI-Manager disabled -----------------------------------------------------------------


def _disable(doc: dict, how: str) -> Path:
    node = Path(doc["node_dir"])
    dest = node.with_name(node.name + ".disabled") if how == "renamed" else node.parent / ".disabled" / node.name
    dest.parent.mkdir(exist_ok=True)
    node.rename(dest)
    return dest


@pytest.mark.parametrize("how", ["renamed", "moved"])
def test_uninstall_removes_a_pack_comfyui_manager_disabled(tmp_path, run_cli, how):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    (comfy / "custom_nodes" / ".disabled").mkdir()  # ComfyUI-Manager's folder, there before h3kit
    before = comfy_tree.snapshot(comfy)
    doc = _install(run_cli, comfy)
    disabled = _disable(doc, how)
    (disabled / "mine.txt").write_text("added while disabled")
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["disabled_pack"] == str(disabled) and result["missing"] == []
    assert [Path(b["path"]).name for b in result["backed_up"]] == ["mine.txt"]
    assert comfy_tree.snapshot(comfy) == before and not Path(doc["manifest"]).exists()


def test_doctor_says_the_pack_is_disabled_and_apply_says_so_too(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    disabled = _disable(_install(run_cli, comfy), "renamed")
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--json")
    [present] = [f for f in json.loads(out)["findings"] if f["check"] == "pack.present"]
    assert present["status"] == "warn" and "disabled" in present["message"] and str(disabled) in present["message"]
    code, out, err = run_cli("apply", "--comfyui", str(comfy))
    assert code == 3 and "disabled" in err and "Traceback" not in err
    before = comfy_tree.snapshot(comfy)
    code, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))  # no second copy beside the disabled one
    assert code == 3 and "disabled" in json.loads(out)["error"]
    assert comfy_tree.snapshot(comfy) == before
    disabled.rename(comfy / "custom_nodes" / "ComfyUI-h3kit")  # enabled again: still ours
    code, out, err = run_cli("doctor", "--comfyui", str(comfy), "--json")
    [present] = [f for f in json.loads(out)["findings"] if f["check"] == "pack.present"]
    assert present["status"] == "ok"


def test_a_foreign_folder_with_the_disabled_name_is_not_taken(tmp_path, run_cli):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    doc = _install(run_cli, comfy)
    node = Path(doc["node_dir"])
    theirs = node.with_name(node.name + ".disabled")
    theirs.mkdir()
    (theirs / "__init__.py").write_text("# another pack\n")
    import shutil

    shutil.rmtree(node)  # the pack is gone; the other folder holds nothing of h3kit's
    code, out, err = run_cli("uninstall", "--comfyui", str(comfy), "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["disabled_pack"] is None
    assert (theirs / "__init__.py").read_text() == "# another pack\n"
