"""The one safetensors header reader (nodes/h3k_safetensors): its checks, each refusal naming file and tensor.

The streamed loader's refusals through it are in test_streamed_loader.py, calibration's in
test_calibrate_arch.py; here the checks themselves, on real files written byte by byte.
"""

from __future__ import annotations

import json
import struct

import pytest

from h3kit import bundled
from h3kit.comfyui import deploy
from h3kit.bundled import h3k_safetensors as st
from h3kit.data.plan_doc import PlanSettings


def write(path, header: dict, data_bytes: int) -> None:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(data_bytes))


def test_a_whole_file_reads_in_header_order_with_absolute_offsets(tmp_path):
    f = tmp_path / "w.safetensors"
    write(f, {"b": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "a": {"dtype": "F4", "shape": [6], "data_offsets": [24, 27]},  # two 4-bit values per byte
              "__metadata__": {"format": "pt"}}, 27)
    h = st.read_header(f)
    start = h["data_start"]
    assert list(h["tensors"]) == ["b", "a"] and h["metadata"] == {"format": "pt"}
    assert h["tensors"]["a"] == {"dtype": "F4", "shape": [6], "start": start + 24, "end": start + 27}
    assert h["file_size"] == start + 27


@pytest.mark.parametrize("entry, says", [
    ({"dtype": "Q9_X", "shape": [4], "data_offsets": [0, 4]}, "dtype Q9_X, which is not a safetensors dtype"),
    ({"dtype": "U8", "shape": [4], "data_offsets": [4, 0]}, "malformed"),
    ({"dtype": "U8", "shape": [-4], "data_offsets": [0, 4]}, "malformed"),
    ({"dtype": "U8", "shape": [4]}, "malformed"),
    ({"dtype": "F16", "shape": [4], "data_offsets": [0, 4]}, "should hold 8 bytes but the header gives 4"),
    ({"dtype": "F6_E2M3", "shape": [3], "data_offsets": [0, 3]}, "should hold 2.25 bytes"),
    ({"dtype": "U8", "shape": [64], "data_offsets": [0, 64]}, "blocks.3.w) and after lie past the end"),
])
def test_a_bad_entry_is_refused_naming_the_file_and_the_tensor(tmp_path, entry, says):
    f = tmp_path / "bad.safetensors"
    write(f, {"blocks.3.w": entry}, 8)
    with pytest.raises(st.HeaderError) as err:
        st.read_header(f)
    assert says in str(err.value) and str(f) in str(err.value) and "blocks.3.w" in str(err.value)
    assert err.value.tensor == "blocks.3.w" and err.value.path == f


def test_metadata_that_is_not_a_table_is_refused(tmp_path):
    f = tmp_path / "meta.safetensors"
    write(f, {"__metadata__": ["x"]}, 0)
    with pytest.raises(st.HeaderError, match="__metadata__ is not a JSON object"):
        st.read_header(f)


def test_deploy_ships_the_reader_and_both_sides_use_the_same_one():
    files = deploy.pack_contents(None, PlanSettings(), "test")
    assert files["h3k_safetensors/__init__.py"] == (bundled.SAFETENSORS / "__init__.py").read_bytes()
    from h3kit.calibrate import arch
    from pack_support import pack_module

    logic = pack_module("h3kit_streaming.logic")
    assert logic._shared_reader().__file__ == st.__file__ and arch.h3k_safetensors is st
