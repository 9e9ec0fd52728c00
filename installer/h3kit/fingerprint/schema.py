"""Checking a `h3kit.fingerprint/1` document (ours, or one saved to a file).

`plan --fingerprint FILE` and `models plan --fingerprint FILE` read saved
fingerprints; a wrong one must give one sentence naming the key, not a
KeyError deep inside the planner. A checked file becomes the typed
`Fingerprint` here, where it enters.
"""

from __future__ import annotations

import json
from pathlib import Path

from h3kit.core.errors import BadInput
from h3kit.data.fingerprint import SCHEMA, Fingerprint

_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))

# key path -> allowed types; "[]" marks list items.
_SHAPE: dict[str, tuple] = {
    "schema": (str,),
    "os": (dict,),
    "os.system": (str,),
    "os.release": (str,),
    "os.wsl": (bool,),
    "arch": (str,),
    "rosetta": (bool,),
    "cpu": (dict,),
    "cpu.model": (str,),
    "cpu.physical_cores": (int, type(None)),
    "cpu.logical_cores": (int, type(None)),
    "cpu.flags": (list,),
    "memory": (dict,),
    "memory.total_bytes": _NUM,
    "memory.available_bytes": _NUM,
    "memory.swap_total_bytes": _NUM,
    "disks": (list,),
    "disks[].path": (str,),
    "disks[].total_bytes": _NUM,
    "disks[].free_bytes": _NUM,
    "disks[].kind": (str,),
    "gpus": (list,),
    "gpus[].vendor": (str,),
    "gpus[].name": (str,),
    "gpus[].memory_total_bytes": _NUM,
    "gpus[].memory_free_bytes": _OPT_NUM,
    "gpus[].unified_memory": (bool,),
    "gpus[].driver_version": _OPT_STR,
    "gpus[].cuda_driver_version": _OPT_STR,
    "gpus[].compute_capability": _OPT_STR,
    "gpus[].backend": _OPT_STR,
    "compilers": (list,),
    "probes": (list,),
}

_ENUMS = {
    "os.system": {"linux", "darwin", "windows"},
    "arch": {"x86_64", "arm64"},
    "disks[].kind": {"ssd", "hdd", "unknown"},
    "gpus[].vendor": {"nvidia", "amd", "intel", "apple"},
    "gpus[].backend": {"cuda", "rocm", "xpu", "mps", "directml", None},
}


def _type_names(types: tuple) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def validate(doc: object) -> list[str]:
    """Return a list of problems (empty when the document is a valid fingerprint)."""
    if not isinstance(doc, dict):
        return ["the document is not a JSON object"]
    problems: list[str] = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"'schema' is {doc.get('schema')!r}, expected {SCHEMA!r}")
    for key, types in _SHAPE.items():
        if "[]" in key:
            list_key, item_key = key.split("[].")
            items = doc.get(list_key)
            if not isinstance(items, list):
                continue
            for i, item in enumerate(items):
                where = f"{list_key}[{i}].{item_key}"
                if not isinstance(item, dict) or item_key not in item:
                    problems.append(f"'{where}' is missing")
                    continue
                problems += _check(where, item[item_key], types, _ENUMS.get(key))
            continue
        node: object = doc
        missing = False
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                missing = True
                break
            node = node[part]
        if missing:
            problems.append(f"'{key}' is missing")
        else:
            problems += _check(key, node, types, _ENUMS.get(key))
    return problems


def _check(where: str, value: object, types: tuple, allowed: set | None) -> list[str]:
    if isinstance(value, bool) and bool not in types:
        return [f"'{where}' must be {_type_names(types)}, not a boolean"]
    if not isinstance(value, types):
        return [f"'{where}' must be {_type_names(types)}, not {type(value).__name__}"]
    if allowed is not None and value not in allowed:
        shown = ", ".join(sorted(str(a) for a in allowed if a is not None))
        return [f"'{where}' is {value!r}; allowed: {shown}"]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return [f"'{where}' is negative ({value})"]
    return []


def load_file(path: str | Path) -> Fingerprint:
    """Read, check and parse a saved fingerprint; BadInput (exit 2) with the first problems named."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"The fingerprint file {p} does not exist.",
                       "Save one with 'h3kit fingerprint --json > FILE' and pass that path.") from None
    except (IsADirectoryError, PermissionError, OSError) as exc:
        raise BadInput(f"The fingerprint file {p} cannot be read ({exc.strerror or exc}).",
                       "Pass a readable JSON file made by 'h3kit fingerprint --json'.") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"The fingerprint file {p} is not valid JSON (line {exc.lineno}: {exc.msg}).",
                       "Recreate it with 'h3kit fingerprint --json > FILE'.") from None
    problems = validate(doc)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise BadInput(f"The fingerprint file {p} is not a valid {SCHEMA} document: {'; '.join(problems[:3])}{more}.",
                       "Recreate it with 'h3kit fingerprint --json > FILE'.")
    return Fingerprint.from_json(doc)
