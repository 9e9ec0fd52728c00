"""Where a ComfyUI looks for each kind of model file, and where a new one goes: asked of ComfyUI itself.

A ComfyUI rarely keeps its weights only in `<ComfyUI>/models/`: the Desktop
app hands every install its shared `ComfyUI-Shared` folder, Stability Matrix
its `Data/Models`, and many people a second drive, through
`extra_model_paths.yaml`, `--extra-model-paths-config` files or links. So the
search lists come from ComfyUI's own code, in its own Python
(`FOLDERS_SCRIPT`): its `folder_paths` after main.py's `apply_custom_paths`
has run with the arguments this ComfyUI is started with (taken from main.py's
source, so whatever that version reads, in its order, is what counts). The
script only reads: `folder_paths` makes input/ and output/ folders when
imported, so `os.makedirs` is a no-op while it runs.

Order of trust, written once here:

1. ComfyUI's own answer (`source == "comfyui"`);
2. when its Python cannot be run, or its tree has no main.py (the legacy
   Desktop keeps the code inside the app), h3kit's reading of the same YAML
   files with ComfyUI 0.33's rule (`read_extra_config`, checked against the
   real one in tests/real_comfyui) (`source == "h3kit"`);
3. nothing to read: ComfyUI's built-in folders (`source == "default"`).

A file counts as present in any folder of its search list. A missing one
goes where ComfyUI's default points: the first folder of the list when a
configuration put it first (`is_default: true`), else the catalog's folder
inside the ComfyUI's own models folder (`target_dir`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from h3kit.comfyui.inspect import marked_json
from h3kit.comfyui.locate import ComfyInstall
from h3kit.core import bounded_read
from h3kit.data import comfy_argv, yamlio

FOLDERS_TIMEOUT = 60.0
# ComfyUI's older folder names for the same kind of file (folder_paths.map_legacy).
LEGACY = {"unet": "diffusion_models", "clip": "text_encoders"}
# ComfyUI's own search list for a folder, under its models folder (folder_paths.py, 0.30-0.38).
BUILT_IN = {"diffusion_models": ("unet", "diffusion_models"), "text_encoders": ("text_encoders", "clip")}

# Runs inside ComfyUI's interpreter: argv[1] the folder with main.py, argv[2] the JSON launch arguments,
# argv[3] the JSON folder names wanted. Stdlib and ComfyUI's own light modules only (no torch); never raises.
FOLDERS_SCRIPT = r"""
import ast, itertools, json, logging, os, sys
out = {"ok": False}
try:
    code_dir = os.path.abspath(sys.argv[1])
    launch, wanted = json.loads(sys.argv[2]), json.loads(sys.argv[3])
    sys.path.insert(0, code_dir)
    sys.argv = [os.path.join(code_dir, "main.py")] + launch
    logging.disable(logging.CRITICAL)
    real_makedirs = os.makedirs
    os.makedirs = lambda *a, **k: None
    try:
        import comfy.options
        comfy.options.enable_args_parsing(True)
        import comfy.cli_args
        import folder_paths
        import utils.extra_config
        ns = {"os": os, "itertools": itertools, "logging": logging, "folder_paths": folder_paths,
              "utils": utils, "args": comfy.cli_args.args, "__file__": os.path.join(code_dir, "main.py")}
        try:
            with open(os.path.join(code_dir, "main.py"), encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "apply_custom_paths"]
            exec(compile(ast.Module(body=fn[:1], type_ignores=[]), "main.py", "exec"), ns)
            ns["apply_custom_paths"]()
            out["rule"] = "main.py apply_custom_paths"
        except Exception as exc:
            out["rule_error"] = "%s: %s" % (type(exc).__name__, exc)
            beside = os.path.join(code_dir, "extra_model_paths.yaml")
            if os.path.isfile(beside):
                utils.extra_config.load_extra_path_config(beside)
            for path in itertools.chain(*(comfy.cli_args.args.extra_model_paths_config or [])):
                utils.extra_config.load_extra_path_config(path)
            out["rule"] = "0.33 rule"
    finally:
        os.makedirs = real_makedirs
    out["models_dir"] = folder_paths.models_dir
    out["folders"] = {}
    for name in wanted:
        try:
            out["folders"][name] = folder_paths.get_folder_paths(name)
        except Exception:
            pass
    out["ok"] = True
except BaseException as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print("H3KIT-FOLDERS " + json.dumps(out))
"""


@dataclass(frozen=True)
class ModelFolders:
    """Each folder's search list in ComfyUI's order, and where a new file goes."""

    models_dir: Path
    search: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)
    source: str = "default"  # comfyui | h3kit | default (module docstring)
    detail: str = "ComfyUI's built-in folders"
    configs: tuple[Path, ...] = ()
    problem: str | None = None  # a configuration ComfyUI cannot read (it would not start with it), in a sentence

    @classmethod
    def built_in(cls, models_dir: Path) -> "ModelFolders":
        return cls(Path(models_dir))

    def search_list(self, folder: str) -> tuple[Path, ...]:
        folder = LEGACY.get(folder, folder)
        found = self.search.get(folder)
        if found:
            return found
        return tuple(self.models_dir / sub for sub in BUILT_IN.get(folder, (folder,)))

    def target_dir(self, folder: str) -> Path:
        """Where a missing file of `folder` goes: a configured default first, else models/<folder>."""
        folder = LEGACY.get(folder, folder)
        first = self.search_list(folder)[0]
        if _inside(first, self.models_dir):
            return self.models_dir / folder
        return first

    def shared(self, path: Path) -> bool:
        """Whether `path` lies outside this ComfyUI's own models folder (a shared folder)."""
        return not _inside(Path(path), self.models_dir)

    def to_json(self) -> dict:
        return {"source": self.source, "detail": self.detail, "models_dir": str(self.models_dir),
                "configs": [str(c) for c in self.configs], "problem": self.problem,
                "search": {k: [str(p) for p in v] for k, v in self.search.items()}}


def _inside(path: Path, folder: Path) -> bool:
    try:
        Path(os.path.abspath(path)).relative_to(os.path.abspath(folder))
        return True
    except ValueError:
        return False


# -- ComfyUI's own answer -----------------------------------------------------------------------------


def parse_folders_output(text: str, wanted: list[str]) -> tuple[ModelFolders | None, str]:
    """(folders, why not) from FOLDERS_SCRIPT's line: None with the reason when it failed."""
    report = marked_json(text, "H3KIT-FOLDERS")
    if report is None:
        return None, "ComfyUI's Python printed no answer"
    if not report.get("ok") or not isinstance(report.get("folders"), dict):
        return None, str(report.get("error") or "ComfyUI's folder_paths gave no folders")
    search = {}
    for name in wanted:
        paths = report["folders"].get(LEGACY.get(name, name))
        if isinstance(paths, list) and paths and all(isinstance(p, str) for p in paths):
            search[LEGACY.get(name, name)] = tuple(Path(p) for p in paths)
    rule = "its main.py" if report.get("rule") == "main.py apply_custom_paths" else "ComfyUI 0.33's rule"
    return ModelFolders(Path(report.get("models_dir") or "."), search, "comfyui",
                        f"asked ComfyUI's own folder_paths ({rule})"), ""


# -- h3kit's reading, when ComfyUI's Python cannot be asked ----------------------------------------------


def read_extra_config(text: str, yaml_dir: Path) -> list[tuple[str, Path, bool]]:
    """(folder, path, is_default) for each entry of an extra_model_paths.yaml, as ComfyUI 0.33's
    utils/extra_config.py reads it (base_path relative to the file, one path per line); bad YAML -> []."""
    try:
        config = bounded_read.parse_yaml(text, "extra_model_paths.yaml")
    except bounded_read.UnreadableFile:
        return []
    return extra_config_entries(config, yaml_dir)


def extra_config_entries(config: object, yaml_dir: Path) -> list[tuple[str, Path, bool]]:
    """`read_extra_config` on the parsed YAML."""
    if not isinstance(config, dict):
        return []
    out = []
    for conf in config.values():
        if not isinstance(conf, dict):
            continue
        conf = dict(conf)
        base = conf.pop("base_path", None)
        if isinstance(base, str):
            base = os.path.expandvars(os.path.expanduser(base))
            if not os.path.isabs(base):
                base = os.path.abspath(os.path.join(yaml_dir, base))
        is_default = bool(conf.pop("is_default", False))
        for folder, value in conf.items():
            if not isinstance(value, str):
                continue
            for line in value.split("\n"):
                if not line:
                    continue
                full = os.path.join(base, line) if base else (line if os.path.isabs(line) else os.path.join(yaml_dir, line))
                out.append((LEGACY.get(str(folder), str(folder)), Path(os.path.normpath(os.path.abspath(full))), is_default))
    return out


def config_files(code_dir: Path | None, launch_args: tuple[str, ...]) -> list[Path]:
    """The YAML files ComfyUI reads, in its order: beside main.py `extra_paths.yaml` when there is one (newer
    than 0.33: it then skips extra_model_paths.yaml), else `extra_model_paths.yaml`; then every value of every
    --extra-model-paths-config, read as ComfyUI reads its command line (h3kit.data.comfy_argv)."""
    files = []
    for name in ("extra_paths.yaml", "extra_model_paths.yaml"):
        if code_dir is not None and (Path(code_dir) / name).is_file():
            files.append(Path(code_dir) / name)
            break
    # An empty value names no file (Path("") would be the working folder): left out.
    files += [Path(v) for v in comfy_argv.values(launch_args, "--extra-model-paths-config") or () if v]
    return files


class _Order:
    """One folder's search list built as ComfyUI's add_model_folder_path builds it (a default goes first, one
    already listed moves first when it is a default, else it is appended), in time linear in the entries: each
    path holds a rank, where a list would be searched (`in`, remove, insert) once per line of the YAML."""

    def __init__(self, paths):
        self.rank: dict = {}
        self.first = self.last = 0
        for p in paths:
            self.add(p, False)

    def add(self, path: Path, is_default: bool) -> None:
        if is_default:
            self.first -= 1
            self.rank[path] = self.first
        elif path not in self.rank:
            self.last += 1
            self.rank[path] = self.last

    def paths(self) -> tuple[Path, ...]:
        return tuple(sorted(self.rank, key=self.rank.__getitem__))


def _read_model_paths(path: Path) -> tuple[object, str | None, str | None]:
    """(parsed YAML, a problem ComfyUI would stop on, a note that h3kit skipped it): one of the three set.

    Read as ComfyUI reads it, but bounded: a pipe, a device or a folder is never opened, a file longer than
    h3kit's own config.yaml may be is skipped (ComfyUI itself reads it; h3kit asks ComfyUI first), and one
    nested too deep for yaml.safe_load is a problem (ComfyUI stops at start on its RecursionError)."""
    try:
        text = bounded_read.read_text(path, yamlio.MAX_BYTES)
    except bounded_read.UnreadableFile as exc:
        if exc.too_big:
            return None, None, exc.skipped
        return None, f"{path} cannot be read ({exc.why})", None
    try:
        config = bounded_read.parse_yaml(text, path)
    except bounded_read.UnreadableFile as exc:
        return None, f"{path} is not a model-paths file ComfyUI can read ({exc.why})", None
    why = config_problem(config)
    return config, (f"{path} is not a model-paths file ComfyUI can read ({why})" if why else None), None


def h3kit_reading(models_dir: Path, files: list[Path], wanted: list[str]) -> ModelFolders:
    """ComfyUI 0.33's rule applied by h3kit to `files` (module docstring, step 2)."""
    models_dir = Path(models_dir)
    search = {LEGACY.get(w, w): _Order(ModelFolders.built_in(models_dir).search_list(w)) for w in wanted}
    read, problems, skipped = [], [], []
    for path in files:
        config, problem, skip = _read_model_paths(Path(path))
        if problem or skip:
            problems += [problem] if problem else []
            skipped += [skip] if skip else []
            continue
        read.append(Path(path))
        for folder, full, is_default in extra_config_entries(config, Path(path).absolute().parent):
            order = search.get(folder) or search.setdefault(folder, _Order([models_dir / folder]))
            order.add(full, is_default)
    problem = ("; ".join(problems) + ": ComfyUI stops at start with such a file; fix or remove it") if problems else None
    note = "".join(f"; {s}" for s in skipped)
    if not read:
        return ModelFolders(models_dir, {}, "default", "ComfyUI's built-in folders" + note, (), problem)
    return ModelFolders(models_dir, {k: v.paths() for k, v in search.items()}, "h3kit",
                        "h3kit's reading of " + ", ".join(str(p) for p in read) + note, tuple(read), problem)


def yaml_problem(text: str) -> str | None:
    """Why ComfyUI's load_extra_path_config would fail on `text` (not YAML, not a mapping of mappings), or None."""
    try:
        config = bounded_read.parse_yaml(text, "extra_model_paths.yaml")
    except bounded_read.UnreadableFile as exc:
        return exc.why
    return config_problem(config)


def config_problem(config: object) -> str | None:
    """`yaml_problem` on the parsed YAML: what ComfyUI's load_extra_path_config would stop on, with the fix."""
    if config is None:
        return None
    if not isinstance(config, dict):
        return "its top level must map section names to folders"
    return next(filter(None, (_section_problem(name, conf) for name, conf in config.items())), None)


def _section_problem(name: object, conf: object) -> str | None:
    """One section as ComfyUI 0.33-0.38 reads it: os.path.expanduser(base_path) and value.split("\\n") for each
    folder, so a null or non-text base_path (a TypeError) or folder value (an AttributeError) stops its start.
    A section that is null, or an empty list or text, ComfyUI passes over."""
    if conf is None or (isinstance(conf, (str, list)) and not conf):
        return None
    if not isinstance(conf, dict):
        return (f"section '{name}' is {_yaml_value(conf)}, not a mapping; write the folders under it as "
                "indented 'vae: path' lines, or delete the section")
    if "base_path" in conf and not isinstance(conf["base_path"], str):
        return (f"section '{name}' has base_path: {_yaml_value(conf['base_path'])}, not a folder path; write the "
                "folder the paths below it are in, or delete the base_path line to take them from the file's folder")
    for folder, value in conf.items():
        if folder not in ("base_path", "is_default") and not isinstance(value, str):
            return (f"section '{name}' has {folder}: {_yaml_value(value)}, not a path; write a folder path (several "
                    f"as a '|' block, one a line), or delete the {folder} line")
    return None


def _yaml_value(value: object) -> str:
    """A parsed value as the YAML spelled it, for a sentence: ~ (null), a list, a number."""
    if value is None:
        return "~ (null)"
    kind = ("a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else
            "true/false" if isinstance(value, bool) else "a number" if isinstance(value, (int, float)) else
            "text" if isinstance(value, str) else type(value).__name__)
    return kind if isinstance(value, (list, dict)) else f"{str(value)[:40]} ({kind})"


def resolve(install: ComfyInstall, wanted: list[str], run_python=None,
            timeout: float = FOLDERS_TIMEOUT) -> ModelFolders:
    """The folders of `install`, in the module docstring's order of trust. Never raises."""
    launch = tuple(install.launch_args)
    code_dir = install.code_dir or (install.path if install.main_py is not None else None)
    base = comfy_argv.value(launch, "--base-directory")
    models_dir = Path(comfy_argv.value(launch, "--models-directory") or Path(base or install.path) / "models")
    why = "its tree has no main.py" if code_dir is None else "h3kit does not know its Python"
    if code_dir is not None and install.python is not None and run_python is not None:
        result = run_python(install, ["-c", FOLDERS_SCRIPT, str(code_dir), json.dumps(list(launch)), json.dumps(wanted)],
                            timeout)
        folders, why = parse_folders_output(result.stdout, wanted)
        if folders is not None:
            return ModelFolders(folders.models_dir, folders.search, folders.source, folders.detail,
                                tuple(config_files(code_dir, launch)))
    reading = h3kit_reading(models_dir, config_files(code_dir, launch), wanted)
    note = f" (ComfyUI itself could not be asked: {why})"
    return ModelFolders(reading.models_dir, reading.search, reading.source, reading.detail + note, reading.configs,
                        reading.problem)


# -- where h3kit may make a model folder -------------------------------------------------------------------


def configured_bases(configs) -> list[tuple[Path, Path]]:
    """(base_path, the file naming it) for each section of the model-path files with a base_path, spelt out
    as ComfyUI does (~ and $VARS expanded, relative to the file's folder)."""
    out = []
    for path in configs:
        config, _problem, _skip = _read_model_paths(Path(path))
        for conf in config.values() if isinstance(config, dict) else ():
            base = conf.get("base_path") if isinstance(conf, dict) else None
            if isinstance(base, str) and base:
                base = os.path.expandvars(os.path.expanduser(base))
                full = os.path.join(os.path.dirname(os.path.abspath(path)), base)
                out.append((Path(os.path.normpath(os.path.abspath(full))), Path(path)))
    return out


def creation_root(folders: ModelFolders, target: Path) -> tuple[Path, str]:
    """(the folder that must already exist before h3kit makes `target` and the folders between, what it is).

    ComfyUI's own models folder is made under the ComfyUI folder; a configured one under its entry's
    base_path; one configured as a bare path under the folder it is in. A root that is not there is a
    drive that is not connected: making the chain would write onto the disk below its mount point."""
    target = Path(os.path.abspath(target))
    if not folders.shared(target):
        return Path(os.path.abspath(folders.models_dir)).parent, "the ComfyUI folder its models folder is in"
    bases = [(b, f) for b, f in configured_bases(folders.configs) if _inside(target, b)]
    if bases:
        base, named_in = max(bases, key=lambda bf: len(bf[0].parts))
        return base, f"the base_path in {named_in}"
    return target.parent, "the folder above it in " + ", ".join(str(c) for c in folders.configs)
