"""Issue 26 (13): offline pip (H3KIT_PIP_FIND_LINKS + H3KIT_PIP_NO_INDEX=1) meeting two pins that cannot both
hold names the two pins, not pip's "remove package versions" advice; a full disk under pip names the disk."""

from __future__ import annotations

import pytest

from comfy_setup_support import ctx, make_venv, pip_only_from
from h3kit.comfyui.setup.pip import install_requirements
from h3kit.core.errors import NotReady
from h3kit.core.tools import classify


def test_a_pin_conflict_offline_names_both_pins(tmp_path, wheelhouse, venv_template, monkeypatch):
    opts = pip_only_from(wheelhouse, monkeypatch)
    python = make_venv(venv_template, tmp_path / "venv")
    reqs, pins = tmp_path / "requirements.txt", tmp_path / "constraints.txt"
    reqs.write_text("torchvision==0.28.0+cpu\n")  # built for torch 2.13.0
    pins.write_text("torch==2.14.1+cpu\n")  # the torch h3kit pinned
    with pytest.raises(NotReady) as err:
        install_requirements(ctx(), python, reqs, pins, opts, timeout=300)
    msg = err.value.message
    assert "two pins conflict: torchvision 0.28.0+cpu depends on torch==2.13.0" in msg, msg
    assert "torch==2.14.1+cpu is requested" in msg and "remove package versions" not in msg, msg
    assert "H3KIT_PIP_FIND_LINKS" in err.value.fix and err.value.exit_code == 3


def test_pip_on_a_full_disk_names_the_path_it_could_not_write():
    out = ("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device: "
           "'/home/Me/ComfyUI/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so'\n")
    sentence, fix = classify("pip", out)
    assert sentence == ("the disk that holds /home/Me/ComfyUI/venv/lib/python3.11/site-packages/torch/lib/"
                        "libtorch_cpu.so is full.")
    assert "TMPDIR" in fix
