"""The fingerprint as a whole: the real one on this machine, fake tools on PATH,
redirected sysfs trees, and the macOS / Windows back ends fed recorded values."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from h3kit.fingerprint import schema as fpschema
from h3kit.fingerprint import _darwin, _linux, _windows, collect, parsers, render_text, resolve_timeout
from h3kit.fingerprint.parsers import GIB, MIB

from conftest import FIXTURES

FP = FIXTURES / "fingerprint"
# the probes themselves: this machine's GPUs, the fake tools on PATH, the sysfs trees, not conftest's GPU-less box
pytestmark = pytest.mark.real_gpus

BANNER_4090 = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0  On |                  Off |
|  0%   38C    P8             21W /  450W |     584MiB /  24564MiB |      1%      Default |
"""


def fake_tool(folder: Path, name: str, body: str) -> Path:
    """An executable called `name` in `folder`: a sh wrapper running the Python body beside it.

    Not a `#!python` line: a shebang cannot hold a path with a space, and the
    test Python may live under one (a checkout in "My Projects").
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    (folder / f"{name}.py").write_text(f"import sys, time\n{body}\n", encoding="utf-8")
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$0.py" "$@"\n', encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def fake_nvidia_smi(folder: Path, query_lines: list[str], banner: str = BANNER_4090) -> Path:
    return fake_tool(folder, "nvidia-smi", (
        f"if any(a.startswith('--query-gpu') for a in sys.argv[1:]):\n"
        f"    print({chr(10).join(query_lines)!r})\n"
        f"else:\n"
        f"    print({banner!r})\n"))


@pytest.fixture
def fake_bin(tmp_path, monkeypatch) -> Path:
    """A folder put first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return folder


def probe(doc: dict, name: str) -> dict:
    return next(p for p in doc["probes"] if p["name"] == name)


# ---------------------------------------------------------------- this machine


def test_real_fingerprint_is_valid_and_fast():
    start = time.monotonic()
    doc = collect()
    elapsed = time.monotonic() - start
    assert fpschema.validate(doc) == []
    assert elapsed < 3.0, doc["probes"]
    assert doc["memory"]["total_bytes"] > 0 and doc["cpu"]["logical_cores"] >= 1
    assert doc["disks"][0]["path"] == str(Path.home()) and doc["disks"][0]["total_bytes"] > 0
    assert all(p["status"] in ("ok", "missing", "timeout", "error") for p in doc["probes"])
    assert "memory" in {p["name"] for p in doc["probes"] if p["status"] == "ok"}


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None or Path("/sys/class/drm").exists()
                    or not sys.platform.startswith("linux"),
                    reason="only on a Linux machine without any GPU (like the project's test box)")
def test_gpu_less_linux_box_runs_clean():
    doc = collect()
    assert doc["gpus"] == []
    assert probe(doc, "nvidia-smi")["status"] == "missing"
    assert not [p for p in doc["probes"] if p["status"] in ("error", "timeout")]


def test_cli_json_is_one_valid_document(h3kit_exe):
    start = time.monotonic()
    proc = subprocess.run(h3kit_exe + ["fingerprint", "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 3.0 + 1.0  # the interpreter's start-up on a loaded 2-core box
    doc = json.loads(proc.stdout)
    assert fpschema.validate(doc) == [] and doc["seconds"] < 3.0


def test_cli_text_table(run_cli):
    code, out, err = run_cli("fingerprint")
    assert code == 0
    for label in ("OS", "CPU", "SIMD", "Memory", "Disk", "Compilers", "Probes"):
        assert any(line.startswith(label) for line in out.splitlines()), label


def test_cli_rejects_a_bad_timeout(run_cli):
    code, out, err = run_cli("fingerprint", "--timeout", "0")
    assert code == 2 and "--timeout must be a positive number" in err and "Traceback" not in err


def test_extra_disk_paths_not_yet_created(tmp_path):
    models = tmp_path / "ComfyUI" / "models"
    doc = collect(extra_disk_paths=[tmp_path / "ComfyUI", models])
    paths = [d["path"] for d in doc["disks"]]
    assert str(models) in paths  # sized by its nearest existing parent
    assert fpschema.validate(doc) == []


# ---------------------------------------------------------------- timeouts


def test_timeout_resolution(monkeypatch):
    monkeypatch.delenv("H3KIT_PROBE_TIMEOUT", raising=False)
    assert resolve_timeout() == (5.0, "default")
    monkeypatch.setenv("H3KIT_PROBE_TIMEOUT", "2.5")
    assert resolve_timeout() == (2.5, "H3KIT_PROBE_TIMEOUT")
    assert resolve_timeout(1) == (1.0, "argument")
    monkeypatch.setenv("H3KIT_PROBE_TIMEOUT", "soon")
    seconds, source = resolve_timeout()
    assert seconds == 5.0 and "ignored" in source


def test_hanging_nvidia_smi_times_out(fake_bin):
    fake_tool(fake_bin, "nvidia-smi", "time.sleep(60)")
    start = time.monotonic()
    doc = collect(timeout=1.0)
    elapsed = time.monotonic() - start
    assert elapsed < 1.0 + 1.0
    assert probe(doc, "nvidia-smi")["status"] == "timeout"
    assert probe(doc, "nvidia-smi header")["status"] == "timeout"
    assert doc["gpus"] == [] and fpschema.validate(doc) == []


def test_hanging_tool_through_cli_and_env_timeout(fake_bin, h3kit_exe):
    fake_tool(fake_bin, "nvidia-smi", "time.sleep(60)")
    env = dict(os.environ, H3KIT_PROBE_TIMEOUT="1")
    start = time.monotonic()
    proc = subprocess.run(h3kit_exe + ["fingerprint", "--json"], capture_output=True, text=True, env=env, timeout=60)
    elapsed = time.monotonic() - start
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0
    assert doc["seconds"] < 1.0 + 1.0 and elapsed < 1.0 + 1.0 + 1.0  # + interpreter start-up
    assert probe(doc, "nvidia-smi")["status"] == "timeout" and doc["probe_timeout_source"] == "H3KIT_PROBE_TIMEOUT"


def test_hanging_sysfs_read_is_abandoned(monkeypatch):
    monkeypatch.setattr(_linux, "sysfs_probe", lambda timeout: time.sleep(30))
    start = time.monotonic()
    doc = collect(timeout=0.5)
    assert time.monotonic() - start < 0.5 + 1.0
    if sys.platform.startswith("linux"):
        assert probe(doc, "sysfs drm")["status"] == "timeout"


# ---------------------------------------------------------------- fake NVIDIA tools


def test_fake_rtx_4090(fake_bin):
    fake_nvidia_smi(fake_bin, ["NVIDIA GeForce RTX 4090, 24564, 23980, 580.95.05, 8.9"])
    doc = collect(timeout=5)
    assert fpschema.validate(doc) == []
    (gpu,) = doc["gpus"]
    assert gpu["vendor"] == "nvidia" and gpu["name"] == "NVIDIA GeForce RTX 4090"
    assert gpu["memory_total_bytes"] == 24564 * MIB and abs(gpu["memory_total_bytes"] / GIB - 24) < 0.1
    assert gpu["driver_version"] == "580.95.05" and gpu["cuda_driver_version"] == "13.0"
    assert gpu["compute_capability"] == "8.9" and gpu["backend"] == "cuda" and gpu["unified_memory"] is False
    assert probe(doc, "nvidia-smi")["status"] == "ok"
    assert "NVIDIA GeForce RTX 4090 (nvidia), 24.0 GiB, driver 580.95.05, CUDA 13.0" in render_text(doc)


def test_fake_two_gpus_largest_first(fake_bin):
    fake_nvidia_smi(fake_bin, ["NVIDIA GeForce RTX 3060, 12288, 11000, 580.95.05, 8.6",
                               "NVIDIA GeForce RTX 4090, 24564, 23980, 580.95.05, 8.9"])
    doc = collect(timeout=5)
    assert [g["name"] for g in doc["gpus"]] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3060"]
    assert {g["cuda_driver_version"] for g in doc["gpus"]} == {"13.0"}


def test_fake_garbage_output_is_an_error_with_first_bytes(fake_bin):
    fake_tool(fake_bin, "nvidia-smi", "sys.stdout.buffer.write(b'\\x7fELF\\x02\\x01 not csv at all ' * 20)")
    doc = collect(timeout=5)
    record = probe(doc, "nvidia-smi")
    assert record["status"] == "error" and "ELF" in record["detail"] and "unreadable output" in record["detail"]
    assert probe(doc, "nvidia-smi header")["status"] == "error"
    assert doc["gpus"] == [] and fpschema.validate(doc) == []


def test_fake_nonzero_exit_is_an_error(fake_bin):
    fake_tool(fake_bin, "nvidia-smi", (
        "print(\"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\")\nsys.exit(9)"))
    doc = collect(timeout=5)
    record = probe(doc, "nvidia-smi")
    assert record["status"] == "error" and "exit code 9" in record["detail"] and "NVIDIA driver" in record["detail"]
    assert doc["gpus"] == []


def test_tool_in_current_directory_never_runs(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    fake_tool(tmp_path, "nvidia-smi", f"open({str(marker)!r}, 'w').write('x')\nprint('x')")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f".{os.pathsep}{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    doc = collect(timeout=5)
    assert not marker.exists()
    assert probe(doc, "nvidia-smi")["status"] == "missing"


# ---------------------------------------------------------------- Linux sysfs trees


def _card(root: Path, name: str, vendor: str, slot: str, render: int, **files: str) -> None:
    dev = root / "class" / "drm" / name / "device"
    (dev / "drm" / f"renderD{render}").mkdir(parents=True)
    (dev / "vendor").write_text(vendor + "\n")
    (dev / "uevent").write_text(f"DRIVER=x\nPCI_SLOT_NAME={slot}\n")
    for key, value in files.items():
        (dev / key).write_text(value)
    (root / "class" / "drm" / f"{name}-DP-1").mkdir()


def test_sysfs_amd_intel_arc_and_integrated_intel(tmp_path, monkeypatch):
    sysfs = tmp_path / "sys"
    _card(sysfs, "card0", "0x8086", "0000:00:02.0", 128)  # integrated: left out
    _card(sysfs, "card1", "0x1002", "0000:03:00.0", 129,
          mem_info_vram_total=str(24 * GIB), mem_info_vram_used=str(1 * GIB))
    a770_resource = "\n".join(["0x0000000078000000 0x0000000078ffffff 0x0000000000040200",
                               "0x0000006800000000 0x00000069ffffffff 0x000000000014220c"]) + "\n"
    _card(sysfs, "card2", "0x8086", "0000:04:00.0", 130, resource=a770_resource)
    node = sysfs / "class" / "kfd" / "kfd" / "topology" / "nodes" / "1"
    node.mkdir(parents=True)
    (node / "properties").write_text("simd_count 192\ngfx_target_version 110000\ndrm_render_minor 129\n")
    monkeypatch.setattr(_linux, "SYSFS_PATH", str(sysfs))

    lspci = parsers.parse_lspci(
        "03:00.0 VGA compatible controller [0300]: Advanced Micro Devices, Inc. [AMD/ATI] Navi 31 [Radeon RX 7900 XT/7900 XTX] [1002:744c] (rev c8)\n"
        + (FP / "lspci" / "arc-a770-vvv.txt").read_text().replace("03:00.0", "04:00.0"))
    gpus = _linux.amd_and_intel_gpus({"sysfs drm": _linux.sysfs_probe(1), "lspci": lspci})
    amd, arc = gpus
    assert amd["vendor"] == "amd" and amd["backend"] == "rocm" and amd["gfx_target"] == "gfx1100"
    assert amd["memory_total_bytes"] == 24 * GIB and amd["memory_free_bytes"] == 23 * GIB
    assert amd["name"] == "Radeon RX 7900 XT/7900 XTX"
    assert arc["vendor"] == "intel" and arc["name"] == "Intel Arc A770" and arc["backend"] == "xpu"
    assert arc["memory_total_bytes"] == 8 * GIB and arc["memory_source"] == "pci-bar"


def test_rocm_smi_wins_over_sysfs_names(tmp_path, monkeypatch):
    sysfs = tmp_path / "sys"
    _card(sysfs, "card0", "0x1002", "0000:03:00.0", 128, mem_info_vram_total=str(20 * GIB))
    monkeypatch.setattr(_linux, "SYSFS_PATH", str(sysfs))
    rocm = parsers.parse_rocm_smi_json((FP / "rocm-smi" / "rx7900xt.json").read_text())
    (gpu,) = _linux.amd_and_intel_gpus({"sysfs drm": _linux.sysfs_probe(1), "rocm-smi": rocm})
    assert gpu["name"] == "Radeon RX 7900 XT" and gpu["memory_total_bytes"] == 21458059264


def test_rocm_smi_without_sysfs(monkeypatch):
    rocm = parsers.parse_rocm_smi_json((FP / "rocm-smi" / "rx6800-raphael.json").read_text())
    gpus = _linux.amd_and_intel_gpus({"rocm-smi": rocm})
    assert [g["gfx_target"] for g in gpus] == ["gfx1030", "gfx1036"]


def test_disk_kind_from_rotational(tmp_path, monkeypatch):
    st = os.stat(tmp_path)
    block = tmp_path / "sys" / "dev" / "block" / f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    (block / "queue").mkdir(parents=True)
    (block / "queue" / "rotational").write_text("0\n")
    monkeypatch.setattr(_linux, "SYSFS_PATH", str(tmp_path / "sys"))
    assert _linux.disk_kind(str(tmp_path), 1) == "ssd"
    (block / "queue" / "rotational").write_text("1\n")
    assert _linux.disk_kind(str(tmp_path), 1) == "hdd"
    monkeypatch.setattr(_linux, "SYSFS_PATH", str(tmp_path / "nowhere"))
    assert _linux.disk_kind(str(tmp_path), 1) == "unknown"


def test_wsl_from_proc_version(tmp_path, monkeypatch):
    (tmp_path / "version").write_text("Linux version 5.15.153.1-microsoft-standard-WSL2 (root@x) #1 SMP\n")
    monkeypatch.setattr(_linux, "PROCFS_PATH", str(tmp_path))
    assert _linux.wsl_probe(1)["wsl"] is True


# ---------------------------------------------------------------- macOS back end, recorded values


def _mac_values(memsize: int, translated: bool = False, wired_mb: int | None = None) -> dict:
    values = parsers.parse_sysctl((FP / "sysctl" / "m1-hw-optional.txt").read_text()
                                  + (FP / "sysctl" / "m1-machdep-cpu.txt").read_text())
    values["hw.memsize"] = str(memsize)
    if translated:
        values["sysctl.proc_translated"] = "1"
    if wired_mb is not None:
        values["iogpu.wired_limit_mb"] = str(wired_mb)
    return values


def test_apple_unified_memory_usable_share():
    displays = parsers.parse_system_profiler_displays((FP / "system_profiler" / "m1-kHW-item.json").read_text())
    (gpu,) = _darwin.gpus_from(_mac_values(16 * GIB), displays)
    assert gpu["vendor"] == "apple" and gpu["unified_memory"] is True and gpu["backend"] == "mps"
    assert gpu["unified_memory_total_bytes"] == 16 * GIB
    assert gpu["memory_total_bytes"] == int(16 * GIB * 2 / 3) and gpu["usable_share"] == pytest.approx(0.6667, abs=1e-4)


def test_apple_large_mac_and_raised_wired_limit():
    displays = parsers.parse_system_profiler_displays((FP / "system_profiler" / "m3-pro.json").read_text())
    (gpu,) = _darwin.gpus_from(_mac_values(128 * GIB), displays)
    assert gpu["memory_total_bytes"] == 96 * GIB and gpu["usable_share"] == 0.75
    (raised,) = _darwin.gpus_from(_mac_values(128 * GIB, wired_mb=120 * 1024), displays)
    assert raised["memory_total_bytes"] == 120 * GIB and raised["usable_share_source"] == "iogpu.wired_limit_mb"


def test_rosetta_loses_mps_and_is_reported():
    values = _mac_values(32 * GIB, translated=True)
    (gpu,) = _darwin.gpus_from(values, [])  # system_profiler failed: the SoC GPU is still listed
    assert gpu["backend"] is None and gpu["name"] == "Apple M1"
    cpu = _darwin.cpu_from_sysctl(values)
    assert "neon" not in cpu["flags"]


def test_apple_cpu_flags_from_sysctl():
    cpu = _darwin.cpu_from_sysctl(_mac_values(16 * GIB))
    assert cpu["model"] == "Apple M1" and {"neon", "fp16"} <= set(cpu["flags"])


def test_darwin_describe_is_valid():
    values = {"sysctl": _mac_values(64 * GIB),
              "system_profiler": parsers.parse_system_profiler_displays(
                  (FP / "system_profiler" / "m3-pro.json").read_text())}
    doc = {"schema": fpschema.SCHEMA, **_darwin.describe(values),
           "memory": {"total_bytes": 64 * GIB, "available_bytes": 1, "swap_total_bytes": 0},
           "disks": [], "compilers": [], "probes": []}
    assert fpschema.validate(doc) == []
    assert doc["arch"] == "arm64" and doc["rosetta"] is False


# ---------------------------------------------------------------- Windows back end, recorded values


def test_windows_controllers_sized_from_registry():
    # Records as Format-List prints them; names, PNP ids and the capped AdapterRAM
    # are from ollama#5124 and TimVer#103 (see SOURCES.md).
    text = (FP / "powershell" / "intel-uhd-fl-star.txt").read_text() + (
        "\nName                 : AMD Radeon RX 7900 XTX\nAdapterCompatibility : Advanced Micro Devices, Inc.\n"
        "AdapterRAM           : 4293918720\nDriverVersion        : 31.0.24019.1006\n"
        "PNPDeviceID          : PCI\\VEN_1002&DEV_744C&SUBSYS_471E1DA2&REV_C8\\6&2B7D1A1&0&00000019\n"
        "\nName                 : NVIDIA GeForce RTX 4090\nAdapterCompatibility : NVIDIA\n"
        "AdapterRAM           : 4293918720\nPNPDeviceID          : PCI\\VEN_10DE&DEV_2684\n")
    controllers = parsers.parse_powershell_list(text)
    registry = [{"DriverDesc": "AMD Radeon RX 7900 XTX", "qwMemorySize": parsers.qword_memory_size((24 * GIB).to_bytes(8, "little"))}]
    gpus = _windows.controller_gpus(controllers, registry, have_nvidia_smi=True)
    (amd,) = gpus  # Intel UHD is integrated; the NVIDIA card comes from nvidia-smi
    assert amd["memory_total_bytes"] == 24 * GIB and amd["backend"] == "directml" and amd["memory_source"] == "registry"
    without_smi = _windows.controller_gpus(controllers, [], have_nvidia_smi=False)
    nvidia = next(g for g in without_smi if g["vendor"] == "nvidia")
    assert nvidia["memory_source"] == "adapter-ram-capped-4gib"


def test_windows_nvidia_smi_search_order(tmp_path, monkeypatch):
    system32 = tmp_path / "Windows" / "System32"
    system32.mkdir(parents=True)
    (system32 / "nvidia-smi.exe").write_text("")
    monkeypatch.setenv("SystemRoot", str(tmp_path / "Windows"))
    assert _windows.nvidia_smi_path() == str(system32 / "nvidia-smi.exe")


# ---------------------------------------------------------------- notes for people


def test_note_when_nvidia_card_has_no_working_driver():
    lspci = parsers.parse_lspci((FP / "lspci" / "rtx3090-x2-nnk.txt").read_text())
    described = _linux.describe({"lspci": lspci})
    assert described["gpus"] == []
    assert any("nvidia-smi did not report it" in n for n in described["notes"])


def test_note_for_rosetta():
    described = _darwin.describe({"sysctl": _mac_values(16 * GIB, translated=True)})
    assert described["rosetta"] is True and "Rosetta" in described["notes"][0]


def test_notes_reach_the_table(fake_bin):
    fake_nvidia_smi(fake_bin, ["NVIDIA GeForce RTX 4090, 24564, 23980, 580.95.05, 8.9"])
    doc = collect(timeout=5)
    doc["notes"] = ["Something a person should know."]
    assert "Note" in render_text(doc) and "Something a person should know." in render_text(doc)


def test_collect_never_raises_even_when_a_back_end_breaks(monkeypatch):
    import h3kit.fingerprint as front

    def broken(*args, **kwargs):
        raise RuntimeError("synthetic back-end bug")

    monkeypatch.setattr(front._backend, "probes", broken)
    monkeypatch.setattr(front._backend, "describe", broken)
    doc = collect(timeout=1)
    assert fpschema.validate(doc) == []
    assert {p["name"]: p["status"] for p in doc["probes"]}["setup"] == "error"
    assert any("synthetic back-end bug" in p["detail"] for p in doc["probes"] if p["name"] == "describe")


@pytest.mark.parametrize("backend", [_linux, _darwin, _windows], ids=lambda m: m.SYSTEM)
def test_every_back_end_fails_softly_into_a_valid_document(backend):
    """The contract test: any back end, on any machine, gives a valid document
    quickly; the probes that cannot work here say so instead of raising."""
    from h3kit.fingerprint import collect_with

    start = time.monotonic()
    doc = collect_with(backend, timeout=2)
    assert time.monotonic() - start < 2 + 1
    assert fpschema.validate(doc) == [], doc["probes"]
    assert doc["os"]["system"] == backend.SYSTEM
    assert {p["status"] for p in doc["probes"]} <= {"ok", "missing", "timeout", "error"}
    assert len({p["name"] for p in doc["probes"]}) == len(doc["probes"])
