"""The search: for one profile, the files and the canvas that fit, best first.

Per profile: down the DiT formats in quality order, each at its largest
canvas and frame count that fit, to the first one ComfyUI's own loading runs.
Above it, a DiT h3kit's streamed loader can read (plain bf16/fp16/fp32
safetensors) is also tried streamed where ComfyUI's loading falls short and the
machine has no dynamic VRAM (plan/streaming.py decides when that applies).
Each option gets its workflow defaults and time (streaming slows every model
call; plan/defaults.py), and the best wins by Candidate.rank: fits, files
that load, a clip within target_minutes, format quality, preset, canvas,
frames, ComfyUI's own loading before streaming. Files ComfyUI is reported to
load (its own loader, a loader pack, or h3kit's own loader node) in a format
known to run here (measured by the format probe, else reported in the
catalog's runs_on) are tried first; files or formats with no report come next.
A format that fails here is never planned, and a file reported not to load
only when the user names it. Nothing fits: the plan that misses by least, from
files that load, marked as not fitting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from h3kit.data.catalog import LOAD_TIERS, Catalog, Machine, Profile, Weight
from h3kit.data.fingerprint import Fingerprint
from h3kit.data.settings import AUTO, Settings
from h3kit.data.speed import PRESET_ORDER
from h3kit.plan import streaming, te_stream
from h3kit.plan import timing as timing_mod
from h3kit.plan.budget import Budget, Choice, Estimate, memory_estimate, make_budget
from h3kit.plan.defaults import workflow_defaults


def merge_settings(profile: Profile, config) -> tuple[Settings, dict, dict]:
    """profile < calibrated < overrides: (settings, where each value came from, each as its file spells it)."""
    settings = profile.settings
    source = {k: f"profile {profile.name}" for k in settings.given}
    written = dict(profile.written)
    if config is not None:
        for section, label in (("calibrated", "calibration"), ("overrides", "override")):
            spelled = config.written(section)
            layer = getattr(config, section)
            settings = settings.over(layer)
            for k, v in layer.items():
                written[k] = spelled.get(k, v)
                line = config.line_of(section, k)
                source[k] = f"{label} ({config.raw}:{line})" if config.raw else label
    return settings, source, written


def _ladder(cat: Catalog, settings: Settings) -> tuple[list, list]:
    """The canvases (largest first) and frame counts (fewest first) the profile's limits allow."""
    max_w, max_h = settings.max_canvas
    min_w, min_h = settings.min_canvas or cat.canvas_ladder[-1]
    canvases = [c for c in cat.canvas_ladder
                if c[0] * c[1] <= max_w * max_h and c[0] <= max_w and c[0] * c[1] >= min_w * min_h]
    if not canvases:
        canvases = [(min_w, min_h)]
    frames = [f for f in cat.frames_ladder if settings.min_frames <= f <= settings.max_frames]
    if frames and settings.max_frames not in frames:  # a cap between two rungs (e.g. 209) is itself a rung
        frames.append(settings.max_frames)
    return canvases, frames or [settings.min_frames]


def sequence_cap(cat: Catalog, backend: str):
    """(the most sequence rows a plan on `backend` may run, the catalog's SequenceCap) or (None, None)."""
    cap = next((c for c in cat.sequence_caps if c.backend == backend), None)
    return (timing_mod.sequence_tokens(cat, *cap.shape), cap) if cap else (None, None)


def cap_rationale(cat: Catalog, c: "Candidate") -> list[str]:
    """The sentence that says the plan's canvas x frames were kept under the backend's sequence cap."""
    rows, cap = sequence_cap(cat, c.machine.backend)
    if cap is None:
        return []
    (w, h), f = c.choice.canvas, c.choice.frames
    mine = timing_mod.sequence_tokens(cat, w, h, f)
    over = " (set by config.yaml, above it: expect that failure)" if mine > rows else ""
    return [f"On {cap.backend} a plan's canvas x frames stay within {rows:,} sequence rows, those of "
            f"{cap.shape[0]}x{cap.shape[1]}x{cap.shape[2]} ({cap.source}); "
            f"{cap.failing}. This plan's {w}x{h}x{f} is {mine:,} rows{over}."]


def tier(cat: Catalog, machine: Machine, w: Weight, probe=None) -> tuple[int, int]:
    """How sure the plan is that `w` loads and runs here: (its load tier from file.comfyui_loads, its format's
    evidence tier: known to run 0, nobody reported 1); (0, 0) is sure."""
    return w.load_tier, cat.evidence(w.format, machine, w.part, probe).tier


# The search widens in this order: files that load in a format known to run here, then files that load in a format
# nobody reported on here, then files nobody reported loading; files reported not to load only when the user names them.
LEVELS = ((0, 0), (0, 1), (1, 1))
FORCED_LEVEL = (LOAD_TIERS["reported_broken"], 2)


def _pick(weights: list[Weight], cat: Catalog, machine: Machine, settings: Settings, key: str,
          formats: list | None = None, probe=None) -> tuple[list[Weight], list[str]]:
    """Runnable weights -- files that load and are known to run first (quality order among them, ComfyUI's own
    loader before a node pack), then ones nobody reported on, then ones reported broken; smaller first at equal
    rank -- plus reasons for those left out (a format that fails here, by the probe or a report, is never kept)."""
    if getattr(settings, key) != AUTO:
        return [w for w in weights if w.id == getattr(settings, key)], []
    out, skipped = [], []
    for w in weights:
        if formats is not None and w.format not in formats:
            continue
        ok, why = cat.runnable(w.format, machine, w.part, probe)
        if ok:
            out.append(w)
        elif why not in skipped:
            skipped.append(why)
    # ComfyUI's own loaders (and loader packs) before h3kit's GGUF nodes at any quality: they are the widely used
    # path and, on CUDA, the faster one (int8/fp8 kernels; h3kit's nodes dequantize GGUF per layer)
    return sorted(out, key=lambda w: (tier(cat, machine, w, probe), w.comfyui_loads == "with_h3kit_loader",
                                      -w.quality, w.comfyui_loads != "stock", w.bytes)), skipped


@dataclass
class Candidate:
    profile: Profile
    settings: Settings
    source: dict
    written: dict  # the settings as their files spell them, for sentences that quote them
    budget: Budget
    choice: Choice
    est: Estimate  # the run the plan describes: ComfyUI loading the DiT, or h3kit's loader streaming it
    skipped: list
    searched: bool  # canvas/frames chosen by search (not fixed by the user)
    machine: Machine
    held: Estimate | None = None  # with a streamed `est`: the same choice loaded by ComfyUI itself
    probe: object = None  # the FormatProbe the plan was made with (data/format_evidence.py), or None
    timing: dict = field(default_factory=dict)
    clip_rates: dict = field(default_factory=dict)  # the rates the clip's time used: `timing`, plus a streamed text
    # encoder's read of its file per prompt in text_encode_s (the pack's cost model prices graphs with these)
    defaults: dict = field(default_factory=dict)  # workflow_defaults: (defaults, time, rationale, warnings)
    time: dict = field(default_factory=dict)
    defaults_why: list = field(default_factory=list)
    defaults_warnings: list = field(default_factory=list)
    evidence_tiers: dict = field(default_factory=dict)  # weight id -> its format's evidence tier here
    unloadable: list = field(default_factory=list)  # parts with no file that loads and runs here (then it cannot fit)
    notes: list = field(default_factory=list)  # rationale sentences about what the search itself changed
    stream: streaming.StreamDecision | None = None  # whether h3kit's loader streams the DiT, decided once (_finish)
    te_decision: te_stream.TeDecision | None = None  # whether it streams the text encoder, decided once (candidate)

    @property
    def fits(self) -> bool:
        """The run fits in memory and every part has a file that loads and runs here."""
        return self.est.fits and not self.unloadable

    @property
    def loads(self) -> tuple:
        """The chosen files' load tiers, worst first: a smaller tuple is a plan more sure to load in ComfyUI."""
        ch = self.choice
        return tuple(sorted(((w.load_tier, self.evidence_tiers.get(w.id, 0))
                             for w in (ch.dit, ch.te, ch.vae, ch.audio_vae)), reverse=True))

    def rank(self) -> tuple:
        """Fits, files that load, a clip within target_minutes, ComfyUI's own loaders before h3kit's GGUF nodes, format
        quality, preset, the workflows' canvas and frames, ComfyUI's own loading before h3kit's streamer (it is
        faster), then the memory limits."""
        ch, d = self.choice, self.defaults
        preset = PRESET_ORDER.index(d["preset"]) if d.get("preset") in PRESET_ORDER else len(PRESET_ORDER)
        canvas = d.get("canvas") or ch.canvas
        ours = sum(w.comfyui_loads == "with_h3kit_loader" for w in (ch.dit, ch.te, ch.vae, ch.audio_vae))
        return (self.fits, tuple((-a, -b) for a, b in self.loads), bool(self.time.get("meets_target")), -ours,
                ch.dit.quality,
                -preset, canvas[0] * canvas[1], d.get("frames") or 0, not self.est.streamed,
                ch.canvas[0] * ch.canvas[1], ch.frames, -ch.dit.bytes)


def _timing(cat: Catalog, machine: Machine, profile: Profile, settings: Settings, fingerprint: Fingerprint,
            dit: Weight) -> dict:
    """The rates the time estimate uses: calibrated `timing` when set, else the throughput table's for this DiT."""
    if settings.timing is not None:
        return dict(settings.timing)
    backend = "cpu" if profile.match.get("backend") == ["cpu"] else machine.backend
    return timing_mod.rates_from_table(fingerprint, cat, cat.comfyui.dtype_on(backend), backend=backend,
                                       weight_format=dit.format)


def _shortfall(est: Estimate) -> int:
    return sum(need - have for _, need, have, _ in est.short)


@dataclass(frozen=True)
class _Frame:
    """What every candidate of one profile shares: where its settings came from, its budget, streaming policy,
    the files left out, and how sure the plan is of each file."""

    cat: Catalog
    fingerprint: Fingerprint
    machine: Machine
    profile: Profile
    settings: Settings
    source: dict
    written: dict
    budget: Budget
    policy: streaming.StreamPolicy
    skipped: list
    probe: object
    fixed: bool  # canvas and frames both set by the user
    evidence_tiers: dict

    def candidate(self, ch: Choice, est: Estimate, held: Estimate | None, searched: bool = True) -> Candidate:
        """A candidate with its streaming decision, workflow defaults and their time (streaming slows every model
        call, and a streamed text encoder reads its file once per prompt), which its rank needs."""
        c = Candidate(self.profile, self.settings, self.source, self.written, self.budget, ch, est, self.skipped,
                      searched and not self.fixed, self.machine, held, self.probe,
                      evidence_tiers=self.evidence_tiers)
        c.stream = streaming.decide(self.policy, self.cat, self.budget, ch.dit, est, held)
        c.timing = _timing(self.cat, self.machine, self.profile, self.settings, self.fingerprint, ch.dit)
        c.te_decision = te_stream.decide(self.cat, self.budget, self.settings, ch, est)
        c.clip_rates = rates = c.te_decision.clip_rates(c.timing)
        c.defaults, c.time, c.defaults_why, c.defaults_warnings = workflow_defaults(
            self.cat, self.settings, self.source, ch.canvas, ch.frames, rates, pass_overhead=c.stream.pass_overhead)
        return c


@dataclass(frozen=True)
class _Space:
    """The canvases, frames and files one profile is searched over, and the memory model it asks."""

    cat: Catalog
    budget: Budget
    settings: Settings
    held_settings: Settings  # for ComfyUI's own loading (stream_from: ram where it has no dynamic VRAM)
    policy: streaming.StreamPolicy
    audio: Weight
    canvases: list  # largest first
    frames: list  # fewest first
    cap_rows: int | None  # the backend's sequence cap (catalog sequence_caps), None: none applies

    @property
    def small(self) -> tuple:
        return self.canvases[-1], self.frames[0]

    def estimate(self, ch: Choice, stream: int | None = None) -> Estimate:
        return memory_estimate(self.cat, self.budget, self.settings if stream is not None else self.held_settings,
                               ch, stream)

    def capped(self, canvas, nframes) -> bool:
        return self.cap_rows is not None and timing_mod.sequence_tokens(self.cat, *canvas, nframes) > self.cap_rows

    def first_fit(self, dit: Weight, tes: list, vaes: list, canvas, nframes: int, stream: int | None):
        for te, te_streamed in te_stream.options(self.cat, self.settings, self.budget, tes):
            for vae in vaes:
                ch = Choice(dit, te, vae, self.audio, canvas, nframes, te_streamed)
                est = self.estimate(ch, stream)
                if est.fits:
                    return ch, est
        return None

    def grow(self, dit: Weight, tes: list, vaes: list, stream: int | None):
        """`dit` at the smallest canvas, then the largest canvas and frames it allows; None when even that fails."""
        chosen = self.first_fit(dit, tes, vaes, *self.small, stream)
        if chosen is None:
            return None
        for canvas in self.canvases:
            found = None if self.capped(canvas, self.frames[0]) else \
                self.first_fit(dit, tes, vaes, canvas, self.frames[0], stream)
            if found:
                longest = (self.first_fit(dit, tes, vaes, canvas, n, stream) for n in reversed(self.frames)
                           if not self.capped(canvas, n))
                return next((f for f in longest if f), found)
        return chosen

    def search(self, dits: list, tes: list, vaes: list) -> list:
        """Down the DiT ladder to the first one ComfyUI's own loading runs, with every streamable DiT above it that
        h3kit's loader runs where that loading falls short: [(choice, est, held est or None)]."""
        found = []
        for dit in dits:
            held = self.grow(dit, tes, vaes, None)
            if streaming.may_stream(self.policy, dit):
                probe = held[1] if held else min(
                    (self.estimate(Choice(dit, te, vaes[0], self.audio, *self.small, te_streamed))
                     for te, te_streamed in te_stream.options(self.cat, self.settings, self.budget, tes)),
                    key=lambda e: e.phases["encode"]["ram_bytes"])  # the text encoder way that leaves the DiT most
                if streaming.wants_stream(self.policy, probe, self.budget):
                    held = None  # ComfyUI's own loading falls short here (or stream_dit is on)
                    if (streamed := self.grow(dit, tes, vaes, self.policy.depth)):
                        found.append((*streamed, self.estimate(streamed[0])))
            if held:
                found.append((*held, None))
                break
        return found

    def closest(self, dits: list, tes: list, vaes: list) -> list:
        """Nothing fits: the cheapest DiT held, and each streamable one streamed where the policy wants it, at the
        smallest canvas with the text encoder the encode phase needs least for: [(choice, est, held or None)]."""
        te, vae = min(tes, key=lambda w: w.bytes), min(vaes, key=lambda w: w.bytes)
        te_ways = te_stream.options(self.cat, self.settings, self.budget, tes)
        te, te_streamed = min(te_ways, key=lambda o: (not o[1], o[0].bytes)) if any(o[1] for o in te_ways) \
            else (te, False)
        out = []
        for dit in sorted(dits, key=lambda w: w.bytes)[:1] + [w for w in dits if streaming.may_stream(self.policy, w)]:
            ch = Choice(dit, te, vae, self.audio, *self.small, te_streamed)
            held = self.estimate(ch)
            if streaming.may_stream(self.policy, dit) and streaming.wants_stream(self.policy, held, self.budget):
                out.append((ch, self.estimate(ch, self.policy.depth), held))
            else:
                out.append((ch, held, None))
        return out


# ComfyUI's flag that turns its dynamic VRAM off (comfy/cli_args.py), so h3kit's streamed loader can feed the GPU
DYNAMIC_VRAM_OFF = "--disable-dynamic-vram"


def _profile_settings(profile: Profile, config, extra_args: tuple, dit: str | None) -> tuple[Settings, dict, dict]:
    settings, source, written = merge_settings(profile, config)
    if extra_args:
        settings = settings.but(comfyui_args=tuple(settings.comfyui_args) + tuple(extra_args))
    if dit is not None:
        settings = settings.but(dit_weights=dit)
    return settings, source, written


def _user_fixed(source: dict, key: str) -> bool:
    """Did config.yaml (overrides or calibration) set `key`, so the search keeps it as it is?"""
    return source.get(key, "").startswith(("override", "calibration"))


def _within(tiers: dict, w: Weight, level: tuple) -> bool:
    return tiers[w.id][0] <= level[0] and tiers[w.id][1] <= level[1]


def _space(cat: Catalog, machine: Machine, settings: Settings, source: dict, budget: Budget,
           pol: streaming.StreamPolicy) -> _Space:
    # ComfyUI maps the off-card part from the file only with dynamic VRAM; without it, it keeps that part in RAM.
    discrete = budget.gpu_bytes is not None and not budget.unified
    hs = settings.but(stream_from="ram") if discrete and pol.dynamic_vram is not True else settings
    canvases, frames = _ladder(cat, settings)
    fixed_canvas, fixed_frames = _user_fixed(source, "max_canvas"), _user_fixed(source, "max_frames")
    canvases = [settings.max_canvas] if fixed_canvas else canvases
    frames = [settings.max_frames] if fixed_frames else frames
    cap_rows = None if fixed_canvas and fixed_frames else sequence_cap(cat, machine.backend)[0]
    return _Space(cat, budget, settings, hs, pol, cat.audio_vae[0], canvases, frames, cap_rows)


def _parts(cat: Catalog, machine: Machine, settings: Settings, probe) -> tuple[list, list, list, list]:
    """(DiTs, text encoders, video VAEs, reasons DiT formats were left out), each list best first."""
    formats = [settings.quantization] if settings.quantization != AUTO else list(settings.formats)
    dits, skipped = _pick(cat.dit, cat, machine, settings, "dit_weights", formats, probe)
    if not dits:  # the user forced something this machine cannot run: keep it, warn later
        dits = [w for w in cat.dit if w.format in formats or w.id == settings.dit_weights]
    tes, _ = _pick(cat.text_encoder, cat, machine, settings, "text_encoder_weights", probe=probe)
    vaes, _ = _pick(cat.vae, cat, machine, settings, "vae_weights", probe=probe)
    return (dits, tes or sorted(cat.text_encoder, key=lambda w: w.bytes),
            vaes or sorted(cat.vae, key=lambda w: w.bytes), skipped)


def plan_profile(cat: Catalog, fingerprint: Fingerprint, machine: Machine, profile: Profile, config,
                 probe=None, *, extra_args: tuple = (), dit: str | None = None,
                 runtime: dict | None = None) -> Candidate:
    """The best plan `profile` gives this machine under `config` and the format probe's `probe` (see the module
    docstring for the order); `extra_args`: ComfyUI flags the planner adds to the profile's; `dit`: the DiT file
    the planner pins; `runtime`: a probed ComfyUI's versions for the streaming policy (streaming.policy)."""
    settings, source, written = _profile_settings(profile, config, extra_args, dit)
    budget = make_budget(cat, fingerprint, settings, getattr(config, "comfyui_path", None),
                         cpu=profile.match.get("backend") == ["cpu"])
    pol = streaming.policy(fingerprint, machine, settings, budget, cat, runtime)
    space = _space(cat, machine, settings, source, budget, pol)
    dits, tes, vaes, skipped = _parts(cat, machine, settings, probe)
    weights = dits + tes + vaes + [space.audio]
    tiers = {w.id: tier(cat, machine, w, probe) for w in weights}
    frame = _Frame(cat, fingerprint, machine, profile, settings, source, written, budget, pol, skipped, probe,
                   _user_fixed(source, "max_canvas") and _user_fixed(source, "max_frames"),
                   {w.id: cat.evidence(w.format, machine, w.part, probe).tier for w in weights})
    # Files that load and run first; widen to unreported ones. A file reported not to load is planned only
    # when the user named it (dit_weights / quantization / *_weights): a plan never picks one by itself.
    forced = any(getattr(settings, k) != AUTO for k in ("quantization", "dit_weights", "text_encoder_weights",
                                                        "vae_weights"))
    levels = LEVELS + ((FORCED_LEVEL,) if forced else ())
    for level in levels:
        allowed = [[w for w in ws if _within(tiers, w, level)] for ws in (dits, tes, vaes)]
        if all(allowed) and (found := space.search(*allowed)):
            return max((frame.candidate(*f) for f in found), key=Candidate.rank)
    # Nothing fits: the plan that misses by least (the cheapest DiT held, or a streamable one streamed), honestly
    # marked, from files that load (the plan then says what would make it work).
    unloadable = [label for label, ws in (("DiT", dits), ("text encoder", tes), ("video VAE", vaes))
                  if not any(_within(tiers, w, levels[-1]) for w in ws)]
    tries = [frame.candidate(*t, searched=False)
             for t in space.closest(*([w for w in ws if _within(tiers, w, levels[-1])] or ws for ws in (dits, tes, vaes)))]
    tries.sort(key=Candidate.rank, reverse=True)  # at equal shortfall, the better plan
    best = min(tries, key=lambda c: _shortfall(c.est))
    best.unloadable = unloadable
    if not extra_args and (other := _without_dynamic_vram(best, space, cat, fingerprint, machine, profile, config,
                                                          probe, runtime)):
        return other
    return best


def _without_dynamic_vram(best: Candidate, space: _Space, cat: Catalog, fingerprint: Fingerprint, machine: Machine,
                          profile: Profile, config, probe, runtime: dict | None) -> Candidate | None:
    """Where nothing fits because ComfyUI's dynamic VRAM keeps the DiT's off-card blocks in RAM through the decode:
    the plan with it off, so h3kit's streamed loader reads the same file from the disk instead (streaming decides
    the rest), when that fits. The DiT stays the one the closest plan holds: less memory never buys a heavier
    file."""
    budget = space.budget
    discrete = budget.gpu_bytes is not None and not budget.unified
    if not (discrete and space.policy.dynamic_vram is True and space.settings.stream_dit != "off" and
            any(what == "RAM" and phase in ("sample", "decode") for what, _, _, phase in best.est.short)):
        return None
    other = plan_profile(cat, fingerprint, machine, profile, config, probe, extra_args=(DYNAMIC_VRAM_OFF,),
                         dit=best.choice.dit.id, runtime=runtime)
    if not other.fits:
        return None
    what, need, have, phase = max(best.est.short, key=lambda x: x[1] - x[2])
    other.notes.append(
        f"With ComfyUI's dynamic VRAM nothing fits: it keeps the DiT's off-card blocks in RAM "
        f"(stream_from: {space.held_settings.stream_from}), {need / 1e9:.1f} GB at the {phase} peak against "
        f"{have / 1e9:.1f} GB; the plan adds {DYNAMIC_VRAM_OFF} so h3kit's streamed loader feeds the GPU from the "
        "file on disk.")
    return other
