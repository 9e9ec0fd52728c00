"""What the ComfyUI-setup tests share (not a test module): tiny wheels built here, throwaway venvs, a quiet Context.

The fixtures built on these (`wheelhouse`, `offline_pip`, `venv_template`) are in conftest.py.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path

from h3kit.cli.context import Context
from h3kit.core.paths import locations
from h3kit.core.venv import venv_python

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
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


def fill_wheelhouse(house: Path) -> Path:
    torch_wheels(house, "2.13.0", "0.28.0", None, "cpu")          # what a user has by mistake
    torch_wheels(house, "2.14.1", "0.29.1", "2.11.0", "cu130")     # what a 4090 with driver 580 needs
    torch_wheels(house, "2.14.1", "0.29.1", "2.11.0", "cpu")       # a same-version decoy of the wrong build
    # A newer torch that an unconstrained 'pip install -r requirements.txt' would grab.
    make_wheel(house, "torch", "2.15.0", {"torch/__init__.py": TORCH_INIT.format(version="2.15.0", cuda=None)})
    make_wheel(house, "comfy-tiny-dep", "1.0", {"comfy_tiny_dep.py": "VALUE = 42\n"})
    h3_python_wheels(house)
    return house


def h3_python_wheels(house: Path) -> None:
    """What ComfyUI 0.33's requirements add for H3 (PyAV with H.264/AAC encoders, comfy-kitchen, comfy-aimdo),
    as tiny wheels of the fake modules the test trees use."""
    from tests.fixtures.comfyui.comfy_tree import FAKE_MODULES

    for name, version, module in (("av", "18.1.0", "av"), ("comfy-kitchen", "0.2.31", "comfy_kitchen"),
                                  ("comfy-aimdo", "0.4.13", "comfy_aimdo")):
        make_wheel(house, name, version, {rel: text for rel, text in FAKE_MODULES.items() if rel.startswith(module + "/")})


def ctx(**kw) -> Context:
    return Context(locations=locations(), yes=True, json=True, **kw)


def make_venv(template: Path, path: Path) -> str:
    """A copy of the template venv (a venv's prefix follows its pyvenv.cfg, so a copy works with 'python -m pip')."""
    shutil.copytree(template, path, symlinks=True)
    return str(venv_python(path))


def pip_install(python: str, *reqs: str, wheelhouse: Path) -> None:
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse), *reqs],
                   check=True, timeout=300)


def pip_only_from(folder: Path, monkeypatch):
    """PipOptions that let pip see only `folder`: no config files, no index, no machine-wide find-links."""
    import os

    from h3kit.core.tools import PipOptions

    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("H3KIT_PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("H3KIT_PIP_NO_INDEX", "1")
    return PipOptions.from_env()
