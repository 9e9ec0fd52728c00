"""The C unit tests (payload/tests/test_h3k.c) and the self-test program
(payload/selftest.c), each compiled with the library's units and run under
AddressSanitizer + UndefinedBehaviorSanitizer (with float-cast-overflow) for
every variant this machine can run, and under ThreadSanitizer; h3k_cpu_count()
under taskset; the exported symbols; zig's builds for other platforms. pytest
runs them, so CI does too."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from h3kit.native import build

from h3kit.native import compilers

from h3kit.core import subproc

pytestmark = pytest.mark.slow

# float-cast-overflow is not part of "undefined" in gcc or clang: a NaN or an
# out-of-range float converted to an integer is UB that only it reports.
SANITIZE = ["-fsanitize=address,undefined,float-cast-overflow",
            "-fno-sanitize-recover=undefined,float-cast-overflow", "-fno-omit-frame-pointer"]


@pytest.fixture(scope="module")
def compiler() -> compilers.Compiler:
    for name in ("cc", "gcc", "clang"):
        exe = subproc.which(name)
        if exe:
            return compilers.Compiler(name, [exe], "", "PATH")
    pytest.skip("no C compiler on PATH for the sanitizer build")


def _variants_here(compiler) -> list[tuple[str, list[str]]]:
    flags = build.variant_flags(compiler)
    out = [("baseline", [])]
    for variant, vflags in flags.items():
        if variant != "baseline":
            out.append((variant, [f for f in vflags if f not in build.GNU_FLAGS]))
    return out


def _sanitized(compiler, flags: list[str], main: str, tmp_path, runtime: str):
    """`main` (a payload/ file with a main()) built with every unit under `flags`; skips when the compiler
    has no such sanitizer runtime."""
    src = build.source_dir()
    exe = tmp_path / f"{Path(main).stem}_{runtime}"
    argv = compiler.argv + ["-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", *flags,
                            *build.unit_paths(src), str(src / main), "-o", str(exe), "-lm", "-lpthread"]
    res = subproc.run(argv, timeout=180)
    if not res.ok and runtime in (res.stderr + res.stdout).lower():
        pytest.skip(f"this compiler has no {runtime} runtime: {res.stderr.strip()[:200]}")
    assert res.ok, res.stderr
    return exe


@pytest.mark.parametrize("variant", ["baseline", "tuned"])
def test_c_unit_tests_under_asan_and_ubsan(compiler, variant, tmp_path):
    chosen = _variants_here(compiler)
    if variant == "tuned" and len(chosen) == 1:
        pytest.skip(f"no tuned variant for {build.arch()}")
    name, extra = chosen[0] if variant == "baseline" else chosen[1]
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "PATH": "/usr/bin:/bin"}
    selftest = _sanitized(compiler, [*SANITIZE, *extra], build.SELFTEST, tmp_path, "asan")
    run = subproc.run([selftest], timeout=180, env=env)
    if variant == "tuned" and run.returncode == 2:  # the self-test checks the CPU first
        pytest.skip(f"this CPU cannot run the {name} build")
    assert run.ok and json.loads(run.stdout)["passed"] is True, run.stdout + run.stderr
    assert "runtime error" not in run.stderr  # UBSan reports
    exe = _sanitized(compiler, [*SANITIZE, *extra], "tests/test_h3k.c", tmp_path, "asan")
    run = subproc.run([exe, str(tmp_path)], timeout=180, env=env)
    assert run.ok, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1].startswith("ok ")
    assert "runtime error" not in run.stderr


def test_c_unit_tests_under_tsan(compiler, tmp_path):
    """The same tests and the self-test program under ThreadSanitizer: the worker pool, the streamer's
    reader thread and the last-error copies must be free of data races."""
    for main in (build.SELFTEST, "tests/test_h3k.c"):
        exe = _sanitized(compiler, ["-fsanitize=thread"], main, tmp_path, "tsan")
        run = subproc.run([exe, str(tmp_path)], timeout=300, env={"PATH": "/usr/bin:/bin"})
        if "unexpected memory mapping" in run.stderr:  # TSan cannot map its shadow memory on this kernel
            pytest.skip(f"ThreadSanitizer cannot run here: {run.stderr.strip()[:200]}")
        assert "ThreadSanitizer" not in run.stderr, run.stderr[-4000:]
        assert run.ok, run.stdout + run.stderr
        last = run.stdout.strip().splitlines()[-1]
        assert last.startswith("ok ") or json.loads(last)["passed"] is True


def test_cpu_count_follows_taskset(compiler, tmp_path):
    """Pinned to one CPU with taskset, h3k_cpu_count() says 1: the thread
    count follows the affinity mask, so a container given some CPUs is not
    oversubscribed."""
    taskset = subproc.which("taskset")
    if taskset is None or not hasattr(os, "sched_getaffinity"):
        pytest.skip("taskset is not installed (util-linux), or no affinity masks here")
    src = build.source_dir()
    exe = tmp_path / "test_h3k"
    res = subproc.run(compiler.argv + ["-std=c11", "-O1", "-ffp-contract=off", *build.unit_paths(src),
                                       str(src / "tests" / "test_h3k.c"), "-o", str(exe), "-lm", "-lpthread"],
                      timeout=180)
    assert res.ok, res.stderr
    first = min(os.sched_getaffinity(0))
    run = subproc.run([taskset, "-c", str(first), exe, "--cpu-count"], timeout=60)
    assert run.ok, run.stdout + run.stderr
    assert run.stdout.strip() == "1", run.stdout
    run = subproc.run([exe, "--cpu-count"], timeout=60)
    assert run.ok and int(run.stdout.strip()) == len(os.sched_getaffinity(0)), run.stdout


def _zig_cc() -> list[str]:
    pytest.importorskip("ziglang")
    return [sys.executable, "-m", "ziglang", "cc"]


@pytest.mark.parametrize("target, cpu", [
    ("x86_64-windows-gnu", "baseline"), ("x86_64-windows-gnu", "x86_64_v3"),
    ("aarch64-windows-gnu", "baseline"), ("aarch64-macos", "generic+dotprod+fullfp16"),
    ("x86_64-macos", "x86_64_v3"), ("aarch64-linux-musl", "generic+dotprod+fullfp16"),
])
def test_other_platforms_compile_cleanly(target, cpu, tmp_path):
    """The #ifdef branches this machine never runs (Windows threads/ReadFile/affinity, macOS) still compile,
    the units link into one shared library there (every internal call between them resolves), and the
    build's own commands link the self-test program against it (Windows' import library, macOS' rpath)."""
    system = {"windows": "win32", "macos": "darwin"}.get(target.split("-")[1], "linux")
    zig = compilers.Compiler("zig", _zig_cc() + ["-target", target], "", "ziglang")
    lib = tmp_path / {"win32": "libh3kit-v.dll", "darwin": "libh3kit-v.dylib"}.get(system, "libh3kit-v.so")
    flags = [f"-mcpu={cpu}", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-shared",
             "-fvisibility=hidden"]
    res = subproc.run(build.compile_command(zig, build.source_dir(), lib, flags, tmp_path, system), timeout=300)
    assert res.ok, res.stderr
    program = tmp_path / ("h3k-selftest.exe" if system == "win32" else "h3k-selftest")
    res = subproc.run(build.selftest_command(zig, build.source_dir(), lib, program, tmp_path, system) + ["-Werror"],
                      timeout=300)
    assert res.ok and program.is_file(), res.stderr
    assert lib.name.encode() in program.read_bytes()  # it loads the library by its own name, from beside itself


@pytest.mark.parametrize("cpu", ["baseline", "generic+dotprod+fullfp16"])
def test_neon_kernels_under_qemu(cpu, tmp_path):
    """The arm64 builds (NEON kernels, dotprod detection) pass the C tests under qemu-aarch64."""
    qemu = subproc.which("qemu-aarch64")
    if qemu is None:
        pytest.skip("qemu-aarch64 is not installed (apt install qemu-user)")
    src = build.source_dir()
    exe = tmp_path / "test_h3k_arm64"
    res = subproc.run(_zig_cc() + ["-target", "aarch64-linux-musl", f"-mcpu={cpu}", "-std=c11", "-O2",
                                   "-ffp-contract=off", "-static", *build.unit_paths(src),
                                   str(src / "tests" / "test_h3k.c"), "-o", str(exe)], timeout=300)
    assert res.ok, res.stderr
    # qemu-user 7.2 aborts a forked child of a threaded process that starts a
    # thread (its own bug, not ours), so the fork test is left to native runs.
    run = subproc.run([qemu, "-cpu", "max", exe, str(tmp_path)], timeout=300,
                      env={"H3K_TEST_NO_FORK": "1", "PATH": "/usr/bin:/bin"})
    assert run.ok and run.stdout.strip().splitlines()[-1].startswith("ok "), run.stdout + run.stderr


def test_units_are_listed_once_and_stay_readable():
    """build.UNITS names every .c file of payload/ (a unit left out would be a link error at the user's),
    and no file of payload/ grows past 600 lines."""
    src = build.source_dir()
    assert sorted([*build.UNITS, build.SELFTEST]) == sorted(p.name for p in src.glob("*.c"))
    assert set(build.SOURCES) == {p.name for p in src.iterdir() if p.suffix in (".c", ".h")}
    for path in [*src.glob("*.[ch]"), *(src / "tests").glob("*.[ch]")]:
        lines = path.read_text(encoding="utf-8").count("\n")
        assert lines <= 600, f"{path.name} has {lines} lines"
    selftest = (src / build.SELFTEST).read_text(encoding="utf-8")
    assert '"h3k_internal.h"' not in selftest and "int main(" in selftest  # a program, a client of h3k.h


def test_library_exports_exactly_the_public_header(compiler, tmp_path):
    """Split into units, the shared library still exports every H3K_API function of h3k.h and nothing
    else (the internal calls between units stay hidden): the ABI the bridge checks is unchanged."""
    nm = subproc.which("nm")
    if nm is None or not sys.platform.startswith("linux"):
        pytest.skip("needs nm on Linux")
    src = build.source_dir()
    header = (src / "h3k.h").read_text(encoding="utf-8")
    declared = set(re.findall(r"H3K_API[^;(]*?\b(h3k_\w+)\s*\(", header))
    lib = tmp_path / "libh3k.so"
    res = subproc.run(compiler.argv + build.GNU_FLAGS + build.unit_paths(src) + ["-o", str(lib)] + build.link_libs(),
                      timeout=180)
    assert res.ok, res.stderr
    out = subproc.run([nm, "-D", "--defined-only", str(lib)], timeout=60)
    assert out.ok, out.stderr
    exported = {line.split()[-1] for line in out.stdout.splitlines() if " T " in line}
    assert len(declared) > 40 and exported == declared and "h3k_selftest" not in exported  # a program now
