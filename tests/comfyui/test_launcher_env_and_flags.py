"""Issue 26 (campaign 2, 3): env overrides cannot run as commands in the launcher, and apply warns about the
ComfyUI flags known to harm H3 as plan does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fixtures.comfyui import comfy_tree
from h3kit.cli.context import Context
from h3kit.comfyui import launcher
from h3kit.comfyui.locate import find

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "comfyui"
FP = str(Path(__file__).parents[1] / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json")
INSTALL = ("install", "--yes", "--skip-calibrate", "--no-models")


@pytest.mark.parametrize("key, value", [("X=1;touch PWN;Y", "2"), ("A B", "1"), ("1A", "1"), ("A", "a\ntouch PWN"),
                                        ("A", 'a" & calc & "')])
def test_env_override_that_is_not_a_name_and_a_plain_value_is_exit_2(run_cli, h3kit_home, key, value):
    cfg = h3kit_home / "config.yaml"
    import yaml
    cfg.write_text(yaml.safe_dump({"profile": "auto", "overrides": {"env": {key: value}}}))
    code, out, err = run_cli("plan", "--fingerprint", FP)
    assert code == 2, err
    first = err.splitlines()[0]
    assert first.startswith(f"error: {cfg}:") and "overrides.env" in first, first


def test_env_values_reach_comfyui_literally_through_the_sh_launcher(tmp_path, run_cli, h3kit_home):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    value = "$(touch PWN1); `touch PWN2`; touch PWN3 'x' \\ %PATH%"
    (h3kit_home / "config.yaml").write_text(
        "profile: auto\noverrides:\n  env:\n    H3KIT_PROBE: " + __import__("json").dumps(value) + "\n")
    code, out, err = run_cli(*INSTALL, "--comfyui", str(comfy))
    assert code == 0, err
    sh = comfy / "run_h3kit.sh"
    probe = "import os,sys; print(repr(os.environ['H3KIT_PROBE']))"
    # Run the launcher as written, with ComfyUI's main.py swapped for one that prints the variable.
    (comfy / "main.py").write_text(probe + "\n")
    out = subprocess.run(["sh", str(sh)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(value)
    assert not list(tmp_path.glob("PWN*")) and not list(comfy.glob("PWN*"))


def test_bat_launcher_doubles_percent_and_quotes_args(tmp_path):
    comfy = comfy_tree.make_comfyui(tmp_path / "c", layout="portable")
    inst = find(str(comfy), None, Context(yes=True))
    text = launcher.render_bat(inst, inst.python, ["--output-directory", "C:\\out & calc"],
                               {"H3KIT_A": "%USERPROFILE%&calc"}, "p")
    assert 'set "H3KIT_A=%%USERPROFILE%%&calc"' in text
    assert '"C:\\out & calc"' in text and " & calc " not in text.replace('"C:\\out & calc"', "")
    with pytest.raises(Exception) as exc:
        launcher.render_sh(inst, inst.python, [], {"A;B": "1"}, "p")
    assert getattr(exc.value, "exit_code", None) == 2


@pytest.mark.parametrize("flag", ["--fast", "--fp16-unet", "--force-fp16"])
def test_apply_warns_about_flags_that_harm_h3(tmp_path, run_cli, h3kit_home, flag):
    comfy = comfy_tree.make_comfyui(tmp_path / "c")
    assert run_cli(*INSTALL, "--comfyui", str(comfy))[0] == 0
    (h3kit_home / "config.yaml").write_text(f"profile: auto\ncomfyui_path: {comfy}\noverrides:\n  comfyui_args: ['{flag}']\n")
    for extra in ((), ("--dry-run",)):
        code, out, err = run_cli("apply", "--yes", *extra)
        assert code == 0, err
        assert f"warning: comfyui_args {flag} are known to give black frames" in err, err
