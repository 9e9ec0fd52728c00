"""The ComfyUI half of `h3kit doctor`: is the pack there, intact, current, and does it load?

Each check returns findings `{"check", "status": ok|warn|fail, "message", "fix"}`
(the contract shared with h3kit.plan.torch_build and h3kit.models). Checks never
raise: a check that cannot run says so as a finding.
"""

from __future__ import annotations

import json
from pathlib import Path

from h3kit.comfyui import manifest as mf
from h3kit.comfyui.deploy import PROFILE_FILE, PROFILE_SCHEMA, disabled_copy
from h3kit.comfyui.inspect import marked_json
from h3kit.comfyui.launcher import accepted_flags, filter_args
from h3kit.comfyui.locate import ComfyInstall, run_python

NATIVE_TIMEOUT = 60.0

# Loads the pack's bridge in ComfyUI's Python and asks the library for its version.
NATIVE_SCRIPT = r"""
import json, os, sys
out = {"ok": False, "version": None, "error": None}
try:
    sys.path.insert(0, os.path.dirname(sys.argv[1]))
    import h3k_native as mod
    mod.load()
    out["version"] = str(mod.version()) if hasattr(mod, "version") else None
    out["ok"] = True
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print("H3KIT-NATIVE " + json.dumps(out))
"""


def finding(check: str, status: str, message: str, fix: str | None = None) -> dict:
    return {"check": check, "status": status, "message": message, "fix": fix}


def _reinstall(install: ComfyInstall) -> str:
    return f'h3kit install --comfyui "{install.path}"'


def pack_findings(install: ComfyInstall, record: mf.Manifest | None) -> list[dict]:
    """Pack present and every recorded file unchanged."""
    disabled = disabled_copy(install, record)
    if disabled is not None:
        return [finding("pack.present", "warn", f"The h3kit node pack is disabled: ComfyUI-Manager renamed it to "
                        f"{disabled}, so ComfyUI does not load it.",
                        f"Enable it again in ComfyUI-Manager (or rename it back to {install.node_dir.name}) and "
                        "restart ComfyUI; 'h3kit uninstall' removes it under either name.")]
    if record is None or record.find(install.node_dir) is None:
        if install.node_dir.exists():
            return [finding("pack.present", "fail", f"{install.node_dir} exists but h3kit has no record of installing it.",
                            "Move that folder away, then run " + _reinstall(install))]
        return [finding("pack.present", "fail", f"The h3kit node pack is not installed in {install.path}.", _reinstall(install))]
    changed, missing = [], []
    for entry in record.entries:
        if entry.role not in ("node-pack", "launcher"):
            continue
        p = Path(entry.path)
        if not p.exists() and not p.is_symlink():
            missing.append(p.name)
        elif not record.still_ours(entry):
            changed.append(p.name)
    out = [finding("pack.present", "ok", f"Node pack installed in {install.node_dir}.")]
    if missing or changed:
        parts = ([f"missing: {', '.join(missing[:5])}"] if missing else []) + ([f"changed: {', '.join(changed[:5])}"] if changed else [])
        out.append(finding("pack.intact", "fail", f"The pack differs from what h3kit installed ({'; '.join(parts)}).",
                           _reinstall(install) + " (files you changed are moved to a backup first)"))
    else:
        out.append(finding("pack.intact", "ok", f"All {len(record.entries)} recorded files and folders are as installed."))
    return out


def launcher_findings(install: ComfyInstall, record: mf.Manifest | None, cache_dir: Path) -> list[dict]:
    """The recorded launcher's flags are all accepted by this ComfyUI's main.py."""
    launcher = (record.extra.get("launcher") if record else None) or {}
    if not launcher.get("path"):
        return [finding("launcher.flags", "warn", f"No h3kit launcher is installed ({launcher.get('detail', 'none recorded')}).",
                        f'h3kit apply --comfyui "{install.path}"')]
    flags, detail = accepted_flags(install, cache_dir)
    if flags is None:
        return [finding("launcher.flags", "warn", f"Cannot check the launcher's flags: {detail}.", None)]
    _, rejected = filter_args(launcher.get("args") or [], flags)
    if rejected:
        return [finding("launcher.flags", "fail", f"This ComfyUI no longer accepts {' '.join(rejected)} from the launcher.",
                        f'h3kit apply --comfyui "{install.path}"')]
    shown = " ".join(launcher.get("args") or []) or "no extra flags"
    return [finding("launcher.flags", "ok", f"{Path(launcher['path']).name}: {shown}; ComfyUI accepts all of them.")]


def parse_native_output(text: str) -> dict | None:
    return marked_json(text, "H3KIT-NATIVE")


def native_findings(install: ComfyInstall) -> list[dict]:
    bridge = install.node_dir / "h3k_native"
    if not (bridge / "__init__.py").is_file():
        return [finding("native.loads", "warn", "The pack carries no native bridge (h3k_native/); nodes run without it.",
                        "h3kit build, then " + _reinstall(install))]
    if install.python is None:
        return [finding("native.loads", "warn", "Cannot test the native library: ComfyUI's Python is unknown.", None)]
    result = run_python(install, ["-c", NATIVE_SCRIPT, str(bridge)], NATIVE_TIMEOUT)
    parsed = parse_native_output(result.stdout)
    if parsed and parsed.get("ok"):
        return [finding("native.loads", "ok", f"The native library loads in ComfyUI's Python (version {parsed.get('version')}).")]
    why = (parsed or {}).get("error") or result.detail or result.status
    return [finding("native.loads", "fail", f"The native library does not load in ComfyUI's Python ({why}).",
                    "h3kit build --force, then " + _reinstall(install))]


def profile_findings(install: ComfyInstall, plan: dict | None) -> list[dict]:
    """h3kit_profile.json exists, is readable, and matches the plan the config gives now."""
    path = install.node_dir / PROFILE_FILE
    apply_fix = f'h3kit apply --comfyui "{install.path}"'
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("schema") != PROFILE_SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r}")
    except (OSError, ValueError, AttributeError) as exc:
        return [finding("profile.current", "fail", f"{path} is missing or unreadable ({exc}).", apply_fix)]
    if plan is None:
        return [finding("profile.current", "ok", f"Profile '{doc.get('profile')}' is in place (no planner here to compare with).")]
    if doc.get("profile") != plan.get("profile") or doc.get("settings") != plan.get("settings"):
        return [finding("profile.current", "warn",
                        f"The pack uses profile '{doc.get('profile')}' but the config now gives '{plan.get('profile')}' "
                        "or different settings.", apply_fix)]
    return [finding("profile.current", "ok", f"Profile '{doc.get('profile')}' in the pack matches the config.")]
