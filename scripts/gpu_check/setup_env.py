#!/usr/bin/env python3
"""The GPU machine's side of the carry: unpack it and make ComfyUI's venv (standard library only).

    python3 scripts/gpu_check/setup_env.py --carry gpu-carry --work DIR

Run with the image's Python (3.12, PyTorch installed). Unpacks comfyui.tar.xz,
comfyui-gguf.tar.xz and wheels.tar.xz (scripts/gpu_check/prepare.py) into
--work, makes DIR/ComfyUI/venv with --system-site-packages and, where the
image's Python is itself a venv (its packages are then not the "system" ones
a new venv sees), a .pth file naming the image's site-packages; installs the
carried wheels with no index and no dependency resolution (the image's
packages stand for the rest; `pip check` says what does not match), and the
checkout itself. Prints one JSON line: the paths, seconds and pip check.
Exit 3 when the carry is missing or an install fails, with the reason.
"""

from __future__ import annotations

import argparse
import json
import site
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHIVES = ("comfyui.tar.xz", "comfyui-gguf.tar.xz", "wheels.tar.xz")


def say(text: str) -> None:
    print(f"gpu_check setup: {text}", file=sys.stderr, flush=True)


def fail(text: str) -> None:
    say(text)
    raise SystemExit(3)


def run(argv: list[str], timeout: int, what: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail(f"{what} took over {timeout} s")
    if done.returncode != 0:
        fail(f"{what} failed: {(done.stderr or done.stdout).strip()[-1500:]}")
    return done.stdout


def unpack(carry: Path, work: Path) -> None:
    for name in ARCHIVES:
        if not (carry / name).is_file():
            fail(f"{carry / name} is missing: run `scripts/gpu_check.sh prepare` here first and carry {carry.name}.")
    for name in ARCHIVES:
        t0 = time.monotonic()
        with tarfile.open(carry / name, "r:xz") as tar:
            tar.extractall(work, filter="data")
        say(f"unpacked {name} in {time.monotonic() - t0:.1f} s")


def make_venv(comfy: Path) -> tuple[Path, list[str]]:
    """ComfyUI's venv on the image's packages: (its Python, the pip command for it). Without ensurepip in the
    image the venv has no pip of its own, and the image's pip installs into it (pip --python)."""
    venv = comfy / "venv"
    argv = [sys.executable, "-m", "venv", "--system-site-packages", str(venv)]
    python = venv / "bin" / "python"
    if subprocess.run(argv, capture_output=True, timeout=120).returncode == 0:
        pip = [str(python), "-m", "pip"]
    else:
        run(argv[:-1] + ["--without-pip", str(venv)], 120, "making the venv")
        pip = [sys.executable, "-m", "pip", "--python", str(python)]
    sees = run([str(python), "-c", "import importlib.util as u; print(bool(u.find_spec('torch')))"], 60, "a venv probe")
    if sees.strip() != "True":  # the image's Python is a venv itself: name its site-packages
        purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], 60,
                      "a venv probe").strip()
        dirs = [d for d in site.getsitepackages() if Path(d).is_dir()]
        Path(purelib, "_h3kit_gpu_check_image.pth").write_text("\n".join(dirs) + "\n", encoding="utf-8")
        say(f"the image's Python is a venv: its site-packages named in a .pth ({', '.join(dirs)})")
    return python, pip


def install(pip: list[str], wheels: Path) -> str:
    files = sorted(str(w) for w in wheels.glob("*.whl"))
    t0 = time.monotonic()
    run([*pip, "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
         "--find-links", str(wheels), *files], 600, "installing the carried wheels")
    say(f"installed {len(files)} wheels in {time.monotonic() - t0:.0f} s")
    run([*pip, "install", "--quiet", "--no-index", "--no-deps", "--no-build-isolation",
         str(REPO)], 300, "installing the checkout (h3kit)")
    say("installed h3kit from the checkout")
    done = subprocess.run([*pip, "check"], capture_output=True, text=True, timeout=120)
    return (done.stdout + done.stderr).strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--carry", type=Path, default=REPO / "gpu-carry")
    ap.add_argument("--work", type=Path, required=True)
    a = ap.parse_args()
    t0 = time.monotonic()
    a.work.mkdir(parents=True, exist_ok=True)
    unpack(a.carry, a.work)
    python, pip = make_venv(a.work / "ComfyUI")
    checked = install(pip, a.work / "wheels")
    doc = {"comfyui": str(a.work / "ComfyUI"), "python": str(python), "gguf_pack": str(a.work / "ComfyUI-GGUF"),
           "seconds": round(time.monotonic() - t0, 1), "pip_check": checked,
           "image_python": sys.executable, "image_version": sys.version.split()[0]}
    (a.work / "env.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
