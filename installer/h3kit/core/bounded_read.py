"""Reading files h3kit does not own: an app's settings, a cache's ref, another tool's config, a YAML of model paths.

Such a file is whatever its path leads to when h3kit looks: a named pipe that blocks the first read forever, a
link to /dev/zero that never ends, a folder, 2 GB of text, bytes in another encoding, JSON or YAML nested
200,000 deep (both parsers recurse once per level: a RecursionError). So every read here

- stats the path first and refuses anything that is not a regular file, naming what it is, without opening it;
  the open itself is non-blocking and the opened file is checked again (the path may change in between);
- reads at most `cap` + 1 bytes, so a file past its cap (or one that grows) is refused without being held;
- decodes strictly and names the file, the encoding and the offset of the first bad byte;
- parses JSON and YAML with a bound on nesting: JSON's RecursionError is caught (the C scanner counts its own
  depth, in time linear in the text it read), YAML is composed with a depth count (its composer is the only
  recursive step of PyYAML's safe loader) and refused past `max_depth`.

Whatever fails raises `UnreadableFile`, one sentence with `.skipped` for the "skipped <file>: <why>" line the
caller shows; `absent` says the file simply is not there (usually nothing to say). Nothing here logs or prints.
What is left out on purpose: locking, and any retry; a file that changes while read is refused or read as is.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml

from h3kit.core.errors import H3kitError, EXIT_BAD_INPUT
from h3kit.core.units import human_bytes

JSON_CAP = 64 << 20  # an app's installations.json with thousands of installs is a few MB; 29 MB has been seen
TEXT_CAP = 1 << 20  # small settings files (an INI, a YAML of folders): the cap h3kit's own config.yaml has
YAML_DEPTH = 64  # the model-path YAML needs three levels; h3kit's own YAML reader stops at 64 too
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class UnreadableFile(H3kitError):
    """A file h3kit does not own that it would not or could not read; `why` is the reason in words."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: str | os.PathLike, why: str, *, absent: bool = False, too_big: bool = False):
        super().__init__(f"{path} cannot be read: {why}.",
                         "Move that file away or write it again; h3kit goes on without it meanwhile.")
        self.path = Path(path)
        self.why = why
        self.absent = absent
        self.too_big = too_big

    @property
    def skipped(self) -> str:
        return f"skipped {self.path}: {self.why}"


def _cap(n: int) -> str:
    """A cap as written in the code (1 MiB, 4 KiB), not rounded to a decimal size."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _what(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _check_regular(path: Path, cap: int) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        dangling = os.path.islink(path)
        raise UnreadableFile(path, "it is a link that leads nowhere" if dangling else "it does not exist",
                             absent=not dangling) from None
    except OSError as exc:
        raise UnreadableFile(path, f"{exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        lead = f"it is a link to {os.path.realpath(path)}, " if os.path.islink(path) else "it is "
        raise UnreadableFile(path, f"{lead}{_what(st.st_mode)}, not a file")
    if st.st_size > cap:
        raise UnreadableFile(path, f"it holds {human_bytes(st.st_size)}, more than the {_cap(cap)} h3kit "
                                   "reads from such a file", too_big=True)


def read_bytes(path: str | os.PathLike, cap: int) -> bytes:
    """The bytes of the regular file at `path` (links followed), at most `cap` of them; else UnreadableFile."""
    path = Path(path)
    _check_regular(path, cap)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UnreadableFile(path, f"{exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped for something else since the stat above
            raise UnreadableFile(path, f"it is {_what(mode)}, not a file")
        chunks, left = [], cap + 1
        while left > 0:
            block = os.read(fd, min(left, 1 << 20))
            if not block:
                break
            chunks.append(block)
            left -= len(block)
    except OSError as exc:
        raise UnreadableFile(path, f"{exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap:
        raise UnreadableFile(path, f"it grew past the {_cap(cap)} h3kit reads from such a file", too_big=True)
    return data


def read_text(path: str | os.PathLike, cap: int = TEXT_CAP, encoding: str = "utf-8") -> str:
    """`read_bytes` decoded strictly; a byte that is not `encoding` is named with its offset."""
    data = read_bytes(path, cap)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"it is not {exc.encoding.upper()} text (byte 0x{data[exc.start]:02x} at offset "
                                   f"{exc.start}: {exc.reason})") from None


def parse_json(text: str, where: str | os.PathLike) -> object:
    """JSON from `text`, or UnreadableFile naming `where` (bad JSON, or nested past Python's recursion limit)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise UnreadableFile(where, "its JSON is nested deeper than h3kit reads (about a thousand levels)") from None
    except ValueError as exc:
        raise UnreadableFile(where, f"it is not JSON ({exc})") from None


def read_json(path: str | os.PathLike, cap: int = JSON_CAP) -> object:
    """`read_text` (UTF-8) parsed as JSON."""
    return parse_json(read_text(path, cap), path)


class _DepthLoader(yaml.SafeLoader):
    """PyYAML's safe loader (what ComfyUI uses) that stops composing past `max_depth` levels."""

    max_depth = YAML_DEPTH

    def __init__(self, text: str):
        super().__init__(text)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                mark = self.peek_event().start_mark
                raise _TooDeep(mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _TooDeep(Exception):
    def __init__(self, line: int):
        super().__init__(line)
        self.line = line


def parse_yaml(text: str, where: str | os.PathLike, max_depth: int = YAML_DEPTH) -> object:
    """YAML from `text` as yaml.safe_load reads it, nested at most `max_depth` levels; else UnreadableFile."""
    loader = _DepthLoader(text)
    loader.max_depth = max_depth
    try:
        return loader.get_single_data()
    except _TooDeep as exc:
        raise UnreadableFile(where, f"its YAML is nested more than {max_depth} levels deep (line {exc.line})") from None
    except RecursionError:
        raise UnreadableFile(where, "its YAML is nested deeper than h3kit reads") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise UnreadableFile(where, f"it is not YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    except (ValueError, OverflowError) as exc:  # a value the safe loader cannot build: a date 2001-13-01
        raise UnreadableFile(where, f"it holds a YAML value that cannot be read ({exc})") from None
    finally:
        loader.dispose()


def read_yaml(path: str | os.PathLike, cap: int = TEXT_CAP, max_depth: int = YAML_DEPTH) -> object:
    """`read_text` (UTF-8) parsed as YAML by `parse_yaml`."""
    return parse_yaml(read_text(path, cap), path, max_depth)
