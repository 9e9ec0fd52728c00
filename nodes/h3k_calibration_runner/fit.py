"""Pure arithmetic for the H3 model measurement: token counts, repeat-until-stable timing, the timing fit.

Standard library only and no clock of its own (the timing loop takes one),
so every function here is tested on made-up points.

The model behind the fit (seconds for one call of the diffusion model with
`n` blocks at `T` tokens):

    call(T, n) = F0 + F1*T + n * (c + a*T + b*T**2)

`b` comes from timing ComfyUI's attention function alone (it is the only
quadratic part), `c` and `a` from the blocks' own times inside real model
calls (minus their attention share), `F0` and `F1` from the rest of the
call (embeddings, RoPE table, final layer). The rates mapping h3kit plans
with has no per-block constant, so `c` (the AdaLN projection and weight
reads that do not grow with tokens) is folded into `step_fixed_s` for the
file's own depth: `step_fixed_s = F0 + blocks_total * c`.
"""

from __future__ import annotations

import statistics

VIDEO_PATCH = (1, 2, 2)  # H3's DiT patch (time, height, width) over the latent
SPATIAL = 16  # pixels per latent cell (the H3 video VAE's 16x)
AUDIO_LATENTS_PER_S = 40
VIDEO_FPS = 24


def snap_frames(frames: int) -> int:
    """Frames rounded up to 17k+5, as MiniMaxH3ImageToVideo / EmptyMiniMaxH3LatentAV do."""
    frames = max(5, int(frames))
    return 5 + -(-(frames - 5) // 17) * 17


def latent_frames(frames: int) -> int:
    f = snap_frames(frames)
    return 2 if f <= 5 else (f - 5) // 17 * 5 + 2


def audio_latent_frames(frames: int) -> int:
    return round(snap_frames(frames) / VIDEO_FPS * AUDIO_LATENTS_PER_S)


def tokens_for(width: int, height: int, frames: int, text_tokens: int) -> int:
    """Packed sequence length of one t2va call: text + 2 stereo rows per audio latent + video patches."""
    lat_h = -(-int(height) // SPATIAL)
    lat_w = -(-int(width) // SPATIAL)
    video = latent_frames(frames) * (-(-lat_h // VIDEO_PATCH[1])) * (-(-lat_w // VIDEO_PATCH[2]))
    return int(text_tokens) + 2 * audio_latent_frames(frames) + video


def spread(values) -> float:
    """(max - min) / median: 0 for identical runs; None for fewer than two runs or a zero median."""
    values = list(values)
    if len(values) < 2:
        return None
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else None


def low_median(values) -> float:
    """The median of the fastest third of `values` (at least one run): other work on the machine only ever
    slows a run down, so the slow runs are the machine's, not the model's. A plain median of three moves
    as soon as two are slowed; this moves only when all of a third's runs are."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no runs to take a median of")
    return statistics.median(ordered[:max(1, -(-len(ordered) // 3))])


def repeat_until_stable(run, clock, *, warmup: int = 1, min_runs: int = 3, max_runs: int = 30, window: int = 3,
                        target: float = 0.05, cap_s: float = 10.0) -> dict:
    """Call `run()` (which returns its own seconds) until the last `window` runs agree within `target`.

    Warm-up calls first (not counted). After `min_runs` counted runs it stops
    as soon as the last `window` (at least two) runs agree, or when the time
    spent passes `cap_s`; never more than `max_runs`. Returns {"seconds":
    median of the last window, "spread", "runs", "stable", "all"}.
    """
    for _ in range(warmup):
        run()
    started = clock()
    times: list[float] = []
    stable = False
    while len(times) < max_runs:
        times.append(run())
        if len(times) < min_runs:
            continue
        tail = times[-window:]
        if len(tail) >= 2 and (spread(tail) or 0.0) <= target:
            stable = True
            break
        if clock() - started >= cap_s:
            break
    tail = times[-window:]
    return {"seconds": statistics.median(tail), "spread": spread(tail), "runs": len(times), "stable": stable,
            "all": times}


def solve(rows: list[list[float]], ys: list[float]) -> list[float]:
    """Least squares by the normal equations (few unknowns); ValueError when the points cannot separate them."""
    n = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(n)]
    m = [row[:] + [v] for row, v in zip(ata, aty)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        scale = max(abs(m[r][col]) for r in range(n)) or 1.0
        if abs(m[piv][col]) <= 1e-12 * scale:
            raise ValueError("the points do not separate the unknowns (too few distinct token counts)")
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [a - f * b for a, b in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) >= 0 of seconds against tokens; through the origin when the intercept comes out negative."""
    xs = sorted({x for x, _ in points})
    if len(xs) >= 2:
        c, a = solve([[1.0, x] for x, _ in points], [y for _, y in points])
        if c >= 0 and a >= 0:
            return c, a
        if a < 0:  # time falling with tokens is noise: a constant
            return max(0.0, statistics.mean(y for _, y in points)), 0.0
    a = sum(x * y for x, y in points) / sum(x * x for x, _ in points)
    return 0.0, max(0.0, a)


def attention_rate(points: list[dict], heads: int) -> float:
    """Seconds per query token per key token for all `heads` heads, from timed attention calls.

    Each point: {"tokens" (keys), "query_tokens", "heads", "seconds"}; a call
    costs about rate * query_tokens * tokens * heads / point heads.
    """
    if not points:
        return 0.0
    num = sum(p["seconds"] * p["query_tokens"] * p["tokens"] * heads / p["heads"] for p in points)
    den = sum((p["query_tokens"] * p["tokens"]) ** 2 for p in points)
    return num / den if den else 0.0


COMPUTE_BOUND = 0.10  # a line constant under this share of the largest point's block time is noise-sized (3% point noise
# moves it about 2.5%); above it it is real (on a CPU the small-row inefficiency: 0.4 s of 2.8 s at 480 rows)


ANCHOR_ROWS = 48  # a point at or under this many rows (the fewest a call has is about 32) pins the constant


def fit_anchored(points: list[tuple[float, float]]) -> tuple[float, float, str] | None:
    """(c, a, how) of block seconds = c + a*T with the constant pinned by the point at the fewest rows.

    A line's intercept through points 80-320 rows apart is ill-conditioned:
    10% on the top point moved the per-block constant 3x between two quick
    runs (and with it the per-step fixed cost, blocks x that constant),
    while the block time between the points stayed within 5%. A block timed
    at the fewest rows a call can have (ANCHOR_ROWS) is almost all constant,
    so the constant is taken there (that time minus its few rows' share) and
    the slope fitted through it by relative error (each point's timing noise
    is a share of its time, so no point dominates by being the slowest).
    None without such a point and two others above it.
    """
    low = [p for p in points if p[0] <= ANCHOR_ROWS]
    rest = [p for p in points if p[0] > ANCHOR_ROWS and p[1] > 0]
    if not low or len({x for x, _ in rest}) < 2:
        return None
    t0 = statistics.median(x for x, _ in low)
    y0 = statistics.median(y for _, y in low)
    c, a = y0, 0.0
    for _ in range(20):  # c = y0 - a*t0 and a through c converge in a few rounds (t0 is small)
        num = sum((y - c) * x / (y * y) for x, y in rest)
        den = sum(x * x / (y * y) for x, y in rest)
        a = max(0.0, num / den)
        c = max(0.0, y0 - a * t0)
    return c, a, f"constant from the block at {t0:.0f} rows, slope by relative error"


def fit_block(points: list[tuple[float, float]], constant_s: float | None = None) -> tuple[float, float, str]:
    """(c, a, how) of block seconds = c + a*T.

    With a point at the fewest rows, `fit_anchored`. Otherwise (runs
    recorded before it was timed):

    A straight line through the points, unless the block is compute-bound
    (the line's constant is under COMPUTE_BOUND of the block time at the
    largest point, or negative): then the constant is small and the line's
    estimate of it mostly noise, which the slope then inherits and every
    extrapolation above the points amplifies. There the constant leans on
    the one measured directly (`constant_s`: the AdaLN projection, the
    block's work that does not grow with tokens), the more the smaller the
    line's share, and the slope is fitted through it. The lean is gradual so
    that a constant near the bound gives the same fit whichever side of it
    a run's noise puts it (a hard switch moved the per-step fixed cost 3x
    between two quick runs).
    """
    anchored = fit_anchored(points)
    if anchored is not None:
        return anchored
    c, a = fit_line(points)
    top = max(points)[0]
    share = c / (c + a * top) if c + a * top > 0 else 1.0
    if constant_s is None or share >= COMPUTE_BOUND:
        return c, a, "line"
    lean = max(0.0, share) / COMPUTE_BOUND  # 1 at the bound (the line's constant), 0 at none (the measured one)
    c = lean * max(0.0, c) + (1.0 - lean) * max(0.0, float(constant_s))
    num = sum((y - c) * x for x, y in points)
    den = sum(x * x for x, _ in points)
    return c, max(0.0, num / den), "slope through the measured block constant" + (
        f" ({lean:.0%} of the way to the line's)" if lean > 0 else "")


def fit_timing(calls: list[dict], attention_points: list[dict], heads: int, blocks_total: int,
               block_constant_s: float | None = None) -> dict:
    """The rates mapping from timed model calls.

    `calls`: {"tokens", "blocks", "seconds", "block_seconds": [one per block, or empty]}.
    Calls with per-block times give the block fit and the fixed part
    (seconds minus the blocks); the residual is over every call, so a call
    without per-block times (the one-block check) tests the fit.
    """
    b = attention_rate(attention_points, heads)
    block_pts, fixed_pts = [], []
    for c in calls:
        per = c.get("block_seconds") or []
        if per:
            t = c["tokens"]
            block_pts += [(t, s - b * t * t) for s in per]
            fixed_pts.append((t, c["seconds"] - sum(per)))
    if not block_pts:
        raise ValueError("no call has per-block times")
    c_blk, a, how = fit_block(block_pts, block_constant_s)
    f0, f1 = fit_line(fixed_pts)
    errors = []
    for c in calls:
        t, n = c["tokens"], c["blocks"]
        predicted = f0 + f1 * t + n * (c_blk + a * t + b * t * t)
        c["predicted_seconds"] = predicted
        errors.append(abs(predicted - c["seconds"]) / c["seconds"] if c["seconds"] > 0 else 0.0)
    return {"block_s_per_token": a, "block_s_per_token2": b, "step_fixed_s": f0 + blocks_total * c_blk,
            "step_fixed_s_per_token": f1, "block_fixed_s": c_blk, "call_fixed_s": f0,
            "blocks_folded": blocks_total, "block_fit": how, "block_constant_measured_s": block_constant_s,
            "residual_pct": 100.0 * (sum(e * e for e in errors) / len(errors)) ** 0.5 if errors else None}


def seconds_per_call(fit: dict, blocks: int, tokens: int) -> float:
    """The plan's formula (plan/timing.py): blocks*(a*T + b*T^2) + step_fixed_s + step_fixed_s_per_token*T.

    step_fixed_s already holds the per-block constant for `blocks_folded`
    blocks; a different depth moves it by the difference.
    """
    t = float(tokens)
    extra = (blocks - fit.get("blocks_folded", blocks)) * fit.get("block_fixed_s", 0.0)
    return (blocks * (fit["block_s_per_token"] * t + fit["block_s_per_token2"] * t * t)
            + fit["step_fixed_s"] + extra + fit.get("step_fixed_s_per_token", 0.0) * t)
