"""doctor --fix/--undo and a new ComfyUI, for real: venvs, pip, git, with tiny wheels built here (no network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from comfy_setup_support import FP_4090, ctx, make_venv, pip_install
from h3kit.cli.context import Context
from h3kit.comfyui import manifest
from h3kit.comfyui import setup as comfy_setup
from h3kit.comfyui.setup import create
from h3kit.core import tools
from h3kit.core.errors import BadInput, NotReady
from h3kit.core.paths import locations
from h3kit.core.venv import venv_python
from h3kit.fingerprint.schema import load_file
from h3kit.plan import torch_build
from tests.conftest import FIXTURES

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test


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
    ("fatal: could not read Username for 'https://github.com': terminal prompts disabled", "asked for a login"),
    ("git@github.com: Permission denied (publickey).\r\nfatal: Could not read from remote repository.", "asked for a login"),
    ("remote: Permission to x/y.git denied to u.\nfatal: unable to access 'https://github.com/x/y.git/': The requested "
     "URL returned error: 403", "asked for a login"),
    ("fatal: unable to access 'https://github.com/x/y.git/': SSL certificate problem: self-signed certificate in "
     "certificate chain", "TLS certificate"),
    ("fatal: could not create work tree dir 'ComfyUI': Permission denied", "not writable"),
]


@pytest.mark.parametrize("text,expect", GIT_ERRORS)
def test_classify_git_error(text, expect):
    sentence, fix = tools.classify("git", text)
    assert expect in sentence and fix
    assert "git is not installed" in tools.classify("git", "", "missing")[0]


PIP_ERRORS = [
    ("WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by "
     "'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new "
     "connection: [Errno -3] Temporary failure in name resolution')': /whl/cu130/torch/", "no network"),
    ("WARNING: Retrying ... after connection broken by 'ProxyError('Cannot connect to proxy.', OSError('Tunnel connection "
     "failed: 407 Proxy Authentication Required'))': /simple/torch/", "proxy"),
    ("ERROR: Could not find a version that satisfies the requirement torch==2.14.1+cu130 (from versions: none)\n"
     "ERROR: No matching distribution found for torch==2.14.1+cu130", "no wheel of torch==2.14.1+cu130"),
    ("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device", "disk is full"),
    ("ERROR: Could not install packages due to an OSError: [Errno 13] Permission denied: "
     "'/usr/lib/python3/dist-packages/torch'\nConsider using the `--user` option or check the permissions.", "not writable"),
    ("Could not fetch URL https://pypi.org/simple/torch/: There was a problem confirming the ssl certificate: "
     "HTTPSConnectionPool(host='pypi.org', port=443): Max retries exceeded with url: /simple/torch/ (Caused by "
     "SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get "
     "local issuer certificate (_ssl.c:1006)')))", "TLS certificate"),
    ("WARNING: Retrying ... after connection broken by 'NewConnectionError('<...>: Failed to establish a new connection: "
     "[Errno 101] Network is unreachable')': /simple/torch/", "no network"),
]


@pytest.mark.parametrize("text,expect", PIP_ERRORS)
def test_classify_pip_error(text, expect):
    sentence, fix = tools.classify("pip", text)
    assert expect in sentence and fix


def test_classify_adds_the_callers_way_around_the_network_only_where_it_helps():
    offline = "or pass a downloaded ComfyUI .zip with --comfyui-source"
    assert tools.classify("git", GIT_ERRORS[0][0], alternative=offline)[1].endswith(offline + ".")
    assert tools.classify("git", "", "missing", alternative=offline)[1].endswith(offline + ".")
    assert offline not in tools.classify("git", GIT_ERRORS[3][0], alternative=offline)[1]  # a wrong URL stays wrong
    assert "H3KIT_PIP_FIND_LINKS" in tools.classify("pip", PIP_ERRORS[0][0])[1]  # pip's own: a folder of wheels
    sentence, fix = tools.classify("pip", "something new\nERROR: the last line says it")
    assert sentence == "pip reported: ERROR: the last line says it" and "-v" in fix


def test_an_unknown_failure_is_named_by_its_fatal_line_not_the_advice_after_it():
    # git 2.43's output for a clone from a copy that lacks some of its files (recorded here, from a snapshot)
    text = ("Cloning into 'ComfyUI'...\nwarning: --depth is ignored in local clones; use file:// instead.\ndone.\n"
            "error: unable to read sha1 file of comfy/text_encoders/llama_tokenizer/tokenizer.json (99f23954b4)\n"
            "fatal: unable to checkout working tree\nwarning: Clone succeeded, but checkout failed.\n"
            "You can inspect what was checked out with 'git status'\n"
            "and retry with 'git restore --source=HEAD :/'\n")
    assert tools.classify("git", text)[0] == "git reported: fatal: unable to checkout working tree"
    assert tools.telling_line("x\nerror: first\nerror: second\nnote") == "error: first"
    assert tools.telling_line("") == "no output"


def test_run_pip_and_git_honour_the_options(monkeypatch):
    """One runner: offline/mirror arguments on install only, git never waits at a login prompt, failures classified."""
    seen = []

    def fake_run(argv, **kw):
        seen.append((argv, kw))
        return tools.subproc.ToolResult(list(argv), "error", 1, "", "ERROR: No matching distribution found for x")

    monkeypatch.setattr(tools.subproc, "run", fake_run)
    monkeypatch.setattr(tools.subproc, "which", lambda name: "/usr/bin/git")
    opts = tools.PipOptions(["/wheels"], no_index=True)
    with pytest.raises(NotReady) as err:
        tools.run_pip(ctx(), "/py", ["install", "x"], "Installing x", timeout=5, opts=opts, index_url="https://i")
    assert seen[-1][0][:7] == ["/py", "-m", "pip", "install", "x", "--no-index", "--find-links"]
    assert err.value.message == "Installing x failed: a package was not found on the index."
    with pytest.raises(NotReady):
        tools.run_pip(ctx(), "/py", ["uninstall", "-y", "x"], "Removing x", timeout=5, opts=opts)
    assert "--no-index" not in seen[-1][0]
    with pytest.raises(NotReady):
        tools.run_git(ctx(), ["clone", "u", "d"], "Cloning u", timeout=5)
    assert seen[-1][0][:2] == ["/usr/bin/git", "clone"] and seen[-1][1]["env"]["GIT_TERMINAL_PROMPT"] == "0"


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

@pytest.mark.slow
def test_fix_then_undo_in_a_throwaway_venv(tmp_path, wheelhouse, offline_pip, venv_template):
    python = make_venv(venv_template, tmp_path / "comfy-venv")
    pip_install(python, "torch==2.13.0+cpu", "torchvision==0.28.0+cpu", wheelhouse=wheelhouse)
    fp = load_file(FP_4090)
    before = comfy_setup.probe_torch(python)
    assert before["torch_version"] == "2.13.0+cpu" and before["torch_build"] == "cpu"
    findings = torch_build.doctor_findings(fp, before)
    assert findings[0]["status"] == "fail" and "cu130" in findings[0]["fix"]

    man = manifest.load_or_new(locations().state_dir, tmp_path / "ComfyUI")
    result = comfy_setup.fix_torch(ctx(), python, fp, man, offline_pip)
    assert result["changed"] is True
    after = comfy_setup.probe_torch(python, import_torch=True)
    assert after["packages"] == {"torch": "2.14.1+cu130", "torchvision": "0.29.1+cu130", "torchaudio": "2.11.0+cu130"}
    assert after["torch_cuda"] == "13.0"
    assert torch_build.check(fp, after) == []
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
    python = str(venv_python(tmp_path / "venv"))
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


def test_no_comfyui_found_offers_one_next_to_h3kits_data(tmp_path, monkeypatch):
    """The question lists what was searched and defaults to yes; --yes answers it; a script without a
    terminal and without --yes gets nothing it did not ask for."""
    fp = load_file(FP_4090)
    made = []
    monkeypatch.setattr(create, "new_comfyui", lambda c, target, source, f: made.append(target) or target)
    default = create.new_comfyui_dir(locations())
    assert default == Path(os.environ["H3KIT_HOME"]) / "ComfyUI"  # next to h3kit's data, never a system folder
    assert comfy_setup.offer_new_comfyui(Context(), fp) is None and made == []  # no terminal, no --yes

    @dataclass
    class Terminal(Context):
        answers: list = field(default_factory=list)
        asked: list = field(default_factory=list)
        said: list = field(default_factory=list)

        @property
        def interactive(self) -> bool:
            return True

        def ask(self, question, default=""):
            self.asked.append(question)
            return self.answers.pop(0)

        def progress(self, message):
            self.said.append(message)

    term = Terminal(locations=locations(), answers=["n"])
    assert comfy_setup.offer_new_comfyui(term, fp, searched=["~/ComfyUI", "the current folder"]) is None
    assert term.asked == [f"Set up ComfyUI 0.30.0 or newer with MiniMax H3 support at {default}? [Y/n] "]
    assert "Searched:" in term.said[0] and "~/ComfyUI" in term.said[0] and made == []
    term = Terminal(locations=locations(), answers=[""])  # Enter takes the default: yes
    assert comfy_setup.offer_new_comfyui(term, fp) == default == made[-1]
    assert comfy_setup.offer_new_comfyui(Context(yes=True), fp) == default and len(made) == 2  # --yes: no question


def test_install_without_comfyui_and_no_new_comfyui_exits_3_naming_comfyui(tmp_path, run_cli, monkeypatch):
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    monkeypatch.delenv("COMFYUI_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(create, "new_comfyui", lambda *a: pytest.fail("--no-new-comfyui must not set one up"))
    code, out, err = run_cli("install", "--yes", "--no-new-comfyui", "--skip-calibrate", "--no-models",
                             "--fingerprint", str(FP_4090))
    assert code == 3 and "--comfyui" in err


@pytest.fixture
def room_for_a_download(monkeypatch):
    """A disk with room for the torch build's download: these tests are about the ComfyUI source, which is asked
    after the disk check, so the machine's free disk must not decide them (test_disk_need covers that check)."""
    from h3kit.comfyui.setup import disk_need

    monkeypatch.setattr(disk_need, "free_bytes", lambda path: 1 << 50)


@pytest.mark.usefixtures("room_for_a_download")
def test_offline_new_comfyui_is_one_sentence_naming_comfyui_source(tmp_path, run_cli, monkeypatch):
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    monkeypatch.delenv("COMFYUI_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("install", "--yes", "--skip-calibrate", "--no-models", "--fingerprint", str(FP_4090),
                             "--comfyui-source", "https://127.0.0.1:9/nothing-here/ComfyUI.git")
    assert code == 3, err
    assert "--comfyui-source" in err and "Traceback" not in err


@pytest.mark.usefixtures("room_for_a_download")
def test_an_unreachable_comfyui_repository_is_reported_at_once_naming_comfyui_source(tmp_path):
    import time

    from model_server import closed_port

    source = f"http://127.0.0.1:{closed_port()}/Comfy-Org/ComfyUI.git"
    start = time.monotonic()
    with pytest.raises(NotReady) as err:
        comfy_setup.new_comfyui(ctx(), tmp_path / "ComfyUI", source, load_file(FP_4090))
    assert time.monotonic() - start < 5
    assert source in err.value.message and "cannot be reached" in err.value.message
    assert "--comfyui-source" in err.value.fix and not (tmp_path / "ComfyUI").exists()


def test_a_missing_wheel_folder_is_said_before_anything_is_fetched(tmp_path):
    opts = tools.PipOptions.from_env({"H3KIT_PIP_FIND_LINKS": str(tmp_path / "no-such-wheels"),
                                      "H3KIT_PIP_NO_INDEX": "1"})
    with pytest.raises(BadInput) as err:
        comfy_setup.new_comfyui(ctx(), tmp_path / "ComfyUI", str(tmp_path / "no-such-source"), load_file(FP_4090),
                                opts=opts)
    assert err.value.message == (f"H3KIT_PIP_FIND_LINKS names the wheel folder {tmp_path / 'no-such-wheels'}, "
                                 "which does not exist.")
    assert not (tmp_path / "ComfyUI").exists() and not (tmp_path / "ComfyUI.h3kit-partial").exists()
