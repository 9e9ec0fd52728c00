"""The measurement behind the clip time: ComfyUI's own H3 transformer, timed in ComfyUI's Python.

The runner builds the real architecture at full width with a few blocks
(`h3_model`, interfaces D) and times it at two or three token counts; the
fit (a linear and an attention term per block, plus a fixed part per
model call) is what the clip time is extrapolated from. This section shows
the points, the fitted curve through them and how far the fit is off, so a
reader can judge the extrapolation.
"""

from __future__ import annotations

from h3kit.calibrate.report.model import LineChart, NoChart, Paragraph, Section, Table
from h3kit.calibrate.report import figures
from h3kit.calibrate.report.text import fmt, hb
from h3kit.core.units import human_seconds, percent, precise_seconds


def _num(x) -> float | None:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else None


def _dict(x) -> dict:
    return x if isinstance(x, dict) else {}


def per_block(point: dict) -> float | None:
    """Seconds of one block at one token count: the mean of the per-block clocks when the runner kept them,
    else the call's seconds over its blocks (an upper bound: it includes the call's fixed part)."""
    clocks = [x for x in point.get("block_seconds") or [] if _num(x) is not None]
    if clocks:
        return sum(clocks) / len(clocks)
    if "block_seconds" in point:
        return None  # a call timed without per-block clocks (the fit's check): only its total is known
    s, b = _num(point.get("seconds")), _num(point.get("blocks"))
    if s is None:
        return None
    return s / b if b else s


def fitted(fit: dict, tokens: float) -> float | None:
    """The fit's seconds for one block at `tokens`: c + a T + b T^2 (c: the per-block constant, when fitted)."""
    a, b = _num(fit.get("block_s_per_token")), _num(fit.get("block_s_per_token2"))
    if a is None and b is None:
        return None
    return (_num(fit.get("block_fixed_s")) or 0.0) + (a or 0.0) * tokens + (b or 0.0) * tokens * tokens


def _arch_sentence(h3: dict) -> str:
    arch = _dict(h3.get("arch"))
    where = ", ".join(str(x) for x in (f"ComfyUI {h3['comfyui_version']}" if h3.get("comfyui_version") else None,
                                       h3.get("device"), h3.get("dtype"), h3.get("attention")) if x)
    shape = ""
    if arch.get("hidden"):
        shape = (f"hidden {arch['hidden']} ({arch.get('heads')} heads x {arch.get('head_dim')}), FFN {arch.get('ffn')}, "
                 f"{arch.get('blocks_built')} of {arch.get('blocks_total')} blocks built")
        shape += f" (width {arch['from']})" if arch.get("from") else ""
    text = "ComfyUI's own H3 transformer with random weights"
    text += f", {shape}" if shape else ""
    text += f"; run in {where}" if where else ""
    return text + (f"; took {human_seconds(_num(h3.get('seconds')), '-')}" if _num(h3.get("seconds")) else "") + "."


def _memory_row(key: str, value) -> tuple:
    """`weights_bytes_per_block` -> ("weights per block", "804.60 MB"); a byte count with units, else as it is."""
    name, _, per = key.partition("_bytes")
    if "bytes" not in key or _num(value) is None:
        return key.replace("_", " "), fmt(value)
    return (name.replace("_", " ") + (" " + per.strip("_").replace("_", " ") if per else "")), hb(value)


def _fit_rows(fit: dict) -> list[tuple]:
    rows = []
    a, b = _num(fit.get("block_s_per_token")), _num(fit.get("block_s_per_token2"))
    if a is not None:
        rows.append(("per block, linear part", f"{precise_seconds(a * 1000)} per 1000 tokens", fmt(a)))
    if b is not None:
        rows.append(("per block, attention part", f"{precise_seconds(b * 1e6)} per (1000 tokens)^2", fmt(b)))
    if _num(fit.get("step_fixed_s")) is not None:
        rows.append(("per model call, outside the blocks", precise_seconds(fit["step_fixed_s"]), fmt(fit["step_fixed_s"])))
    if _num(fit.get("step_fixed_s_per_token")):
        rows.append(("  its part that grows with tokens", f"{precise_seconds(fit['step_fixed_s_per_token'] * 1000)} "
                     "per 1000 tokens", fmt(fit["step_fixed_s_per_token"])))
    if _num(fit.get("residual_pct")) is not None:
        rows.append(("fit residual", percent(fit["residual_pct"] / 100.0), fmt(fit["residual_pct"])))
    return rows


def _repeatability(rep: dict) -> list:
    """This run's figures beside the earlier calibrations of the same setup (calibrate/repeatability.py)."""
    runs = [r for r in rep.get("runs") or [] if isinstance(r, dict)]
    if not runs or not rep.get("sentence"):
        return []
    out: list = [Paragraph((rep["sentence"],))]
    if len(runs) > 1:
        spread = _dict(rep.get("spread_pct"))
        rows = [(str(r.get("created") or "?"), precise_seconds(_num(r.get("seconds_per_step"))),
                 precise_seconds(_num(r.get("block_seconds"))), precise_seconds(_num(r.get("step_fixed_s"))))
                for r in runs]
        rows.append(("spread", *(percent(spread[k] / 100.0) if _num(spread.get(k)) is not None else "-"
                                 for k in ("seconds_per_step", "block_seconds", "step_fixed_s"))))
        out.append(Table(("calibration", "seconds per step", "one block at the workflow's rows",
                          "per-step fixed cost"), tuple(rows)))
    return out


def h3_model(doc: dict) -> Section:
    """Points, fit and memory of the H3 transformer measured in ComfyUI's Python (or why it was not)."""
    h3 = _dict(doc.get("h3_model"))
    title = "The model in ComfyUI's Python"
    if h3.get("status") != "measured":
        why = h3.get("reason") or ("this report predates the measurement in ComfyUI's Python" if not h3 else "not run")
        return Section(title, [NoChart("h3_fit", "Seconds per block vs tokens", f"not measured: {why}"),
                               Paragraph((f"Not measured: {why}.",))])
    points = [p for p in h3.get("points") or [] if isinstance(p, dict) and _num(p.get("tokens"))]
    fit = _dict(h3.get("fit"))
    blocks: list = [Paragraph((_arch_sentence(h3),), "note")]
    measured = [(p["tokens"], per_block(p)) for p in points if per_block(p) is not None]
    if measured:
        series = {"measured": measured}
        hi = max(t for t, _ in measured)
        curve = [(hi * i / 8, fitted(fit, hi * i / 8)) for i in range(1, 9)]
        if all(y is not None for _, y in curve):
            series["fit"] = curve
        blocks.append(LineChart("h3_fit", "Seconds per block vs tokens: measured points and the fit", series, "tokens",
                                "seconds per block", xticks=tuple(sorted({t for t, _ in measured})), curves=("fit",)))
    else:
        blocks.append(NoChart("h3_fit", "Seconds per block vs tokens", "the runner recorded no per-block times"))
    if points:
        blocks.append(Table(("tokens", "blocks", "model call", "fit: call", "per block", "fit: block", "spread",
                             "runs"),
                            tuple((int(p["tokens"]), p.get("blocks"), precise_seconds(_num(p.get("seconds"))),
                                   precise_seconds(_num(p.get("predicted_seconds"))), precise_seconds(per_block(p)),
                                   precise_seconds(fitted(fit, p["tokens"])), percent(_num(p.get("spread"))),
                                   p.get("runs")) for p in points)))
    rows = _fit_rows(fit)
    if rows:
        blocks.append(Table(("fitted rate", "for people", "value"), tuple(rows)))
    blocks += _repeatability(_dict(doc.get("repeatability")))
    attn = [p for p in h3.get("attention_points") or [] if isinstance(p, dict)]
    if attn:
        blocks.append(Table(("attention alone: tokens", "heads", "seconds"),
                            tuple((p.get("tokens"), p.get("heads"), precise_seconds(_num(p.get("seconds"))))
                                  for p in attn)))
    mem = _dict(h3.get("memory"))
    if mem:
        blocks.append(Table(("memory", "value"), tuple(_memory_row(k, v) for k, v in mem.items()
                                                      if v is not None and not isinstance(v, (dict, list)))))
    for part, name in (("vae", "VAE decoder"), ("text_encoder", "text encoder")):
        p = _dict(h3.get(part))
        if not p:
            continue
        if p.get("status") == "measured":
            figures = [f"tile {p['tile']} px" if p.get("tile") else None,
                       f"{human_seconds(p['seconds_per_tile'])} per tile" if _num(p.get("seconds_per_tile")) else None,
                       f"{human_seconds(p['text_encode_s'])} per prompt" if _num(p.get("text_encode_s")) else None,
                       p.get("how")]
            blocks.append(Paragraph((f"{name}: measured, " + ", ".join(str(f) for f in figures if f) + ".",), "note"))
        else:
            blocks.append(Paragraph((f"{name}: not measured ({p.get('reason') or p.get('status') or '-'}).",), "note"))
    return Section(title, blocks)


def timing_rates(doc: dict) -> Section | None:
    """The rates the clip time was computed from (mapping A), as the config's `timing:` would hold them."""
    est = _dict(doc.get("estimates"))
    timing = _dict(est.get("timing")) or dict(figures.planned(doc).settings.timing)
    if not timing:
        return None
    rows = tuple((k, fmt(v) if not isinstance(v, str) else v) for k, v in timing.items()
                 if not isinstance(v, (dict, list)))
    return Section("Rates the clip time is computed from", [
        Paragraph(("seconds per model call = blocks x (linear x T + attention x T^2) + fixed; per clip = steps x "
                   "calls per step x that + text encode + VAE decode (T = tokens).",), "note"),
        Table(("rate", "value"), rows)])


def memory_parts(doc: dict) -> Section | None:
    """Where the estimated peak RAM goes (estimates.memory.parts), with its formula; None when absent."""
    mem = _dict(_dict(doc.get("estimates")).get("memory"))
    parts = _dict(mem.get("parts"))
    if not parts:
        return None
    rows = tuple((k.removesuffix("_bytes").replace("_", " "), hb(v)) for k, v in parts.items() if _num(v) is not None)
    blocks: list = [Table(("part", "bytes"), rows + (("peak RSS", hb(mem.get("peak_rss_bytes"))),))]
    if mem.get("formula"):
        blocks.append(Paragraph((f"peak RSS = {mem['formula']}.",), "note"))
    return Section("Peak memory, part by part", blocks)
