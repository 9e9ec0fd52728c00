"""Run by ComfyUI's Python with gguf-py importable: the streamed text encoder's embedding rows from quantized tables.

    te_rows_probe.py COMFY_DIR OUT_DIR

Writes a GGUF text-encoder table per type (Q8_0 quantized by gguf-py, Q4_K and Q6_K random blocks as
make_tiny_gguf.py makes them; llama.cpp's name token_embd.weight) and reads rows of it through
h3kit_streaming.te_load's RowEmbedding (each row on its own, a whole number of ggml blocks) and, whole, through
ComfyUI-GGUF's dequantize. Prints one JSON line: per type whether the rows equal the whole table's rows.
"""

import importlib.util
import json
import os
import sys

comfy_dir, out_dir = sys.argv[1:3]
sys.path.insert(0, comfy_dir)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from comfy.cli_args import args  # noqa: E402

args.cpu = True
import numpy as np  # noqa: E402
import torch  # noqa: E402
import gguf  # noqa: E402
from gguf import quants  # noqa: E402
from gguf_container import write_gguf  # noqa: E402

spec = importlib.util.spec_from_file_location("make_tiny_gguf", os.path.join(HERE, "make_tiny_gguf.py"))
mk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mk)
pack_dir = os.path.join(comfy_dir, "custom_nodes", "ComfyUI-h3kit")
spec = importlib.util.spec_from_file_location("h3kpack", os.path.join(pack_dir, "__init__.py"),
                                              submodule_search_locations=[pack_dir])
pack = importlib.util.module_from_spec(spec)
sys.modules["h3kpack"] = pack
spec.loader.exec_module(pack)
from h3kpack.h3kit_streaming import te_load as ts, te_logic as tl  # noqa: E402
from h3kpack.h3kit_streaming.load import gguf_dequantizer  # noqa: E402
from h3kpack.h3kit_common.files import file_stamp  # noqa: E402

Q = gguf.GGMLQuantizationType
ROWS, IDS = 40, [[7, 3, 7, 39, 0]]
dequantize = gguf_dequantizer()
result = {}
for qtype, width in ((Q.Q8_0, 64), (Q.Q4_K, 512), (Q.Q6_K, 256)):
    if qtype == Q.Q8_0:
        values = np.random.default_rng(1).standard_normal((ROWS, width)).astype(np.float32) * 0.02
        raw = quants.quantize(values, qtype)
    else:
        raw = mk.random_blocks((ROWS, width), qtype)
    path = os.path.join(out_dir, f"table_{qtype.name}.gguf")
    write_gguf(path, {"token_embd.weight": (int(qtype), [ROWS, width], raw.tobytes())})
    entry = tl.te_tensors(path)["tensors"][tl.EMBED]
    table = ts._row_module(path, entry, torch.bfloat16, dequantize, file_stamp(path))
    got = table(torch.tensor(IDS), out_dtype=torch.float32)
    whole = dequantize(torch.frombuffer(bytearray(raw.tobytes()), dtype=torch.uint8), int(qtype), (ROWS, width),
                       torch.bfloat16)
    want = whole[torch.tensor(IDS)].float()
    result[qtype.name] = {"equal": bool(torch.equal(got, want)), "shape": list(got.shape),
                          "finite": bool(torch.isfinite(got).all())}
print(json.dumps(result))
