"""When PyTorch's index cannot be reached: the connect probe, pip's own index asked instead, and what is taken.

The "unreachable" hosts are closed ports on 127.0.0.1; pip's index is a folder of tiny
wheels made here (with the Requires-Dist lines of the real PyPI torch wheel), so pip runs
for real and nothing leaves this machine.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import zipfile
from pathlib import Path

import pytest

from h3kit.comfyui.setup import torch_source
from model_server import closed_port
from h3kit.core import net
from h3kit.core.errors import NotReady
from h3kit.core.session import Session
from h3kit.core.tools import PipOptions
from h3kit.plan import torch_build
from h3kit.fingerprint.schema import load_file
from tests.conftest import FIXTURES

RECORDED = FIXTURES / "torchsel" / "recorded"


def _fp(name: str) -> dict:
    return load_file(FIXTURES / "torchsel" / f"{name}.json")


def test_a_closed_port_is_unreachable_at_once_and_asked_once():
    url = f"http://127.0.0.1:{closed_port()}/whl/cpu"
    start = time.monotonic()
    assert net.unreachable(url) == "the connection was refused"
    assert time.monotonic() - start < 1.0
    assert net.unreachable(url + "/other") == "the connection was refused"  # remembered per host and port


def test_a_listening_host_and_local_paths(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        assert net.unreachable(f"http://127.0.0.1:{s.getsockname()[1]}/simple") is None
    finally:
        s.close()
    assert net.unreachable(tmp_path.as_uri()) is None
    assert "does not exist" in net.unreachable(str(tmp_path / "nope"))


def test_the_probe_goes_to_the_proxy_that_the_environment_names(monkeypatch):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{s.getsockname()[1]}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert net.unreachable("https://download.pytorch.invalid/whl/cpu") is None
    finally:
        s.close()


def test_pip_config_list_is_read_with_pips_precedence():
    cfg = torch_source.parse_pip_config((RECORDED / "pip-config-list.txt").read_text())
    assert cfg == {"index_url": None, "extra_index_urls": ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"],
                   "find_links": ["/opt/wheels"]}
    text = "global.index-url='https://a.example/simple'\n:env:.index-url='https://b.example/simple'\n"
    assert torch_source.parse_pip_config(text)["index_url"] == "https://b.example/simple"


def test_the_recorded_pypi_report_is_a_cuda_13_build_that_runs_on_a_cpu_box_only():
    info = torch_source.read_report(json.loads((RECORDED / "pip-report-torch-2.14.1-pypi.json").read_text()), "linux")
    assert (info["torch_version"], info["torch_build"], info["build"]) == ("2.14.1", "cuda", "cu130")
    assert info["packages"]["torchvision"] == "0.29.1"
    assert torch_build.check(_fp("linux-cpu-only"), info) == []
    assert torch_build.check(_fp("linux-rtx4090-driver580"), info) == []
    [problem] = torch_build.check(_fp("linux-rtx4090-driver570-nocuda"), info)
    assert problem["kind"] == "cuda-too-new"


def test_the_line_says_what_was_taken_its_size_and_that_the_cpu_wheel_is_smaller():
    taken = {"planned_build": "cpu", "planned_index": "https://download.pytorch.org/whl/cpu", "torch": "2.14.1",
             "build": "cu130", "backend": "cuda", "from": "pypi.org", "download_bytes": 2_900_000_000}
    line = torch_source.taken_line(taken, torch_build.builds_table())
    assert "torch 2.14.1 (cu130 build, 2.9 GB" in line and "download.pytorch.org could not be reached" in line
    assert "also runs on the CPU" in line and "0.2 GB" in line


# -- pip for real, on a folder of tiny wheels -------------------------------------------

def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    dist = f"{name.replace('-', '_')}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", meta)
        z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: h3kit-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")


@pytest.fixture
def pypi_like(tmp_path, monkeypatch):
    """pip's index: a folder with torch 2.14.1 as PyPI publishes it (a CUDA 13.0 build) and its companions."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "torch", "2.14.1", ["cuda-toolkit[cublas,cudart]==13.0.3; platform_system == \"Linux\""])
    _wheel(wheels, "torchvision", "0.29.1", ["torch==2.14.1"])
    _wheel(wheels, "torchaudio", "2.11.1", ["torch"])
    _wheel(wheels, "cuda-toolkit", "13.0.3", [])
    empty = tmp_path / "simple"
    empty.mkdir()
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no pip.conf: only the folder below
    monkeypatch.setenv("PIP_INDEX_URL", empty.as_uri())
    monkeypatch.setenv("H3KIT_TORCH_INDEX_URL", f"http://127.0.0.1:{closed_port()}/whl")
    return PipOptions(find_links=[str(wheels)])


def test_a_cpu_box_takes_the_pypi_wheel_when_pytorchs_index_is_unreachable(pypi_like):
    ctx = Session()
    choice = torch_build.choose(_fp("linux-cpu-only"))
    start = time.monotonic()
    got, taken = torch_source.reachable_choice(ctx, sys.executable, choice, _fp("linux-cpu-only"), pypi_like,
                                               timeout=120)
    assert time.monotonic() - start < 60
    assert got["index_url"] is None and got["local_tag"] is None
    assert torch_build.requirements(got, local=True) == ["torch==2.14.1", "torchvision==0.29.1", "torchaudio>=2.11"]
    assert (taken["torch"], taken["build"], taken["planned_build"]) == ("2.14.1", "cu130", "cpu")
    assert taken["unreachable"] == "the connection was refused" and taken["download_bytes"] > 0


def test_a_gpu_box_whose_driver_cannot_run_that_wheel_stops_naming_the_index(pypi_like):
    fp = _fp("linux-rtx4090-driver570-nocuda")
    with pytest.raises(NotReady) as exc:
        torch_source.reachable_choice(Session(), sys.executable, torch_build.choose(fp), fp, pypi_like, timeout=120)
    assert "cu126 index http://127.0.0.1:" in exc.value.message and "/whl/cu126 cannot be reached" in exc.value.message
    assert "cu130" in exc.value.message
    assert "H3KIT_TORCH_INDEX_URL" in exc.value.fix and "H3KIT_PIP_FIND_LINKS" in exc.value.fix


def test_a_gpu_box_the_pypi_wheel_drives_takes_it(pypi_like):
    fp = _fp("linux-rtx4090-driver580")
    got, taken = torch_source.reachable_choice(Session(), sys.executable, torch_build.choose(fp), fp, pypi_like,
                                               timeout=120)
    assert got["index_url"] is None and taken["build"] == "cu130"


def test_a_mirror_that_replaces_every_index_is_not_second_guessed(monkeypatch):
    monkeypatch.setenv("H3KIT_TORCH_INDEX_URL", f"http://127.0.0.1:{closed_port()}/whl")
    choice = torch_build.choose(_fp("linux-cpu-only"))
    got, taken = torch_source.reachable_choice(Session(), sys.executable, choice, _fp("linux-cpu-only"),
                                               PipOptions(index_url="https://mirror.example/simple"), timeout=5)
    assert got is choice and taken is None


def test_the_torch_mirror_gets_the_builds_folder():
    choice = torch_build.choose(_fp("linux-cpu-only"))
    assert torch_source.planned_index(choice, {"H3KIT_TORCH_INDEX_URL": "https://mirror.example/pytorch/whl/"}) \
        == "https://mirror.example/pytorch/whl/cpu"
    assert torch_source.planned_index(choice, {}) == "https://download.pytorch.org/whl/cpu"
    apple = torch_build.choose(_fp("darwin-m3max-128"))
    assert torch_source.planned_index(apple, {"H3KIT_TORCH_INDEX_URL": "https://mirror.example/whl"}) is None


def test_doctor_names_the_torch_that_was_taken():
    class Record:
        extra = {"comfyui_setup": {"torch_taken": {
            "planned_build": "cpu", "planned_index": "https://download.pytorch.org/whl/cpu", "torch": "2.14.1",
            "build": "cu130", "backend": "cuda", "from": "pypi.org", "download_bytes": None,
            "unreachable": "its name does not resolve"}}}

    [finding] = torch_source.taken_findings(Record())
    assert finding["check"] == "torch.source" and finding["status"] == "ok"
    assert finding["message"].startswith("Took torch 2.14.1 (cu130 build) from pypi.org")
    assert "its name does not resolve" in finding["message"]
    assert torch_source.taken_findings(None) == []


def test_git_urls_of_every_kind_name_their_host_and_port(monkeypatch):
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert net.host_of("git@github.com:city96/ComfyUI-GGUF.git") == "github.com"
    assert net._endpoint("git@github.com:city96/ComfyUI-GGUF.git") == ("github.com", 22)
    assert net._endpoint("ssh://git@example.org/x.git") == ("example.org", 22)
    assert net._endpoint("git://example.org/x.git") == ("example.org", 9418)
    assert net._endpoint("https://example.org:8443/x") == ("example.org", 8443)
