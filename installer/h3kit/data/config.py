"""The user's config.yaml: read it, check it, and rewrite single keys in place.

Location: `<config dir>/config.yaml` (H3KIT_HOME/config.yaml when set; see
h3kit.core.paths). Keys:

    profile: auto | NAME      # which profile; auto lets the planner choose
    overrides: {KEY: VALUE}   # any settings key; the user is in charge
    comfyui_path: PATH        # the ComfyUI to manage
    calibrated: {KEY: VALUE}  # written by `h3kit calibrate`; checked like overrides
    comfyui_python: PATH      # ComfyUI's own interpreter, when h3kit cannot find it (h3kit.comfyui.locate)
    models:                   # model downloads (h3kit.models / h3kit.models.download)
      mirror: URL             # an http(s) base URL that replaces huggingface.co

Settings merge: profile < calibrated < overrides. Any other top-level key,
and any key written twice, is an error with its file:line (and the nearest
known key): a misspelt `profle:` silently planning with the default profile
is the mistake this prevents.

`set_value` and `write_section` change only their key's lines, so the user's
comments, order and other keys survive -- the file is edited as text, using
the line spans yaml.compose reports, never re-dumped whole.
"""

from __future__ import annotations

import difflib
import errno
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from h3kit.core.errors import BadInput
from h3kit.core.paths import Locations
from h3kit.core.paths import locations as default_locations
from h3kit.data import settings as settings_mod
from h3kit.data.settings import Settings
from h3kit.data.yamlio import Problems, YamlDoc, parse_yaml

KNOWN_KEYS = ("profile", "overrides", "comfyui_path", "calibrated", "comfyui_python", "models")
MODELS_KEYS = ("mirror",)
HEADER = """# h3kit configuration. Edit by hand; the next `h3kit plan` uses it.
#   profile: auto | NAME         (h3kit profile list)
#   overrides: {KEY: VALUE}      (any settings key, e.g. vae_tile_size: 384)
#   comfyui_path: PATH
#   models: {mirror: URL}        (a Hugging Face mirror, e.g. https://hf-mirror.com)
#   calibrated: written by `h3kit calibrate`
"""


@dataclass
class Config:
    profile: str = "auto"
    overrides: Settings = field(default_factory=Settings)  # typed like a profile's settings (data.settings.typed)
    comfyui_path: str | None = None
    calibrated: Settings = field(default_factory=Settings)  # typed the same way
    comfyui_python: str | None = None
    models: dict = field(default_factory=dict)  # {mirror: URL}
    raw: Path | None = None  # the file read (None when there was none)
    doc: YamlDoc | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # a caller's mapping of checked values (a test, a script) is typed here, as load() types the file's
        for section in ("overrides", "calibrated"):
            if not isinstance(getattr(self, section), Settings):
                setattr(self, section, settings_mod.typed(getattr(self, section)))

    @property
    def mirror(self) -> str | None:
        return self.models.get("mirror")

    def line_of(self, *keypath) -> int | None:
        return self.doc.line(keypath) if self.doc else None

    def written(self, section: str) -> dict:
        """A section as the file spells it ("1 GB", [864, 480]), for sentences that quote the user."""
        raw = self.doc.data if self.doc is not None and isinstance(self.doc.data, dict) else {}
        return dict(raw.get(section) or {})


def _config_path(where: Any) -> Path:
    if where is None:
        return default_locations().config_file
    if isinstance(where, Locations):
        return where.config_file
    return Path(where)


def load(locations: Any = None, *, catalog=None, profile_names=None) -> Config:
    """Read and check config.yaml; no file means all defaults. Bad values: BadInput naming file:line."""
    path = _config_path(locations)
    if not _present(path):
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}:1: the config file cannot be read ({exc}).", "Save it as UTF-8 text.") from None
    doc = parse_yaml(text, path)
    return check(doc, catalog=catalog, profile_names=profile_names)


def _present(path: Path) -> bool:
    """True for a config file to read, False when there is none; BadInput for a path that is there but is not
    a file (a folder, a FIFO, a device, a dangling link, a link loop): planning with defaults would hide the
    user's settings. Only stat is asked: opening a FIFO would wait for a writer that never comes."""
    if not os.path.lexists(path):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        target = os.readlink(path) if path.is_symlink() else None
        why = ("is a link in a loop" if exc.errno == errno.ELOOP else
               f"is a link to {target}, which does not exist" if target is not None else f"cannot be read ({exc.strerror})")
        raise BadInput(f"{path}:1: the config file {why}.",
                       "Point the link at your config.yaml, or delete it to plan with the defaults.") from None
    if stat.S_ISREG(mode):
        return True
    what = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    link = f"a link to {os.readlink(path)}, which " if path.is_symlink() else ""
    if stat.S_ISDIR(mode) and not link:
        raise BadInput(f"{path}:1: the config file is a folder, not a file.",
                       "Move that folder away (h3kit reads config.yaml as a YAML file), then run the command again.")
    raise BadInput(f"{path}:1: the config file is {link}{'is ' if link else ''}{what}, not a file.",
                   f"Delete {'that link' if link else 'it'} and write config.yaml as a plain YAML file "
                   "(or leave it deleted to plan with the defaults), then run the command again.")


_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket",
          stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}


def check(doc: YamlDoc, *, catalog=None, profile_names=None) -> Config:
    from h3kit.data import catalog as catalog_mod

    if catalog is None:
        catalog = catalog_mod.load()
    if profile_names is None:
        profile_names = sorted(catalog_mod.load_profiles(catalog))
    data = doc.data if doc.data is not None else {}
    problems = Problems(doc)
    cfg = Config(raw=doc.path, doc=doc)
    if not isinstance(data, dict):
        problems.add((), f"must be a mapping ({', '.join(k + ':' for k in KNOWN_KEYS)})")
        problems.raise_if_any("Start the file with 'profile: auto' and put settings under 'overrides:'.")
    for key in data:
        if key not in KNOWN_KEYS:
            near = difflib.get_close_matches(str(key), KNOWN_KEYS, n=1)
            hint = f"did you mean '{near[0]}'? " if near else ""
            problems.add((key,), f"is not a config key; {hint}allowed: {', '.join(KNOWN_KEYS)}")
    profile = data.get("profile", "auto")
    if profile is None:
        profile = "auto"
    if not isinstance(profile, str) or (profile != "auto" and profile not in profile_names):
        problems.add(("profile",), f"is {profile!r}; allowed: auto, {', '.join(profile_names)}")
    else:
        cfg.profile = profile
    for section in ("overrides", "calibrated"):
        value = data.get(section) or {}
        settings_mod.check(value, (section,), problems, catalog, complete=False, source=section)
        if isinstance(value, dict):
            setattr(cfg, section, dict(value))
    comfy = data.get("comfyui_path")
    if comfy is not None and not isinstance(comfy, str):
        problems.add(("comfyui_path",), f"must be a folder path (a string), not {comfy!r}")
    cfg.comfyui_path = comfy if isinstance(comfy, str) else None
    python = data.get("comfyui_python")
    if python is not None and not isinstance(python, str):
        problems.add(("comfyui_python",), f"must be the path of ComfyUI's python (a string), not {python!r}")
    cfg.comfyui_python = python if isinstance(python, str) else None
    cfg.models = _check_models(data.get("models"), problems)
    problems.raise_if_any("Correct that line of config.yaml (or delete it to go back to the profile's value).")
    cfg.overrides, cfg.calibrated = settings_mod.typed(cfg.overrides), settings_mod.typed(cfg.calibrated)
    return cfg


def _check_models(value: Any, problems: Problems) -> dict:
    """The `models:` section: {mirror: http(s) base URL}; anything else is a mistake worth a line number."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.add(("models",), f"must be a mapping (models: then '  mirror: https://...'), not {value!r}")
        return {}
    for key in value:
        if key not in MODELS_KEYS:
            problems.add(("models", key), f"is not a models key; allowed: {', '.join(MODELS_KEYS)}")
    mirror = value.get("mirror")
    if mirror is not None and not _is_http_url(mirror):
        problems.add(("models", "mirror"), f"is {mirror!r}; allowed: an http(s) base URL such as https://hf-mirror.com")
    return {k: v for k, v in value.items() if k in MODELS_KEYS and v is not None}


def _is_http_url(value: Any) -> bool:
    if not isinstance(value, str) or any(ch.isspace() for ch in value):
        return False
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


# --- rewriting single keys -------------------------------------------------


def _dump_value(key: str, value: Any) -> list[str]:
    """'key: value' lines for a top-level key, block style for mappings."""
    if isinstance(value, dict) and value:
        body = yaml.safe_dump(value, default_flow_style=False, sort_keys=False, allow_unicode=True)
        return [f"{key}:"] + ["  " + line for line in body.splitlines()]
    flow = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**6).strip()
    if flow.endswith("\n..."):
        flow = flow[: -len("\n...")]
    flow = flow.removesuffix("...").strip()
    return [f"{key}: {flow}"]


def _span(lines: list[str], text: str, key: str) -> tuple[int, int] | None:
    """[first, end) line indexes of a top-level key and its value, without trailing comments/blank lines."""
    node = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if key_node.value == key:
            first = key_node.start_mark.line
            end = value_node.end_mark.line + (1 if value_node.end_mark.column > 0 else 0)
            end = max(end, first + 1)
            while end > first + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")) \
                    and not lines[end - 1].startswith((" ", "\t")):
                end -= 1
            return first, end
    return None


def _rewrite(path: Path, key: str, new_lines: list[str]) -> None:
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    lines = text.splitlines()
    span = _span(lines, text, key)
    if span:
        first, end = span
        old_first = lines[first]
        # A comment after a one-line scalar value stays on its line.
        m = re.search(r"\s+#.*$", old_first)
        if end - first == 1 and len(new_lines) == 1 and m:
            try:
                yaml.safe_load(old_first[: m.start()])
                new_lines = [new_lines[0] + m.group(0)]
            except yaml.YAMLError:
                pass
        lines[first:end] = new_lines
    else:
        lines += new_lines
    out = "\n".join(lines) + "\n"
    parse_yaml(out, path)  # never write a file we could not read back
    _write_text(path, out)


def _write_text(path: Path, out: str) -> None:
    """config.yaml replaced atomically (a temporary file beside it, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".yaml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(out)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def set_value(path: Any, key: str, value: Any) -> None:
    """Set one top-level key (e.g. profile) in config.yaml, keeping every other line as it was."""
    _rewrite(_config_path(path), key, _dump_value(key, value))


def _child_span(text: str, section: str, key: str):
    """(section's mapping node, [first, end) lines of `key` in it or None) for a block-style section, else None."""
    node = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
    if not isinstance(node, yaml.MappingNode):
        return None
    body = next((v for k, v in node.value if k.value == section), None)
    if not isinstance(body, yaml.MappingNode) or body.flow_style or not body.value:
        return None
    for key_node, value_node in body.value:
        if key_node.value == key:
            end = value_node.end_mark.line + (1 if value_node.end_mark.column > 0 else 0)
            return body, (key_node.start_mark.line, max(end, key_node.start_mark.line + 1))
    return body, None


def set_in_section(path: Any, section: str, key: str, value: Any) -> None:
    """Set (or, with None, remove) one key of a top-level mapping such as overrides, keeping every other line of
    config.yaml and its comments, the key's own trailing comment too; checked as write_section checks."""
    path = _config_path(path)
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    found = _child_span(text, section, key)
    if found is None:  # no block-style section to edit in place: the section is written whole
        data = parse_yaml(text, path).data if text.strip() else {}
        current = dict(data.get(section) or {}) if isinstance(data, dict) else {}
        current.pop(key, None)
        write_section(path, section, {**current, **({} if value is None else {key: value})})
        return
    body, span = found
    lines = text.splitlines()
    indent = " " * body.value[0][0].start_mark.column
    new = [] if value is None else [indent + _dump_value(key, value)[0]]
    if span is None:
        end = body.end_mark.line + (1 if body.end_mark.column > 0 else 0)
        while end > 0 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")) \
                and not lines[end - 1].startswith(indent):
            end -= 1
        lines[end:end] = new
    else:
        m = re.search(r"\s+#.*$", lines[span[0]])
        if new and m and span[1] - span[0] == 1:
            new = [new[0] + m.group(0)]
        lines[span[0]:span[1]] = new
    out = "\n".join(lines) + "\n"
    data = parse_yaml(out, path).data  # never write a file we could not read back
    _check_section(section, dict(data.get(section) or {}) if isinstance(data, dict) else {})
    _write_text(path, out)


def write_section(path: Any, section: str, mapping: dict) -> None:
    """Replace one top-level mapping (e.g. calibrated) in config.yaml, keeping every other line."""
    if not isinstance(mapping, dict):
        raise TypeError("write_section needs a mapping")
    _check_section(section, mapping)
    _rewrite(_config_path(path), section, _dump_value(section, mapping) if mapping else [f"{section}: {{}}"])


def _check_section(section: str, mapping: dict) -> None:
    """Never write a config the next plan would refuse: settings sections are checked as config.yaml is read."""
    if section not in ("calibrated", "overrides"):
        return
    from h3kit.data import catalog as catalog_mod

    text = yaml.safe_dump({section: mapping}, sort_keys=False)
    problems = Problems(parse_yaml(text, Path(f"<{section} to write>")))
    settings_mod.check(mapping, (section,), problems, catalog_mod.load(), complete=False, source=section)
    problems.raise_if_any(f"Only valid settings can be written to '{section}'.")
