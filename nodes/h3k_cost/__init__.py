"""What one H3 run costs at a canvas, frames and steps: the one home of the workload arithmetic.

The planner (h3kit.plan.budget and h3kit.plan.timing, through
`h3kit.bundled.h3k_cost`) and the pack's panel, routes and queue guard (in
ComfyUI's Python) compute a run's cost here, so for the same inputs both give
the same figure.

The split. What the plan decides once -- which files, how the DiT is held
(resident, shards, streamed blocks, the ring), the budgets, the calibrated
rates -- does not change when a user edits a graph's canvas, frames or steps.
What does change is the workload:

  tokens      the memory model's token rule: (w / px) * (h / px) * ceil(frames / t)
  activations tokens * bytes_per_token + fixed, on the device that samples
              (the GPU's budget when there is a GPU, RAM too on a CPU or in
              Apple's one pool)
  video       w * h * frames * bytes_per_pixel_frame, decoded frames handed
              back to ComfyUI, in RAM while the VAE decodes
  time        per model call, blocks * (a * T + b * T^2) + c + d * T over
              the sequence T = text + audio + video rows, times 1 or 2 calls
              a step, times steps, plus the text encode and the decode

So a `CostModel` is the plan's fixed bytes per phase (the phase minus the
workload at the plan's own canvas) plus these rules and rates; `h3kit` writes
it into the pack as `h3kit_cost.json` (h3kit.plan.cost) from the plan it
installs. At the plan's canvas the pack's figure is the plan's by
construction; elsewhere it is the plan's memory model with the plan's loading
decisions kept, which tests/plan/test_cost_parity.py checks against the
planner on the reference plans.

Standard library only; never `import h3kit` (this runs in ComfyUI's Python).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

SCHEMA = "h3kit.cost/1"
COST_FILE = "h3kit_cost.json"
PHASES = ("encode", "sample", "decode")
FAR_PAST_TARGET = 2.0  # a clip past this many times target_minutes gets the panel's warning
GB = 10**9  # the unit h3kit prints sizes in everywhere (h3kit.core.units.gb): the panel matches the CLI
RATE_KEYS = ("block_s_per_token", "block_s_per_token2", "step_fixed_s", "step_fixed_s_per_token",
             "text_encode_s", "decode_s_per_pixel_frame")


class CostUnavailable(ValueError):
    """The cost document is missing a figure or holds one that is not a number; the message names it."""


# -- the workload rules (the planner's too) ---------------------------------------------


def memory_tokens(spatial_px: int, temporal_compression: int, width: int, height: int, frames: int) -> int:
    """The memory model's token count: (w / px) * (h / px) * ceil(frames / temporal_compression), at least 1."""
    latent_frames = math.ceil(int(frames) / int(temporal_compression))
    return max(1, (int(width) // int(spatial_px)) * (int(height) // int(spatial_px)) * latent_frames)


def activation_bytes(tokens: int, per_token: int, fixed: int) -> int:
    """Sampling activations at `tokens`: per_token * tokens + fixed."""
    return int(tokens) * int(per_token) + int(fixed)


def decoded_video_bytes(width: int, height: int, frames: int, per_pixel_frame: int) -> int:
    """The decoded frames ComfyUI holds in RAM at the end of a run."""
    return int(width) * int(height) * int(frames) * int(per_pixel_frame)


@dataclass(frozen=True)
class SequenceRule:
    """The DiT's joint sequence [text | audio | video] (the catalog's `sequence:` and `frames:`)."""

    text_tokens: int
    first_latent_frames: int
    latent_frames_per_step: int
    audio_rows_per_second: float
    fps: float
    frames_base: int
    frames_step: int
    patch_px: int  # the latent is padded to whole patches of this many pixels

    def snap_frames(self, frames: int) -> int:
        """The length ComfyUI runs for `frames`: rounded up to base + step * n."""
        return self.frames_base + -(-max(0, int(frames) - self.frames_base) // self.frames_step) * self.frames_step

    def rows(self, width: int, height: int, frames: int) -> int:
        frames = self.snap_frames(frames)
        latent_t = self.first_latent_frames + (frames - self.frames_base) // self.frames_step \
            * self.latent_frames_per_step
        px = self.patch_px
        video = latent_t * max(1, -(-int(height) // px)) * max(1, -(-int(width) // px))
        audio = 2 * round(frames / self.fps * self.audio_rows_per_second / 2)
        return int(self.text_tokens + audio + video)


def model_calls_per_step(cfg: float) -> int:
    """1 at cfg 1.0 (the positive prompt alone), else 2 (CFG's positive and negative)."""
    return 1 if abs(float(cfg) - 1.0) < 1e-9 else 2


def held_call_seconds(rates: Mapping[str, Any], blocks: int, tokens: int) -> float:
    """Seconds of one model call over `tokens` rows with the weights held (no streaming share)."""
    return (int(blocks) * (float(rates["block_s_per_token"]) * tokens + float(rates["block_s_per_token2"]) * tokens ** 2)
            + float(rates["step_fixed_s"]) + float(rates.get("step_fixed_s_per_token") or 0.0) * tokens)


def clip_time(rates: Mapping[str, Any], blocks: int, tokens: int, width: int, height: int, frames: int, steps: int,
              cfg: float, pass_overhead: float = 0.0) -> dict:
    """Seconds for one clip: steps x calls x the call (raised by the streamed pass's share) + text + decode."""
    calls = model_calls_per_step(cfg)
    per_call = held_call_seconds(rates, blocks, tokens) * (1.0 + max(0.0, float(pass_overhead or 0.0)))
    per_step = calls * per_call
    sampling = int(steps) * per_step
    text = float(rates.get("text_encode_s") or 0.0)
    decode = float(rates.get("decode_s_per_pixel_frame") or 0.0) * int(width) * int(height) * int(frames)
    total = sampling + text + decode
    return {"tokens": int(tokens), "model_calls_per_step": calls, "seconds_per_call": per_call,
            "seconds_per_step": per_step, "sampling_s": sampling, "text_encode_s": text, "decode_s": decode,
            "seconds_per_clip": total, "minutes_per_clip": total / 60.0}


# -- the model ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    width: int
    height: int
    frames: int
    steps: int
    cfg: float = 1.0

    @property
    def canvas(self) -> tuple[int, int]:
        return (self.width, self.height)


@dataclass(frozen=True)
class Estimate:
    """A run's figures: phases {phase: {"gpu_bytes", "ram_bytes"}}, peaks against the budgets, the clip's time."""

    workload: Workload
    tokens: int
    activation_bytes: int
    video_bytes: int
    phases: dict
    peak_gpu_bytes: int | None
    peak_ram_bytes: int
    budget_gpu_bytes: int | None
    budget_ram_bytes: int
    short: tuple  # ((what, need, have, phase), ...)
    time: dict
    target_minutes: float | None

    @property
    def fits(self) -> bool:
        return not self.short

    @property
    def minutes(self) -> float:
        return self.time["minutes_per_clip"]

    @property
    def slow(self) -> bool:
        """Far past the plan's target_minutes (FAR_PAST_TARGET times it)."""
        return bool(self.target_minutes) and self.minutes > FAR_PAST_TARGET * float(self.target_minutes)

    def to_json(self) -> dict:
        return {"fits": self.fits, "slow": self.slow, "minutes": self.minutes, "target_minutes": self.target_minutes,
                "canvas": list(self.workload.canvas), "frames": self.workload.frames, "steps": self.workload.steps,
                "cfg": self.workload.cfg, "tokens": self.tokens, "activation_bytes": self.activation_bytes,
                "peak_gpu_bytes": self.peak_gpu_bytes, "peak_ram_bytes": self.peak_ram_bytes,
                "budget": {"gpu_bytes": self.budget_gpu_bytes, "ram_bytes": self.budget_ram_bytes},
                "phases": self.phases, "time": self.time,
                "short": [{"what": w, "need_bytes": n, "have_bytes": h, "phase": p} for w, n, h, p in self.short]}


@dataclass(frozen=True)
class CostModel:
    """The plan's fixed figures and the workload rules; `estimate` prices a workload, `nearest_fit` repairs one."""

    budget_gpu_bytes: int | None
    budget_ram_bytes: int
    unified: bool
    fixed: dict  # {phase: [gpu_bytes | None, ram_bytes]} without the workload
    activation_on_gpu: bool
    activation_on_ram: bool
    in_flight_fixed_bytes: int | None  # nothing resident: shard buffers + ComfyUI's minimum, beside the activations
    token_px: int
    temporal_compression: int
    activation_per_token: int
    activation_fixed: int
    video_bytes_per_pixel_frame: int
    sequence: SequenceRule
    blocks: int
    rates: dict
    pass_overhead: float
    target_minutes: float | None
    canvas_ladder: tuple  # ((w, h), ...), largest first
    frames_ladder: tuple
    defaults: Workload  # what the plan's workflows open with
    max_canvas: tuple
    max_frames: int
    files: dict = field(default_factory=dict)  # part -> the file name the plan loads
    source: str = ""  # where the time's rates come from (calibration or the throughput table)
    machine: str = ""  # the machine the budgets are for, in words

    def estimate(self, work: Workload) -> Estimate:
        tokens = memory_tokens(self.token_px, self.temporal_compression, work.width, work.height, work.frames)
        act = activation_bytes(tokens, self.activation_per_token, self.activation_fixed)
        video = decoded_video_bytes(work.width, work.height, work.frames, self.video_bytes_per_pixel_frame)
        phases = {}
        for phase in PHASES:
            gpu, ram = self.fixed[phase]
            if phase == "sample":
                gpu = None if gpu is None else gpu + act * self.activation_on_gpu
                ram = ram + act * self.activation_on_ram
            elif phase == "decode":
                ram = ram + video
            phases[phase] = {"gpu_bytes": gpu, "ram_bytes": ram}
        peak_gpu = None if self.budget_gpu_bytes is None else max(p["gpu_bytes"] for p in phases.values())
        peak_ram = max(p["ram_bytes"] for p in phases.values())
        rows = self.sequence.rows(work.width, work.height, work.frames)
        time = clip_time(self.rates, self.blocks, rows, work.width, work.height, work.frames, work.steps, work.cfg,
                         self.pass_overhead)
        return Estimate(work, tokens, act, video, phases, peak_gpu, peak_ram, self.budget_gpu_bytes,
                        self.budget_ram_bytes, self._short(phases, peak_gpu, peak_ram, act), time, self.target_minutes)

    def _short(self, phases: dict, peak_gpu: int | None, peak_ram: int, act: int) -> tuple:
        out, gpu = [], self.budget_gpu_bytes
        if gpu is not None:
            if peak_gpu > gpu:
                out.append(("GPU", peak_gpu, gpu, max(phases, key=lambda p: phases[p]["gpu_bytes"])))
            elif self.in_flight_fixed_bytes is not None and act + self.in_flight_fixed_bytes > gpu:
                out.append(("GPU", act + self.in_flight_fixed_bytes, gpu, "sample"))
        if peak_ram > self.budget_ram_bytes:
            out.append(("RAM", peak_ram, self.budget_ram_bytes, max(phases, key=lambda p: phases[p]["ram_bytes"])))
        return tuple(out)

    def nearest_fit(self, work: Workload) -> Workload | None:
        """The setting nearest `work` that fits in memory and is not far past the target: the largest
        canvas x frames (no larger than asked) on the plan's ladders, then the plan's own, keeping the steps
        unless only the plan's steps meet the time; None when even the plan's defaults do not fit."""
        area, portrait = work.width * work.height, work.height > work.width
        canvases = [(h, w) if portrait else (w, h) for w, h in self.canvas_ladder if w * h <= area]
        frames = [f for f in self.frames_ladder if f <= work.frames]
        options = sorted({(c, f) for c in canvases for f in frames}, key=lambda o: (o[0][0] * o[0][1] * o[1],
                                                                                     o[0][0] * o[0][1]), reverse=True)
        steps_tried = [work.steps] + ([self.defaults.steps] if self.defaults.steps < work.steps else [])
        for steps in steps_tried:
            for canvas, n in options:
                trial = Workload(canvas[0], canvas[1], n, steps, work.cfg)
                est = self.estimate(trial)
                if est.fits and not est.slow:
                    return trial
        plan_own = replace(self.defaults, cfg=work.cfg)
        return plan_own if self.estimate(plan_own).fits else None

    # -- the document ----------------------------------------------------------------

    def to_json(self) -> dict:
        """JSON values only (lists, not tuples), so the document equals itself read back."""
        return json.loads(json.dumps({**asdict(self), "schema": SCHEMA}))

    @classmethod
    def from_json(cls, doc: Any) -> CostModel:
        if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
            raise CostUnavailable(f"the cost document is not an {SCHEMA}")
        try:
            fixed = {p: [_opt_int(doc["fixed"][p][0]), _int(doc["fixed"][p][1])] for p in PHASES}
            seq = SequenceRule(**{k: _num(v) for k, v in doc["sequence"].items()})
            rates = {k: float(doc["rates"][k]) for k in RATE_KEYS if doc["rates"].get(k) is not None}
            for k in RATE_KEYS[:3]:
                rates[k]  # the three every call needs
            d = doc["defaults"]
            return cls(
                budget_gpu_bytes=_opt_int(doc["budget_gpu_bytes"]), budget_ram_bytes=_int(doc["budget_ram_bytes"]),
                unified=bool(doc["unified"]), fixed=fixed, activation_on_gpu=bool(doc["activation_on_gpu"]),
                activation_on_ram=bool(doc["activation_on_ram"]),
                in_flight_fixed_bytes=_opt_int(doc.get("in_flight_fixed_bytes")), token_px=_int(doc["token_px"]),
                temporal_compression=_int(doc["temporal_compression"]),
                activation_per_token=_int(doc["activation_per_token"]), activation_fixed=int(doc["activation_fixed"]),
                video_bytes_per_pixel_frame=_int(doc["video_bytes_per_pixel_frame"]), sequence=seq,
                blocks=_int(doc["blocks"]), rates=rates, pass_overhead=float(doc.get("pass_overhead") or 0.0),
                target_minutes=None if doc.get("target_minutes") is None else float(doc["target_minutes"]),
                canvas_ladder=tuple((_int(w), _int(h)) for w, h in doc["canvas_ladder"]),
                frames_ladder=tuple(_int(f) for f in doc["frames_ladder"]),
                defaults=Workload(_int(d["width"]), _int(d["height"]), _int(d["frames"]), _int(d["steps"]),
                                  float(d["cfg"])),
                max_canvas=(_int(doc["max_canvas"][0]), _int(doc["max_canvas"][1])),
                max_frames=_int(doc["max_frames"]), files=dict(doc.get("files") or {}),
                source=str(doc.get("source") or ""), machine=str(doc.get("machine") or ""))
        except KeyError as exc:
            raise CostUnavailable(f"the cost document has no {exc.args[0]!r}") from None
        except (TypeError, ValueError, IndexError, AttributeError) as exc:
            raise CostUnavailable(f"the cost document holds a value that is not a number ({exc})") from None


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{v!r} is not a non-negative number")
    return int(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else _int(v)


def _num(v: Any) -> float | int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{v!r} is not a number")
    return v


def read(path: Path) -> CostModel:
    """The pack's cost model from `path` (h3kit_cost.json); CostUnavailable names what is wrong."""
    try:
        with open(path, "rb") as f:
            raw = f.read(4 * 2**20 + 1)
    except OSError as exc:
        raise CostUnavailable(f"{path} cannot be read ({exc.strerror or exc})") from None
    if len(raw) > 4 * 2**20:
        raise CostUnavailable(f"{path} is over 4 MiB, so it is not h3kit's cost document")
    try:
        return CostModel.from_json(json.loads(raw.decode("utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CostUnavailable(f"{path} is not JSON ({exc})") from None


def gb(n: int | None) -> str:
    """Bytes as the panel and the guard print them, as h3kit's terminal does: decimal GB, one decimal ("12.1 GB")."""
    return "?" if n is None else f"{n / GB:.1f} GB"
