"""The H3 workflows h3kit ships in the node pack, generated from the plan.

The graphs ComfyUI's own H3 templates offer, built from ComfyUI's own H3 nodes
(the smallest graph FACTS.md lists, the shape of ComfyUI's own H3 template):
text-to-video, image-to-video from a first frame, first/last-frame-to-video,
and -- when the plan sets it up (settings key reference_to_video) --
reference-to-video. The first/last-frame graph is a file of its own rather
than a second input of the image-to-video one: ComfyUI's H3 image-to-video
template wires the first frame only, and ComfyUI ships first/last-frame as a
template of its own for its other video models (Wan's FLF2V), so each file
runs as opened, with no image to unhook. Each loads the plan's DiT, text encoder and VAE files through the loader the
catalog names (h3kit's H3kitUnetLoaderGGUF / H3kitCLIPLoaderGGUF for H3's
GGUF files stock ComfyUI-GGUF refuses) -- the DiT through h3kit's streamed
loader (H3kitStreamedDiTLoader, with the plan's preload/shard/prefetch; it
reads safetensors and GGUF) exactly when the plan streams it, and the text encoder through
H3kitStreamedTextEncoderLoader (with the plan's page_cache and prefetch_layers) exactly when
settings.text_encoder_streaming says so -- then the preset's LoRA (LoraLoaderModelOnly) when it
uses one, the plan's canvas, frames, steps and cfg as defaults (cfg 1.0: one
model call per step through BasicGuider; any other through CFGGuider with an
empty negative prompt), sampler, scheduler and shifts from the catalog -- the
loaded LoRA's own where its catalog entry gives them (a turbo LoRA is distilled
on one schedule: lightx2v's 768p files at shifts 6 / 3) -- h3kit's tiled
decode (which applies the profile's tiles) and, when the plan unloads the
text encoder before sampling, h3kit's memory guard between the two. The
reference graph loads the plan's ref2va twin of the DiT instead (same loader
and streaming) and conditions with MiniMaxH3ReferenceToVideo (the prompt names
the reference image as <Picture 1>), with the steps and LoRA the plan gives it. The end writes an MP4 with H3's audio track through
ComfyUI's CreateVideo/SaveVideo (PyAV inside ComfyUI, no system ffmpeg).

Each graph is written twice from one `Graph`: the UI format into
`example_workflows/` (ComfyUI lists that folder in its templates browser) and
the API format into `workflows_api/` (outside it, so the browser shows only
the UI ones), which is what `calibrate --with-model` runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from h3kit.bundled import h3k_cost
from h3kit.comfyui.graph import Graph
from h3kit.core.errors import BadInput
from h3kit.data import comfy_nodes
from h3kit.data.plan_doc import Plan, PlanSettings

UI_DIR = "example_workflows"
API_DIR = "workflows_api"
NAMES = {"t2v": "h3kit_text_to_video", "i2v": "h3kit_image_to_video", "flf2v": "h3kit_first_last_frame_to_video",
         "r2v": "h3kit_reference_to_video"}
DEFAULT_PROMPT = ("A red fox trots through fresh snow in a quiet birch forest at dawn, soft golden light, "
                  "its breath visible in the cold air; the crunch of snow underfoot and distant birdsong.")
REFERENCE_PROMPT = ("The girl from <Picture 1> runs across a sunny green hill under a blue sky, laughing, her hair "
                    "bouncing in the wind; birdsong and a light breeze.")
FIRST_FRAME = "example.png"  # ComfyUI ships input/example.png; the user picks their own in the UI
LAST_FRAME = "example.png"
REFERENCE_IMAGE = "example.png"


@dataclass(frozen=True)
class Schedule:
    """The sampler, scheduler and video/audio flow shifts one workflow samples with."""

    sampler: str
    scheduler: str
    shift_video: float
    shift_audio: float


def schedule_for(catalog, lora_id: str | None) -> Schedule:
    """The LoRA's own schedule when its catalog entry gives one (lora[].sampling), else the catalog's defaults."""
    own = catalog.weight(lora_id).sampling if lora_id and catalog.weight(lora_id) is not None else None
    src = own if own is not None else catalog.sampling
    return Schedule(src.sampler, src.scheduler, float(src.shift_video), float(src.shift_audio))


@dataclass(frozen=True)
class ReferenceSettings:
    """The reference-to-video graph's own part: the ref2va DiT, its steps and LoRA (plan settings.reference)."""

    dit: "LoadedFile"
    steps: int
    lora: "LoadedFile | None" = None
    lora_strength: float = 1.0
    schedule: Schedule | None = None  # its LoRA's (or the catalog's) schedule; None: the main workflows' own


@dataclass(frozen=True)
class LoadedFile:
    name: str  # file name under models/<folder>/
    loader: str  # the node that loads it (UNETLoader, H3kitUnetLoaderGGUF, CLIPLoader, H3kitCLIPLoaderGGUF, ...)


@dataclass(frozen=True)
class WorkflowSettings:
    """Everything a generated workflow takes from the plan and the catalog."""

    dit: LoadedFile
    text_encoder: LoadedFile
    vae: LoadedFile
    audio_vae: LoadedFile
    width: int
    height: int
    frames: int
    steps: int
    sampler: str
    scheduler: str
    shift_video: float
    shift_audio: float
    fps: int
    seed: int
    guard_memory: bool  # unload the text encoder before sampling (H3kitMemoryGuard)
    text_encoder_type: str = "minimax"
    cfg: float = 1.0
    lora: LoadedFile | None = None  # the preset's LoRA (LoraLoaderModelOnly), or none
    lora_strength: float = 1.0
    stream: dict | None = None  # {preload_bytes, shard_size_bytes, prefetch_blocks, page_cache} when the plan streams the DiT
    te_stream: dict | None = None  # {page_cache, prefetch_layers} when the plan streams the text encoder
    reference: ReferenceSettings | None = None  # the reference-to-video graph, when the plan sets it up

    def kinds(self) -> list[str]:
        """The workflows these settings make (NAMES' keys)."""
        return [k for k in NAMES if k != "r2v" or self.reference is not None]

    @classmethod
    def from_plan(cls, plan: Plan, catalog) -> "WorkflowSettings":
        s = plan.settings
        sampling = catalog.sampling
        sched = schedule_for(catalog, s.lora)
        width, height = s.canvas or s.max_canvas
        return cls(
            dit=_file(catalog, s.dit_weights), text_encoder=_file(catalog, s.text_encoder_weights),
            vae=_file(catalog, s.vae_weights),
            audio_vae=_file(catalog, s.audio_vae_weights or catalog.audio_vae[0].id),
            width=int(width), height=int(height), frames=int(s.frames or s.max_frames),
            steps=int(s.steps or sampling.steps),
            sampler=sched.sampler, scheduler=sched.scheduler, shift_video=sched.shift_video,
            shift_audio=sched.shift_audio,
            fps=int(sampling.fps), seed=int(sampling.seed),
            guard_memory=True,
            cfg=float(s.cfg if s.cfg is not None else sampling.cfg),
            lora=_file(catalog, s.lora) if s.lora else None,
            lora_strength=float(s.lora_strength or 1.0),
            stream=_stream(s), te_stream=_te_stream(s), reference=_reference(catalog, s))


def _reference(catalog, settings: PlanSettings) -> ReferenceSettings | None:
    ref = settings.reference
    if ref is None or not ref.dit_weights:
        return None
    return ReferenceSettings(_file(catalog, ref.dit_weights), int(ref.steps or settings.steps or catalog.sampling.steps),
                             _file(catalog, ref.lora) if ref.lora else None, float(ref.lora_strength or 1.0),
                             schedule_for(catalog, ref.lora))


def _stream(settings: PlanSettings) -> dict | None:
    """The streamed loader's widget values when the plan streams the DiT (settings.streaming.enabled)."""
    st = settings.streaming
    if not st.enabled:
        return None
    preload = st.streamed.preload_bytes if st.streamed is not None else settings.preload_bytes
    cache = st.streamed.page_cache if st.streamed is not None else None
    return {"preload_bytes": int(preload or 0), "shard_size_bytes": int(settings.shard_size_bytes or 0),
            "prefetch_blocks": int(st.prefetch_blocks or 1), "page_cache": cache or "use"}


def _te_stream(settings: PlanSettings) -> dict | None:
    """The streamed text encoder's widget values when the plan streams it (settings.text_encoder_streaming)."""
    ts = settings.text_encoder_streaming
    if not ts.enabled:
        return None
    return {"page_cache": ts.page_cache or "use", "prefetch_layers": int(ts.prefetch_layers or 1)}


def _file(catalog, weight_id: str) -> LoadedFile:
    w = catalog.weight(weight_id)
    if w is None or not w.file.name:
        raise BadInput(f"The plan names weight '{weight_id}', which the model catalog does not list with a file.",
                       "Re-run 'h3kit plan' with this h3kit version, or fix the override in config.yaml.")
    return LoadedFile(w.file.name, w.file.loader)


def build(kind: str, ws: WorkflowSettings, specs: dict) -> Graph:
    """The graph for `kind` (a key of NAMES; "r2v" needs `ws.reference`)."""
    if kind not in NAMES:
        raise ValueError(f"unknown workflow kind {kind!r}")
    ref = ws.reference if kind == "r2v" else None
    if kind == "r2v" and ref is None:
        raise ValueError("the reference-to-video workflow needs the plan's reference settings")
    dit, lora, lora_strength, steps = (ref.dit, ref.lora, ref.lora_strength, ref.steps) if ref else \
        (ws.dit, ws.lora, ws.lora_strength, ws.steps)
    sched = ref.schedule if ref is not None and ref.schedule is not None else \
        Schedule(ws.sampler, ws.scheduler, ws.shift_video, ws.shift_audio)
    g = Graph(specs)
    model = _load_dit(g, dit, ws.stream)
    if lora is not None:
        model = g.add("LoraLoaderModelOnly", "preset LoRA", model=model.out(), lora_name=lora.name,
                      strength_model=lora_strength)
    clip = _load_text_encoder(g, ws)
    vae = g.add("VAELoader", "video VAE", vae_name=ws.vae.name)
    audio_vae = g.add("VAELoader", "audio VAE", vae_name=ws.audio_vae.name)
    canvas = {"width": ws.width, "height": ws.height, "length": ws.frames}
    if ref is not None:  # refs are scaled to the canvas' area ("match"), as in ComfyUI's own reference template
        image = g.add("LoadImage", "reference image (<Picture 1>)", image=REFERENCE_IMAGE)
        encode = g.add("MiniMaxH3ReferenceToVideo", "prompt, references, canvas and frames", clip=clip.out(),
                       vae=vae.out(), audio_vae=audio_vae.out(), prompt=REFERENCE_PROMPT, **canvas,
                       ref_image_size="match", ref_images__ref_image_0=image.out(0))
    else:
        frames = {}
        if kind in ("i2v", "flf2v"):
            frames["first_frame"] = g.add("LoadImage", "first frame", image=FIRST_FRAME).out(0)
        if kind == "flf2v":
            frames["last_frame"] = g.add("LoadImage", "last frame", image=LAST_FRAME).out(0)
        encode = g.add("MiniMaxH3ImageToVideo", "prompt, canvas and frames", clip=clip.out(), vae=vae.out(),
                       prompt=DEFAULT_PROMPT, **canvas, **frames)
    positive = encode.out(0)
    if ws.guard_memory:  # the 32B text encoder leaves memory before the DiT needs it
        positive = g.add("H3kitMemoryGuard", "free the text encoder", value=positive).out(0)
    shifted = g.add("MiniMaxH3SigmaShift", "flow shift", model=model.out(), shift_video=sched.shift_video,
                    shift_audio=sched.shift_audio)
    noise = g.add("RandomNoise", noise_seed=ws.seed)
    if abs(ws.cfg - 1.0) < 1e-9:  # H3's setting: the positive prompt alone, one model call per step
        guider = g.add("BasicGuider", model=shifted.out(), conditioning=positive)
    else:
        negative = g.add("CLIPTextEncode", "negative prompt", text="", clip=clip.out())
        guider = g.add("CFGGuider", model=shifted.out(), positive=positive, negative=negative.out(), cfg=ws.cfg)
    sampler = g.add("KSamplerSelect", sampler_name=sched.sampler)
    sigmas = g.add("BasicScheduler", model=shifted.out(), scheduler=sched.scheduler, steps=steps, denoise=1.0)
    sampled = g.add("SamplerCustomAdvanced", noise=noise.out(), guider=guider.out(), sampler=sampler.out(),
                    sigmas=sigmas.out(), latent_image=encode.out(1))
    images = g.add("H3kitTiledVAEDecode", "decode video (profile tiles)", samples=sampled.out(0), vae=vae.out(),
                   frames_per_chunk=1)
    audio = g.add("VAEDecodeAudio", "decode audio", samples=sampled.out(0), vae=audio_vae.out())
    video = g.add("CreateVideo", images=images.out(), fps=float(ws.fps), audio=audio.out(), bit_depth=8)
    # "auto"/"auto" as in ComfyUI's own H3 template: an MP4 with H.264 video and AAC audio from images,
    # and the two-value form the frontend stores for SaveVideo's nested format/codec choice.
    g.add("SaveVideo", video=video.out(), filename_prefix=f"h3kit/{NAMES[kind]}", format="auto",
          format__codec="auto")
    return g


# h3kit's GGUF loaders (nodes/h3kit_gguf/node.py): every widget needs a value in the UI format
GGUF_DIT_DEFAULTS = {"dequant_dtype": "default", "patch_dtype": "default", "patch_on_device": False}
GGUF_TE_DEFAULTS = {"mmproj_name": "(auto)"}


def _load_dit(g: Graph, f: LoadedFile, stream: dict | None = None):
    if stream is not None and f.loader in ("UNETLoader", "H3kitUnetLoaderGGUF", "H3kitStreamedDiTLoader", ""):
        # the streamed loader reads safetensors and GGUF DiTs; the planner streams only what it reads
        return g.add("H3kitStreamedDiTLoader", "DiT (streamed from disk)", unet_name=f.name, weight_dtype="default",
                     **stream)
    if f.loader == "H3kitUnetLoaderGGUF":  # H3 GGUFs without metadata, through ComfyUI-GGUF's ops
        return g.add("H3kitUnetLoaderGGUF", "DiT (GGUF)", unet_name=f.name, **GGUF_DIT_DEFAULTS)
    if f.loader == "UnetLoaderGGUF":  # a GGUF whose metadata stock ComfyUI-GGUF takes
        return g.add("UnetLoaderGGUF", "DiT", unet_name=f.name)
    return g.add("UNETLoader", "DiT", unet_name=f.name, weight_dtype="default")


def _load_text_encoder(g: Graph, ws: WorkflowSettings):
    f = ws.text_encoder
    if ws.te_stream is not None:  # the planner streams only files the node reads (GGUF, plain float safetensors)
        return g.add("H3kitStreamedTextEncoderLoader", "text encoder (streamed from disk)", clip_name=f.name,
                     **GGUF_TE_DEFAULTS, **ws.te_stream)
    if f.loader == "H3kitCLIPLoaderGGUF":  # Qwen3-VL-32B GGUF + its mmproj, renamed for ComfyUI's detection
        return g.add("H3kitCLIPLoaderGGUF", "text encoder (GGUF)", clip_name=f.name, type=ws.text_encoder_type,
                     **GGUF_TE_DEFAULTS)
    if f.loader == "CLIPLoaderGGUF":
        return g.add("CLIPLoaderGGUF", "text encoder", clip_name=f.name, type=ws.text_encoder_type)
    return g.add("CLIPLoader", "text encoder", clip_name=f.name, type=ws.text_encoder_type, device="default")


def pack_files(plan: Plan, catalog, profile: str, specs: dict | None = None) -> dict[str, bytes]:
    """Relative path inside the pack -> bytes of what is generated from `plan`: both formats of every workflow,
    and the plan's cost model (h3kit_cost.json, which the pack's panel and queue guard price graphs with)."""
    out = files(WorkflowSettings.from_plan(plan, catalog), specs if specs is not None else comfy_nodes.load(), profile)
    if plan.cost:
        out[h3k_cost.COST_FILE] = _json(dict(plan.cost))
    return out


def files(ws: WorkflowSettings, specs: dict, profile: str) -> dict[str, bytes]:
    """Relative path inside the pack -> bytes, for both formats of every workflow."""
    out = {}
    for kind in ws.kinds():
        name = NAMES[kind]
        g = build(kind, ws, specs)
        ui = g.to_ui(extra={"h3kit": {"profile": profile, "workflow": kind}})
        out[f"{UI_DIR}/{name}.json"] = _json(ui)
        out[f"{API_DIR}/{name}.json"] = _json(g.to_api())
    return out


def _json(doc: dict) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
