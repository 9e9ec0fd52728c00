"""ComfyUI's own H3 transformer, at the file's full width and reduced depth, timed in ComfyUI's Python.

`measure_h3_model(job, comfyui, quick, progress)` returns the runner's
`h3_model` block (its fields: docs/calibrate.md): it imports ComfyUI from the
`--comfyui` folder with the plan's memory flags (`comfy_env`), builds
`model_base.MiniMaxH3` (the class `load_diffusion_model` builds, with the
operations `comfy.ops.pick_operations` chooses and the dtype
`model_management.unet_dtype` gives for the model's supported dtypes) on
the meta device with 1-2 DiT blocks, gives it cheap random weights, loads
it with ComfyUI's `load_models_gpu` and times `apply_model` (the call the
sampler makes, with the packed video+audio latent, sigma, refined text
context, latent shapes and the H3 payload) at two or three small token
counts. Hooks on the blocks split each call into per-block and fixed
time; one call with the block list sliced to one block checks the split.
The attention's quadratic term is timed on its own with ComfyUI's
attention function at the plan's token count (all heads, fewer query
rows), and `fit.fit_timing` turns it all into the rates mapping.
`h3_parts` adds the video VAE decoder and the text encoder.

What the job may hold (all optional; h3kit's calibrate fills them):
- `h3_arch`: {hidden, heads, head_dim, ffn, text_dim, blocks_total,
  refiner_blocks, rope_inv_freq_len, timestep_input_dim,
  time_embed_hidden, time_embed_dim, adaln_curve_grid, latents_dim,
  audio_latents_dim, weight_dtype ("bfloat16", "float8_e4m3fn", ...),
  from}. Missing dims take MiniMaxH3Model's defaults (the catalog's H3),
  except rope_inv_freq_len (at most head_dim // 6) and the time dims
  (hidden and hidden // 2), which follow the width;
- `h3_device` (or `device`): "cpu" sets ComfyUI's --cpu; without it the
  plan's `--cpu` flag, else ComfyUI's own choice;
- `h3_canvas`: {width, height, frames, text_tokens}; else the plan's
  `settings.canvas`/`frames` (then `max_canvas`/`max_frames`), 128 text tokens;
- `h3_prompt`: the installed workflow's prompt, whose rows ComfyUI's tokenizer counts into
  `h3_canvas.text_tokens` (`prompt_rows`);
- `h3_points`: token counts to time (else two small ones, three without --quick);
- `h3_vae`: {heads, dim_head, layers} of the video VAE's ViT decoder (else
  ComfyUI's fixed 32 x 64, 36 layers); `h3_text_encoder`: {hidden_size,
  intermediate_size, num_hidden_layers, num_attention_heads,
  num_key_value_heads} (else Qwen3VL_32BConfig's); both for files that are
  not the real size (the tiny test files);
- `h3_parts`: which of "vae", "text_encoder" to time (default both);
- `plan.settings.comfyui_args`, `vae_tile_size`.
"""

from __future__ import annotations

import math
import time

from . import comfy_env, fit, h3_parts
from .comfy_env import Skip
from .job import Job
from .measure import PeakSampler, Progress, current_rss

DEFAULT_TEXT_TOKENS = 128
QUICK_POINTS = (32, 160, 480)  # wide apart: the slope between them is what extrapolates; 32 pins the constant
FULL_POINTS = (32, 160, 480, 960)
MIN_BLOCK_S = 0.05  # a point faster than this (a GPU) is mostly launch overhead: larger token counts instead
MAX_POINT_TOKENS = 16384
ARCH_KEYS = {"hidden": "hidden_size", "heads": "num_attention_heads", "head_dim": "attention_head_dim",
             "ffn": "ffn_hidden_size", "text_dim": "text_dim", "refiner_blocks": "token_refiner_num_layers",
             "rope_inv_freq_len": "rope_inv_freq_len", "timestep_input_dim": "timestep_input_dim",
             "time_embed_hidden": "time_embed_hidden_size", "time_embed_dim": "time_embed_dim",
             "adaln_curve_grid": "adaln_curve_grid", "latents_dim": "latents_dim",
             "audio_latents_dim": "audio_latents_dim"}
CATALOG_ARCH = {"hidden": 5376, "heads": 56, "head_dim": 128, "ffn": 14336, "text_dim": 5120, "blocks_total": 50,
                "refiner_blocks": 2}


def resolve_arch(job: Job) -> dict:
    """The architecture to build: the job's `h3_arch`, else the catalog block the job carries, else H3's dims."""
    arch = dict(job.h3_arch)
    if not arch:
        cat = job.catalog_architecture
        if cat:
            arch = {"hidden": cat.get("hidden"), "heads": cat.get("heads"), "head_dim": cat.get("head_dim"),
                    "ffn": cat.get("ffn"), "text_dim": cat.get("text_dim"), "blocks_total": cat.get("blocks"),
                    "refiner_blocks": cat.get("text_refiner_blocks"), "from": "catalog"}
        else:
            arch = {"from": "catalog (MiniMaxH3Model's defaults: the job named no h3_arch)"}
    for k, v in CATALOG_ARCH.items():
        if arch.get(k) is None:
            arch[k] = v
    arch.setdefault("rope_inv_freq_len", min(16, int(arch["head_dim"]) // 6))
    arch.setdefault("time_embed_hidden", int(arch["hidden"]))
    arch.setdefault("time_embed_dim", int(arch["hidden"]) // 2)
    arch.setdefault("from", "catalog")
    return arch


def unet_config(arch: dict, blocks: int) -> dict:
    cfg = {"image_model": "minimax_h3", "num_layers": int(blocks)}
    for ours, theirs in ARCH_KEYS.items():
        if arch.get(ours) is not None:
            cfg[theirs] = int(arch[ours])
    return cfg


def canvas_of(job: Job) -> dict:
    c = dict(job.h3_canvas)
    s = job.settings
    wh = s.canvas or s.max_canvas or (512, 288)
    c.setdefault("width", int(wh[0]))
    c.setdefault("height", int(wh[1]))
    c.setdefault("frames", int(s.frames or s.max_frames or 22))
    c.setdefault("text_tokens", DEFAULT_TEXT_TOKENS)
    c["tokens"] = fit.tokens_for(c["width"], c["height"], c["frames"], c["text_tokens"])
    return c


def prompt_rows(canvas: dict, prompt) -> dict:
    """The canvas with the text rows of the workflow's own prompt (`h3_prompt`), counted by ComfyUI's H3
    tokenizer (the rows the installed workflow's model calls carry); unchanged, with a note, where it cannot."""
    if not isinstance(prompt, str) or not prompt:
        return canvas
    try:
        from comfy.text_encoders.minimax import MiniMaxH3Tokenizer

        out = MiniMaxH3Tokenizer().tokenize_with_weights(prompt)
        rows = sum(len(batch) for value in out.values() for batch in value[:1])
    except Exception as exc:  # noqa: BLE001 -- an older tokenizer: the assumed rows stay, and say so
        return {**canvas, "text_tokens_note": f"the prompt was not tokenized ({type(exc).__name__}: {exc})"}
    if rows <= 0:
        return canvas
    out = {**canvas, "text_tokens": int(rows), "text_tokens_from": "the workflow's prompt, ComfyUI's H3 tokenizer"}
    out["tokens"] = fit.tokens_for(out["width"], out["height"], out["frames"], out["text_tokens"])
    return out


def _torch_dtype(torch, name):
    return getattr(torch, str(name).replace("torch.", ""), None) if name else None


def build(env: dict, arch: dict, blocks: int, timed: int):
    """model_base.MiniMaxH3 with `blocks` distinct DiT blocks (the list repeats them to `timed`), random weights,
    in ComfyUI's dtype; (model, patcher, info).

    No token refiner: the sampler gets the text already refined (extra_conds
    runs it once per clip), so a step never enters it.
    """
    torch, mm = env["torch"], env["mm"]
    config = env["supported"].MiniMaxH3({**unet_config(arch, blocks), "token_refiner_num_layers": 0})
    supported = list(config.supported_inference_dtypes)
    weight_dtype = _torch_dtype(torch, arch.get("weight_dtype"))
    params = int(arch.get("block_params") or 0) + int(arch.get("other_params") or 0)
    load_device = env["device"]
    dtype = mm.unet_dtype(model_params=params, supported_dtypes=supported, weight_dtype=weight_dtype)
    manual_cast = mm.unet_manual_cast(dtype, load_device, supported)
    config.set_inference_dtype(dtype, manual_cast, device=load_device)
    model = config.get_model({}, "", device=torch.device("meta"))
    model.diffusion_model.to_empty(device=mm.unet_offload_device())
    comfy_env.fill_random_(model.diffusion_model, torch)
    dm = model.diffusion_model
    if timed > blocks:  # one block's weights run twice: the time of two blocks for the memory of one
        dm.blocks = type(dm.blocks)([dm.blocks[i % blocks] for i in range(timed)])
    patcher_cls = getattr(env["patcher"], "CoreModelPatcher", env["patcher"].ModelPatcher)
    patcher = patcher_cls(model, load_device=load_device, offload_device=mm.unet_offload_device())
    state = {"vram_state": getattr(getattr(mm, "vram_state", None), "name", None)}
    try:
        mm.load_models_gpu([patcher])
        state["loaded_by"] = "comfy.model_management.load_models_gpu"
    except Exception as exc:  # a partial ComfyUI state: the measurement still wants the model on its device
        model.to(load_device)
        state["loaded_by"] = f"model.to({load_device}) after load_models_gpu failed: {type(exc).__name__}: {exc}"
    info = {"dtype": str(model.get_dtype_inference()).replace("torch.", ""),
            "manual_cast": str(manual_cast).replace("torch.", "") if manual_cast else None,
            "weights_bytes_per_block": comfy_env.param_bytes(model.diffusion_model.blocks[0]),
            "weights_bytes_built": comfy_env.param_bytes(model.diffusion_model), "memory_state": state}
    return model, patcher, info


def inputs_for(env: dict, model, tokens: int, text_tokens: int, hidden: int):
    """Sampler-shaped inputs for a call of about `tokens` packed rows: (kwargs for apply_model, exact tokens)."""
    torch, h3 = env["torch"], env["h3"]
    dev, dtype = env["device"], model.get_dtype_inference()
    text = max(8, min(int(text_tokens), tokens // 2))
    latent_t, audio_t = 2, fit.audio_latent_frames(5)
    rows = max(1, tokens - text - 2 * audio_t)
    w2 = max(1, math.ceil(math.sqrt(rows / latent_t)))
    h2 = max(1, math.ceil(rows / latent_t / w2))
    video = torch.randn(1, model.diffusion_model.latents_dim, latent_t, 2 * h2, 2 * w2, device=dev)
    audio = torch.randn(1, model.diffusion_model.audio_latents_dim, 2, audio_t, device=dev)
    x, shapes = env["utils"].pack_latents([video, audio])
    model.latent_shapes = shapes  # the sampler sets it (samplers.py inner_sample), and audio_scale reads it
    context = (torch.randn(1, text, hidden, device=dev) * 0.5).to(dtype)
    payload = {"seed": 0, "audio_scale": model.audio_scale(),
               "layout": h3.PackedLayout(text, latent_t, 2 * h2, 2 * w2, audio_t)}
    kwargs = {"x": x, "t": torch.tensor([0.85], device=dev), "c_crossattn": context,
              "latent_shapes": shapes, "minimax_payload": payload, "transformer_options": {}}
    return kwargs, payload["layout"].seq_len


def time_calls(env, model, tokens, text_tokens, hidden, quick, clock_blocks=True, once=False) -> dict:
    """One timed point: median seconds of apply_model (repeat until stable) with per-block times and peaks."""
    torch = env["torch"]
    kwargs, exact = inputs_for(env, model, tokens, text_tokens, hidden)
    blocks = list(model.diffusion_model.blocks)
    hooks = comfy_env.ModuleClock(env, blocks) if clock_blocks else None
    runs: list[dict] = []

    def run():
        if hooks:
            hooks.times = []
        t0 = time.perf_counter()
        model.apply_model(**kwargs)
        comfy_env.sync(env)
        dt = time.perf_counter() - t0
        runs.append({"seconds": dt, "blocks": list(hooks.times) if hooks else []})
        return dt

    comfy_env.reset_device_peak(env)
    before = current_rss() or 0
    try:
        with torch.inference_mode(), PeakSampler() as peak:
            # the first call at a new shape allocates its buffers: a warm-up, never counted (the check, which
            # only tests the fit, runs once in --quick when one call is already past the cap: a full-width block)
            stats = fit.repeat_until_stable(run, time.perf_counter, warmup=0 if once else 1,
                                            min_runs=1 if once else 3, window=3, target=0.05 if quick else 0.03,
                                            cap_s=(1.5 if once else 4.0) if quick else 15.0)
    finally:
        if hooks:
            hooks.remove()
    counted = runs[-len(stats["all"]):]
    per_block = [fit.low_median(r["blocks"][i] for r in counted) for i in range(len(blocks))] \
        if hooks and counted and all(len(r["blocks"]) == len(blocks) for r in counted) else []
    return {"tokens": exact, "blocks": len(blocks), "seconds": fit.low_median(stats["all"]), "spread": stats["spread"],
            "runs": stats["runs"], "stable": stats["stable"], "block_seconds": per_block,
            "rss_before_bytes": before, "peak_rss_bytes": peak.peak, "peak_device_bytes": comfy_env.device_peak(env)}


def time_attention(env, heads: int, head_dim: int, key_tokens: int, dtype, quick: bool) -> list[dict]:
    """ComfyUI's attention (the function H3's Attention calls) at the plan's length: all heads, fewer query rows.

    Cost grows with query rows x key rows, so a slice of the query rows
    against every key row measures the quadratic term at the real length,
    with the real head count (which ComfyUI's chunking depends on).
    """
    torch, h3 = env["torch"], env["h3"]
    dev = env["device"]
    free = comfy_env.device_free(env) or (8 << 30)
    esize = torch.empty(0, dtype=dtype).element_size()
    while key_tokens > 512 and 3 * key_tokens * heads * head_dim * esize > free // 4:
        key_tokens //= 2
    out = []
    for keys in sorted({max(256, key_tokens // 4), key_tokens}):
        k = torch.randn(1, heads, keys, head_dim, device=dev, dtype=dtype)
        v = torch.randn(1, heads, keys, head_dim, device=dev, dtype=dtype)
        q_rows = min(keys, 64)
        while True:
            q = torch.randn(1, heads, q_rows, head_dim, device=dev, dtype=dtype)

            def run():
                qc, kc, vc = (h3.AttentionTensorContainer(t) for t in (q, k, v))
                t0 = time.perf_counter()
                h3.optimized_attention(qc, kc, vc, heads, mask=None, skip_reshape=True, transformer_options={})
                comfy_env.sync(env)
                return time.perf_counter() - t0

            with torch.inference_mode():
                run()  # the first call at a shape also allocates
                first = run()
                if first < (0.1 if quick else 0.3) and q_rows < keys:
                    q_rows = min(keys, q_rows * 4)
                    continue
                stats = fit.repeat_until_stable(run, time.perf_counter, warmup=0, min_runs=2 if quick else 3,
                                                cap_s=1.0 if quick else 8.0)
            break
        out.append({"tokens": keys, "query_tokens": q_rows, "heads": heads, "seconds": stats["seconds"],
                    "spread": stats["spread"], "runs": stats["runs"]})
        del k, v, q
    return out


def time_adaln(env, model, quick: bool) -> float | None:
    """Seconds of one block's AdaLN projection on a step's time embeddings: the work that does not grow with tokens."""
    torch = env["torch"]
    dm = model.diffusion_model
    proj = dm.blocks[0].adaln_proj
    dtype = model.get_dtype_inference()
    t_dim = proj.linear.weight.shape[1]
    t_emb = torch.randn(2, t_dim, device=env["device"]).to(dtype if not dm.use_adaln_curves else torch.float32)

    def run():
        t0 = time.perf_counter()
        proj(t_emb)
        comfy_env.sync(env)
        return time.perf_counter() - t0

    with torch.inference_mode():
        return fit.repeat_until_stable(run, time.perf_counter, warmup=1, min_runs=3, cap_s=0.5 if quick else 2.0)["seconds"]


def point_tokens(job: Job, quick: bool) -> list[int]:
    """The token counts to time; not capped at the canvas, whose size does not change what separates the terms."""
    pts = job.h3_points or (QUICK_POINTS if quick else FULL_POINTS)
    return sorted({max(32, min(int(p), MAX_POINT_TOKENS)) for p in pts})


def measure_h3_model(job: Job, comfyui: str | None, quick: bool, progress: Progress) -> dict:
    started = time.perf_counter()
    try:
        env = comfy_env.import_comfy(comfyui, job)
    except Skip as why:
        return {"status": "skipped", "reason": str(why)}
    arch = resolve_arch(job)
    canvas = prompt_rows(canvas_of(job), job.h3_prompt)
    result = {"status": "measured", "comfyui_version": env["version"], "device": env["device_kind"],
              "attention": env["attention"], "flags_applied": env["flags_applied"], "canvas": canvas,
              "import_s": env["import_s"]}
    baseline = current_rss() or 0
    # --quick: one block's weights, listed twice for the check; full: two distinct blocks
    distinct = job.h3_blocks_built or (1 if quick else 2)
    t0 = time.perf_counter()
    model, patcher, info = build(env, arch, distinct, 2)
    result["build_s"] = time.perf_counter() - t0
    result["dtype"] = info["dtype"]
    result["arch"] = {**{k: arch.get(k) for k in ("hidden", "heads", "head_dim", "ffn", "text_dim", "blocks_total",
                                                   "refiner_blocks", "rope_inv_freq_len", "time_embed_dim")},
                      "blocks_built": distinct, "from": arch.get("from")}
    progress("h3 model", 1, 5)
    calls = _timed_points(env, model, point_tokens(job, quick), canvas, int(arch["hidden"]), quick, progress)
    progress("h3 model", 3, 5)
    attn = time_attention(env, int(arch["heads"]), int(arch["head_dim"]), canvas["tokens"],
                          model.get_dtype_inference(), quick)
    result["attention_points"] = attn
    fitted = fit.fit_timing(calls, attn, int(arch["heads"]), int(arch["blocks_total"]), time_adaln(env, model, quick))
    result["points"] = [{k: c[k] for k in ("tokens", "blocks", "seconds", "spread", "runs", "stable",
                                            "block_seconds", "predicted_seconds")} for c in calls]
    result["fit"] = fitted
    result["extrapolated"] = {"tokens": canvas["tokens"],
                              "seconds_per_call": fit.seconds_per_call(fitted, int(arch["blocks_total"]),
                                                                       canvas["tokens"]),
                              "blocks": int(arch["blocks_total"]),
                              "formula": "blocks*(block_s_per_token*T + block_s_per_token2*T^2) + step_fixed_s"
                                         " + step_fixed_s_per_token*T"}
    result["memory"] = _memory(calls, info, baseline)
    progress("h3 model", 4, 5)
    del model, patcher
    if hasattr(env["mm"], "unload_all_models"):  # frees the DiT before the VAE and text encoder are built
        env["mm"].unload_all_models()
    env["mm"].soft_empty_cache()
    result.update(_parts(env, job, canvas, quick, fitted, arch))
    progress("h3 model", 5, 5)
    result["seconds"] = time.perf_counter() - started
    return result


def _timed_points(env, model, tokens: list[int], canvas: dict, hidden: int, quick: bool,
                  progress: Progress) -> list[dict]:
    """Each point timed with the main block count, then the check with the other count."""
    text = canvas["text_tokens"]
    dm = model.diffusion_model
    both = dm.blocks
    one = type(both)(list(both)[:1])
    # the points run with `main` blocks, the check with the other count (quick: cheaper points, one check run)
    main, check = (one, both) if quick else (both, one)
    calls = []
    dm.blocks = main
    with env["torch"].inference_mode():  # first call allocates and warms the kernels; it is never counted
        model.apply_model(**inputs_for(env, model, min(tokens[0], 48), text, hidden)[0])
    i = 0
    while i < len(tokens):
        p = time_calls(env, model, tokens[i], text, hidden, quick)
        calls.append(p)
        if i == 0 and p["block_seconds"] and min(p["block_seconds"]) < MIN_BLOCK_S and tokens[i] < canvas["tokens"]:
            # too fast to be anything but overhead (a GPU): move the ladder towards the canvas
            grow = min(canvas["tokens"], MAX_POINT_TOKENS) / max(tokens)
            if grow > 1.5:
                tokens[1:] = [int(x * grow) for x in tokens[1:]] or [int(tokens[0] * grow)]
        i += 1
        progress("h3 model", 2, 5)
    dm.blocks = check
    try:
        # at the smallest point above the anchor (fit.ANCHOR_ROWS), where the check says most about the fit
        at = next((t for t in tokens if t > fit.ANCHOR_ROWS), tokens[0])
        calls.append(time_calls(env, model, at, text, hidden, quick, clock_blocks=False, once=quick))
    finally:
        dm.blocks = both
    return calls


def _memory(calls: list[dict], info: dict, baseline: int) -> dict:
    """Peak RSS and device memory, and the activations per token at the largest point."""
    big = max((c for c in calls if c["block_seconds"]), key=lambda c: c["tokens"])
    weights = info["weights_bytes_built"]
    act = max(0, big["peak_rss_bytes"] - big["rss_before_bytes"])
    return {"baseline_rss_bytes": baseline, "peak_rss_bytes": max(c["peak_rss_bytes"] for c in calls),
            "weights_bytes_per_block": info["weights_bytes_per_block"],
            "weights_bytes_built": weights,
            "activation_bytes_per_token": act / big["tokens"],
            "peak_device_bytes": big["peak_device_bytes"],
            "device_activation_bytes_per_token":
                None if big["peak_device_bytes"] is None
                else max(0, big["peak_device_bytes"] - weights) / big["tokens"],
            "state": info["memory_state"], "manual_cast": info["manual_cast"]}


def _parts(env, job: Job, canvas: dict, quick: bool, fitted: dict, arch: dict) -> dict:
    """The video VAE decoder and the text encoder, each timed unless the job's h3_parts leaves it out."""
    skip = {"status": "skipped", "reason": "the job's h3_parts leaves it out"}
    return {"vae": h3_parts.guard("vae", h3_parts.measure_vae, env, job, canvas, quick, fitted, arch)
            if "vae" in job.h3_parts else skip,
            "text_encoder": h3_parts.guard("text encoder", h3_parts.measure_text_encoder, env, job, canvas, quick,
                                           fitted, arch) if "text_encoder" in job.h3_parts else skip}


def _main(argv=None) -> int:
    """`python -m h3k_calibration_runner.h3_model --comfyui DIR --plan FILE [--quick] [--repeat N]`: the stability check.

    Runs the measurement N times in this process's Python and prints each
    run's wall seconds and extrapolated seconds per model call at the plan's
    canvas, then the largest relative difference between runs.
    """
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="h3k_calibration_runner.h3_model")
    ap.add_argument("--comfyui", required=True)
    ap.add_argument("--plan", required=True, help="h3kit.plan/1 JSON or a runner job")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", help="write every run's h3_model block here (JSON list)")
    a = ap.parse_args(argv)
    with open(a.plan, encoding="utf-8") as f:
        job = Job.from_json(json.load(f))
    runs = []
    for i in range(a.repeat):
        t0 = time.perf_counter()
        r = measure_h3_model(job, a.comfyui, a.quick, Progress(None))
        wall = time.perf_counter() - t0
        runs.append(r)
        if r.get("status") != "measured":
            print(json.dumps({"run": i + 1, "status": r.get("status"), "reason": r.get("reason")}))
            return 1
        print(json.dumps({"run": i + 1, "wall_s": round(wall, 1), "seconds_per_call": r["extrapolated"]["seconds_per_call"],
                          "tokens": r["extrapolated"]["tokens"], "residual_pct": r["fit"]["residual_pct"],
                          "text_encode_s": r["text_encoder"].get("text_encode_s"),
                          "decode_s_per_pixel_frame": r["vae"].get("decode_s_per_pixel_frame")}), flush=True)
    per = [r["extrapolated"]["seconds_per_call"] for r in runs]
    print(json.dumps({"max_difference_pct": 100.0 * (max(per) - min(per)) / min(per)}))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump(runs, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_main())
