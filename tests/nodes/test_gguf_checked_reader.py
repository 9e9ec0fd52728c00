"""The pack's one checked GGUF reader (nodes/h3k_gguf) as both loaders and calibration meet it.

Crafted and damaged files, written byte by byte: each is refused with one
sentence naming the file, the same sentence from the held loader (before
ComfyUI-GGUF's gguf-py sees the file) and the streamed loader; a KV section
of 20 million short strings is refused in a subprocess whose time and peak
RSS are measured; a vision tower of another shape is refused naming its
mmproj; anything gguf-py still raises comes back as a sentence.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pack_support import pack_module

L = pack_module("h3kit_common.gguf_names")
S = pack_module("h3kit_streaming.logic")
H = pack_module("h3kit_common.gguf_load")
SUPPORT = Path(__file__).resolve().parents[1] / "support"
F32, STRING, ARRAY, UINT32 = 0, 8, 9, 4


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def write(path: Path, tensors, fields=(), data: int | None = None, align: int = 32) -> Path:
    """GGUF v3: `fields` raw KV entries (kv()), `tensors` [(name, dims innermost first, type, offset)], then
    `data` zero bytes of data (default: up to the end of the last F32 tensor, at most 1 MiB)."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(fields)) + b"".join(fields)
    for name, ne, qtype, offset in tensors:
        head += _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        head += struct.pack("<IQ", qtype, offset)
    head += bytes(-len(head) % align)
    if data is None:
        data = min(max((o + 4 * _prod(ne) for _, ne, _, o in tensors), default=0), 1 << 20)
    path.write_bytes(head + bytes(data))
    return path


def _prod(ne) -> int:
    out = 1
    for d in ne:
        out *= d
    return out


def refusals(path: Path, monkeypatch) -> str:
    """The sentence from the reader, the streamed loader and the held loader's two entry points; all the same."""
    monkeypatch.setattr(H, "gguf_pack", lambda: pytest.fail("gguf-py was reached before h3kit's check"))
    with pytest.raises(L.GGUFError) as plain:
        L.read_gguf(path)
    said = str(plain.value)
    with pytest.raises(S.StreamError) as streamed:
        S.read_weights(path)
    with pytest.raises(L.GGUFError) as dit:
        H.load_dit(path)
    with pytest.raises(L.GGUFError) as te:
        H.text_encoder_state_dict(path)
    assert str(streamed.value) == str(dit.value) == str(te.value) == said
    assert said.startswith(path.name) and said.endswith(".") and "\n" not in said and "Traceback" not in said
    return said


GOOD = [("video_patch_proj.weight", [8], F32, 0), ("audio_patch_proj.weight", [8], F32, 32)]


@pytest.mark.parametrize("tensors, fields, says", [
    (GOOD, [kv("general.name", STRING, _s("a")), kv("general.name", STRING, _s("b"))], "KV field general.name twice"),
    ([GOOD[0], ("video_patch_proj.weight", [8], F32, 32)], [], "tensor video_patch_proj.weight twice"),
    (GOOD, [kv("general.alignment", UINT32, struct.pack("<I", 0))], "general.alignment 0, which is not a uint32"),
    (GOOD, [kv("general.alignment", UINT32, struct.pack("<I", 3))], "general.alignment 3, which is not a uint32"),
    (GOOD, [kv("general.alignment", STRING, _s("32"))], "general.alignment '32', which is not a uint32"),
    (GOOD, [kv("general.alignment", 10, struct.pack("<Q", 32))], "general.alignment 32, which is not a uint32"),
    ([GOOD[0], ("audio_patch_proj.weight", [8], F32, 48)], [], "audio_patch_proj.weight starts at data offset 48"),
    ([("video_patch_proj.weight", [16], F32, 0), ("audio_patch_proj.weight", [8], F32, 32)], [],
     "bytes of tensor audio_patch_proj.weight overlap those of video_patch_proj.weight"),
    ([GOOD[0], ("audio_patch_proj.weight", [8, 0], F32, 32)], [], r"audio_patch_proj.weight has the shape \[0, 8\]"),
    ([GOOD[0], ("audio_patch_proj.weight", [1 << 40, 1 << 40], F32, 32)], [], "has the shape"),
    ([GOOD[0], ("audio_patch_proj.weight", [], F32, 32)], [], "claims 0 dimensions"),
    ([GOOD[0], ("audio_patch_proj.weight", [1] * 9, F32, 32)], [], "claims 9 dimensions"),
    ([GOOD[0], ("audio_patch_proj.weight", [16, 2], 8, 32)], [], "rows of 16 values, not whole Q8_0 blocks"),
    (GOOD, [kv("nested", ARRAY, struct.pack("<IQ", ARRAY, 1) + struct.pack("<IQ", ARRAY, 1) +
               struct.pack("<IQ", UINT32, 0))], "nests the KV field nested more than 2 arrays deep"),
], ids=["dup-key", "dup-tensor", "align-0", "align-3", "align-string", "align-uint64", "misaligned", "overlap",
        "zero-dim", "huge-dims", "no-dims", "nine-dims", "part-block", "nested-3"])
def test_a_damaged_or_crafted_header_is_one_sentence_from_both_loaders(tmp_path, monkeypatch, tensors, fields, says):
    assert re.search(says, refusals(write(tmp_path / "bad.gguf", tensors, fields), monkeypatch))


def test_a_deeply_nested_kv_array_is_a_sentence_not_a_recursion_error(tmp_path, monkeypatch):
    depth = 5000  # far past Python's recursion limit: the old reader raised a raw RecursionError
    field = kv("nested", ARRAY, b"".join(struct.pack("<IQ", ARRAY, 1) for _ in range(depth)) + struct.pack("<IQ", 4, 0))
    said = refusals(write(tmp_path / "deep.gguf", GOOD, [field]), monkeypatch)
    assert "nests the KV field nested more than 2 arrays deep" in said


def test_many_short_arrays_count_toward_one_cap(tmp_path, monkeypatch):
    per = 200  # each under the length that is kept, together over the cap
    count = pack_module("h3k_gguf").LIMITS["array_values"] // per + 1
    fields = [kv(f"k.{i}", ARRAY, struct.pack("<IQ", 0, per) + bytes(per)) for i in range(count)]
    assert "values in its KV arrays" in refusals(write(tmp_path / "many.gguf", GOOD, fields), monkeypatch)


def test_a_sound_file_with_alignment_and_kv_arrays_is_read(tmp_path):
    fields = [kv("general.alignment", UINT32, struct.pack("<I", 64)),
              kv("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, 1000) + b"".join(_s(f"t{i}") for i in range(1000))),
              kv("pairs", ARRAY, struct.pack("<IQ", ARRAY, 2) + (struct.pack("<IQ", UINT32, 2) + bytes(8)) * 2),
              kv("template", STRING, _s("x" * 70000))]
    path = write(tmp_path / "ok.gguf", [GOOD[0], ("audio_patch_proj.weight", [8], F32, 64)], fields, align=64)
    doc = L.read_gguf(path)
    assert doc["data_start"] % 64 == 0 and doc["tensors"]["audio_patch_proj.weight"]["start"] == doc["data_start"] + 64
    assert doc["kv"]["tokenizer.ggml.tokens"] == {"array_of": STRING, "length": 1000}
    assert doc["kv"]["pairs"] == [[0, 0], [0, 0]] and doc["kv"]["template"] == {"string_bytes": 70000}
    assert S.read_weights(path)["gguf"]


MEASURE = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from pack_support import pack_module
S, H = pack_module("h3kit_streaming.logic"), pack_module("h3kit_common.gguf_load")
H.gguf_pack = lambda: sys.exit("gguf-py was reached")
out = {}
for name, read in (("streamed", S.read_weights), ("held_dit", H.load_dit), ("held_te", H.text_encoder_state_dict)):
    t = time.perf_counter()
    try:
        read(sys.argv[1])
        said = None
    except (S.StreamError, H.GGUFError) as exc:
        said = str(exc)
    out[name] = {"seconds": time.perf_counter() - t, "said": said}
def peak_mb():
    # VmHWM is this process's own peak since exec; ru_maxrss also counts the pytest process it was forked from
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1024)
out["peak_rss_mb"] = peak_mb()
print(json.dumps(out))
"""


def test_twenty_million_kv_strings_are_refused_fast_in_little_memory(tmp_path):
    """A 200 MB file whose KV section is one array of 20 million 2-byte strings (gguf-py passed 9 GB on it)."""
    path = tmp_path / "strings.gguf"
    count, chunk = 20_000_000, 1_000_000
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + kv("tokenizer.ggml.tokens", ARRAY, struct.pack("<IQ", STRING, count)))
        for _ in range(count // chunk):
            f.write(_s("ab") * chunk)
        f.write(_s("video_patch_proj.weight") + struct.pack("<IQIQ", 1, 8, F32, 0))
        f.write(bytes(-f.tell() % 32 + 32))
    assert path.stat().st_size > 200_000_000
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(SUPPORT)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    print(f"\nrefusing {path.stat().st_size} bytes of KV strings: {json.dumps(got)}")
    sentences = {got[k]["said"] for k in ("streamed", "held_dit", "held_te")}
    assert len(sentences) == 1 and "values in its KV arrays" in sentences.pop()
    assert all(got[k]["seconds"] < 5 for k in ("streamed", "held_dit", "held_te")) and got["peak_rss_mb"] < 300


def test_layers_named_by_anything_but_a_number_are_a_sentence():
    said = L.te_missing(["model.layers.L0.self_attn.q_proj.weight", "visual.deepstack_merger_list.0.norm.weight"],
                        "te.gguf")
    assert "te.gguf has no Qwen3 language model layers numbered" in said and "model.layers.L0" in said
    names = [f"model.layers.{i}.self_attn.q_proj.weight" for i in range(12)] + ["model.layers.L0.mlp.up_proj.weight"]
    assert "has 12 language-model layers" in L.te_missing(names, "te.gguf")  # the odd name is not a layer


# -- the vision tower ---------------------------------------------------------------------------------------

TINY = {**L.QWEN3VL_32B_VISION, "hidden": 32, "intermediate": 64, "depth": 3, "positions": 16}


def _tensors(shapes: dict, halve: bool = False) -> list:
    out, offset = [], 0
    for name, shape in shapes.items():
        shape = [shape[0] // 2] + shape[1:] if halve and len(shape) > 1 else shape
        out.append((name, list(reversed(shape)), F32, offset))
        offset += -(-4 * _prod(shape) // 32) * 32
    return out


def _mmproj(path: Path, width: int, halve: bool = False) -> Path:
    tower = L.tower_shapes(TINY, width)
    patch = tower.pop("visual.patch_embed.proj.weight")
    for i in range(2):  # stable-diffusion.cpp's two temporal slices, as the loader stacks them
        tower[f"visual.patch_embed.proj.{i}.weight"] = patch[:2] + patch[3:]
    return write(path, _tensors(tower, halve), [kv("general.architecture", STRING, _s("clip"))])


def _te(path: Path, width: int) -> Path:
    shapes = {"model.embed_tokens.weight": [100, width], **{f"model.layers.{i}.self_attn.q_proj.weight": [width, width]
                                                             for i in (0, 49)}}
    return write(path, _tensors(shapes))


def test_the_mmproj_tower_must_fit_the_text_encoder_it_feeds(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "gguf_pack", lambda: (_ for _ in ()).throw(LookupError("past the checks")))
    te = _te(tmp_path / "te.gguf", 64)
    _mmproj(tmp_path / "mmproj-te-f16.gguf", 64)
    with pytest.raises(LookupError, match="past the checks"):  # a tower that fits goes on to gguf-py
        H.text_encoder_state_dict(te)
    _mmproj(tmp_path / "mmproj-other-f16.gguf", 64, halve=True)  # every vision weight with half its rows
    with pytest.raises(L.GGUFError) as err:
        H.text_encoder_state_dict(te, "mmproj-other-f16.gguf", lambda n: str(tmp_path / n))
    said = str(err.value)
    assert said.startswith("mmproj-other-f16.gguf is not the vision tower of te.gguf") and "pick the mmproj" in said
    assert "\n" not in said


def test_a_real_width_encoder_needs_qwen3vl_32bs_own_tower():
    te = {"model.embed_tokens.weight": [151936, 5120]}
    real = L.tower_shapes(L.QWEN3VL_32B_VISION, 5120)
    assert real["visual.patch_embed.proj.weight"] == [1152, 3, 2, 16, 16]  # ComfyUI 0.33's module, on meta
    assert real["visual.deepstack_merger_list.2.linear_fc2.weight"] == [5120, 4608]
    assert len(real) == 351 and L.vision_problem(te, real, "mmproj.gguf", "te.gguf") is None
    eight_b = L.tower_shapes(L.QWEN3VL_32B_VISION, 4096)  # Qwen3-VL-8B's tower: same blocks, a narrower output
    said = L.vision_problem(te, eight_b, "mmproj-8b.gguf", "te.gguf")
    assert "visual.deepstack_merger_list.0.linear_fc2.bias is [4096] where ComfyUI builds [5120]" in said
    four_b = L.tower_shapes({**L.QWEN3VL_32B_VISION, "hidden": 1024, "intermediate": 4096, "depth": 24}, 5120)
    assert "has 24 vision blocks where MiniMax H3's Qwen3-VL-32B has 27" in L.vision_problem(te, four_b, "m.gguf", "te.gguf")


# -- gguf-py's own errors, and calibration's reading ---------------------------------------------------------


def test_what_gguf_py_still_raises_is_a_sentence_naming_the_file(tmp_path):
    class Reader:
        def __init__(self, path):
            raise ValueError("Invalid alignment: must be a non-zero power of two")

    pack = type("Pack", (), {"gguf": type("gguf", (), {"GGUFReader": Reader})})()
    path = write(tmp_path / "odd.gguf", GOOD)
    with pytest.raises(L.GGUFError) as err:
        H.read_state_dict(path, pack)
    assert str(err.value).startswith("ComfyUI-GGUF cannot read odd.gguf (ValueError: Invalid alignment")


def test_calibration_reads_gguf_through_the_packs_reader(tmp_path):
    from h3kit import bundled
    from h3kit.bundled import h3k_gguf
    from h3kit.calibrate import arch
    from h3kit.comfyui import deploy
    from h3kit.data.plan_doc import PlanSettings

    assert arch.h3k_gguf is h3k_gguf and not hasattr(arch, "_Reader")  # no parser of its own
    assert deploy.pack_contents(None, PlanSettings(), "test")["h3k_gguf/__init__.py"] == (bundled.GGUF / "__init__.py").read_bytes()
    misaligned = write(tmp_path / "dit.gguf", [GOOD[0], ("audio_patch_proj.weight", [8], F32, 48)])
    with pytest.raises(arch.HeaderError, match="dit.gguf: tensor audio_patch_proj.weight starts at data offset 48"):
        arch.read_shapes(misaligned)
    shapes, meta = arch.read_shapes(write(tmp_path / "ok.gguf", GOOD, [kv("general.architecture", STRING, _s("h3"))]))
    assert shapes["audio_patch_proj.weight"] == ((8,), 32) and meta["general.architecture"] == "h3"
