"""`h3kit build` with real compilers: cache, fallback, failing compiler, failing
self-test, the ziglang path, and the compiler-output parsers on recorded text."""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from h3kit.native import build

from h3kit.native import compilers

from h3kit.core import subproc

pytestmark = pytest.mark.fresh_native  # these tests watch the compile step itself

FIXTURES = Path(__file__).parents[1] / "fixtures" / "build"
REQUIRED = {"schema", "library", "variant", "compiler", "flags", "cached", "seconds", "selftest"}

needs_cc = pytest.mark.skipif(subproc.which("cc") is None and subproc.which("gcc") is None,
                              reason="no C compiler on PATH")


@pytest.mark.slow
@needs_cc
def test_build_json_twice_second_is_cached(run_cli, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    code, out, err = run_cli("build", "--json")
    assert code == 0, err
    first = json.loads(out)
    assert REQUIRED <= set(first) and first["schema"] == "h3kit.build/1"
    assert first["cached"] is False and first["selftest"]["passed"] and first["selftest"]["checks"] > 20
    assert Path(first["library"]).is_file() and first["variant"] in first["variants"]
    assert "-march=native" not in first["flags"]
    assert "Compiling" in err  # progress goes to stderr
    code, out, _ = run_cli("build", "--json")
    second = json.loads(out)
    assert code == 0 and second["cached"] is True and second["library"] == first["library"]
    assert build.find_library() == Path(first["library"])
    code, out, _ = run_cli("build", "--json", "--force")
    assert code == 0 and json.loads(out)["cached"] is False


def test_find_library_is_none_before_any_build():
    assert build.find_library() is None


@pytest.mark.slow
@needs_cc
def test_cc_that_does_not_exist_falls_back_and_says_how(run_cli, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent")
    code, out, err = run_cli("build", "--force")
    assert code == 0, err
    assert "CC=/nonexistent was not found; fell back to" in out
    assert "from PATH" in out


def _fake_compiler(tmp_path: Path, body: str) -> str:
    """A stand-in compiler: answers --version like gcc, then runs `body` (sh)."""
    script = tmp_path / "fakecc"
    script.write_text("#!/bin/sh\n"
                      'if [ "$1" = "--version" ]; then echo "gcc (GCC) 13.2.0"; exit 0; fi\n' + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.mark.skipif(os.name == "nt", reason="uses a POSIX shell script as the fake compiler")
def test_failing_compiler_exits_3_with_its_first_error_lines_and_the_fix(run_cli, monkeypatch, tmp_path):
    body = ("echo 'h3k.c: In function main:' >&2\n"
            "echo 'h3k.c:49:10: fatal error: errno.h: No such file or directory' >&2\n"
            "echo 'compilation terminated.' >&2\nexit 1\n")
    monkeypatch.setenv("CC", _fake_compiler(tmp_path, body))
    code, out, err = run_cli("build", "--json")
    assert code == 3
    doc = json.loads(out)
    assert "fatal error: errno.h: No such file or directory" in doc["error"]
    assert "--compiler zig" in doc["fix"] and "CC=" in doc["fix"]
    assert doc["details"]["first_error_lines"][0].startswith("h3k.c:49:10: fatal error")
    assert build.find_library() is None


@pytest.mark.slow
@needs_cc
def test_failing_selftest_fails_the_build_and_is_not_made_current(run_cli, monkeypatch):
    """A compiler that rounds wrongly (roundf replaced by truncf) must not pass."""
    cc = subproc.which("cc") or subproc.which("gcc")
    monkeypatch.setenv("CC", f"{cc} -Droundf=truncf")
    code, out, _ = run_cli("build", "--json")
    assert code == 4
    doc = json.loads(out)
    assert "self-test" in doc["error"] and "round trip" in doc["error"]
    assert build.find_library() is None


@pytest.mark.slow
def test_ziglang_path_builds_and_self_tests(run_cli, monkeypatch):
    """The last resort of the search order, forced; ziglang is in the test extra."""
    pytest.importorskip("ziglang")
    code, out, err = run_cli("build", "--json", "--force", "--compiler", "zig")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["compiler_info"]["name"] == "zig" and doc["compiler_info"]["source"] == "ziglang"
    assert doc["selftest"]["passed"]
    if build.arch() == "x86_64":
        assert "-mcpu=baseline" in doc["variants"]["baseline"]["flags"]  # never the build machine's CPU


def test_zig_is_not_installed_outside_a_venv(monkeypatch):
    notes: list[str] = []
    monkeypatch.setattr(compilers, "_in_venv", lambda: False)
    assert compilers._install_zig(notes, None) is None
    assert "not installed automatically" in notes[0]


def test_unknown_compiler_family_is_bad_input(run_cli):
    code, _, err = run_cli("build", "--compiler", "tcc")
    assert code == 2 and "invalid choice" in err


def test_zig_pin_matches_pyproject():
    text = (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    assert f'zig = ["ziglang=={compilers.ZIGLANG_PIN}"]' in text


def test_variant_flags_never_target_the_build_machine():
    gcc = compilers.Compiler("gcc", ["gcc"], "12", "PATH")
    zig = compilers.Compiler("zig", [sys.executable, "-m", "ziglang", "cc"], "0.13.0", "ziglang")
    msvc = compilers.Compiler("msvc", ["cl.exe"], "19.38", "vswhere", style="msvc")
    assert set(build.variant_flags(gcc, "x86_64")) == {"baseline", "x86-64-v3"}
    assert set(build.variant_flags(gcc, "arm64")) == {"baseline", "arm64-dotprod"}
    assert build.variant_flags(zig, "x86_64")["baseline"][-1] == "-mcpu=baseline"
    assert "/arch:AVX2" in build.variant_flags(msvc, "x86_64")["x86-64-v3"]
    for c in (gcc, zig, msvc):
        for machine in ("x86_64", "arm64"):
            for flags in build.variant_flags(c, machine).values():
                assert not any("native" in f for f in flags)


def test_compile_commands_name_every_unit_once(tmp_path):
    """gcc/clang/zig and MSVC get the same unit list, each unit once, then their own output flags; the
    library records its own name (soname, install name, import library) for the self-test program."""
    src = build.source_dir()
    gcc = compilers.Compiler("gcc", ["gcc"], "12", "PATH")
    msvc = compilers.Compiler("msvc", ["cl.exe"], "19.38", "vswhere", style="msvc")
    units = [str(src / name) for name in build.UNITS]
    lib = tmp_path / "lib.so"
    gnu = build.compile_command(gcc, src, lib, ["-O2"], tmp_path, "linux")
    assert gnu[:2] == ["gcc", "-O2"] and gnu[2:2 + len(units)] == units
    assert gnu[2 + len(units):] == ["-Wl,-soname,lib.so", "-o", str(lib)] + build.link_libs("linux")
    assert build.compile_command(gcc, src, lib, [], tmp_path, "darwin")[-3] == "-Wl,-install_name,@rpath/lib.so"
    cl = build.compile_command(msvc, src, tmp_path / "h3k.dll", ["/O2"], tmp_path)
    assert cl[2:2 + len(units)] == units and cl[-4] == f"/Fe:{tmp_path / 'h3k.dll'}"
    assert cl[-3] == f"/Fo:{tmp_path}{os.sep}"  # one folder for every unit's object
    assert cl[-2:] == ["/link", f"/IMPLIB:{tmp_path / 'h3k.lib'}"]


def test_selftest_program_links_against_the_library_beside_it(tmp_path):
    """The program gets none of the variant's SIMD flags and finds its library in its own folder."""
    src = build.source_dir()
    gcc = compilers.Compiler("gcc", ["gcc"], "12", "PATH")
    msvc = compilers.Compiler("msvc", ["cl.exe"], "19.38", "vswhere", style="msvc")
    lib, out = tmp_path / "libh3kit-x86-64-v3.so", tmp_path / "h3k-selftest-x86-64-v3"
    linux = build.selftest_command(gcc, src, lib, out, tmp_path, "linux")
    assert linux[:1 + len(build.GNU_PROGRAM_FLAGS)] == ["gcc", *build.GNU_PROGRAM_FLAGS]
    assert linux[-7:] == [str(src / build.SELFTEST), str(lib), "-Wl,-rpath,$ORIGIN", "-o", str(out), "-lm", "-lpthread"]
    assert "-mavx2" not in linux and "-shared" not in linux
    assert "-Wl,-rpath,@loader_path" in build.selftest_command(gcc, src, lib, out, tmp_path, "darwin")
    win = build.selftest_command(gcc, src, tmp_path / "x.dll", out, tmp_path, "win32")
    assert win[-3:] == [str(tmp_path / "x.lib"), "-o", str(out)]
    cl = build.selftest_command(msvc, src, tmp_path / "x.dll", out, tmp_path)
    assert "/LD" not in cl and cl[-3] == str(tmp_path / "x.lib")


# ---------------------------------------------------------------- parsers


@pytest.mark.parametrize("fixture, family, version", [
    ("gcc-debian12.txt", "gcc", "12.2.0"),
    ("clang-ubuntu22.txt", "clang", "14.0.0"),
    ("apple-clang-15.txt", "clang", "15.0.0"),
    ("zig-0.13.0-cc.txt", "clang", "18.1.6"),
])
def test_parse_version_on_recorded_outputs(fixture, family, version):
    assert compilers.parse_version((FIXTURES / fixture).read_text()) == (family, version)


def test_parse_version_rejects_other_programs():
    assert compilers.parse_version("xcrun: error: invalid active developer path") == (None, "")


def test_parse_msvc_banner():
    assert compilers.parse_msvc_banner((FIXTURES / "msvc-cl-banner.txt").read_text()) == "19.38.33133"


def test_parse_set_output_and_vswhere():
    env = compilers.parse_set_output("=C:=C:\\\nPATH=C:\\VS\\bin;C:\\Windows\nINCLUDE=C:\\VS\\include\n")
    assert env == {"PATH": "C:\\VS\\bin;C:\\Windows", "INCLUDE": "C:\\VS\\include"}
    assert compilers.parse_vswhere_path("\nC:\\Program Files\\Microsoft Visual Studio\\2022\\BuildTools\n") == \
        "C:\\Program Files\\Microsoft Visual Studio\\2022\\BuildTools"


def test_first_error_lines_prefers_lines_naming_an_error():
    text = "h3k.c: In function 'f':\nh3k.c:3:1: error: expected ';'\nnote: here\n"
    assert compilers.first_error_lines(text) == ["h3k.c:3:1: error: expected ';'"]
    assert re.match("cc: warning", compilers.first_error_lines("cc: warning only\n")[0])


def test_install_zig_runs_pip_for_the_pinned_version(monkeypatch):
    """The real pip command; where the test extra already installed ziglang it only confirms it."""
    pytest.importorskip("ziglang")
    if not compilers._in_venv():
        pytest.skip("h3kit installs ziglang only into its own venv")
    said: list[str] = []
    notes: list[str] = []
    assert compilers._install_zig(notes, said.append) == compilers.ZIGLANG_PIN
    assert notes == [] and said[0].startswith("No C compiler found; installing ziglang")


def test_heartbeat_reports_progress_while_waiting():
    said: list[str] = []
    with compilers._heartbeat(said.append, "still working", every=0.05):
        import time

        time.sleep(0.2)
    assert said and said[0].startswith("still working (")
