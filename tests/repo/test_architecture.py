"""The package's shape, checked: layers go one way, bundled code stands alone, functions stay short.

The layers, lowest first (installer/h3kit/__init__.py explains each). A module
may import its own package and any lower layer, never a higher one, and the
import graph has no cycle even inside a layer.

The ComfyUI side, nodes/ (the node pack as deployed, its packages included),
runs in ComfyUI's Python: it never imports h3kit, imports only the standard
library at import time, reaches its siblings only by relative imports that
resolve inside the pack (a package that stands on its own, h3k_*, never above
itself; a feature package of nodes, h3kit_*, up to the pack and no further).
h3kit reaches the h3k_* packages only through `h3kit.bundled`.

No function of installer/, nodes/ or scripts/ is over 60 lines: a function
that long holds several decisions, and is split where they part.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "installer" / "h3kit"

LAYERS = {  # subpackage -> rank; a module may import only equal-package or lower-rank modules
    "core": 0, "bundled": 0.5, "data": 1, "fingerprint": 2, "native": 3, "plan": 4, "comfyui": 5, "models": 6,
    "calibrate": 7, "steps": 8, "cli": 9,
}
ROOT_MODULES = {"h3kit": -1, "h3kit.__main__": 10}  # the version string is everyone's; __main__ is the top
MAX_FUNCTION_LINES = 60
# A sanity cap, well above any module today: with every function short, a module past it has become a
# drawer of several subjects (split by subject, not by size). It is not the rule that shapes modules.
MAX_MODULE_LINES = 800
# Code that runs in ComfyUI's interpreter: never h3kit, only the standard library at import time.
NODES = REPO / "nodes"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        mods[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The h3kit modules `name` imports (anywhere in the file, function bodies included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_pkg else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        for t in targets:
            while t and t not in mods:
                t = t.rpartition(".")[0]
            if t and t != name and t.startswith("h3kit"):
                found.add(t)
    return found


def _rank(module: str) -> int | None:
    if module in ROOT_MODULES:
        return ROOT_MODULES[module]
    part = module.split(".")[1]
    return LAYERS.get(part)


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in graph.items():
        for dst in targets:
            same_package = src.split(".")[:2] == dst.split(".")[:2]
            rs, rd = _rank(src), _rank(dst)
            if rs is None or rd is None:
                bad.append(f"{src} -> {dst}: a module outside the documented layers")
            elif not same_package and rd >= rs:
                bad.append(f"{src} -> {dst}: layer {rs} imports layer {rd}")
    return sorted(bad)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_layers_go_one_way():
    assert upward_edges(_graph()) == []


def test_no_import_cycles():
    # Package fronts importing their own submodules and back count too: a cycle is a cycle.
    assert cycles(_graph()) == []


def test_every_subpackage_is_a_documented_layer():
    present = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert present == set(LAYERS)
    doc = (PKG / "__init__.py").read_text(encoding="utf-8")
    for name in present:
        assert f"`{name}/`" in doc, f"installer/h3kit/__init__.py does not describe {name}/"


def test_the_checks_catch_a_violation():
    """The two graph checks fail on a graph with an upward edge and a cycle (so they can fail at all)."""
    graph = {"h3kit.core.paths": {"h3kit.cli"}, "h3kit.cli": {"h3kit.core.paths"}}
    assert upward_edges(graph) == ["h3kit.core.paths -> h3kit.cli: layer 0 imports layer 9"]
    assert cycles(graph) == [["h3kit.cli", "h3kit.core.paths"]]


def bundled_violations(path: Path) -> list[str]:
    """`import h3kit` anywhere, or a non-stdlib module at import time (numpy/torch/comfy only inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = []
    top_level = {id(n) for n in tree.body} | {id(n) for stmt in tree.body if isinstance(stmt, (ast.If, ast.Try))
                                               for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        for n in names:
            root = n.split(".")[0]
            if root == "h3kit":
                bad.append(f"{path.name}:{node.lineno} imports {n}")
            elif id(node) in top_level and root not in sys.stdlib_module_names and root != "__future__" \
                    and root not in ("h3k_native", "h3k_calibration_runner"):
                bad.append(f"{path.name}:{node.lineno} imports {n} at import time")
    return bad


@pytest.mark.parametrize("path", sorted(NODES.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_comfyui_side_never_imports_h3kit(path):
    assert bundled_violations(path) == []


def test_the_bundled_check_catches_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import json\nimport numpy\n\ndef f():\n    from h3kit.core import paths\n    import torch\n")
    assert bundled_violations(bad) == ["bad.py:2 imports numpy at import time", "bad.py:5 imports h3kit.core"]


CODE = [REPO / "installer", REPO / "nodes", REPO / "scripts"]  # tests/ is not held to it


def long_functions(path: Path, root: Path = REPO, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """'file:Class.function' -> lines, for every function (methods and nested ones too) over `limit` lines,
    decorators and docstring included."""
    found = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                if not isinstance(child, ast.ClassDef) and child.end_lineno - first + 1 > limit:
                    found[f"{path.relative_to(root).as_posix()}:{name}"] = child.end_lineno - first + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_functions_stay_short():
    long = {name: n for folder in CODE for path in sorted(folder.rglob("*.py")) for name, n in long_functions(path).items()}
    assert long == {}


def test_the_function_check_catches_a_long_function(tmp_path):
    def body(indent: int) -> str:  # 59 lines: with its `def` line a function of 60, the longest allowed
        return "".join(f"{' ' * indent}x{i} = {i}\n" for i in range(59))

    (tmp_path / "mod.py").write_text("def short():\n" + body(4) + "\n\nclass K:\n    @staticmethod\n    def long():\n"
                                     + body(8) + "        def inner():\n" + body(12))
    assert long_functions(tmp_path / "mod.py", tmp_path) == {"mod.py:K.long": 121}


def test_modules_stay_under_the_sanity_cap():
    files = [p for folder in CODE for p in folder.rglob("*.py")]
    big = {str(p.relative_to(REPO)): n for p in files
           if (n := len(p.read_text(encoding="utf-8").splitlines())) >= MAX_MODULE_LINES}
    assert big == {}


def test_h3kit_reaches_the_comfyui_side_through_one_place():
    """h3kit.bundled's packages are nodes/' packages (the files deploy ships), and no other module of h3kit
    imports them by another way (a path on sys.path, a top-level `import h3k_native`)."""
    from h3kit import bundled

    packages = sorted(p.name for p in NODES.iterdir() if (p / "__init__.py").is_file())
    assert [p for p in packages if not p.startswith(("h3k_", "h3kit_"))] == []
    assert sorted(bundled.PACKAGES) == [p for p in packages if p.startswith("h3k_")]
    assert bundled.PACK_SOURCE == NODES and bundled.NATIVE_BRIDGE.parent == NODES
    pack = pack_module_names()
    stray = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            stray += [f"{path.relative_to(PKG)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in pack]
    assert stray == []


def pack_module_names() -> set[str]:
    """The modules and packages at the top of the deployed pack: nodes/' own."""
    return ({p.stem for p in NODES.glob("*.py") if p.name != "__init__.py"}
            | {p.name for p in NODES.iterdir() if (p / "__init__.py").is_file()})


def unshipped_imports(path: Path, root: Path, shipped: set[str]) -> list[str]:
    """Relative imports of `path` under `root` (the pack) that name a module the pack's top level does not
    hold, or that reach too high: a standalone package (h3k_*, also started on its own) never above itself,
    a feature package of nodes (h3kit_*) up to the pack's top, naming what the pack holds."""
    bad = []
    parts = path.relative_to(root).parts
    depth = len(parts) - 1  # 0: a module at the top of the pack
    feature = depth > 0 and parts[0].startswith("h3kit_")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        if node.level == depth + 1 and (depth == 0 or feature):
            names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            bad += [f"{path.name}:{node.lineno} imports {'.' * node.level}{n}, which the pack does not hold"
                    for n in names if n not in shipped]
        elif node.level > max(depth, 1):
            bad.append(f"{path.name}:{node.lineno} reaches above its package with {'.' * node.level}")
    return bad


def test_comfyui_side_imports_resolve_inside_the_pack():
    shipped = pack_module_names()
    assert [bad for path in sorted(NODES.rglob("*.py")) for bad in unshipped_imports(path, NODES, shipped)] == []


def test_the_pack_import_check_catches_a_violation(tmp_path):
    (tmp_path / "node.py").write_text("from . import h3k_native\nfrom .h3kit_missing import x\nfrom .. import y\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("from . import sibling\nfrom .. import h3kit_logic\n")
    (tmp_path / "h3kit_feature").mkdir()
    (tmp_path / "h3kit_feature" / "node.py").write_text("from .. import h3k_native\nfrom ..h3kit_gone import x\n"
                                                        "from ... import y\n")
    assert unshipped_imports(tmp_path / "node.py", tmp_path, {"h3k_native"}) == [
        "node.py:2 imports .h3kit_missing, which the pack does not hold",
        "node.py:3 reaches above its package with ..",
    ]
    assert unshipped_imports(tmp_path / "pkg" / "mod.py", tmp_path, {"h3kit_logic"}) == [
        "mod.py:2 reaches above its package with ..",
    ]
    assert unshipped_imports(tmp_path / "h3kit_feature" / "node.py", tmp_path, {"h3k_native"}) == [
        "node.py:2 imports ..h3kit_gone, which the pack does not hold",
        "node.py:3 reaches above its package with ...",
    ]


def test_only_the_cli_prints_or_reads_the_terminal():
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("print", "input"):
                offenders.append(f"{rel}:{node.lineno} {node.func.id}()")
    assert offenders == []



def argparse_imports(path: Path) -> list[str]:
    """`import argparse` / `from argparse import ...` anywhere in the file, function bodies included."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        bad += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "argparse"]
    return bad


def test_only_the_cli_knows_the_command_line():
    """steps/ and every layer below take typed options that cli/ builds, never a parsed Namespace; nothing but
    cli/ imports argparse (the bundled programs run in ComfyUI's Python and parse their own arguments)."""
    offenders = [bad for path in PKG.rglob("*.py") if path.relative_to(PKG).parts[0] not in ("cli", "bundled")
                 for bad in argparse_imports(path)]
    assert offenders == []


def test_the_argparse_check_catches_a_violation(tmp_path):
    bad = tmp_path / "step.py"
    bad.write_text("import json\n\ndef run(options):\n    from argparse import Namespace\n    import argparse.x\n")
    assert argparse_imports(bad) == ["step.py:4 imports argparse", "step.py:5 imports argparse.x"]


def test_every_step_takes_a_frozen_options_value():
    """A step module's `run` takes one of h3kit.steps.options' frozen dataclasses first, and a Session."""
    import dataclasses
    import importlib
    import inspect
    import typing

    from h3kit.core.session import Session

    steps = [p.stem for p in (PKG / "steps").glob("*.py") if "def run(" in p.read_text(encoding="utf-8")]
    assert {"install", "apply", "doctor", "uninstall"} <= set(steps)
    for name in steps:
        run = importlib.import_module(f"h3kit.steps.{name}").run
        hints = typing.get_type_hints(run)
        first, second = [hints.get(p) for p in list(inspect.signature(run).parameters)[:2]]
        assert dataclasses.is_dataclass(first) and first.__dataclass_params__.frozen, name
        assert first.__module__ == "h3kit.steps.options" and second is Session, name
