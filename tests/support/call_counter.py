"""Counting the calls to a real function during a real run: wrapped wherever a module bound it by name."""

from __future__ import annotations

import importlib
import sys


def count_calls(monkeypatch, module_name: str, name: str) -> list:
    """Wrap `module_name.name` in every loaded h3kit module that holds it (modules import it by name), for the
    test; returns the list each call appends its `profile` keyword to (None when none was passed)."""
    real = getattr(importlib.import_module(module_name), name)
    calls: list = []

    def counted(*args, **kwargs):
        calls.append(kwargs.get("profile"))
        return real(*args, **kwargs)

    for module in list(sys.modules.values()):
        if module is not None and module.__name__.startswith("h3kit") and getattr(module, name, None) is real:
            monkeypatch.setattr(module, name, counted)
    return calls


def plans_and_fingerprints(monkeypatch) -> dict[str, list]:
    """{"plans": calls to h3kit.plan.make_plan, "fingerprints": calls to h3kit.fingerprint.this_machine,
    "inspections": calls to h3kit.comfyui.locate.inspect (ComfyUI's Python asked what it holds)}, counted
    from now on, with install's and calibration's modules loaded first so their bindings are wrapped too."""
    import h3kit.calibrate.orchestrate  # noqa: F401
    import h3kit.steps.apply  # noqa: F401
    import h3kit.steps.install  # noqa: F401

    return {"plans": count_calls(monkeypatch, "h3kit.plan", "make_plan"),
            "fingerprints": count_calls(monkeypatch, "h3kit.fingerprint", "this_machine"),
            "inspections": count_calls(monkeypatch, "h3kit.comfyui.locate", "inspect")}
