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
from h3kit.comfyui.h3_support import H3_SCRIPT
from h3kit.comfyui.inspect import marked_json
from h3kit.comfyui.launcher import accepted_flags, filter_args
from h3kit.comfyui.locate import ComfyInstall, run_python
from h3kit.data.plan_doc import Plan, Streaming

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


def profile_findings(install: ComfyInstall, plan: Plan | None) -> list[dict]:
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
    if doc.get("profile") != plan.profile or doc.get("settings") != plan.settings.to_json():
        return [finding("profile.current", "warn",
                        f"The pack uses profile '{doc.get('profile')}' but the config now gives '{plan.profile}' "
                        "or different settings.", apply_fix)]
    return [finding("profile.current", "ok", f"Profile '{doc.get('profile')}' in the pack matches the config.")]


# -- dynamic VRAM ------------------------------------------------------------------------
# Whether ComfyUI's own weight streaming (comfy-aimdo) runs in this ComfyUI, by ComfyUI's rule
# (h3kit.plan.dynamic_vram.dynamic_vram, the one the planner uses): the torch build and version come
# from the inspect probe, the import from h3_support's module probe, the flags from the launcher.

AIMDO_MODULES = ("comfy_aimdo.control", "comfy_aimdo._version")  # _version carries the release number
AIMDO_TIMEOUT = 60.0


def tree_has_dynamic_vram(comfyui_dir: Path) -> bool | None:
    """Does this ComfyUI's code know dynamic VRAM (cli_args.enables_dynamic_vram)? None when unreadable."""
    try:
        text = (Path(comfyui_dir) / "comfy" / "cli_args.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return "def enables_dynamic_vram" in text


def parse_aimdo_report(text: str) -> dict:
    """{"imports": bool | None, "version", "error"} from h3_support.H3_SCRIPT's output for AIMDO_MODULES."""
    report = marked_json(text, "H3KIT-H3")
    if report is None:
        return {"imports": None, "version": None, "error": "ComfyUI's Python gave no readable answer"}
    modules = report.get("modules") or {}
    control = modules.get(AIMDO_MODULES[0]) or {}
    version = (modules.get(AIMDO_MODULES[1]) or {}).get("version")
    return {"imports": bool(control.get("ok")), "version": version if control.get("ok") else None,
            "error": None if control.get("ok") else control.get("error")}


def dynamic_vram_status(info: dict, aimdo: dict, args: list, tree: bool | None, comfyui_version: str | None) -> dict:
    """Pure: {"active": bool | None, "line", "reason", "torch", "aimdo_version", "flags", "comfyui_version"}."""
    from h3kit.plan.dynamic_vram import DYNAMIC_VRAM_OFF_FLAGS, DYNAMIC_VRAM_FORCE_FLAG, dynamic_vram, version_tuple

    torch = info.get("torch")
    build = info.get("torch_build")
    flags = [a for a in args if a in DYNAMIC_VRAM_OFF_FLAGS or a == DYNAMIC_VRAM_FORCE_FLAG]
    out = {"torch": torch, "aimdo_version": aimdo.get("version"), "flags": flags, "comfyui_version": comfyui_version}
    cu = f"ComfyUI {comfyui_version}" if comfyui_version else "this ComfyUI"
    if tree is False:
        active, reason = False, f"{cu} has no dynamic VRAM (its cli_args.py lacks it)"
    elif not torch:
        active, reason = None, "ComfyUI's Python has no torch"
    elif build in ("cuda", "rocm") and not info.get("cuda_available") and "--cpu" not in args:
        active, reason = False, f"torch {torch} sees no {'CUDA' if build == 'cuda' else 'ROCm'} device"
    else:
        backend = "cpu" if "--cpu" in args else (build or "cpu")
        hip = version_tuple(info.get("torch_hip"))
        active, reason = dynamic_vram(backend, list(args), version_tuple(torch), hip, aimdo.get("imports"))
        if aimdo.get("imports") is None and active:
            active, reason = None, f"whether comfy-aimdo imports is unknown ({aimdo.get('error')})"
    if active:
        line = f"dynamic VRAM: on (torch {torch}, comfy-aimdo {aimdo.get('version') or 'unknown version'})"
    elif active is False:
        line = f"dynamic VRAM: off: {reason}"
    else:
        line = f"dynamic VRAM: unknown: {reason}"
    return {**out, "active": active, "reason": reason, "line": line}


def launch_args(record: mf.Manifest | None, plan: Plan | None) -> tuple[list[str], str]:
    """The flags ComfyUI starts with: the recorded launcher's, else the plan's comfyui_args."""
    launcher = (record.extra.get("launcher") if record else None) or {}
    if launcher.get("path"):
        return [str(a) for a in launcher.get("args") or []], "the h3kit launcher's flags"
    if plan is not None:
        return [str(a) for a in plan.settings.comfyui_args], "the plan's flags (no h3kit launcher recorded)"
    return [], "no launch flags known"


def dynamic_vram_findings(install: ComfyInstall, info: dict | None, record: mf.Manifest | None,
                          plan: Plan | None) -> list[dict]:
    """The finding `comfyui.dynamic_vram`: ok with the one-line verdict; warn where it cannot tell or
    where the plan counted on the opposite: it relies on dynamic VRAM that is off, or streams with
    h3kit's loader where ComfyUI streams itself."""
    args, flags_from = launch_args(record, plan)
    tree = tree_has_dynamic_vram(install.path)
    version = (info or {}).get("comfyui_version")
    if info is None or install.python is None:
        return [finding("comfyui.dynamic_vram", "warn", "dynamic VRAM: unknown: ComfyUI's Python did not answer.")]
    aimdo = {"imports": False, "version": None, "error": "not probed"}
    if tree is not False:
        result = run_python(install, ["-c", H3_SCRIPT, json.dumps(list(AIMDO_MODULES)), "[]"], AIMDO_TIMEOUT)
        aimdo = parse_aimdo_report(result.stdout)
        if aimdo["imports"] is None and result.detail:
            aimdo["error"] = result.detail
    status = dynamic_vram_status(info, aimdo, args, tree, version)
    where = f"ComfyUI {version}; " if version else ""
    message = f"{status['line']} [{where}{flags_from}: {' '.join(args) or 'none'}]"
    planned = plan.settings.streaming if plan is not None else Streaming()
    expected = planned.dynamic_vram
    if status["active"] is None:
        return [dict(finding("comfyui.dynamic_vram", "warn", message), dynamic_vram=status)]
    if expected is True and status["active"] is False:
        return [dict(finding("comfyui.dynamic_vram", "warn",
                             f"{message}; the plan counted on it and does not stream, so ComfyUI holds the DiT whole.",
                             _dynamic_vram_fix(status, install)), dynamic_vram=status)]
    if expected is False and status["active"] and planned.enabled:
        return [dict(finding("comfyui.dynamic_vram", "warn",
                             f"{message}; the plan streams with h3kit's loader, which ComfyUI's own streaming makes "
                             "unneeded (and slower).", _dynamic_vram_fix(status, install)), dynamic_vram=status)]
    return [dict(finding("comfyui.dynamic_vram", "ok", message), dynamic_vram=status)]


def _dynamic_vram_fix(status: dict, install: ComfyInstall) -> str:
    """What makes ComfyUI match the plan: the cause of 'off' removed, or the plan redone to stream."""
    apply = f'h3kit apply --comfyui "{install.path}"'
    py = f'"{install.python}"' if install.python else "ComfyUI's Python"
    if status["active"]:  # the plan assumed h3kit's own torch; this ComfyUI has a newer stack
        return f"set stream_dit: off under overrides in h3kit's config.yaml (ComfyUI streams itself), then {apply}"
    reason = status["reason"]
    if "comfy-aimdo" in reason:
        return f'{py} -m pip install comfy-aimdo, or stream with h3kit: set stream_dit: on under overrides, then {apply}'
    if reason.startswith("torch ") and "<" in reason:
        return "'h3kit doctor --fix' installs the torch h3kit plans for (2.8 or newer turns dynamic VRAM on)"
    if status["flags"]:
        return (f"drop {' '.join(status['flags'])} from comfyui_args (overrides in h3kit's config.yaml), "
                f"or set stream_dit: on there; then {apply}")
    return f"set stream_dit: on under overrides in h3kit's config.yaml, then {apply}"


def running_flags_findings(install: ComfyInstall, plan: Plan | None, probe=None) -> list[dict]:
    """Did the ComfyUI running from this install get the plan's flags? Asked of its /system_stats (argv);
    for a ComfyUI an app starts, the fix names the app and where its flags go. Never raises."""
    from h3kit.comfyui import running
    from h3kit.comfyui.apps import HOW_TO_ADD

    planned = list(plan.settings.comfyui_args) if plan is not None else []
    ports = (8000, *running.PORTS) if install.app and "Desktop" in install.app else running.PORTS
    try:
        found = [r for r in (probe or running.probe)(ports) if running.same_comfyui(r, install.code_dir or install.path)]
    except Exception:  # noqa: BLE001 - a probe of someone else's server must never stop doctor
        found = []
    how = (f"add {' '.join(running.missing_flags(found[0].argv, planned)) if found else ' '.join(planned)} "
           + (HOW_TO_ADD[install.app] if install.app else "by starting ComfyUI with h3kit's launcher (run_h3kit)"))
    return [running.argv_finding(found[0] if found else None, planned, how)]
