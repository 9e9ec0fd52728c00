"""The disk probe reads the weights' file system with the page cache dropped, checks that it was, and says when not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from h3kit.calibrate import disk
from h3kit.plan.prefetch import prefetch_for

MB = 1 << 20


def test_a_real_folder_is_measured_and_the_probe_file_removed(tmp_path):
    folder = tmp_path / "models"
    r = disk.measure_disk(folder, 16 * MB, drop_all=False)  # never drop the whole machine's cache in a test
    assert r["status"] == "measured", r
    assert r["bytes"] == 16 * MB and r["read_bytes_per_s"] > 0
    assert r["gb_per_s"] == pytest.approx(r["read_bytes_per_s"] / 1e9)
    assert list(folder.iterdir()) == []  # the probe file is gone
    if r["resident_after_drop"] is not None:  # mincore looked: the flag follows what it saw
        assert r["cache_dropped"] == (r["resident_after_drop"] <= disk.RESIDENT_LIMIT)
    if not r["cache_dropped"]:
        assert r["note"].startswith("cache not dropped")


@pytest.mark.skipif(not Path("/proc/self/mounts").is_file(), reason="needs Linux's /proc/self/mounts")
def test_a_disk_file_system_is_dropped_for_real_by_fadvise(tmp_path):
    """On this machine's disk (not tmpfs) DONTNEED empties the file's pages, and mincore sees it."""
    if disk.fs_type(str(tmp_path)) in disk.MEMORY_FS:
        pytest.skip(f"{tmp_path} is on a memory file system here")
    probe = tmp_path / "f.bin"
    probe.write_bytes(os.urandom(4 * MB))
    probe.read_bytes()
    assert disk.resident_fraction(str(probe)) == pytest.approx(1.0, abs=0.01)
    dropped, how, resident = disk.drop_cache(str(probe), drop_all=False)
    assert how == "posix_fadvise DONTNEED" and dropped and resident <= disk.RESIDENT_LIMIT


@pytest.mark.skipif(not Path("/dev/shm").is_dir() or disk.fs_type("/dev/shm") not in disk.MEMORY_FS,
                    reason="needs a tmpfs at /dev/shm")
def test_tmpfs_cannot_be_dropped_and_the_figure_says_so(tmp_path):
    folder = Path("/dev/shm") / f"h3kit-test-{os.getpid()}-{tmp_path.name}"
    try:
        r = disk.measure_disk(folder, 8 * MB, drop_all=False)
    finally:
        folder.rmdir()
    assert r["status"] == "measured" and r["cache_dropped"] is False
    assert r["resident_after_drop"] > 0.5 and r["fs_type"] == "tmpfs"
    assert r["note"].startswith("cache not dropped: the figure may be the page cache's")


def test_a_dry_run_probe_leaves_no_folder(tmp_path):
    folder = tmp_path / "not" / "yet"
    r = disk.measure_disk(folder, 2 * MB, create=False)
    assert r["status"] == "measured" and r["probe_dir"] == str(tmp_path)
    assert not (tmp_path / "not").exists()


def test_a_folder_that_cannot_exist_is_an_error_not_a_traceback(tmp_path):
    (tmp_path / "file").write_text("x")
    r = disk.measure_disk(tmp_path / "file" / "models", 1 * MB)
    assert r["status"] == "error" and r["reason"].startswith("cannot write a probe file")


def test_streaming_block_is_prefetch_for_at_the_measured_rate():
    measured = {"status": "measured", "read_bytes_per_s": 2e9, "gb_per_s": 2.0, "cache_dropped": True}
    block = disk.streaming_block(measured, 750_000_000, 0.2)
    assert block == {"enabled": True, "disk_bytes_per_s": 2e9, "cache_dropped": True,
                     **prefetch_for(2e9, 750_000_000, 0.2)}
    assert block["disk_bound"] and block["io_wait_fraction"] == pytest.approx(1 - 0.2 / 0.375, abs=1e-4)
    stale = disk.streaming_block({**measured, "cache_dropped": False}, 750_000_000, 1.0)
    assert stale["note"].startswith("cache not dropped") and not stale["disk_bound"]
    assert disk.streaming_block({"status": "error", "reason": "x"}, 750_000_000, 0.2) is None
    assert disk.streaming_block(measured, 750_000_000, None) is None


def test_with_the_native_library_the_probe_is_also_read_in_place_into_fp32(tmp_path, native_library):
    r = disk.measure_disk(tmp_path / "models", 16 * MB, drop_all=False, library=native_library)
    assert r["status"] == "measured" and r["direct_read_bytes_per_s"] > 0
    assert disk.measure_disk(tmp_path / "m2", 4 * MB, drop_all=False)["direct_read_bytes_per_s"] is None
    probe = tmp_path / "probe.bin"
    probe.write_bytes(b"\x80\x3f" * (MB // 2))  # bf16 1.0, widened in place
    assert disk.direct_read_rate(native_library, probe) > 0
    assert disk.direct_read_rate(tmp_path / "no-such-library.so", probe) is None  # a probe never raises
    assert disk.direct_read_rate(native_library, tmp_path / "missing.bin") is None
