"""h3kit's own reading of extra_model_paths.yaml (h3kit.comfyui.model_folders, when ComfyUI's Python cannot be
asked) is bounded and linear: a FIFO or a link to /dev/zero is never opened, YAML nested 100,000 deep is one
problem sentence (ComfyUI stops on its RecursionError), a file past config.yaml's 1 MiB cap is skipped with a
line saying so, and one with 40,000 folder lines is read in seconds (the search lists were Python lists searched
with `in` once per line: over 200 s for 12 MB).
The order of each search list is still exactly ComfyUI 0.33's add_model_folder_path."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from h3kit.comfyui import model_folders as mf
from h3kit.data import yamlio
from within import within

WANTED = ["diffusion_models", "text_encoders", "vae", "loras"]




def _comfy(tmp_path: Path) -> Path:
    root = tmp_path / "ComfyUI"
    for sub in ("models/diffusion_models", "models/text_encoders", "models/vae", "custom_nodes"):
        (root / sub).mkdir(parents=True)
    (root / "main.py").write_text("# stand-in\n")
    return root


def _read(comfy: Path) -> mf.ModelFolders:
    return mf.h3kit_reading(comfy / "models", mf.config_files(comfy, ()), WANTED)


@pytest.mark.parametrize("deep", ["shared:\n  vae: " + "[" * 100_000 + "]" * 100_000 + "\n", "- " * 100_000 + "x\n"])
def test_yaml_100000_deep_is_one_problem_sentence(tmp_path, deep):
    comfy = _comfy(tmp_path)
    (comfy / "extra_model_paths.yaml").write_text(deep)
    folders = _read(comfy)
    assert folders.source == "default" and "nested more than 64 levels deep" in folders.problem
    assert "extra_model_paths.yaml is not a model-paths file ComfyUI can read" in folders.problem
    assert "nested more than 64 levels" in mf.yaml_problem(deep) and mf.read_extra_config(deep, tmp_path) == []


@pytest.mark.skipif(os.name != "posix", reason="FIFOs and /dev/zero are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_pipe_or_dev_zero_is_never_opened(tmp_path, kind):
    comfy = _comfy(tmp_path)
    target = tmp_path / "instance-model-paths.yaml"  # named by the app: beside main.py ComfyUI wants a file
    os.mkfifo(target) if kind == "fifo" else target.symlink_to("/dev/zero")
    files = mf.config_files(comfy, ("--extra-model-paths-config", str(target)))
    folders = within(5, mf.h3kit_reading, comfy / "models", files, WANTED)
    assert folders.source == "default"
    assert ("a named pipe (FIFO), not a file" if kind == "fifo" else "a character device, not a file") in folders.problem


def test_a_file_past_the_cap_is_skipped_with_a_line(tmp_path):
    comfy = _comfy(tmp_path)
    lines = "".join(f"    folder/number_{i:08d}_padding_to_thirty\n" for i in range(400_000))
    (comfy / "extra_model_paths.yaml").write_text("shared:\n  base_path: /data\n  loras: |\n" + lines)
    folders = within(10, _read, comfy)
    assert folders.problem is None and folders.source == "default"
    assert f"skipped {comfy / 'extra_model_paths.yaml'}: it holds" in folders.detail
    assert f"more than the {yamlio.MAX_BYTES >> 20} MiB h3kit reads" in folders.detail


def test_forty_thousand_folder_lines_are_read_in_linear_time(tmp_path):
    comfy = _comfy(tmp_path)
    n = 40_000  # ~480 KB: seconds when linear; the list searched per line took minutes
    first, rest = [Path(f"/d/f/{i:06d}") for i in range(n // 2)], [Path(f"/d/f/{i:06d}") for i in range(n // 2, n)]
    (comfy / "extra_model_paths.yaml").write_text(
        "first:\n  base_path: /d\n  is_default: true\n  loras: |\n" + "".join(f"    f/{p.name}\n" for p in first)
        + "second:\n  base_path: /d\n  loras: |\n" + "".join(f"    f/{p.name}\n" for p in rest))
    start = time.monotonic()
    folders = within(30, _read, comfy)
    assert time.monotonic() - start < 10
    # each default goes first (so the last one leads), then ComfyUI's own folder, then the rest in order
    assert folders.search_list("loras") == (*reversed(first), comfy / "models" / "loras", *rest)


def _comfyuis_rule(paths: list, path, is_default: bool) -> None:
    """folder_paths.add_model_folder_path of ComfyUI 0.33, on one folder's list."""
    if path in paths:
        if is_default and paths[0] != path:
            paths.remove(path)
            paths.insert(0, path)
    elif is_default:
        paths.insert(0, path)
    else:
        paths.append(path)


def test_the_search_order_is_comfyuis_add_model_folder_path():
    rng = random.Random(45)
    for _ in range(300):
        start = [Path(f"/m/{i}") for i in range(rng.randint(0, 3))]
        ops = [(Path(f"/x/{rng.randint(0, 8)}"), rng.random() < 0.4) for _ in range(rng.randint(0, 25))]
        want = list(start)
        order = mf._Order(start)
        for path, default in ops:
            _comfyuis_rule(want, path, default)
            order.add(path, default)
        assert list(order.paths()) == want, ops
