#!/usr/bin/env python3
"""Build the one folder that travels with the GPU check (scripts/gpu_check.sh prepare).

    python scripts/gpu_check/prepare.py [--out gpu-carry] [--comfyui DIR] [--gguf-git DIR]

The GPU machine has no network and takes at most 64 MiB of files with a run:
the working tree (which already holds h3kit, its node pack and these scripts)
plus the carried folders. So the folder holds, each as one xz archive
(`tarfile`'s xz reads them there, no `xz` binary needed):

- `comfyui.tar.xz`: the ComfyUI tree of H3KIT_COMFYUI_DIR (default
  /root/ComfyUI-h3) without .git, models/, venv/, its tests, __pycache__ and
  the run folders (input/, output/, temp/, user/);
- `comfyui-gguf.tar.xz`: ComfyUI-GGUF, `git archive HEAD` of a local git
  repository (H3KIT_COMFYUI_GGUF_GIT, default the project's mirror);
- `wheels.tar.xz`: the wheels ComfyUI, h3kit and the check need that the
  card's image lacks (IMAGE_HAS: PyTorch 2.11 cu130, torchvision, torchaudio,
  transformers, safetensors, einops, aiohttp, numpy and the rest of its
  list), for CPython 3.12 manylinux x86_64, each rewritten as a stored zip
  so that xz, not zip's deflate, compresses it (comfy-kitchen's CUDA kernels
  go from 48 to about 21 MB); comfy-kitchen's ROCm backend is left out (the
  card is NVIDIA);
- `manifest.json`: what is in each archive, what was left out and why, and
  the size accounting.

Left out of the wheels, each with its reason in the manifest:
comfyui-frontend-package, the workflow templates and embedded docs (the check
starts ComfyUI with --front-end-root on an empty folder of its own: the
server needs no web page), ComfyUI's "non essential" requirements (kornia,
spandrel, PyOpenGL, comfy-angle: no H3 path imports them). PyAV (35 MB) is
carried although the check writes no MP4: ComfyUI's comfy_api imports it at
start, so every H3 node needs it.

It fails with exit 3 and the sizes when the folder and the working tree
together pass 64 MiB; it prints a line per step on stderr.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 64 << 20  # what travels with a run: the working tree and the carried folders
# The card's image ('cuda', read 2026-11-17: /work/.library/device/KINDS.md): names as pip normalises them.
IMAGE_HAS = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs build
certifi charset-normalizer click cloudpickle cmake colorama contourpy cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython einops filelock flatbuffers fonttools frozenlist fsspec h11 h5py hf-xet
httpcore httpx huggingface-hub humanize idna imageio iniconfig jinja2 joblib kiwisolver lazy-loader llvmlite lxml
markdown markdown-it-py markupsafe matplotlib mdurl ml-dtypes mpmath msgpack multidict networkx ninja numba numpy
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile
nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink
nvidia-nvshmem-cu13 nvidia-nvtx onnx opencv-python-headless packaging pandas pathspec pillow pip pluggy
prometheus-client propcache protobuf psutil pyarrow pygments pyparsing pyproject-hooks pytest python-dateutil pyyaml
regex requests rich safetensors scipy sentencepiece setuptools shellingham simplejson six sortedcontainers sympy
tabulate threadpoolctl tifffile tokenizers toolz torch torchaudio torchvision tqdm transformers triton typer
typing-extensions urllib3 uvloop werkzeug wheel wrapt xxhash yarl zipp""".split())
NOT_CARRIED = {
    "comfyui-frontend-package": "the check starts ComfyUI with --front-end-root on an empty folder (no web page)",
    "comfyui-workflow-templates": "the templates browser is not part of the check",
    "comfyui-embedded-docs": "the node docs are not part of the check",
    "kornia": "one of ComfyUI's 'non essential' requirements; no H3 path imports it",
    "spandrel": "one of ComfyUI's 'non essential' requirements; no H3 path imports it",
    "pyopengl": "one of ComfyUI's 'non essential' requirements; no H3 path imports it",
    "comfy-angle": "one of ComfyUI's 'non essential' requirements; no H3 path imports it",
}
# gguf-py: ComfyUI-GGUF and the check's GGUF writer; hatchling: installs the checkout with no index.
CHECK_NEEDS = ["gguf", "hatchling"]
TREE_SKIP = {".git", "models", "venv", ".venv", "tests", "tests-unit", "__pycache__", "input", "output", "temp",
             "user", ".github", ".ci"}
PLATFORMS = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"] + [
    f"manylinux_2_{n}_x86_64" for n in (5, 12, 17, 24, 26, 27, 28, 31, 34, 35, 36, 38, 39)]
MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
# What only runs on AMD cards: left out of the CUDA machine's copy (the ROCm kernels are 11 MB).
DROP_IN_WHEEL = {"comfy-kitchen": "comfy_kitchen/backends/hip/"}


def say(text: str) -> None:
    print(f"gpu_check prepare: {text}", file=sys.stderr, flush=True)


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wanted_requirements(comfy: Path) -> tuple[list[str], dict]:
    """ComfyUI's requirements.txt, h3kit's dependencies and the check's own, less what is not carried:
    (requirement strings, {name: why left out})."""
    import tomllib

    lines = (comfy / "requirements.txt").read_text(encoding="utf-8").splitlines()
    reqs = [ln.split("#")[0].strip() for ln in lines]
    reqs += tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    out, left = [], {}
    for req in [r for r in reqs if r] + CHECK_NEEDS:
        name = req_name(req)
        if name in NOT_CARRIED:
            left[name] = NOT_CARRIED[name]
        elif name in IMAGE_HAS:
            left[name] = "in the card's image"
        elif req not in out:
            out.append(req)
    return out, left


def pip_download(reqs: list[str], dest: Path) -> None:
    """One `pip download` of `reqs` for CPython 3.12 manylinux x86_64, wheels only, no dependencies."""
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
            "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3",
            "--abi", "none", "-d", str(dest)]
    for p in PLATFORMS:
        argv += ["--platform", p]
    done = subprocess.run(argv + reqs, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"gpu_check prepare: pip could not download {', '.join(reqs)} for Python 3.12 "
                         f"(is PyPI reachable?): {done.stderr.strip().splitlines()[-1:]}")


def wheel_requires(wheel: Path, extras: set[str]) -> list[str]:
    """The Requires-Dist lines of `wheel` that hold on the card (Python 3.12, Linux x86_64) for `extras`."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate(dict(MARKERS, extra=e)) for e in extras | {""}):
            out.append(str(req).split(";")[0].strip())
    return out


def req_name(req: str) -> str:
    return norm(re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0])


def wheel_name(path: Path) -> str:
    return norm(path.name.split("-")[0])


def download_closure(reqs: list[str], dest: Path, left: dict) -> list[Path]:
    """The wheels of `reqs` and of what they need, level by level, skipping what the image has."""
    have: dict[str, Path] = {}
    queue = list(reqs)
    while queue:
        say(f"downloading {len(queue)} wheel(s): {', '.join(queue)}")
        before = set(dest.iterdir())
        pip_download(queue, dest)
        new = set(dest.iterdir()) - before
        for wheel in new:
            have[wheel_name(wheel)] = wheel
        nxt = []
        for req in queue:
            name = req_name(req)
            extras = set(re.findall(r"\[([^\]]+)\]", req)[0].split(",")) if "[" in req else set()
            if name not in have:
                continue
            for dep in wheel_requires(have[name], extras):
                dname = req_name(dep)
                if dname in IMAGE_HAS or dname in NOT_CARRIED:
                    left.setdefault(dname, "in the card's image" if dname in IMAGE_HAS else NOT_CARRIED[dname])
                elif dname not in have and dname not in {req_name(x) for x in nxt}:
                    nxt.append(dep)
        queue = nxt
    return sorted(have.values())


def restored(wheel: Path, dest: Path) -> Path:
    """`wheel` rewritten as a stored (uncompressed) zip in `dest`, less DROP_IN_WHEEL's folder and its RECORD
    lines: xz then compresses the whole set far better than zip's deflate did file by file."""
    drop = DROP_IN_WHEEL.get(wheel_name(wheel))
    out = dest / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if drop and info.filename.startswith(drop):
                continue
            data = src.read(info)
            if drop and info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(ln for ln in io.BytesIO(data) if not ln.startswith(drop.encode()))
            dst.writestr(zipfile.ZipInfo(info.filename, info.date_time), data, zipfile.ZIP_STORED)
    return out


def xz_folder(folder: Path, archive: Path, arcname: str) -> int:
    """`folder` as `archive` (tar, xz -9 on every core through the xz tool, else Python's lzma)."""
    t0 = time.monotonic()
    if shutil.which("xz") and shutil.which("tar"):
        with open(archive, "wb") as f:
            tar = subprocess.Popen(["tar", "-C", str(folder.parent), "-cf", "-", "--transform",
                                    f"s,^{re.escape(folder.name)},{arcname},", folder.name], stdout=subprocess.PIPE)
            xz = subprocess.run(["xz", "-9", "-T0", "--block-size=64MiB", "-c"], stdin=tar.stdout, stdout=f,
                                timeout=1800)
            tar.stdout.close()
            if tar.wait(timeout=60) != 0 or xz.returncode != 0:
                raise SystemExit(f"gpu_check prepare: tar | xz of {folder} failed")
    else:
        with tarfile.open(archive, "w:xz", preset=9) as tar:
            tar.add(folder, arcname=arcname)
    size = archive.stat().st_size
    say(f"{archive.name}: {size / 2**20:.1f} MiB in {time.monotonic() - t0:.0f} s")
    return size


def copy_tree(comfy: Path, dest: Path) -> int:
    """The ComfyUI tree without TREE_SKIP at its top and __pycache__ anywhere; returns the file count."""
    def ignore(folder, names):
        return [n for n in names if n == "__pycache__" or n.endswith(".pyc") or
                (Path(folder) == comfy and n in TREE_SKIP)]

    shutil.copytree(comfy, dest, ignore=ignore, symlinks=True)
    return sum(1 for p in dest.rglob("*") if p.is_file())


def gguf_pack(git_dir: Path, dest: Path) -> str:
    """ComfyUI-GGUF's files (`git archive HEAD`) in `dest`; returns the commit."""
    git = git_dir if (git_dir / "HEAD").is_file() else git_dir / ".git"
    if not (git / "HEAD").is_file():
        raise SystemExit(f"gpu_check prepare: no ComfyUI-GGUF git repository at {git_dir}; set "
                         "H3KIT_COMFYUI_GGUF_GIT to a clone or mirror of city96/ComfyUI-GGUF.")
    archive = subprocess.run(["git", f"--git-dir={git}", "archive", "--format=tar", "HEAD"], capture_output=True,
                             timeout=120, check=True).stdout
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return subprocess.run(["git", f"--git-dir={git}", "rev-parse", "HEAD"], capture_output=True, text=True,
                          timeout=60, check=True).stdout.strip()


def working_tree_bytes(repo: Path = REPO) -> int:
    """Bytes of what travels as the working tree: tracked files and untracked ones git does not ignore."""
    done = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          capture_output=True, timeout=120, check=True)
    files = {f for f in done.stdout.decode("utf-8", "replace").split("\0") if f}
    return sum((repo / f).stat().st_size for f in files if (repo / f).is_file() and not (repo / f).is_symlink())


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def accounting(carry: Path, tree: int, limit: int = LIMIT) -> dict:
    """The size check: the carried folder and the working tree against what a run takes."""
    carried = folder_bytes(carry)
    total = carried + tree
    return {"carry_bytes": carried, "working_tree_bytes": tree, "total_bytes": total, "limit_bytes": limit,
            "fits": total <= limit, "left_bytes": limit - total}


def is_ignored(path: Path, repo: Path = REPO) -> bool:
    """Whether git ignores `path` (the carried folder must not travel twice nor be committed)."""
    done = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", str(path)], capture_output=True, timeout=60)
    return done.returncode == 0


def build_wheels(comfy: Path, work: Path) -> tuple[list[dict], dict]:
    reqs, left = wanted_requirements(comfy)
    raw, stored = work / "raw", work / "wheels"
    raw.mkdir()
    stored.mkdir()
    wheels = download_closure(reqs, raw, left)
    say(f"rewriting {len(wheels)} wheels as stored zips (comfy-kitchen without its ROCm backend)")
    listed = []
    for w in wheels:
        out = restored(w, stored)
        listed.append({"wheel": w.name, "download_bytes": w.stat().st_size, "stored_bytes": out.stat().st_size})
    return listed, left


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "gpu-carry", help="the folder to build (git-ignored)")
    ap.add_argument("--comfyui", type=Path, default=Path(os.environ.get("H3KIT_COMFYUI_DIR") or "/root/ComfyUI-h3"))
    ap.add_argument("--gguf-git", type=Path,
                    default=Path(os.environ.get("H3KIT_COMFYUI_GGUF_GIT") or "/work/.mirror/city96+ComfyUI-GGUF/repo"))
    return ap.parse_args()


def main() -> int:
    a = _arguments()
    if not (a.comfyui / "requirements.txt").is_file() or not (a.comfyui / "comfy").is_dir():
        say(f"{a.comfyui} is not a ComfyUI checkout; set H3KIT_COMFYUI_DIR to one (docs/development.md).")
        return 2
    if not is_ignored(a.out / "x"):
        say(f"{a.out} is not ignored by git: it would travel twice; keep it at the checkout's gpu-carry/.")
        return 2
    t0 = time.monotonic()
    shutil.rmtree(a.out, ignore_errors=True)
    a.out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="h3kit-gpu-carry-") as tmp:
        work = Path(tmp)
        say(f"copying the ComfyUI tree of {a.comfyui} (no .git, models, venv, tests)")
        files = copy_tree(a.comfyui, work / "ComfyUI")
        say("unpacking ComfyUI-GGUF from its git repository")
        commit = gguf_pack(a.gguf_git, work / "ComfyUI-GGUF")
        wheels, left = build_wheels(a.comfyui, work)
        sizes = {"comfyui.tar.xz": xz_folder(work / "ComfyUI", a.out / "comfyui.tar.xz", "ComfyUI"),
                 "comfyui-gguf.tar.xz": xz_folder(work / "ComfyUI-GGUF", a.out / "comfyui-gguf.tar.xz",
                                                  "ComfyUI-GGUF")}
        say("compressing the wheels (xz -9: a few minutes on two cores)")
        sizes["wheels.tar.xz"] = xz_folder(work / "wheels", a.out / "wheels.tar.xz", "wheels")
    manifest = {"schema": "h3kit.gpu_carry/1", "comfyui": {"source": str(a.comfyui), "files": files},
                "comfyui_gguf": {"source": str(a.gguf_git), "commit": commit}, "wheels": wheels,
                "not_carried": dict(sorted(left.items())), "archives": sizes, "python": "cp312 manylinux x86_64",
                "pack": "the working tree travels with every run, so h3kit and its node pack are there already"}
    (a.out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    acc = accounting(a.out, working_tree_bytes())
    manifest["size"] = acc
    (a.out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    say(f"carry {acc['carry_bytes'] / 2**20:.1f} MiB + working tree {acc['working_tree_bytes'] / 2**20:.1f} MiB = "
        f"{acc['total_bytes'] / 2**20:.1f} MiB of {LIMIT / 2**20:.0f} MiB, in {time.monotonic() - t0:.0f} s")
    if not acc["fits"]:
        say(f"too large by {-acc['left_bytes'] / 2**20:.1f} MiB: a run takes at most 64 MiB with the working tree; "
            "leave more out (NOT_CARRIED in scripts/gpu_check/prepare.py) or make the working tree smaller.")
        return 3
    print(json.dumps(acc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
