"""Run by ComfyUI's Python: MiniMax H3's text encoder through CLIPLoader's code and through h3kit's streamed loader.

    te_stream_probe.py COMFY_DIR CASE REFERENCE FILE [FILE ...]

Loads the test node (tiny dims) and h3kit's pack from COMFY_DIR/custom_nodes, encodes a prompt and an image
prompt with ComfyUI's own load of REFERENCE, then with each FILE through the streamed loader in the read way
CASE names ("direct": in place on the CPU, "ring": the way a GPU is fed, "bypass": past the page cache), twice,
and prints one JSON line: per FILE whether the conditionings equal the stock ones, their relative error, the
stats file, and what the loader still holds once the encode is over. A loader refusal is printed as its
sentence.
"""

import importlib.util
import json
import os
import sys

comfy_dir, case, reference, *files = sys.argv[1:]
sys.path.insert(0, comfy_dir)
from comfy.cli_args import args  # noqa: E402

args.cpu = True
import torch  # noqa: E402
import comfy.sd  # noqa: E402


def _load(name, init):
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[os.path.dirname(init)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_load("tiny_h3_testnode", os.path.join(comfy_dir, "custom_nodes", "tiny_h3_testnode", "__init__.py"))
_load("h3kpack", os.path.join(comfy_dir, "custom_nodes", "ComfyUI-h3kit", "__init__.py"))
from h3kpack.h3kit_streaming import te_load as ts  # noqa: E402
from h3kpack.h3kit_streaming.logic import StreamError  # noqa: E402

TE_DIR = os.path.join(comfy_dir, "models", "text_encoders")
IMAGE = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(0))
PROMPTS = (("a red fox runs through snow, cinematic", []), ("the picture comes alive", [IMAGE]))


def encode(clip):
    out = []
    for text, images in PROMPTS:
        cond = clip.encode_from_tokens_scheduled(clip.tokenize(text, images=images))
        out.append((cond[0][0], cond[0][1].get("minimax_token_tags")))
    return out


def held(clip) -> dict:
    stream = clip.patcher.model.h3kit_stream
    layer_bytes = sum(s.module._parameters[s.pname].numel() for ss in stream.specs.values() for s in ss)
    return {"layer_elements": layer_bytes, "buffers": len(stream.slots), "streamer_open": stream.streamer is not None}


stock = encode(comfy.sd.load_clip([os.path.join(TE_DIR, reference)], clip_type=comfy.sd.CLIPType.MINIMAX))
result = {}
for name in files:
    stats = os.path.join(comfy_dir, f"te_stats_{case}_{name}.json")
    try:
        clip = ts.load_streamed_text_encoder(os.path.join(TE_DIR, name), page_cache="bypass" if case == "bypass" else
                                             "use", stats_path=stats, folder_lookup=lambda n: os.path.join(TE_DIR, n))
    except StreamError as exc:
        result[name] = {"refused": str(exc)}
        continue
    clip.patcher.model.h3kit_stream.direct_ok &= case == "direct"
    runs = [encode(clip), encode(clip)]
    result[name] = {
        "equal": [all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(stock, r)) for r in runs],
        "rel": max(float((b[0] - a[0]).norm() / a[0].norm()) for r in runs for a, b in zip(stock, r)),
        "mode": clip.patcher.model.h3kit_stream.mode, "after": held(clip),
        "stats": json.load(open(stats, encoding="utf-8"))}
print(json.dumps(result))
