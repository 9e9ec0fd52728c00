"""The self-test that marks a ComfyUI state as working for H3, run in that ComfyUI's own interpreter.

Three checks, in one run of ComfyUI's Python (`SELFTEST_SCRIPT`, standard library and ComfyUI only,
one JSON line marked `H3KIT-SELFTEST`, never raises):

1. registered: ComfyUI's own `nodes.init_extra_nodes` loads its built-in nodes, then its own
   `nodes.load_custom_node` loads the h3kit pack as ComfyUI does at start-up; every node the pack must
   have (h3kit.comfyui.deploy.EXPECTED_NODES) is then in `nodes.NODE_CLASS_MAPPINGS`;
2. workflows: every node type of every installed workflow (the pack's `example_workflows/`) is there;
3. loaders: every `comfy.*` name the pack's code reaches (its imports and attribute uses, found by
   comfy-import-guard's scanner; those inside try/except are left out, they are optional by design)
   is imported and resolved in that interpreter, so a function renamed in ComfyUI fails here even when
   the pack imports it lazily inside a loader.

The flags the launcher passes are ComfyUI's arguments for the run (`--cpu` on a machine without a GPU),
so the checks see the devices the user's runs see. The quick calibration is the fourth piece of
evidence; it runs in the steps layer (h3kit.steps.versions), which may call calibration.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from h3kit.comfyui.deploy import EXPECTED_NODES
from h3kit.comfyui.inspect import marked_json
from h3kit.comfyui.locate import ComfyInstall, run_python
from h3kit.comfyui.workflows import UI_DIR

SELFTEST_TIMEOUT = 600.0  # ComfyUI's built-in nodes import in 10-60 s; a cold disk takes longer

SELFTEST_SCRIPT = r"""
import asyncio, inspect, json, os, sys, traceback, importlib
comfy_dir, pack_dir, spec_path = sys.argv[1], sys.argv[2], sys.argv[3]
with open(spec_path, encoding="utf-8") as f:
    spec = json.load(f)
out = {"pack_loaded": False, "registered": [], "missing_nodes": [], "missing_workflow_nodes": {},
       "unresolved": [], "error": None}
def run(value):
    return asyncio.run(value) if inspect.iscoroutine(value) else value
try:
    sys.argv = [os.path.join(comfy_dir, "main.py")] + list(spec.get("args", []))
    sys.path.insert(0, comfy_dir)
    os.chdir(comfy_dir)
    try:
        import comfy.options
        comfy.options.enable_args_parsing()
    except Exception:
        pass
    import nodes
    try:
        run(nodes.init_extra_nodes(init_custom_nodes=False, init_api_nodes=False))
    except TypeError:
        run(nodes.init_extra_nodes(init_custom_nodes=False))
    out["pack_loaded"] = bool(run(nodes.load_custom_node(pack_dir)))
    mapping = nodes.NODE_CLASS_MAPPINGS
    out["registered"] = sorted(n for n in mapping if n.startswith("H3kit"))
    out["missing_nodes"] = [n for n in spec["expected"] if n not in mapping]
    for name, types in spec["workflows"].items():
        missing = [t for t in types if t not in mapping]
        if missing:
            out["missing_workflow_nodes"][name] = missing
    for ref in spec["references"]:
        parts, obj, error = ref["dotted"].split("."), None, None
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError as exc:
                error = "%s: %s" % (type(exc).__name__, exc)
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
                error = None
            except AttributeError as exc:
                error = "AttributeError: %s" % exc
            break
        if error:
            out["unresolved"].append(dict(ref, error=error))
except BaseException as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
    out["trace"] = traceback.format_exc()[-2000:]
print("H3KIT-SELFTEST " + json.dumps(out))
"""


@dataclass(frozen=True)
class SelfTest:
    passed: bool
    problems: tuple[str, ...]
    registered: tuple[str, ...] = ()
    references: int = 0
    workflows: tuple[str, ...] = ()
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return "; ".join(self.problems[:3]) + (f" and {len(self.problems) - 3} more" if len(self.problems) > 3 else "")

    def to_json(self) -> dict:
        return {"passed": self.passed, "problems": list(self.problems), "registered": list(self.registered),
                "references_checked": self.references, "workflows": list(self.workflows),
                "seconds": round(self.seconds, 1), **self.extra}


def workflow_node_types(node_dir: Path) -> dict[str, list[str]]:
    """{workflow file name: node types} of the UI workflows the pack carries (`example_workflows/`)."""
    out = {}
    for path in sorted((node_dir / UI_DIR).glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out[path.name] = ["<unreadable workflow>"]
            continue
        types = [n.get("type") for n in doc.get("nodes") or [] if isinstance(n, dict)]
        out[path.name] = sorted({t for t in types if isinstance(t, str) and t not in ("Note", "MarkdownNote")})
    return out


def pack_references(node_dir: Path) -> list[dict]:
    """Every hard `comfy.*` reference in the pack's code (comfy-import-guard's scanner): {dotted, file, line}."""
    from comfy_import_guard.extract import scan_pack

    scan = scan_pack(str(node_dir), node_dir.name)
    seen, out = set(), []
    for ref in scan.references:
        if ref.soft or ref.symbol == "*" or ref.dotted in seen:
            continue
        seen.add(ref.dotted)
        out.append({"dotted": ref.dotted, "file": ref.file, "line": ref.lineno})
    return out


def parse_output(text: str) -> dict | None:
    return marked_json(text, "H3KIT-SELFTEST")


def verdict(found: dict | None, detail: str) -> list[str]:
    """The problems in the script's answer, one sentence each (empty: passed); pure."""
    if found is None:
        return [f"ComfyUI's Python gave no self-test answer ({detail})"]
    problems = [f"ComfyUI could not load its nodes ({found['error']})"] if found.get("error") else []
    if not found.get("error") and not found.get("pack_loaded"):
        problems.append("ComfyUI did not load the h3kit pack (its import failed; the log has ComfyUI's output)")
    if found.get("missing_nodes"):
        problems.append(f"the pack's nodes {', '.join(found['missing_nodes'])} are not registered")
    for name, types in (found.get("missing_workflow_nodes") or {}).items():
        problems.append(f"the workflow {name} uses nodes this ComfyUI lacks: {', '.join(types)}")
    for ref in found.get("unresolved") or []:
        problems.append(f"{ref['dotted']}, which the pack uses in {ref['file']} line {ref['line']}, does not "
                        f"resolve in this ComfyUI ({ref['error']})")
    return problems


def run(ctx, install: ComfyInstall, launch_args: tuple[str, ...] | list[str] = (),
        timeout: float = SELFTEST_TIMEOUT) -> SelfTest:
    """The three checks of the module doc in `install`'s ComfyUI; never raises for a failed check."""
    import time

    workflows = workflow_node_types(install.node_dir)
    references = pack_references(install.node_dir) if install.node_dir.is_dir() else []
    spec = {"expected": list(EXPECTED_NODES), "workflows": workflows, "references": references,
            "args": list(launch_args)}
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="h3kit-selftest-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        ctx.progress(f"Self-test: loading ComfyUI's nodes and the h3kit pack in {install.path}...")
        result = run_python(install, ["-c", SELFTEST_SCRIPT, str(install.path), str(install.node_dir),
                                      str(spec_path)], timeout)
    found = parse_output(result.stdout)
    ctx.log.debug("self-test output:\n%s\n%s", result.stdout[-4000:], result.stderr[-4000:])
    problems = verdict(found, result.detail or result.status)
    return SelfTest(not problems, tuple(problems), tuple((found or {}).get("registered") or ()), len(references),
                    tuple(workflows), time.monotonic() - start)
