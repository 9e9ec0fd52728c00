"""ComfyUI 0.35+'s malloc graph and h3kit's in-forward reads (nodes/h3kit_streaming/compiler.py): found by feature detection
on stand-in `comfy` modules shaped like ComfyUI's (comfy/model_prefetch.py's pause_malloc_graph, #16148;
comfy/cli_args.py's disable_comfy_compiler). The real tier checks the 0.33 tree ("absent")."""

from __future__ import annotations

import contextlib
import sys
import types

import pytest
from pack_support import pack_module

compiler = pack_module("h3kit_streaming.compiler")


@pytest.fixture
def fake_comfy(monkeypatch):
    comfy = types.ModuleType("comfy")
    comfy.__path__ = []
    monkeypatch.setitem(sys.modules, "comfy", comfy)

    def install(name, **attrs):
        mod = types.ModuleType(f"comfy.{name}")
        mod.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, f"comfy.{name}", mod)
        return mod
    return install


def test_pause_is_used_where_comfyui_has_it(fake_comfy):
    events = []

    @contextlib.contextmanager
    def pause_malloc_graph(sync=False):
        events.append("pause")
        yield
        events.append("resume")

    fake_comfy("model_prefetch", pause_malloc_graph=pause_malloc_graph)
    args = types.SimpleNamespace(disable_comfy_compiler=False)
    fake_comfy("cli_args", args=args)
    outside, state = compiler.prepare()
    assert state == "paused"
    with outside():
        events.append("read block")
    assert events == ["pause", "read block", "resume"]
    assert args.disable_comfy_compiler is False  # the compiler stays on where the pause exists


def test_compiler_without_pause_is_turned_off_for_the_process(fake_comfy, caplog):
    fake_comfy("model_prefetch")  # the module, without the pause (builds before #16148)
    args = types.SimpleNamespace(disable_comfy_compiler=False)
    fake_comfy("cli_args", args=args)
    outside, state = compiler.prepare()
    assert state == "disabled" and args.disable_comfy_compiler is True
    assert "turned off for this process" in caplog.text
    with outside():
        pass


def test_a_comfyui_without_the_compiler_needs_nothing(fake_comfy):
    args = types.SimpleNamespace(cpu=True)  # 0.30-0.34: no disable_comfy_compiler flag at all
    fake_comfy("cli_args", args=args)
    outside, state = compiler.prepare()
    assert state == "absent" and not hasattr(args, "disable_comfy_compiler")
    with outside():
        pass
