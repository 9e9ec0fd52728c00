"""The search: for one profile, the files and the canvas that fit, best first.

Per profile: the highest-quality runnable format whose smallest file fits at
the profile's min canvas and min frames; then the largest canvas and frame
count that fit with it. Files ComfyUI is reported to load (its own loader, or
a loader pack) are tried first; files with no report come next, and files
reported not to load only when nothing else fits (the catalog's
file.comfyui_loads). Nothing fits: the cheapest choice, marked as not fitting.
"""

from __future__ import annotations

from dataclasses import dataclass

from h3kit.data.catalog import LOAD_TIERS, Catalog, Machine, Profile, Weight
from h3kit.plan.budget import Budget, Choice, Estimate, estimate, make_budget


def merge_settings(profile: Profile, config) -> tuple[dict, dict, dict]:
    """profile < calibrated < overrides: (settings, where each value came from, each as its file spells it)."""
    settings = dict(profile.settings)
    source = {k: f"profile {profile.name}" for k in settings}
    written = profile.written
    if config is not None:
        for section, label in (("calibrated", "calibration"), ("overrides", "override")):
            spelled = config.written(section)
            for k, v in (getattr(config, section) or {}).items():
                settings[k] = v
                written[k] = spelled.get(k, v)
                line = config.line_of(section, k)
                source[k] = f"{label} ({config.raw}:{line})" if config.raw else label
    return settings, source, written


def _ladder(cat: Catalog, settings: dict) -> tuple[list, list]:
    """The canvases (largest first) and frame counts (fewest first) the profile's limits allow."""
    max_w, max_h = settings["max_canvas"]
    min_w, min_h = settings.get("min_canvas") or cat.canvas_ladder[-1]
    canvases = [c for c in cat.canvas_ladder
                if c[0] * c[1] <= max_w * max_h and c[0] <= max_w and c[0] * c[1] >= min_w * min_h]
    if not canvases:
        canvases = [(min_w, min_h)]
    frames = [f for f in cat.frames_ladder if settings["min_frames"] <= f <= settings["max_frames"]]
    if frames and settings["max_frames"] not in frames:  # a cap between two rungs (e.g. 209) is itself a rung
        frames.append(settings["max_frames"])
    return canvases, frames or [settings["min_frames"]]


def _pick(weights: list[Weight], cat: Catalog, machine: Machine, settings: dict, key: str,
          formats: list | None = None) -> tuple[list[Weight], list[str]]:
    """Runnable weights -- files ComfyUI loads first (quality order among them, its own loader before a
    loader pack), then unreported ones, then ones reported broken; smaller first at equal rank -- plus
    reasons for those left out."""
    if settings.get(key, "auto") != "auto":
        return [w for w in weights if w.id == settings[key]], []
    out, skipped = [], []
    for w in weights:
        if formats is not None and w.format not in formats:
            continue
        ok, why = cat.runnable(w.format, machine)
        if ok:
            out.append(w)
        elif why not in skipped:
            skipped.append(why)
    return sorted(out, key=lambda w: (w.load_tier, -w.quality, w.comfyui_loads != "stock", w.bytes)), skipped


@dataclass
class Candidate:
    profile: Profile
    settings: dict
    source: dict
    written: dict  # the settings as their files spell them, for sentences that quote them
    budget: Budget
    choice: Choice
    est: Estimate
    skipped: list
    searched: bool  # canvas/frames chosen by search (not fixed by the user)
    machine: Machine

    @property
    def loads(self) -> tuple:
        """The chosen files' load tiers, worst first: a smaller tuple is a plan more sure to load in ComfyUI."""
        ch = self.choice
        return tuple(sorted((w.load_tier for w in (ch.dit, ch.te, ch.vae, ch.audio_vae)), reverse=True))

    def rank(self) -> tuple:
        ch = self.choice
        return (self.est.fits, tuple(-t for t in self.loads), ch.dit.quality, ch.canvas[0] * ch.canvas[1],
                ch.frames, -ch.dit.bytes)


def plan_profile(cat: Catalog, fp: dict, machine: Machine, profile: Profile, config) -> Candidate:
    """The best plan `profile` gives this machine under `config` (see the module docstring for the order)."""
    settings, source, written = merge_settings(profile, config)
    budget = make_budget(cat, fp, settings, getattr(config, "comfyui_path", None),
                         cpu=profile.match.get("backend") == ["cpu"])
    formats = settings["formats"]
    if settings.get("quantization", "auto") != "auto":
        formats = [settings["quantization"]]
    dits, skipped = _pick(cat.dit, cat, machine, settings, "dit_weights", formats)
    if not dits:  # the user forced something this machine cannot run: keep it, warn later
        dits = [w for w in cat.dit if w.format in formats or w.id == settings.get("dit_weights")]
    tes, _ = _pick(cat.text_encoder, cat, machine, settings, "text_encoder_weights")
    vaes, _ = _pick(cat.vae, cat, machine, settings, "vae_weights")
    tes = tes or sorted(cat.text_encoder, key=lambda w: w.bytes)
    vaes = vaes or sorted(cat.vae, key=lambda w: w.bytes)
    audio = cat.audio_vae[0]
    canvases, frames = _ladder(cat, settings)
    fixed_canvas = source.get("max_canvas", "").startswith(("override", "calibration"))
    fixed_frames = source.get("max_frames", "").startswith(("override", "calibration"))
    if fixed_canvas:
        canvases = [settings["max_canvas"]]
    if fixed_frames:
        frames = [settings["max_frames"]]
    small = (canvases[-1], frames[0])

    def first_fit(dit, tes, vaes, canvas, nframes):
        for te in tes:
            for vae in vaes:
                ch = Choice(dit, te, vae, audio, canvas, nframes)
                est = estimate(cat, budget, settings, ch)
                if est.fits:
                    return ch, est
        return None

    def search(dits, tes, vaes):
        """The best DiT that fits at the smallest canvas, then the largest canvas and frames it allows."""
        chosen = next((found for dit in dits if (found := first_fit(dit, tes, vaes, *small))), None)
        if chosen is None:
            return None
        dit = chosen[0].dit
        for canvas in canvases:
            found = first_fit(dit, tes, vaes, canvas, frames[0])
            if found:
                chosen = found
                for nframes in reversed(frames):
                    bigger = first_fit(dit, tes, vaes, canvas, nframes)
                    if bigger:
                        chosen = bigger
                        break
                break
        return chosen

    # Files ComfyUI loads first; widen to unreported, then to reported-broken files only when nothing fits.
    chosen = None
    for level in sorted(set(LOAD_TIERS.values())):
        allowed = [[w for w in ws if w.load_tier <= level] for ws in (dits, tes, vaes)]
        if all(allowed) and (chosen := search(*allowed)):
            break
    if chosen is None:  # nothing fits: the cheapest plan, honestly marked
        dit = min(dits, key=lambda w: w.bytes)
        ch = Choice(dit, min(tes, key=lambda w: w.bytes), min(vaes, key=lambda w: w.bytes), audio, *small)
        return Candidate(profile, settings, source, written, budget, ch, estimate(cat, budget, settings, ch), skipped,
                         False, machine)
    return Candidate(profile, settings, source, written, budget, chosen[0], chosen[1], skipped,
                     not (fixed_canvas and fixed_frames), machine)
