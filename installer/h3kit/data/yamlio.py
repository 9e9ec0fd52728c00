"""Reading h3kit's YAML files with line numbers, and checking their values.

Profiles, the model catalog and the user's config.yaml are all YAML that a
person edits by hand. A mistake must come back as one sentence naming the
file, the line, the key, and what is allowed -- so files are composed into
nodes first (yaml.compose keeps each node's position) and every key path is
mapped to its line before the plain data is built.

Parsing is bounded, because a hand-edited file can be hostile or broken:
at most MAX_BYTES of text, MAX_DEPTH levels of nesting, MAX_ALIASES alias
uses and MAX_NODES values once aliases are expanded (a 416-byte anchor bomb
otherwise grows to gigabytes while its lines are recorded), and no control
characters YAML refuses (a NUL byte). Past any of them: BadInput naming
file:line, like every other mistake in the file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import yaml

from h3kit.core.errors import BadInput

KeyPath = tuple  # ("overrides", "vae_tile_size") or ("dit", 3, "size")

MAX_BYTES = 1 << 20  # the catalog, the largest of h3kit's own files, is under 64 KB
MAX_DEPTH = 64  # PyYAML composes recursively: 100,000 levels would be a RecursionError
MAX_ALIASES = 100
MAX_NODES = 100_000  # values counted with every alias expanded, as the code after the parse sees them
MAX_DIGITS = 1000  # Python refuses to read an int past 4300 digits (a ValueError); the ranges name the rest


@dataclass
class YamlDoc:
    """Plain data from a YAML file plus the line of every key path in it."""

    path: Path
    data: Any
    lines: dict = field(default_factory=dict)

    def line(self, keypath: KeyPath) -> int:
        """The line of `keypath`, or of its nearest ancestor that has one (1 for the top)."""
        kp = tuple(keypath)
        while kp:
            if kp in self.lines:
                return self.lines[kp]
            kp = kp[:-1]
        return self.lines.get((), 1)

    def where(self, keypath: KeyPath) -> str:
        return f"{self.path}:{self.line(keypath)}"


def dotted(keypath: KeyPath) -> str:
    out = ""
    for part in keypath:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _too_big(path: Path | None, line: int, what: str) -> BadInput:
    return BadInput(f"{path}:{line}: {what}, more than h3kit reads from a settings file.",
                    "Write the values out plainly (no deep nesting, no repeated anchors); "
                    "h3kit's files need only a few levels and a few hundred lines.")


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses nesting past MAX_DEPTH and more than MAX_ALIASES aliases, while composing."""

    def __init__(self, text: str, path: Path | None):
        super().__init__(text)
        self._depth = 0
        self._aliases = 0
        self._where = path

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                line = self.peek_event().start_mark.line + 1
                raise _too_big(self._where, line, f"more than {MAX_ALIASES} aliases (*name)")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise _too_big(self._where, line, f"values nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node):
        digits = sum(ch.isdigit() for ch in node.value)
        if digits > MAX_DIGITS:
            raise _too_big(self._where, node.start_mark.line + 1, f"a number {digits} digits long")
        return super().construct_yaml_int(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


def _record_lines(node: yaml.Node, keypath: KeyPath, lines: dict, path: Path | None = None,
                  budget: list | None = None) -> None:
    """Line of every key path; a key written twice in one mapping is an error (YAML would keep the last silently).

    `budget` ([nodes left]) bounds the walk: an alias is walked again each time it is used."""
    budget = [MAX_NODES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise _too_big(path, node.start_mark.line + 1, f"more than {MAX_NODES} values once its aliases are expanded")
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            kp = keypath + (key_node.value,)
            if kp in lines:
                raise BadInput(f"{path}:{key_node.start_mark.line + 1}: '{dotted(kp)}' is set twice (first on line "
                               f"{lines[kp]}); only one of them could count.",
                               "Delete one of the two lines.")
            lines[kp] = key_node.start_mark.line + 1
            _record_lines(value_node, kp, lines, path, budget)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            kp = keypath + (i,)
            lines[kp] = item.start_mark.line + 1
            _record_lines(item, kp, lines, path, budget)


def parse_yaml(text: str, path: Path) -> YamlDoc:
    """Parse YAML text; a syntax error, or a file past the bounds above, becomes BadInput naming file:line."""
    if len(text) > MAX_BYTES:
        raise _too_big(path, text.count("\n", 0, MAX_BYTES) + 1, f"the file is longer than {MAX_BYTES // 1024} KiB")
    loader = None
    try:
        loader = _BoundedLoader(text, path)  # the reader checks every character here
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise BadInput(f"{path}:{line}: this is not valid YAML ({exc.problem or exc.context}).",
                       "Fix the indentation or quoting on that line (YAML uses spaces, 'key: value').") from None
    except yaml.reader.ReaderError as exc:  # a NUL or another control character: no mark, only a position
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        raise BadInput(f"{path}:{line}: this file holds a character YAML does not allow "
                       f"(#x{exc.character if isinstance(exc.character, int) else ord(exc.character):04x}).",
                       "Delete that character (a NUL byte often comes from a binary or a half-written file), "
                       "or write the file again.") from None
    finally:
        if loader is not None:
            loader.dispose()
    lines: dict = {(): 1}
    if node is not None:
        _record_lines(node, (), lines, path)
    return YamlDoc(path, data, lines)


def load_yaml(path: Path) -> YamlDoc:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path}:1: the file is not UTF-8 text.", "Save it as UTF-8.") from None
    except OSError as exc:
        raise BadInput(f"{path} cannot be read ({exc.strerror or exc}).", "Check the path and its permissions.") from None
    return parse_yaml(text, Path(path))


class Problems:
    """Collects problems as 'file:line: key: what is wrong; allowed: ...' and raises them once."""

    def __init__(self, doc: YamlDoc):
        self.doc = doc
        self.items: list[str] = []

    def add(self, keypath: KeyPath, text: str) -> None:
        self.items.append(f"{self.doc.where(keypath)}: '{dotted(keypath)}' {text}")

    def raise_if_any(self, fix: str) -> None:
        if self.items:
            more = f" (and {len(self.items) - 3} more problems)" if len(self.items) > 3 else ""
            raise BadInput("; ".join(self.items[:3]) + more + ".", fix, details={"problems": self.items})


# --- sizes -----------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: Any) -> int | None:
    """Bytes from 123, "40.23 GB" (10^9) or "25.28 GiB" (2^30); None when it is not a size."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if value >= 0 and math.isfinite(value) else None
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m and m.group(2).lower() in _UNITS:
            number, unit = m.group(1), _UNITS[m.group(2).lower()]
            if len(number) <= 30:
                return int(round(float(number) * unit))
            # past float's range "1e400 TB" would be inf (an OverflowError in int()); exact, a range check can name it
            return int(Fraction(number) * unit)
    return None


def shown(value: Any) -> str:
    """A value as a sentence quotes it: repr, but a 400-digit number is named by its length, not printed."""
    text = repr(value) if not isinstance(value, int) or isinstance(value, bool) or abs(value) < 10**30 else None
    if text is None:
        return f"a number {len(str(abs(value)))} digits long"
    return text if len(text) <= 60 else f"{text[:24]}...{text[-10:]} ({len(text)} characters)"


SIZE_HELP = "a size in bytes (an integer >= 0) or a string like \"4 GB\" or \"2.5 GiB\""


# --- small value checks (return None when fine, else 'must be ...' text) ----

Check = Callable[[Any], "str | None"]


def is_int_range(lo: int, hi: int, multiple: int = 1) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int):
            return f"must be a whole number from {lo} to {hi}" + (f" (a multiple of {multiple})" if multiple > 1 else "") + f", not {v!r}"
        if not lo <= v <= hi or v % multiple:
            return f"is {shown(v)}; allowed: {lo} to {hi}" + (f", a multiple of {multiple}" if multiple > 1 else "")
        return None
    return check


def is_size(v: Any) -> str | None:
    if parse_size(v) is None:
        neg = isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0
        return f"is {'negative' if neg else 'not a size'} ({shown(v)}); allowed: {SIZE_HELP}"
    return None


def is_one_of(allowed: list | set | tuple) -> Check:
    def check(v: Any) -> str | None:
        if v not in allowed:
            return f"is {v!r}; allowed: {', '.join(str(a) for a in allowed)}"
        return None
    return check


def is_str_list(v: Any) -> str | None:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        return f"must be a list of strings, not {v!r}"
    return None


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters no launcher can carry safely: a line break ends the command, a quote ends cmd.exe's "K=V".
_ENV_VALUE_BAD = ("\n", "\r", "\x00", '"')


def is_env_map(v: Any) -> str | None:
    """Environment variables for a launcher: NAME (letters, digits, _) to a plain value on one line."""
    msg = is_str_map(v)
    if msg:
        return msg
    for k, x in v.items():
        if not ENV_NAME.match(k):
            return f"has {k!r}, which is not an environment variable name (letters, digits and _, not starting with a digit)"
        if any(c in str(x) for c in _ENV_VALUE_BAD):
            return f"has {k}: {x!r}; a value may not hold a line break or a double quote"
    return None


def is_str_map(v: Any) -> str | None:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(x, (str, int, float)) and not isinstance(x, bool)
                                          for k, x in v.items()):
        return f"must be a mapping of NAME: value (strings), not {v!r}"
    return None
