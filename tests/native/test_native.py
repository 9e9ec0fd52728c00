"""h3kit.native against the real library: byte-exact with gguf.quants, products
against numpy, odd shapes, arena, streamer, tiles, and the library search order."""

from __future__ import annotations

import array
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest


from h3kit import bundled, native

KINDS = ("q8_0", "q4_0")


def _gguf():
    """gguf's reference quantizer, the byte-exact oracle; only the tests that compare with it need it."""
    gguf = pytest.importorskip("gguf")
    from gguf import quants

    return quants, {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}


@pytest.fixture(scope="session")
def libdir(native_build_dir) -> Path:
    return native_build_dir


@pytest.fixture(scope="session")
def lib(libdir) -> native.Library:
    return native.load(libdir)


def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    n = 32 * 64
    return {
        "random": rng.standard_normal(n).astype(np.float32),
        "all-zero": np.zeros(n, np.float32),
        "very-large": (rng.standard_normal(n) * 1e30).astype(np.float32),
        "beyond-fp16": (rng.standard_normal(n) * 1e6).astype(np.float32),
        "very-small": (rng.standard_normal(n) * 1e-30).astype(np.float32),
        "fp16-subnormal-scale": (rng.standard_normal(n) * 1e-6).astype(np.float32),
        "constant": np.full(n, 3.7, np.float32),
        "negative-constant": np.full(n, -0.25, np.float32),
        "integers-with-ties": rng.integers(-40, 40, n).astype(np.float32) / 2,
        "one-spike-per-block": np.where(np.arange(n) % 32 == 7, -5.0, 0.01).astype(np.float32),
    }


def _gguf_quantize(x: np.ndarray, kind: str) -> bytes:
    gq, GGML = _gguf()
    with np.errstate(all="ignore"):
        return gq.quantize(x.reshape(-1, 32), GGML[kind]).tobytes()


def _gguf_dequantize(data: bytes, kind: str) -> np.ndarray:
    gq, GGML = _gguf()
    blocks = np.frombuffer(data, np.uint8).reshape(-1, native.BLOCK_BYTES[kind])
    with np.errstate(all="ignore"):
        return gq.dequantize(blocks, GGML[kind]).ravel()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(_cases()))
def test_quantize_is_byte_exact_with_gguf(lib, kind, case):
    x = _cases()[case]
    assert lib.quantize(x, kind) == _gguf_quantize(x, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_dequantize_round_trip_matches_gguf(lib, kind):
    for case, x in _cases().items():
        data = lib.quantize(x, kind)
        ours = lib.dequantize(data, kind, x.size)
        np.testing.assert_array_equal(ours, _gguf_dequantize(data, kind), err_msg=case)


@pytest.mark.parametrize("kind", KINDS)
def test_quantize_accepts_array_f_and_bytes_without_numpy(lib, kind):
    x = _cases()["random"]
    expected = _gguf_quantize(x, kind)
    assert lib.quantize(array.array("f", x.tolist()), kind) == expected
    assert lib.quantize(x.tobytes(), kind) == expected
    back = lib.dequantize(expected, kind, x.size)
    assert isinstance(back, array.array) and back.typecode == "f"
    assert np.array_equal(np.frombuffer(back, np.float32), _gguf_dequantize(expected, kind))


def _weights(rows: int, cols: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, cols), dtype=np.float32), rng.standard_normal(cols, dtype=np.float32)


@pytest.mark.parametrize("kind", KINDS)
def test_matvec_matches_numpy_on_dequantized_weights(lib, kind):
    rows, cols = 300, 512
    w, x = _weights(rows, cols)
    data = np.frombuffer(lib.quantize(w, kind), np.uint8)
    y = lib.matvec(data, kind, rows, cols, x)
    ref = lib.dequantize(data, kind, rows * cols).reshape(rows, cols).astype(np.float64) @ x.astype(np.float64)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (rows,)
    assert np.linalg.norm(y - ref) <= 1e-3 * np.linalg.norm(ref)
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


@pytest.mark.parametrize("kind", KINDS)
def test_matvec_within_quantization_error_of_fp32_weights(lib, kind):
    """|Wq x - W x| is at most sum over blocks of max-error(d) * sum |x| (d/2 for q8_0, d for q4_0)."""
    rows, cols = 200, 256
    w, x = _weights(rows, cols, seed=2)
    data = lib.quantize(w, kind)
    y = np.asarray(lib.matvec(np.frombuffer(data, np.uint8), kind, rows, cols, x))
    blocks = np.frombuffer(data, np.uint8).reshape(rows, cols // 32, native.BLOCK_BYTES[kind])
    d = np.abs(blocks[:, :, :2].copy().view(np.float16)[..., 0].astype(np.float64))
    per_value = d / 2 if kind == "q8_0" else d
    xsum = np.abs(x.astype(np.float64)).reshape(cols // 32, 32).sum(axis=1)
    bound = (per_value * xsum).sum(axis=1) * 1.01 + 1e-4
    exact = w.astype(np.float64) @ x.astype(np.float64)
    assert np.all(np.abs(y - exact) <= bound)


def test_cols_not_a_multiple_of_32_is_a_clear_error(lib):
    with pytest.raises(ValueError, match="multiple of 32"):
        lib.matvec(bytes(34 * 2), "q8_0", 2, 33, np.zeros(33, np.float32))
    with pytest.raises(ValueError, match="multiple of 32"):
        lib.quantize(np.zeros(33, np.float32), "q8_0")


def test_sizes_are_checked_before_c(lib):
    x = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="needs exactly"):
        lib.matvec(bytes(10), "q8_0", 2, 64, x)
    with pytest.raises(ValueError, match="were expected"):
        lib.matvec(bytes(2 * 2 * 34), "q8_0", 2, 64, np.zeros(63, np.float32))
    with pytest.raises(ValueError, match="float32"):
        lib.matvec(bytes(2 * 2 * 34), "q8_0", 2, 64, np.zeros(64, np.float64))
    with pytest.raises(ValueError, match="unknown quantization kind"):
        lib.quantize(x, "q5_k")
    with pytest.raises(ValueError, match="need"):
        lib.dequantize(bytes(10), "q4_0", 64)


@pytest.mark.parametrize("kind", KINDS)
def test_rows_one_and_many_rows_and_threads(lib, kind):
    w, x = _weights(1, 96, seed=3)
    data = lib.quantize(w, kind)
    one = lib.matvec(data, kind, 1, 96, x)
    assert one.shape == (1,)
    assert one[0] == pytest.approx(float(lib.dequantize(data, kind, 96) @ x), rel=1e-4, abs=1e-4)
    rows = 20000
    w, x = _weights(rows, 32, seed=4)
    data = lib.quantize(w, kind)
    ys = [lib.matvec(data, kind, rows, 32, x, threads=t) for t in (1, 3, 0)]
    assert np.array_equal(ys[0], ys[1]) and np.array_equal(ys[0], ys[2])
    ref = lib.matvec_reference(data, kind, rows, 32, x)
    np.testing.assert_allclose(ys[0], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_matmul_equals_matvec_per_row_of_x(lib, kind):
    w, _ = _weights(70, 128, seed=6)
    xs = np.random.default_rng(7).standard_normal((5, 128), dtype=np.float32)
    data = lib.quantize(w, kind)
    y = lib.matmul(data, kind, 70, 128, xs)
    assert y.shape == (5, 70)
    for b in range(5):
        assert np.array_equal(y[b], lib.matvec(data, kind, 70, 128, xs[b]))
    flat = lib.matmul(data, kind, 70, 128, array.array("f", xs.ravel().tolist()))
    assert np.array_equal(np.frombuffer(flat, np.float32), y.ravel())


@pytest.mark.parametrize("rows, cols, batch", [(70, 128, 5), (1, 3, 1), (33, 257, 7), (600, 40, 2)])
def test_matmul_f32_matches_numpy(lib, rows, cols, batch):
    rng = np.random.default_rng(rows + cols)
    w = rng.standard_normal((rows, cols), dtype=np.float32)
    x = rng.standard_normal((batch, cols), dtype=np.float32)
    y = lib.matmul_f32(w, rows, cols, x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (batch, rows)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    ys = [lib.matmul_f32(w, rows, cols, x, threads=t) for t in (1, 3)]
    assert np.array_equal(ys[0], y) and np.array_equal(ys[1], y)  # the same sums whatever the threads
    # Without numpy in the call: array('f') in, array('f') out, the same numbers.
    flat = lib.matmul_f32(array.array("f", w.ravel().tolist()), rows, cols, array.array("f", x.ravel().tolist()))
    assert isinstance(flat, array.array) and np.array_equal(np.frombuffer(flat, np.float32), y.ravel())


def test_matmul_f32_checks_sizes_before_c(lib):
    w, x = np.zeros((4, 8), np.float32), np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="w holds 32 values but 4 x 9"):
        lib.matmul_f32(w, 4, 9, x)
    with pytest.raises(ValueError, match="not a whole number of rows"):
        lib.matmul_f32(w, 4, 8, np.zeros(17, np.float32))
    with pytest.raises(ValueError, match="x holds 16 values but 3 x 8"):
        lib.matmul_f32(w, 4, 8, x, batch=3)
    with pytest.raises(ValueError, match="float32"):
        lib.matmul_f32(w.astype(np.float64), 4, 8, x)
    with pytest.raises(ValueError, match="positive whole number"):
        lib.matmul_f32(w, 0, 8, x)


def test_arena_allocates_aligned_and_reports_lock(lib):
    with lib.arena(1 << 20, lock=True) as arena:
        a = arena.alloc(1000, align=64)
        b = arena.alloc(5000, align=4096)
        a[:] = b"\x01" * 1000
        b[0] = 7
        stats = arena.stats()
        assert stats["used"] >= 6000 and stats["peak"] == stats["used"] and stats["capacity"] == 1 << 20
        assert stats["locked"] or "mlock" in stats["lock_error"] or "VirtualLock" in stats["lock_error"]
        with pytest.raises(native.NativeError, match="arena full"):
            arena.alloc(2 << 20)
        arena.reset()
        assert arena.used == 0 and arena.peak == stats["peak"]


def test_streamer_reads_ranges_in_order(lib, tmp_path):
    data = np.random.default_rng(8).integers(0, 256, 3 * (1 << 20) + 17, dtype=np.uint8).tobytes()
    path = tmp_path / "shard.safetensors"
    path.write_bytes(data)
    with lib.streamer(path, read_size=1 << 20, depth=2) as s:
        assert s.file_size == len(data)
        s.submit(0, len(data))
        s.submit(100, 50)
        got = bytearray()
        offsets = []
        for offset, view in s:
            offsets.append(offset)
            got += view
        stats = s.stats()
    assert bytes(got) == data + data[100:150]
    assert offsets == [0, 1 << 20, 2 << 20, 3 << 20, 100]
    assert stats["bytes_read"] == len(data) + 50 and stats["chunks"] == 5 and stats["wait_seconds"] >= 0


def test_streamer_reads_past_the_page_cache_byte_for_byte(lib, tmp_path):
    # ranges that start and end off the 4 KiB boundary, one running to an odd-sized file's last byte
    data = np.random.default_rng(9).integers(0, 256, 5 * (1 << 20) + 4099, dtype=np.uint8).tobytes()
    path = tmp_path / "shard bigger than the cache.safetensors"
    path.write_bytes(data)
    ranges = [(4097, 3 << 20), (1, 10), ((5 << 20) + 3, len(data) - (5 << 20) - 3), (0, 4096)]
    with lib.streamer(path, read_size=1 << 20, depth=3) as s:
        why = s.bypass_cache()
        if why is not None:  # a file system without such reads: the ring reads through the cache as before
            assert not s.bypassing and "cannot open" in why
        else:
            assert s.bypassing
        for off, length in ranges:
            s.submit(off, length)
        got = {}
        for offset, view in s:
            got[offset] = bytes(view)
        still = s.bypassing
    want = {}
    for off, length in ranges:
        for start in range(off, off + length, 1 << 20):
            want[start] = data[start:min(off + length, start + (1 << 20))]
    assert got == want
    assert still == (why is None)  # no read fell back to the cache


def _bf16(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits by truncation (what the file holds), as uint16."""
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_direct_reads_widen_bf16_and_fp16_into_numpy_buffers(lib, tmp_path):
    rng = np.random.default_rng(9)
    n = 200_003  # two read units and an odd tail
    values = rng.standard_normal(n).astype(np.float32) * 3
    bf, hf = _bf16(values), values.astype(np.float16)
    path = tmp_path / "weights.bin"
    path.write_bytes(b"hdr!" + bf.tobytes() + hf.tobytes())
    got_bf, got_hf = np.zeros(n, np.float32), np.zeros(n, np.float32)
    with lib.streamer(path, read_size=1 << 20, depth=1) as s:
        s.advise(4, 4 * n)  # a hint: nothing to wait for, nothing delivered
        s.read_many([(4, 2 * n, got_bf.ctypes.data, got_bf.nbytes, "BF16", "F32"),
                     (4 + 2 * n, 2 * n, got_hf.ctypes.data, got_hf.nbytes, "F16", "F32")])
        same = np.zeros(n, np.uint16)
        s.read_into_buffer(4, 2 * n, same, "BF16", "BF16", threads=1)
        assert s.stats()["bytes_read"] == 6 * n and s.stats()["chunks"] == 0
    assert np.array_equal(got_bf.view(np.uint32), bf.astype(np.uint32) << 16)
    assert np.array_equal(got_hf, hf.astype(np.float32))
    assert np.array_equal(same, bf)


def test_direct_read_refusals_are_one_sentence_and_write_nothing(lib, tmp_path):
    path = tmp_path / "small.bin"
    path.write_bytes(b"\x01" * 1000)
    buf = np.zeros(1000, np.float32)
    with lib.streamer(path, read_size=1 << 20, depth=1) as s:
        with pytest.raises(native.NativeError, match="past the end"):
            s.read_into(500, 502, buf.ctypes.data, buf.nbytes)
        with pytest.raises(native.NativeError, match="do not fit a buffer"):
            s.read_into(0, 1000, buf.ctypes.data, 1999)
        with pytest.raises(native.NativeError, match="read 1: cannot read type 0 into type 30"):
            s.read_many([(0, 8, buf.ctypes.data, 16, "BF16", "F32"), (0, 8, buf.ctypes.data, 8, "F32", "BF16")])
        with pytest.raises(ValueError, match="not one of F32, F16, BF16"):
            s.read_into(0, 8, buf.ctypes.data, 16, "Q8_0")
        with pytest.raises(native.NativeError, match="past the end"):
            s.advise(0, 1001)
        assert not buf.any()
    with lib.streamer(path, read_size=1 << 20, depth=1) as s:
        path.write_bytes(b"")  # the file shrinks under an open streamer
        with pytest.raises(native.NativeError, match="small.bin: the file ended at offset 0"):
            s.read_into(0, 1000, buf.ctypes.data, buf.nbytes)


def test_streamer_range_past_end_of_file_is_an_error(lib, tmp_path):
    path = tmp_path / "short.bin"
    path.write_bytes(b"x" * 1000)
    with lib.streamer(path, read_size=4096, depth=2) as s:
        with pytest.raises(native.NativeError, match="past the end"):
            s.submit(500, 501)
        s.submit(500, 500)
        assert [bytes(v) for _, v in s] == [b"x" * 500]
    with pytest.raises(native.NativeError, match="cannot stream"):
        lib.streamer(tmp_path / "missing.bin", read_size=4096, depth=2)


def test_streamer_limits_are_the_librarys_own(lib, tmp_path):
    """The loaders ask the library how far a read and the ring may go: exactly what h3k_streamer_open takes."""
    limits = lib.streamer_limits()
    assert limits == (1 << 31, 64) and limits.max_depth == 64
    path = tmp_path / "one.bin"
    path.write_bytes(b"x" * 4096)
    with lib.streamer(path, read_size=4096, depth=limits.max_depth) as s:
        assert s.depth == limits.max_depth
    with pytest.raises(native.NativeError):
        lib.streamer(path, read_size=4096, depth=limits.max_depth + 1)


def test_streamer_plan_comes_from_shard_and_preload_sizes(lib, tmp_path):
    assert lib.streamer_plan(4 << 30, 8 << 30) == (64 << 20, 8)
    assert lib.streamer_plan(100 << 20, 0) == (6 << 20, 2)
    path = tmp_path / "f.bin"
    path.write_bytes(b"\0" * 10)
    with lib.streamer(path, shard_size_bytes=512 << 20, preload_bytes=256 << 20) as s:
        assert (s.read_size, s.depth) == (32 << 20, 8)


def test_tiles_split_and_blend_back_to_the_image(lib):
    img = np.random.default_rng(9).standard_normal((3, 50, 70)).astype(np.float32)
    tiles = lib.split_tiles(img, 3, 50, 70, tile=32, overlap=8)
    assert [(t.y, t.x) for t in tiles][:3] == [(0, 0), (0, 24), (0, 38)]
    np.testing.assert_array_equal(tiles[1].data, img[:, 0:32, 24:56])
    out = lib.blend_tiles(tiles, 3, 50, 70, overlap=8)
    np.testing.assert_allclose(out, img, rtol=1e-5, atol=1e-6)


def test_tiles_feather_linearly_across_the_overlap(lib):
    """Two tiles of constant 0 and 1 overlapping by 4: the seam ramps from 0 to 1."""
    left = native.Tile(0, 0, 1, 8, np.zeros(8, np.float32))
    right = native.Tile(0, 4, 1, 8, np.ones(8, np.float32))
    out = lib.blend_tiles([left, right], 1, 1, 12, overlap=4)
    seam = out.ravel()[4:8]
    assert np.all(np.diff(seam) > 0) and out.ravel()[0] == 0 and out.ravel()[-1] == 1
    np.testing.assert_allclose(seam, [0.2, 0.4, 0.6, 0.8], atol=1e-6)


def test_selftest_version_features(lib):
    """The self-test is the program built against this library, beside it; the library has no such call."""
    assert lib.selftest() == {"passed": True, "checks": lib.selftest()["checks"], "message": ""}
    assert lib.selftest()["checks"] > 20
    assert not hasattr(lib.c, "h3k_selftest")
    feats = lib.features()
    assert feats["version"] == lib.version() and feats["variant"] in native.VARIANTS
    assert set(feats["build"]) <= set(feats["cpu"])


def _run_copied_bridge(tmp_path: Path, env: dict, code: str) -> dict:
    pack = tmp_path / "pack"
    pack.mkdir(exist_ok=True)
    shutil.copytree(bundled.NATIVE_BRIDGE, pack / "h3k_native", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(pack)!r}); {code}"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_search_order_lib_beside_the_bridge_then_env_then_cache(libdir, tmp_path):
    """A copy of the bridge (as deploy makes it) finds lib/ beside itself; H3KIT_NATIVE_LIB wins over it."""
    code = "import json, h3k_native as n; l = n.load(); print(json.dumps([l.source, str(l.path), l.selftest()['passed']]))"
    base = {"PATH": "/usr/bin:/bin", "H3KIT_HOME": str(tmp_path / "empty-home")}
    (tmp_path / "pack" / "lib").mkdir(parents=True)
    for p in [*libdir.glob("libh3kit-*"), *libdir.glob("h3k-selftest-*")]:
        shutil.copy2(p, tmp_path / "pack" / "lib" / p.name)
    source, path, ok = _run_copied_bridge(tmp_path, base, code)
    assert source == "lib/ beside the bridge" and Path(path).parent == tmp_path / "pack" / "lib" and ok
    one = next(libdir.glob("libh3kit-baseline*"))
    source, path, ok = _run_copied_bridge(tmp_path, {**base, "H3KIT_NATIVE_LIB": str(one)}, code)
    assert (source, path, ok) == ("H3KIT_NATIVE_LIB", str(one), True)


def test_search_order_finds_the_cache_written_by_build(libdir, tmp_path):
    home = libdir.parent.parent.parent  # <home>/cache/native/<key>
    code = "import json, h3k_native as n; l = n.load(); print(json.dumps([l.source, str(l.path)]))"
    source, path = _run_copied_bridge(tmp_path, {"PATH": "/usr/bin:/bin", "H3KIT_HOME": str(home)}, code)
    assert source == "h3kit cache" and Path(path).parent == libdir


def test_selftest_program_missing_or_failing_is_a_sentence(libdir, tmp_path):
    """A library copied without its self-test program says how to get it back; a program that prints no
    result, or exits with the CPU's 'cannot run this build', is read as such."""
    one = next(libdir.glob("libh3kit-baseline*"))
    shutil.copy(one, tmp_path / one.name)
    with pytest.raises(native.NativeError, match="h3kit build --force"):
        native.Library(tmp_path / one.name).selftest()
    assert native.read_selftest(139, "", "Segmentation fault")["message"] == \
        "the self-test program gave no result (Segmentation fault)"
    line = '{"passed": false, "checks": 1, "variant": "x86-64-v3", "message": "this CPU lacks features"}'
    assert native.read_selftest(2, line) == {"passed": False, "checks": 1, "message": "this CPU lacks features",
                                             "skipped": True}


def test_missing_library_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.delenv("H3KIT_NATIVE_LIB", raising=False)
    with pytest.raises(native.NativeError, match="h3kit build"):
        native.find(tmp_path / "nothing-here")


def test_bridge_works_without_numpy(libdir, tmp_path):
    """h3kit's own venv has no numpy: array('f') in, array('f') out."""
    code = ("import sys; sys.modules['numpy'] = None; import array, json, h3k_native as n; "
            "l = n.load(); x = array.array('f', [float(i % 7) - 3 for i in range(64)]); "
            "q = l.quantize(x, 'q8_0'); y = l.matvec(q + q, 'q8_0', 2, 64, x); "
            "d = l.dequantize(q, 'q8_0', 64); "
            "print(json.dumps([type(y).__name__, y.typecode, len(y), y[0] == y[1], type(d).__name__]))")
    one = next(libdir.glob("libh3kit-baseline*"))
    env = {"PATH": "/usr/bin:/bin", "H3KIT_HOME": str(tmp_path / "home"), "H3KIT_NATIVE_LIB": str(one)}
    assert _run_copied_bridge(tmp_path, env, code) == ["array", "f", 2, True, "array"]


def test_folder_with_only_the_tuned_build_loads_when_the_cpu_allows(lib, libdir, tmp_path):
    tuned = [p for p in libdir.glob("libh3kit-*") if "baseline" not in p.name]
    if not tuned or not lib.runs_here() or lib.variant() == "baseline":
        pytest.skip("no tuned build for this CPU")
    shutil.copy(tuned[0], tmp_path / tuned[0].name)
    assert native.find(tmp_path).variant() == lib.variant()


def test_read_only_buffers_are_read_through_a_copy(lib, tmp_path):
    x = _cases()["random"]
    path = tmp_path / "w.bin"
    path.write_bytes(x.tobytes())
    import mmap

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert lib.quantize(m, "q4_0") == _gguf_quantize(x, "q4_0")
        assert lib.quantize(memoryview(x.tobytes()), "q4_0") == _gguf_quantize(x, "q4_0")


def test_arena_and_streamer_from_a_plan(lib, tmp_path):
    plan = {"schema": "h3kit.plan/1", "settings": {"shard_size_bytes": 512 << 20, "preload_bytes": 64 << 20}}
    path = tmp_path / "shard.bin"
    path.write_bytes(b"\0" * 4096)
    with native.Streamer.from_plan(path, plan, library=lib) as s:
        assert (s.read_size, s.depth) == (32 << 20, 2)
    with native.Arena.from_plan(plan, lock=False, library=lib) as arena:
        assert arena.capacity == 64 << 20


def test_big_endian_float32_is_refused_not_misread(lib):
    """C reads bytes as they lie: a '>f4' array must be refused, not quantized as garbage."""
    x = np.arange(64, dtype=">f4")
    with pytest.raises(ValueError, match="byte order"):
        lib.quantize(x, "q8_0")
    assert bytes(lib.quantize(x.astype(np.float32), "q8_0")) == bytes(lib.quantize(np.arange(64, dtype=np.float32), "q8_0"))
