"""scripts/gpu_check/prepare.py's accounting and choices, with no network: what travels is counted as the
device tool counts it (tracked and untracked-not-ignored files, plus the carried folder), the carried folder is
git-ignored, the wheel list leaves out what the card's image has, and the repacked wheels are stored zips
without the ROCm kernels."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_check_prepare", REPO / "scripts" / "gpu_check" / "prepare.py")
prep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prep)


def _git(repo: Path, *argv: str) -> None:
    subprocess.run(["git", "-C", str(repo), *argv], check=True, capture_output=True, timeout=60)


def test_the_carry_folder_is_ignored_by_git():
    assert prep.is_ignored(REPO / "gpu-carry" / "wheels.tar.xz")
    assert not prep.is_ignored(REPO / "scripts" / "gpu_check.sh")


def test_the_working_tree_counts_tracked_and_untracked_files_but_not_ignored_ones(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("/gpu-carry/\n")
    (tmp_path / "tracked.txt").write_bytes(b"x" * 1000)
    _git(tmp_path, "add", ".gitignore", "tracked.txt")
    (tmp_path / "new.txt").write_bytes(b"y" * 300)
    (tmp_path / "gpu-carry").mkdir()
    (tmp_path / "gpu-carry" / "wheels.tar.xz").write_bytes(b"z" * 5000)
    assert prep.working_tree_bytes(tmp_path) == 1000 + 300 + len("/gpu-carry/\n")
    acc = prep.accounting(tmp_path / "gpu-carry", prep.working_tree_bytes(tmp_path), limit=7000)
    assert acc["carry_bytes"] == 5000 and acc["total_bytes"] == 5000 + acc["working_tree_bytes"]
    assert acc["fits"] and acc["left_bytes"] == 7000 - acc["total_bytes"]
    assert not prep.accounting(tmp_path / "gpu-carry", 2001, limit=7000)["fits"]


def test_the_wheel_list_leaves_out_what_the_image_has_and_what_the_check_does_not_need(tmp_path):
    (tmp_path / "requirements.txt").write_text(
        "comfyui-frontend-package==1.49.6\ntorch\nnumpy>=1.25.0\nav>=16.0.0\ncomfy-kitchen==0.2.31\n"
        "#non essential dependencies:\nkornia>=0.7.1\nPyOpenGL>=3.1.8\n")
    reqs, left = prep.wanted_requirements(tmp_path)
    names = {prep.req_name(r) for r in reqs}
    assert {"av", "comfy-kitchen", "gguf", "hatchling", "platformdirs", "comfy-import-guard"} <= names
    assert not names & {"torch", "numpy", "comfyui-frontend-package", "kornia", "pyopengl", "psutil", "pyyaml"}
    assert left["torch"] == "in the card's image" and "front-end-root" in left["comfyui-frontend-package"]
    assert "non essential" in left["pyopengl"]


def _wheel(path: Path, files: dict[str, bytes], requires: list[str]) -> Path:
    meta = "Metadata-Version: 2.1\nName: comfy-kitchen\nVersion: 0.2.31\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    record = "".join(f"{n},sha256=x,1\n" for n in files) + "comfy_kitchen-0.2.31.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("comfy_kitchen-0.2.31.dist-info/METADATA", meta)
        z.writestr("comfy_kitchen-0.2.31.dist-info/RECORD", record)
    return path


def test_requirements_are_read_for_python_312_on_linux(tmp_path):
    wheel = _wheel(tmp_path / "comfy_kitchen-0.2.31-cp312-abi3-manylinux_2_28_x86_64.whl", {"a.py": b""},
                   ['nvidia-cublas>=13.0.0; extra == "cublas"', 'tomli; python_version < "3.11"',
                    'greenlet; platform_machine == "x86_64"', "typing-extensions>=4"])
    assert prep.wheel_requires(wheel, set()) == ["greenlet", "typing-extensions>=4"]
    assert "nvidia-cublas>=13.0.0" in prep.wheel_requires(wheel, {"cublas"})


def test_repacked_wheels_are_stored_and_lose_the_rocm_backend(tmp_path):
    files = {"comfy_kitchen/__init__.py": b"x = 1\n" * 100, "comfy_kitchen/backends/cuda/_C.abi3.so": b"\0" * 4096,
             "comfy_kitchen/backends/hip/_C.abi3.so": b"\1" * 4096}
    src = _wheel(tmp_path / "comfy_kitchen-0.2.31-cp312-abi3-manylinux_2_28_x86_64.whl", files, [])
    (tmp_path / "out").mkdir()
    out = prep.restored(src, tmp_path / "out")
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
        record = z.read("comfy_kitchen-0.2.31.dist-info/RECORD").decode()
        assert z.read("comfy_kitchen/backends/cuda/_C.abi3.so") == files["comfy_kitchen/backends/cuda/_C.abi3.so"]
    assert not any("/hip/" in n for n in names) and "hip" not in record and "backends/cuda" in record


@pytest.mark.skipif(sys.version_info < (3, 11), reason="prepare reads pyproject.toml with tomllib")
def test_a_checkout_that_is_no_comfyui_is_refused_with_exit_2(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check" / "prepare.py"), "--comfyui",
                           str(tmp_path), "--out", str(tmp_path / "carry")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "is not a ComfyUI checkout" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "carry").exists()
