"""doctor --fix/--undo and a new ComfyUI, for real: venvs, pip, git, with tiny wheels built here (no network)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from h3kit.comfy import setup as comfy_setup

from h3kit.comfy import manifest

from h3kit.plan import torch_build as torchsel
from h3kit.cli.context import Context
from h3kit.core.errors import NotReady
from h3kit.fingerprint.schema import load_file
from h3kit.core.paths import locations
from tests.conftest import FIXTURES

FP_4090 = FIXTURES / "torchsel" / "linux-rtx4090-driver580.json"

TORCH_INIT = '''__version__ = "{version}"
class version:
    cuda = {cuda!r}
    hip = None
class cuda:
    @staticmethod
    def is_available():
        return False
'''


def make_wheel(folder: Path, name: str, version: str, files: dict[str, str], requires=()) -> Path:
    """A minimal valid wheel: the files, METADATA, WHEEL and a RECORD with hashes."""
    dist = f"{name.replace('-', '_')}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    contents = dict(files)
    contents[f"{dist}.dist-info/METADATA"] = meta
    contents[f"{dist}.dist-info/WHEEL"] = "Wheel-Version: 1.0\nGenerator: h3kit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}.dist-info/RECORD,,")
    contents[f"{dist}.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in contents.items():
            z.writestr(path, text)
    return wheel


def torch_wheels(folder: Path, torch_version: str, vision: str, audio: str | None, tag: str) -> None:
    cuda = f"{tag[2:-1]}.{tag[-1]}" if tag.startswith("cu") else None
    make_wheel(folder, "torch", f"{torch_version}+{tag}", {"torch/__init__.py": TORCH_INIT.format(version=f"{torch_version}+{tag}", cuda=cuda)})
    make_wheel(folder, "torchvision", f"{vision}+{tag}", {"torchvision/__init__.py": f"__version__ = '{vision}+{tag}'\n"},
               requires=[f"torch=={torch_version}"])
    if audio:
        make_wheel(folder, "torchaudio", f"{audio}+{tag}", {"torchaudio/__init__.py": f"__version__ = '{audio}+{tag}'\n"},
                   requires=["torch>=2.11"])


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    house = tmp_path_factory.mktemp("wheelhouse")
    torch_wheels(house, "2.13.0", "0.28.0", None, "cpu")          # what a user has by mistake
    torch_wheels(house, "2.14.1", "0.29.1", "2.11.0", "cu130")     # what a 4090 with driver 580 needs
    torch_wheels(house, "2.14.1", "0.29.1", "2.11.0", "cpu")       # a same-version decoy of the wrong build
    # A newer torch that an unconstrained 'pip install -r requirements.txt' would grab.
    make_wheel(house, "torch", "2.15.0", {"torch/__init__.py": TORCH_INIT.format(version="2.15.0", cuda=None)})
    make_wheel(house, "comfy-tiny-dep", "1.0", {"comfy_tiny_dep.py": "VALUE = 42\n"})
    return house


@pytest.fixture
def offline_pip(wheelhouse, monkeypatch) -> comfy_setup.PipOptions:
    """pip sees only the wheelhouse: no config files, no index, no machine-wide find-links."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("H3KIT_PIP_FIND_LINKS", str(wheelhouse))
    monkeypatch.setenv("H3KIT_PIP_NO_INDEX", "1")
    return comfy_setup.PipOptions.from_env()


def ctx(**kw) -> Context:
    return Context(locations=locations(), yes=True, json=True, **kw)


@pytest.fixture(scope="session")
def venv_template(tmp_path_factory) -> Path:
    """One venv with pip, made once; tests get copies (a venv's prefix follows its pyvenv.cfg, so a copy works
    with 'python -m pip'), which saves ensurepip's seconds per test."""
    path = tmp_path_factory.mktemp("venv-template") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path


def make_venv(template: Path, path: Path) -> str:
    shutil.copytree(template, path, symlinks=True)
    return str(comfy_setup.venv_python(path))


def pip_install(python: str, *reqs: str, wheelhouse: Path) -> None:
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse), *reqs],
                   check=True, timeout=300)


# -- pure parts ------------------------------------------------------------------

def test_pip_options_from_env():
    opts = comfy_setup.PipOptions.from_env({"H3KIT_PIP_FIND_LINKS": os.pathsep.join(["/a", "/b"]), "H3KIT_PIP_NO_INDEX": "1"})
    assert opts.index_args("https://download.pytorch.org/whl/cu130") == ["--no-index", "--find-links", "/a", "--find-links", "/b"]
    mirror = comfy_setup.PipOptions.from_env({"H3KIT_PIP_INDEX_URL": "https://mirror.example/simple"})
    assert mirror.index_args("https://download.pytorch.org/whl/cu130") == ["--index-url", "https://mirror.example/simple"]
    assert comfy_setup.PipOptions().index_args(None) == []


# Recorded messages: git's and pip's own wording (git http.c / curl, pip's resolver and urllib3).
GIT_ERRORS = [
    ("fatal: unable to access 'https://github.com/Comfy-Org/ComfyUI.git/': Could not resolve host: github.com", "no network"),
    ("fatal: unable to access 'https://github.com/Comfy-Org/ComfyUI.git/': Received HTTP code 407 from proxy after CONNECT", "proxy"),
    ("fatal: unable to access 'https://github.com/x/y.git/': Failed to connect to github.com port 443 after 21 ms: Couldn't connect to server", "no network"),
    ("remote: Repository not found.\nfatal: repository 'https://github.com/x/nope.git/' not found", "does not exist"),
    ("fatal: cannot create directory at 'comfy': No space left on device", "disk is full"),
]


@pytest.mark.parametrize("text,expect", GIT_ERRORS)
def test_classify_git_error(text, expect):
    sentence, fix = comfy_setup.classify_git_error(text)
    assert expect in sentence and fix
    assert "git is not installed" in comfy_setup.classify_git_error("", "missing")[0]


PIP_ERRORS = [
    ("WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by "
     "'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new "
     "connection: [Errno -3] Temporary failure in name resolution')': /whl/cu130/torch/", "no network"),
    ("WARNING: Retrying ... after connection broken by 'ProxyError('Cannot connect to proxy.', OSError('Tunnel connection "
     "failed: 407 Proxy Authentication Required'))': /simple/torch/", "proxy"),
    ("ERROR: Could not find a version that satisfies the requirement torch==2.14.1+cu130 (from versions: none)\n"
     "ERROR: No matching distribution found for torch==2.14.1+cu130", "no wheel of torch==2.14.1+cu130"),
    ("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device", "disk is full"),
]


@pytest.mark.parametrize("text,expect", PIP_ERRORS)
def test_classify_pip_error(text, expect):
    sentence, fix = comfy_setup.classify_pip_error(text)
    assert expect in sentence and fix


def test_source_kind(tmp_path):
    assert comfy_setup.source_kind("https://github.com/Comfy-Org/ComfyUI.git") == "git-url"
    assert comfy_setup.source_kind("git@github.com:Comfy-Org/ComfyUI.git") == "git-url"
    (tmp_path / "plain").mkdir()
    assert comfy_setup.source_kind(str(tmp_path / "plain")) == "folder"
    (tmp_path / "c.zip").write_bytes(b"")
    assert comfy_setup.source_kind(str(tmp_path / "c.zip")) == "archive"
    with pytest.raises(Exception) as err:
        comfy_setup.source_kind(str(tmp_path / "missing"))
    assert err.value.exit_code == 2


def test_probe_reads_metadata_without_torch(tmp_path):
    info = comfy_setup.probe_torch(sys.executable)
    assert info["python_version"] and "error" not in info


# -- doctor --fix / --undo in a throwaway venv ------------------------------------------

def test_fix_then_undo_in_a_throwaway_venv(tmp_path, wheelhouse, offline_pip, venv_template):
    python = make_venv(venv_template, tmp_path / "comfy-venv")
    pip_install(python, "torch==2.13.0+cpu", "torchvision==0.28.0+cpu", wheelhouse=wheelhouse)
    fp = load_file(FP_4090)
    before = comfy_setup.probe_torch(python)
    assert before["torch_version"] == "2.13.0+cpu" and before["torch_build"] == "cpu"
    findings = torchsel.doctor_findings(fp, before)
    assert findings[0]["status"] == "fail" and "cu130" in findings[0]["fix"]

    man = manifest.load_or_new(locations().state_dir, tmp_path / "ComfyUI")
    result = comfy_setup.fix_torch(ctx(), python, fp, man, offline_pip)
    assert result["changed"] is True
    after = comfy_setup.probe_torch(python, import_torch=True)
    assert after["packages"] == {"torch": "2.14.1+cu130", "torchvision": "0.29.1+cu130", "torchaudio": "2.11.0+cu130"}
    assert after["torch_cuda"] == "13.0"
    assert torchsel.check(fp, after) == []
    saved = json.loads(Path(man.path).read_text())["extra"]["torch_before"]
    assert saved["packages"] == {"torch": "2.13.0+cpu", "torchvision": "0.28.0+cpu", "torchaudio": None}
    assert saved["index_urls"]["torch"] == "https://download.pytorch.org/whl/cpu"

    # A second --fix changes nothing and keeps the first record.
    again = comfy_setup.fix_torch(ctx(), python, fp, man, offline_pip)
    assert again["changed"] is False and man.extra["torch_before"]["packages"]["torch"] == "2.13.0+cpu"

    undone = comfy_setup.undo_torch(ctx(), man, offline_pip)
    assert undone["removed"] == ["torchaudio"]
    assert comfy_setup.probe_torch(python)["packages"] == {"torch": "2.13.0+cpu", "torchvision": "0.28.0+cpu"}
    assert "torch_before" not in json.loads(Path(man.path).read_text())["extra"]


def test_fix_refuses_a_link_that_would_run_outside_its_venv(tmp_path, offline_pip):
    """A link to venv/bin/python outside the venv starts the base interpreter: pip must not touch that one."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = str(comfy_setup.venv_python(tmp_path / "venv"))
    (tmp_path / "elsewhere" / "bin").mkdir(parents=True)
    link = tmp_path / "elsewhere" / "bin" / "python"
    os.symlink(python, link)
    man = manifest.load_or_new(locations().state_dir, tmp_path / "ComfyUI")
    with pytest.raises(NotReady) as err:
        comfy_setup.fix_torch(ctx(), str(link), load_file(FP_4090), man, offline_pip)
    assert "not the virtual environment" in err.value.message and str(tmp_path / "venv") in err.value.message
    assert "torch_before" not in man.extra


def test_fix_refuses_on_a_machine_that_cannot_run_any_build(tmp_path, offline_pip):
    fp = load_file(FIXTURES / "torchsel" / "linux-rtx3090-driver535.json")
    man = manifest.load_or_new(locations().state_dir, tmp_path / "ComfyUI")
    with pytest.raises(NotReady) as err:
        comfy_setup.fix_torch(ctx(), sys.executable, fp, man, offline_pip)
    assert "560.28.03" in err.value.fix


def test_fix_reports_an_unreachable_index(tmp_path, wheelhouse, monkeypatch, venv_template):
    """A wheel the index does not have: one sentence naming it, exit 3, nothing half-recorded."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    python = make_venv(venv_template, tmp_path / "v")
    pip_install(python, "torch==2.13.0+cpu", wheelhouse=wheelhouse)
    empty = tmp_path / "empty-house"
    empty.mkdir()
    man = manifest.load_or_new(locations().state_dir, tmp_path / "ComfyUI")
    with pytest.raises(NotReady) as err:
        comfy_setup.fix_torch(ctx(), python, load_file(FP_4090), man,
                              comfy_setup.PipOptions([str(empty)], no_index=True))
    assert "no wheel of torch==2.14.1+cu130" in err.value.message
    assert comfy_setup.probe_torch(python)["packages"]["torch"] == "2.13.0+cpu"


def test_offer_is_only_made_in_a_terminal(tmp_path, monkeypatch):
    """--yes, --json or no terminal: no question, so scripts never get a ComfyUI they did not ask for."""
    fp = load_file(FP_4090)
    assert comfy_setup.offer_new_comfyui(ctx(), fp) is None

    class Terminal(Context):
        interactive = True

    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    asked = []
    monkeypatch.setattr("builtins.input", lambda q: asked.append(q) or "n")
    assert comfy_setup.offer_new_comfyui(Terminal(locations=locations()), fp) is None
    assert str(tmp_path / "ComfyUI") in asked[0] and not (tmp_path / "ComfyUI").exists()
    made = []
    monkeypatch.setattr("builtins.input", lambda q: "y")
    monkeypatch.setattr(comfy_setup, "new_comfyui", lambda c, target, source, f: made.append(target) or target)
    assert comfy_setup.offer_new_comfyui(Terminal(locations=locations()), fp) == tmp_path / "ComfyUI" == made[0]
