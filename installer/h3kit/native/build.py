"""Compiling payload/ (its units, UNITS) into libh3kit-<variant>, and its self-test program against each.

Two builds per machine architecture, never `-march=native` (the library may
be copied to another machine with the node pack):

- `baseline`: portable, any CPU of the architecture;
- a tuned build: `x86-64-v3` (AVX2/FMA/F16C) or `arm64-dotprod`.

The loader (h3kit.native) picks the tuned build when the CPU has what it
needs, else the baseline.

Cache: `<cache>/native/<key>/` where key is a hash of the sources, the
compiler (command and version) and every variant's flags, so a changed
source, compiler or flag builds again and an unchanged one is reused.
`<cache>/native/current.json` points at the folder of the last good build;
the bridge reads it. A build only becomes current after its self-test
passed: the program h3k-selftest-<variant> (payload/selftest.c), linked
against that variant's library and found beside it, run on every variant
with a timeout, then the bridge in a child process, which must load the
library (its ABI) and pick a variant that passed. Both are other processes,
so a library that crashes cannot take h3kit down with it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from h3kit import bundled
from h3kit.bundled import h3k_native
from h3kit.core import subproc
from h3kit.core.errors import NotReady, VerificationFailed
from h3kit.core.files import atomic_write, free_bytes
from h3kit.core.oserrors import no_space, translate
from h3kit.core.paths import asset_dir, locations
from h3kit.native import compilers

log = logging.getLogger("h3kit.native.build")

SCHEMA = "h3kit.build/1"
# The library's units (payload/README.md says which holds what), compiled and
# linked in one command; SOURCES is everything a build depends on, hashed.
UNITS = ("h3k.c", "platform.c", "kernels.c", "products.c", "pool.c", "arena.c", "streamer.c",
         "direct_read.c", "tiles.c")
SELFTEST = "selftest.c"  # not a unit: the program h3k-selftest, a client of h3k.h
SOURCES = ("h3k.h", "h3k_internal.h", *UNITS, SELFTEST)
COMPILE_TIMEOUT = 300.0
SELFTEST_TIMEOUT = h3k_native.SELFTEST_TIMEOUT
BRIDGE_TIMEOUT = 60.0

GNU_FLAGS = ["-std=c11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-ffp-contract=off", "-Wall"]
MSVC_FLAGS = ["/nologo", "/O2", "/LD", "/std:c11", "/fp:precise", "/W3"]
# The self-test program gets no SIMD flags whatever the variant, so on a CPU that lacks the tuned build's
# features it still runs far enough to say so.
GNU_PROGRAM_FLAGS = ["-std=c11", "-O2", "-Wall"]
MSVC_PROGRAM_FLAGS = ["/nologo", "/O2", "/std:c11", "/W3"]


def arch() -> str:
    m = platform.machine().lower()
    if m in ("x86_64", "amd64"):
        return "x86_64"
    if m in ("arm64", "aarch64"):
        return "arm64"
    return m


def variant_flags(compiler: compilers.Compiler, machine: str | None = None) -> dict[str, list[str]]:
    """Flags per variant for this compiler family and architecture."""
    machine = machine or arch()
    zig = compiler.name == "zig"
    if compiler.style == "msvc":
        out = {"baseline": list(MSVC_FLAGS)}
        if machine == "x86_64":
            out["x86-64-v3"] = MSVC_FLAGS + ["/arch:AVX2"]
        return out
    # zig cc targets the build machine's own CPU unless told otherwise.
    base = GNU_FLAGS + (["-mcpu=baseline"] if zig else [])
    out = {"baseline": base}
    if machine == "x86_64":
        out["x86-64-v3"] = GNU_FLAGS + (["-mcpu=x86_64_v3"] if zig else ["-mavx2", "-mfma", "-mf16c"])
    elif machine == "arm64":
        out["arm64-dotprod"] = GNU_FLAGS + (["-mcpu=generic+dotprod+fullfp16"] if zig
                                            else ["-march=armv8.2-a+dotprod+fp16"])
    return out


def program_flags(compiler: compilers.Compiler) -> list[str]:
    if compiler.style == "msvc":
        return list(MSVC_PROGRAM_FLAGS)
    return GNU_PROGRAM_FLAGS + (["-mcpu=baseline"] if compiler.name == "zig" else [])


def link_libs(system: str = sys.platform) -> list[str]:
    return [] if system in ("win32", "darwin") else ["-lm", "-lpthread"]


def import_library(lib: Path) -> Path:
    """Windows: the import library the self-test program links against (written beside the DLL)."""
    return lib.with_suffix(".lib")


def source_dir() -> Path:
    return asset_dir("payload")


def sources_hash(src: Path | None = None) -> str:
    src = src or source_dir()
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (src / name).read_bytes() + b"\0")
    return h.hexdigest()


def unit_paths(src: Path | None = None) -> list[str]:
    """The units' paths, in build order, for a compiler's command line."""
    src = src or source_dir()
    return [str(src / name) for name in UNITS]


def cache_key(src_hash: str, compiler: compilers.Compiler, flags: dict[str, list[str]]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([src_hash, compiler.name, compiler.argv, compiler.version, flags, link_libs(),
                         program_flags(compiler), sys.platform], sort_keys=True).encode())
    return h.hexdigest()[:16]


def native_cache() -> Path:
    return locations().cache_dir / "native"


def compile_command(compiler: compilers.Compiler, src: Path, out: Path, flags: list[str],
                    workdir: Path, system: str = sys.platform) -> list[str]:
    """The library's one command (`system`: the target's sys.platform). Its name is recorded inside it
    (soname, install name) and on Windows its import library written, so the self-test program linked
    against it finds it beside itself."""
    if compiler.style == "msvc":
        return compiler.argv + flags + unit_paths(src) + [f"/Fe:{out}", f"/Fo:{workdir}{os.sep}",
                                                            "/link", f"/IMPLIB:{import_library(out)}"]
    if system == "win32":
        own_name = [f"-Wl,--out-implib,{import_library(out)}"]
    elif system == "darwin":
        own_name = [f"-Wl,-install_name,@rpath/{out.name}"]
    else:
        own_name = [f"-Wl,-soname,{out.name}"]
    return compiler.argv + flags + unit_paths(src) + own_name + ["-o", str(out)] + link_libs(system)


def selftest_command(compiler: compilers.Compiler, src: Path, lib: Path, out: Path, workdir: Path,
                     system: str = sys.platform) -> list[str]:
    """The self-test program linked against `lib`, which it looks for in its own folder when it runs."""
    program = compiler.argv + program_flags(compiler) + [str(src / SELFTEST)]
    if compiler.style == "msvc":
        return program + [str(import_library(lib)), f"/Fe:{out}", f"/Fo:{workdir}{os.sep}"]
    if system == "win32":
        return program + [str(import_library(lib)), "-o", str(out)]
    beside = "@loader_path" if system == "darwin" else "$ORIGIN"
    return program + [str(lib), f"-Wl,-rpath,{beside}", "-o", str(out)] + link_libs(system)


def _compile(compiler, argv: list[str], out: Path, workdir: Path) -> None:
    log.info("compile: %s", argv)
    res = subproc.run(argv, timeout=COMPILE_TIMEOUT, env=compiler.env, cwd=workdir)
    log.info("compile %s in %.1f s: %s", res.status, res.seconds, (res.stderr or res.stdout)[-2000:])
    if res.ok and out.is_file():
        return
    cause = environment_cause(res.stderr + "\n" + res.stdout, workdir)
    if cause is not None:
        raise cause
    lines = compilers.first_error_lines(res.stderr + "\n" + res.stdout) or [res.detail or res.status]
    raise NotReady(
        f"compiling the native library with {compiler.describe()} failed:\n  " + "\n  ".join(lines),
        "Fix or update that compiler, point CC at another one (CC=clang h3kit build --force), "
        "or use the ziglang compiler from PyPI: 'h3kit build --force --compiler zig'.",
        details={"command": argv, "first_error_lines": lines},
    )


# What a compiler or linker prints when the disk, not the compiler, is at fault (the C library's strerror texts).
_ENV_TEXT = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": getattr(errno, "EDQUOT", errno.ENOSPC),
             "Read-only file system": errno.EROFS, "Permission denied": errno.EACCES}
# Free space below this in the output folder makes a failed link a full disk, whatever ld says ("ld returned
# 1 exit status" alone): the two libraries take about 100 KB (64 KB with gcc 12 on x86_64).
BUILD_BYTES = 1 << 20


def environment_cause(output: str, workdir: Path) -> NotReady | None:
    """The NotReady for a compile that failed because of where it writes (full, read-only, not writable), or None.

    Read from the compiler's own output first, then from the free space of its output folder."""
    code = next((c for text, c in _ENV_TEXT.items() if text in output), None)
    free = free_bytes(workdir)
    if code is None and free is not None and free < BUILD_BYTES:
        code = errno.ENOSPC
    if code is None:
        return None
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        err = no_space(workdir, need=BUILD_BYTES)
    else:
        err = translate(OSError(code, os.strerror(code), str(workdir)))
    err.message = f"The native library cannot be built: {err.message[:1].lower()}{err.message[1:]}"
    err.details = {**err.details, "cause": "environment"}
    return err


def run_selftest(folder: Path, variants: list[str]) -> dict:
    """Every variant's self-test program (skipped where this CPU lacks the build's features), then the
    bridge's pick in a child process: {passed, checks, selected, message, variants}."""
    results = {}
    for variant in variants:
        res = subproc.run([str(folder / h3k_native.selftest_filename(variant))], timeout=SELFTEST_TIMEOUT, cwd=folder)
        results[variant] = h3k_native.read_selftest(res.returncode, res.stdout,
                                                res.stderr.strip()[-400:] or res.detail or res.status)
    failed = [f"{v}: {r['message']}" for v, r in results.items() if not r["passed"] and not r.get("skipped")]
    if "baseline" in results and results["baseline"].get("skipped"):
        failed.append(f"baseline: {results['baseline']['message']}")
    res = subproc.run([sys.executable, str(bundled.NATIVE_BRIDGE), "info", "--dir", str(folder)],
                      timeout=BRIDGE_TIMEOUT)
    try:
        selected = json.loads(res.stdout.strip().splitlines()[-1])["variant"]
    except (ValueError, IndexError, KeyError, TypeError):
        selected = None
        failed.append(f"the bridge could not load the library ({res.detail or res.status}): "
                      f"{(res.stdout or res.stderr).strip()[-400:]}")
    if selected is not None and not results.get(selected, {}).get("passed"):
        failed.append(f"the bridge picked {selected}, which did not pass")
    return {"passed": not failed, "checks": results.get(selected, {}).get("checks", 0), "selected": selected,
            "message": "; ".join(failed), "variants": results}


def _write_json(path: Path, doc: dict) -> None:
    atomic_write(path, json.dumps(doc, indent=2) + "\n")


def build(force: bool = False, progress=None, *, prefer: str | None = None, env: dict | None = None) -> dict:
    """Build (or reuse) the native library; returns the h3kit.build/1 document.

    Raises NotReady when no compiler works, VerificationFailed when the
    self-test fails (the failed build never becomes current).
    """
    say = progress or (lambda msg: None)
    start = time.monotonic()
    src = source_dir()
    resolution = compilers.resolve(env, prefer=prefer, progress=say)
    compiler = resolution.compiler
    fallback = None
    if resolution.notes:
        fallback = f"{'; '.join(resolution.notes)}; fell back to {compiler.describe()}"
        say(f"note: {fallback}")
    flags = variant_flags(compiler)
    src_hash = sources_hash(src)
    key = cache_key(src_hash, compiler, flags)
    root = native_cache()
    folder = root / key
    libs = {v: folder / h3k_native.library_filename(v) for v in flags}
    programs = {v: folder / h3k_native.selftest_filename(v) for v in flags}
    cached = not force and folder.is_dir() and all(p.is_file() for p in [*libs.values(), *programs.values()])
    if not cached:
        _compile_into(folder, compiler, src, flags, say)
    say("Running the native self-test ...")
    test = run_selftest(folder, list(flags))
    selected = test.get("selected")
    doc = {
        "schema": SCHEMA,
        "library": str(libs[selected]) if selected in libs else None,
        "variant": selected,
        "compiler": compiler.describe(),
        "compiler_info": compiler.to_json(),
        "compiler_notes": resolution.notes,
        "compiler_fallback": fallback,
        "flags": flags.get(selected, []),
        "cached": cached,
        "seconds": round(time.monotonic() - start, 3),
        "selftest": {"passed": bool(test.get("passed")), "checks": int(test.get("checks", 0)),
                     "message": test.get("message", ""), "variants": test.get("variants", {})},
        "variants": {v: {"library": str(p), "flags": flags[v]} for v, p in libs.items()},
        "cache_key": key,
        "sources_sha256": src_hash,
        "arch": arch(),
    }
    _make_current(root, folder, doc, compiler)
    return doc


def _compile_into(folder: Path, compiler: compilers.Compiler, src: Path, flags: dict[str, list[str]], say) -> None:
    """Every variant's library and self-test program, compiled in a private folder beside `folder` that then
    takes its place, so a build cut short never leaves a half-made folder under the cache key."""
    root = folder.parent
    made = {h3k_native.library_filename(v) for v in flags} | {h3k_native.selftest_filename(v) for v in flags}
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
    try:
        for i, (variant, vflags) in enumerate(flags.items(), 1):
            lib, program = work / h3k_native.library_filename(variant), work / h3k_native.selftest_filename(variant)
            say(f"Compiling {lib.name} ({i}/{len(flags)}) with {compiler.describe()} ...")
            _compile(compiler, compile_command(compiler, src, lib, vflags, work), lib, work)
            _compile(compiler, selftest_command(compiler, src, lib, program, work), program, work)
        for p in work.iterdir():  # objects and import libraries stay behind
            if p.name not in made:
                p.unlink()
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(work, folder)
        folder.chmod(0o755)  # mkdtemp made it private; the libraries are not secret
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _make_current(root: Path, folder: Path, doc: dict, compiler: compilers.Compiler) -> None:
    """Record the build and point current.json at it, only when its self-test passed (else VerificationFailed)."""
    if not doc["selftest"]["passed"] or doc["library"] is None:
        raise VerificationFailed(
            f"the native library built with {compiler.describe()} failed its self-test: "
            f"{doc['selftest']['message'] or 'no result'}",
            "Report this with the log; meanwhile try another compiler: "
            "'h3kit build --force --compiler zig' or CC=clang h3kit build --force.",
            details={"build": doc},
        )
    _write_json(folder / "build.json", doc)
    _write_json(root / "current.json", {"schema": "h3kit.native-cache/1", "dir": str(folder),
                                        "variant": doc["variant"], "library": doc["library"],
                                        "sources_sha256": doc["sources_sha256"]})


def find_library() -> Path | None:
    """The cached library for this machine's CPU, or None (not built, or built from other sources)."""
    try:
        current = json.loads((native_cache() / "current.json").read_text(encoding="utf-8"))
        lib = Path(current["library"])
        if current.get("sources_sha256") != sources_hash():
            return None
    except (OSError, ValueError, KeyError, TypeError, NotReady):
        return None
    return lib if lib.is_file() else None
