"""Parsers on recorded real tool output (tests/fixtures/fingerprint, see SOURCES.md)."""

from __future__ import annotations

import plistlib
import re

import pytest

from h3kit.fingerprint import parsers
from h3kit.fingerprint.parsers import GIB, MIB, ParseError

from conftest import FIXTURES

FP = FIXTURES / "fingerprint"


def read(rel: str) -> str:
    return (FP / rel).read_text(encoding="utf-8")


def test_every_fixture_is_listed_in_sources():
    sources = read("SOURCES.md")
    for path in FP.rglob("*"):
        if path.is_file() and path.name != "SOURCES.md":
            assert path.relative_to(FP).as_posix() in sources, path


# ---------------------------------------------------------------- nvidia-smi banner


@pytest.mark.parametrize("name, driver, cuda", [
    ("header-550.40.07-rtx4070.txt", "550.40.07", "12.4"),
    ("header-550.107.02-rtx4090d.txt", "550.107.02", "12.4"),
    ("header-535.129.03-2x-quadro-rtx4000.txt", "535.129.03", "12.2"),
    ("header-450.57-titanxp.txt", "450.57", "11.0"),
    ("header-331.62-gtx680.txt", "331.62", None),
    ("header-580.119.02-rtx5090-rtx3090.txt", "580.119.02", "13.0"),
    ("header-610.57.04-2x-rtx5090.txt", "610.57.04", "13.3"),
])
def test_nvidia_smi_banner(name, driver, cuda):
    assert parsers.parse_nvidia_smi_header(read(f"nvidia-smi/{name}")) == {"driver_version": driver, "cuda_driver_version": cuda}


def test_nvidia_smi_banner_refuses_other_text():
    with pytest.raises(ParseError):
        parsers.parse_nvidia_smi_header(read("nvidia-smi/query-470.182.03-no-compute-cap.txt"))


# ---------------------------------------------------------------- nvidia-smi query


def test_nvidia_query_one_gpu():
    (gpu,) = parsers.parse_nvidia_smi_query(read("nvidia-smi/query-550.107.02-rtx4090d.csv"))
    assert gpu == {"name": "NVIDIA GeForce RTX 4090 D", "memory_total_bytes": 24564 * MIB,
                   "memory_free_bytes": 24563 * MIB, "driver_version": "550.107.02", "compute_capability": "8.9"}


def test_nvidia_query_mixed_pair():
    gpus = parsers.parse_nvidia_smi_query(read("nvidia-smi/query-580.119.02-rtx5090-rtx3090.csv"))
    assert [g["name"] for g in gpus] == ["NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 3090"]
    assert [g["compute_capability"] for g in gpus] == ["12.0", "8.6"]
    assert gpus[1]["memory_free_bytes"] == 1224 * MIB


def test_nvidia_query_identical_pair():
    gpus = parsers.parse_nvidia_smi_query(read("nvidia-smi/query-535.129.03-2x-quadro-rtx4000.csv"))
    assert len(gpus) == 2 and all(g["memory_total_bytes"] == 8 * GIB for g in gpus)


def test_nvidia_query_unavailable_values_are_none():
    gpus = parsers.parse_nvidia_smi_query(read("nvidia-smi/query-570.86.15-titanv-rtx5880.csv"))
    assert [g["memory_free_bytes"] for g in gpus] == [None, None]
    assert gpus[1]["name"] == "NVIDIA RTX 5880 Ada Generation"


@pytest.mark.parametrize("text", [
    read("nvidia-smi/query-470.182.03-no-compute-cap.txt"),
    "",
    "NVIDIA GeForce RTX 4090, lots, 1, 580.95.05, 8.9",
    "\x00\x01\x02 binary junk",
])
def test_nvidia_query_garbage(text):
    with pytest.raises(ParseError):
        parsers.parse_nvidia_smi_query(text)


@pytest.mark.parametrize("value, text", [(13000, "13.0"), (12040, "12.4"), (11080, "11.8"), (0, None)])
def test_cuda_version_from_int(value, text):
    assert parsers.cuda_version_from_int(value) == text


# ---------------------------------------------------------------- rocm-smi, KFD


def test_rocm_smi_one_card():
    (card,) = parsers.parse_rocm_smi_json(read("rocm-smi/rx7900xt.json"))
    assert card == {"card": "card0", "name": "Radeon RX 7900 XT", "memory_total_bytes": 21458059264,
                    "memory_free_bytes": 21458059264 - 27856896, "gfx_target": "gfx1100"}


def test_rocm_smi_dgpu_and_igpu():
    cards = parsers.parse_rocm_smi_json(read("rocm-smi/rx6800-raphael.json"))
    assert [c["gfx_target"] for c in cards] == ["gfx1030", "gfx1036"]
    assert cards[1]["memory_total_bytes"] == 64 * MIB


def test_rocm_smi_without_vram_keys_gives_no_memory():
    cards = parsers.parse_rocm_smi_json(read("rocm-smi/rx6800-memuse-1.4.1.json"))
    assert [c["memory_total_bytes"] for c in cards] == [None, None]


def test_rocm_smi_garbage():
    with pytest.raises(ParseError):
        parsers.parse_rocm_smi_json("====== ROCm System Management Interface ======")


@pytest.mark.parametrize("version, gfx", [(90402, "gfx942"), (110000, "gfx1100"), (100300, "gfx1030"),
                                          (90010, "gfx90a"), (0, None)])
def test_kfd_gfx_target(version, gfx):
    text = f"cpu_cores_count 0\nsimd_count 192\ngfx_target_version {version}\ndrm_render_minor 128\n"
    assert parsers.parse_kfd_properties(text) == {"gfx_target": gfx, "drm_render_minor": 128}


def test_kfd_recorded_line():
    assert parsers.parse_kfd_properties(read("kfd/mi300x-node4-gfx-line.txt"))["gfx_target"] == "gfx942"


# ---------------------------------------------------------------- lspci, BARs


def test_lspci_nn_two_nvidia_cards_and_no_audio():
    devices = parsers.parse_lspci(read("lspci/rtx3090-x2-nnk.txt"))
    assert [d["slot"] for d in devices] == ["0000:05:00.0", "0000:0a:00.0"]
    assert {d["vendor_id"] for d in devices} == {"0x10de"}
    assert parsers.marketing_name(devices[0]["name"]) == "GeForce RTX 3090"


@pytest.mark.parametrize("name, marketing", [("lspci/arc-a770-vvv.txt", "Intel Arc A770"),
                                             ("lspci/arc-b580-vvv.txt", "Intel Arc B580")])
def test_lspci_plain_intel_arc(name, marketing):
    (device,) = parsers.parse_lspci(read(name))
    assert device["vendor_id"] == "0x8086"
    assert parsers.marketing_name(device["name"]) == marketing


def test_lspci_host_without_display_controllers():
    assert parsers.parse_lspci(read("lspci/amd-matisse-host.txt")) == []


def test_lspci_garbage():
    with pytest.raises(ParseError):
        parsers.parse_lspci("lspci: Unable to load libkmod resources: error -2")


def _resource_line(start: int, size: int, flags: int) -> str:
    return f"0x{start:016x} 0x{start + size - 1:016x} 0x{flags:016x}"


def test_largest_prefetchable_bar_is_vram():
    # The A770's regions from its lspci -vvv recording, in sysfs `resource` form.
    text = "\n".join([
        _resource_line(0x78000000, 16 * MIB, 0x40200),       # non-prefetchable registers
        "0x0000000000000000 0x0000000000000000 0x0000000000000000",
        _resource_line(0x6800000000, 16 * GIB, 0x14220c),    # prefetchable, 64-bit
    ])
    assert parsers.largest_bar_bytes(text) == 16 * GIB
    assert parsers.largest_bar_bytes("0x0 0x0 0x0\n") is None


# ---------------------------------------------------------------- /proc/cpuinfo


def test_cpuinfo_x86_avx512():
    info = parsers.parse_cpuinfo(read("cpuinfo/amd-epyc-zen4-kvm.txt"))
    assert info["model"] == "AMD EPYC"
    assert {"avx2", "fma", "avx512f", "avx512_bf16", "sse4_2"} <= set(info["flags"])
    assert "pdpe1gb" not in info["flags"]  # only flags that matter for kernels are kept


def test_cpuinfo_arm64_names_neon_and_dotprod():
    info = parsers.parse_cpuinfo(read("cpuinfo/apple-m1-asahi.txt"))
    assert {"neon", "dotprod", "fp16"} <= set(info["flags"])
    assert "sve" not in info["flags"]


def test_cpuinfo_garbage():
    with pytest.raises(ParseError):
        parsers.parse_cpuinfo("hello")


# ---------------------------------------------------------------- macOS


def test_sysctl_hw_optional():
    values = parsers.parse_sysctl(read("sysctl/m1-hw-optional.txt"))
    assert values["hw.optional.arm64"] == "1" and values["hw.optional.neon_fp16"] == "1"


def test_sysctl_brand_string_keeps_spaces():
    assert parsers.parse_sysctl(read("sysctl/m1-machdep-cpu.txt"))["machdep.cpu.brand_string"] == "Apple M1"


def test_sysctl_garbage():
    with pytest.raises(ParseError):
        parsers.parse_sysctl("")


def test_system_profiler_m3_pro():
    (gpu,) = parsers.parse_system_profiler_displays(read("system_profiler/m3-pro.json"))
    assert gpu["name"] == "Apple M3 Pro" and gpu["vendor"] == "apple" and gpu["metal"] == "metal3"


def test_system_profiler_early_m1_item_name():
    (gpu,) = parsers.parse_system_profiler_displays(read("system_profiler/m1-kHW-item.json"))
    assert gpu["name"] == "Apple M1" and gpu["vendor"] == "apple" and gpu["metal"] == "mtlgpufamilyapple7"


def test_system_profiler_cores_and_intel_mac_vram():
    text = ('{"SPDisplaysDataType": [{"_name": "Apple M2 Max", "sppci_cores": "38", "sppci_model": "Apple M2 Max",'
            ' "spdisplays_vendor": "sppci_vendor_Apple"}, {"_name": "Radeon Pro Vega 64", "spdisplays_vram": "16 GB",'
            ' "spdisplays_vendor": "sppci_vendor_amd"}]}')
    m2, vega = parsers.parse_system_profiler_displays(text)
    assert m2["gpu_cores"] == 38 and vega["vendor"] == "amd" and vega["vram_bytes"] == 16 * GIB


def test_system_profiler_garbage():
    with pytest.raises(ParseError):
        parsers.parse_system_profiler_displays("Graphics/Displays:\n    Apple M1:")


def test_diskutil_plist():
    assert parsers.parse_diskutil_plist(plistlib.dumps({"SolidState": True})) == "ssd"
    assert parsers.parse_diskutil_plist(plistlib.dumps({"SolidState": False})) == "hdd"
    assert parsers.parse_diskutil_plist(plistlib.dumps({"VolumeName": "net"})) == "unknown"
    with pytest.raises(ParseError):
        parsers.parse_diskutil_plist(b"Could not find disk")


# ---------------------------------------------------------------- Windows


def test_powershell_format_list_intel_uhd():
    (record,) = parsers.parse_powershell_list(read("powershell/intel-uhd-fl-star.txt"))
    assert record["Name"] == "Intel(R) UHD Graphics"
    assert parsers.vendor_from_pnp(record["PNPDeviceID"]) == "intel"
    assert record["InstallDate"] == ""


def test_powershell_table_is_not_a_list():
    with pytest.raises(ParseError):
        parsers.parse_powershell_list(read("powershell/amd-adapterram-capped.txt"))


def test_powershell_wrapped_value_and_two_records():
    text = ("Name        : NVIDIA GeForce RTX 4090\nPNPDeviceID : PCI\\VEN_10DE&DEV_2684&SUBSYS_\n"
            "              16F310DE&REV_A1\\4&1\n\nName        : AMD Radeon RX 7900 XTX\n"
            "PNPDeviceID : PCI\\VEN_1002&DEV_744C\n")
    first, second = parsers.parse_powershell_list(text)
    assert first["PNPDeviceID"].endswith("16F310DE&REV_A1\\4&1")
    assert parsers.vendor_from_pnp(second["PNPDeviceID"]) == "amd"


@pytest.mark.parametrize("value, expected", [
    (25769803776, 24 * GIB),
    ((24 * GIB).to_bytes(8, "little"), 24 * GIB),
    ("17163091968", 17163091968),
    ("{0, 0, 0, 0, 4, 0, 0, 0}", 16 * GIB),
    (None, None), ("", None), (0, None),
])
def test_qword_memory_size(value, expected):
    assert parsers.qword_memory_size(value) == expected


def test_adapter_ram_cap_is_recognisable():
    # TimVer#103: a 16 GB card reports 4293918720 through AdapterRAM (uint32).
    capped = int(re.search(r"\d{6,}", read("powershell/amd-adapterram-capped.txt")).group())
    assert capped < 4 * GIB


# ---------------------------------------------------------------- misc


@pytest.mark.parametrize("text, version", [
    ("gcc (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022", "12.2.0"),
    ("Apple clang version 15.0.0 (clang-1500.3.9.4)\nTarget: arm64-apple-darwin23.4.0", "15.0.0"),
    ("0.13.0\n", "0.13.0"),
    ("Microsoft (R) C/C++ Optimizing Compiler Version 19.40.33811 for x64", "19.40.33811"),
])
def test_compiler_version(text, version):
    assert parsers.parse_compiler_version(text) == version


@pytest.mark.parametrize("text, wsl", [
    ("Linux version 5.15.153.1-microsoft-standard-WSL2 (root@941d701f84f1) (gcc (GCC) 11.2.0)", True),
    ("Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com) (gcc version 5.4.0 (GCC) )", True),
    ("Linux version 6.8.0-45-generic (buildd@lcy02-amd64-115) (x86_64-linux-gnu-gcc-13)", False),
])
def test_wsl_kernel(text, wsl):
    assert parsers.is_wsl(text) is wsl


@pytest.mark.parametrize("text, kind", [("0\n", "ssd"), ("1\n", "hdd")])
def test_rotational(text, kind):
    assert parsers.parse_rotational(text) == kind


@pytest.mark.parametrize("text, kind", [("SSD\r\n", "ssd"), ("HDD\n", "hdd"), ("Unspecified\n", "unknown")])
def test_windows_media_type(text, kind):
    assert parsers.parse_media_type(text) == kind


def test_windows_media_type_garbage():
    with pytest.raises(ParseError):
        parsers.parse_media_type("Get-Partition : No MSFT_Partition objects found")
