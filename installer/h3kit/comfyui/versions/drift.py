"""What changed in a ComfyUI since its last working state, what that means for H3 here, and the fix (pure).

`changes` lists what moved, one sentence each: ComfyUI's version or commit, torch, a node pack updated,
added or removed, launch flags lost, other pip packages, local edits to tracked files. `findings` turns
that into doctor's lines: the change, what it means on this machine (a release known to fail for this
card, a `comfy.*` name the h3kit pack uses that this tree no longer has, a weight file that needs
another version) and the fix (`h3kit rollback N`, the rule's own fix, `h3kit update --to X`).
"""

from __future__ import annotations

from dataclasses import dataclass

from h3kit.comfyui.versions import freeze
from h3kit.comfyui.versions.state import ComfyState
from h3kit.data.comfy_versions import ComfyVersions

TORCH_FAMILY = ("torch", "torchvision", "torchaudio")


@dataclass(frozen=True)
class Machine:
    """What the version rules need to know of this machine."""

    backend: str  # cuda | rocm | xpu | mps | directml | cpu
    gpu_bytes: int | None = None
    gpu_name: str | None = None


def _pack_changes(now: ComfyState, then: ComfyState) -> list[str]:
    out = []
    for pack in now.packs:
        old = then.pack(pack.name)
        if old is None:
            out.append(f"the node pack {pack.name} was added")
        elif (old.commit, old.files_sha256) != (pack.commit, pack.files_sha256):
            out.append(f"the node pack {pack.name} changed ({old.identity} -> {pack.identity})")
    out += [f"the node pack {p.name} was removed" for p in then.packs if now.pack(p.name) is None]
    return out


def _pip_changes(now: ComfyState, then: ComfyState) -> list[str]:
    if not now.pip or not then.pip:
        return []
    before, after = freeze.parse(list(then.pip)), freeze.parse(list(now.pip))
    moved = [c for c in freeze.changes({k: v for k, v in before.items() if k not in TORCH_FAMILY},
                                       {k: v for k, v in after.items() if k not in TORCH_FAMILY})]
    if not moved:
        return []
    shown = "; ".join(moved[:4]) + (f" and {len(moved) - 4} more" if len(moved) > 4 else "")
    return [f"{len(moved)} other Python package{'s' if len(moved) != 1 else ''} changed ({shown})"]


def changes(now: ComfyState, then: ComfyState) -> list[str]:
    """What moved between the state `then` and `now`, one phrase each, most telling first."""
    out = []
    if now.version != then.version:
        out.append(f"ComfyUI went from {then.label} to {now.label}")
    elif now.git and then.git and now.git.commit != then.git.commit:
        out.append(f"the ComfyUI checkout moved from commit {then.git.short} to {now.git.short} "
                   f"(both {now.version})")
    if now.torch != then.torch and (now.torch or then.torch):
        out.append(f"torch went from {then.torch or 'none'} to {now.torch or 'none'}")
    out += _pack_changes(now, then)
    lost = [a for a in then.launch_args if a.startswith("--") and a not in now.launch_args]
    if lost:
        out.append(f"launch flags were lost: {' '.join(lost)}")
    out += _pip_changes(now, then)
    new_edits = sorted(set(now.git.changed if now.git else ()) - set(then.git.changed if then.git else ()))
    if new_edits:
        out.append(f"tracked files were edited: {', '.join(new_edits[:3])}"
                   + (f" and {len(new_edits) - 3} more" if len(new_edits) > 3 else ""))
    return out


def meanings(now: ComfyState, versions: ComfyVersions, machine: Machine, *, api_refusal: str | None = None,
             file_names: tuple[str, ...] = ()) -> list[tuple[str, str, bool]]:
    """What the ComfyUI as it is now means for H3 on this machine: [(problem, fix, severe)]; a rule of severity
    `warn` is said but not severe."""
    rules = versions.known_problems(now.version, machine.backend, machine.gpu_bytes, list(now.launch_args),
                                    gpu_name=machine.gpu_name)
    out = [(f"{r.problem} ({r.source})", r.fix, r.severity == "refuse") for r in rules]
    if api_refusal:
        out.append((api_refusal, "", True))
    for need, name in versions.needs_for(now.version, file_names):
        out.append((f"{name} ({need.what}) needs ComfyUI {need.min_version} or newer ({need.source})",
                    f"h3kit update --to {need.min_version}", True))
    return out


def findings(now: ComfyState, last_working, versions: ComfyVersions, machine: Machine, *,
             api_refusal: str | None = None, file_names: tuple[str, ...] = ()) -> list[dict]:
    """doctor's `comfyui.drift` line: ok when nothing changed since the last working state, warn when something
    did, fail when what it is now is known not to work here. `last_working` is a history Entry or None."""
    if last_working is None:
        return [{"check": "comfyui.drift", "status": "warn",
                 "message": "h3kit has no working state of this ComfyUI on record to compare with.",
                 "fix": "Run 'h3kit update' (or 'h3kit install') once; each records a working state."}]
    then = last_working.state
    moved = changes(now, then)
    bad = meanings(now, versions, machine, api_refusal=api_refusal, file_names=file_names)
    since = f"working state #{last_working.id} ({then.label}, recorded {last_working.recorded[:10]})"
    back = f"h3kit rollback {last_working.id}" if then.git else "reinstall what changed"
    if not moved:
        bad = [b for b in bad if b[2]]  # a warning that held already in the working state is the plan's to say
    if not moved and not bad:
        return [{"check": "comfyui.drift", "status": "ok", "message": f"ComfyUI is as it was in {since}.",
                 "fix": None}]
    message = (f"Since {since}: " + "; ".join(moved) + ".") if moved else f"Nothing changed since {since}."
    if bad:
        message += " " + " ".join(f"{p[0].rstrip('.')}." for p in bad)
    fixes = [f for _p, f, _s in bad if f] + ([f"go back with '{back}'"] if moved else [])
    severe = any(s for _p, _f, s in bad)
    return [{"check": "comfyui.drift", "status": "fail" if severe else "warn", "message": message,
             "fix": "; ".join(fixes) or None}]
