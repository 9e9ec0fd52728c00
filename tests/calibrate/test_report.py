"""The calibration report: schema, Markdown, and an HTML page that a real browser renders offline.

`sample_doc` is an older report's shape (no `h3_model`, no clip time, no workflow defaults in the plan);
tests/calibrate/test_report_first_screen.py renders the newer documents of tests/fixtures/report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from browser_support import NO_CHROMIUM, chromium, headless
from h3kit.calibrate import report

CHART_IDS = ("native", "threads", "measured_vs_estimated", "memory", "tiles", "timeline", "h3_fit")


def sample_doc(with_tiles: bool = True) -> dict:
    """A document shaped like a real run's (numbers from a quick run on the 2-core test machine)."""
    blocks = [{"index": i, "seconds": 0.3, "wait_seconds": 0.01 * i, "compute_seconds": 0.29, "bytes": 1782784}
              for i in range(4)]
    timeline = []
    t = 0.0
    for b in blocks:
        timeline.append({"block": b["index"], "kind": "wait", "start": t, "end": t + b["wait_seconds"]})
        t += b["wait_seconds"]
        timeline.append({"block": b["index"], "kind": "compute", "start": t, "end": t + b["compute_seconds"]})
        t += b["compute_seconds"]
    tiles = [{"tile": s, "seconds": 1.0 / s * 200, "peak_bytes": s * s * 20000, "within_budget": s <= 512}
             for s in (128, 256, 384, 512, 640, 768)] if with_tiles else []
    return {
        "schema": report.SCHEMA, "created": "2026-11-30T19:30:00+00:00", "quick": True,
        "fingerprint": {"os": {"system": "linux", "release": "6.1"}, "arch": "x86_64",
                        "cpu": {"model": "Test CPU <&>", "physical_cores": 2, "logical_cores": 2},
                        "memory": {"total_bytes": 24 * 10**9}, "gpus": []},
        "plan": {"profile": "cpu-only", "fits": True,
                 "settings": {"quantization": "q5_0", "shard_size_bytes": 278000000, "preload_bytes": 0,
                              "vae_tile_size": 256, "max_canvas": [608, 352], "max_frames": 73},
                 "budget": {"gpu_bytes": 8 * 10**9, "ram_bytes": 22 * 10**9}},
        "native": {"status": "measured", "threads_max": 2,
                   "kernels": [{"kind": k, "op": op, "shape": [1024, 2048], "threads": 2, "seconds": 0.004,
                                "weight_gb_per_s": 0.5 if op == "matmul" else 8.0, "gflop_per_s": 31.0}
                               for k in ("q8_0", "q4_0") for op in ("matvec", "matmul")],
                   "scaling": [{"threads": 1, "gflop_per_s": 17.0}, {"threads": 2, "gflop_per_s": 31.0}],
                   "best": {"kind": "q8_0", "op": "matmul", "gflop_per_s": 31.0, "weight_gb_per_s": 0.5, "threads": 2}},
        "inference": {"status": "measured", "config": {"blocks": 4, "hidden": 512, "tokens": 384, "quantization": "q4_0"},
                      "blocks": blocks, "timeline": timeline, "seconds_per_block": 0.3, "relative_error": 0.11,
                      "kernel_relative_error": 4e-7, "wait_fraction": 0.02, "peak_rss_bytes": 61 * 10**6,
                      "baseline_rss_bytes": 42 * 10**6, "predicted_peak_rss_bytes": 62 * 10**6,
                      "bytes_streamed": 7 * 10**6},
        "device": {"status": "skipped", "reason": "torch sees no cuda, mps or xpu device"},
        "disk": {"status": "measured", "path": "/tmp", "gb_per_s": 1.8, "bytes": 128 << 20},
        "tiles": tiles,
        "estimates": {"label": "estimate", "seconds_per_step": 812.0, "peak_ram_bytes": 21 * 10**9,
                      "formulas": {"seconds_per_step": "max(compute, stream)"},
                      "check": {"measured_seconds_per_block": 0.3, "estimated_seconds_per_block": 0.21}},
        "real_model": {"status": "not run", "reason": "not run: pass --with-model"},
        "decisions": [{"setting": "vae_tile_size", "value": 512, "previous": 256, "changed": True,
                       "evidence": "tile 512 was fastest within budget"},
                      {"setting": "preload_bytes", "value": 0, "previous": 0, "changed": False, "evidence": "kept"}],
        "skipped": ["device rates and tile sweep: no GPU"],
        "duration_seconds": 12.5, "report_files": {},
    }


def test_written_report_is_valid_and_has_three_files_plus_latest(tmp_path):
    doc = sample_doc()
    files = report.write(doc, tmp_path)
    assert set(files) == {"json", "md", "html"}
    for ext, path in files.items():
        assert Path(path).is_file() and Path(path).name.startswith("calibration-")
        assert (tmp_path / f"latest.{ext}").read_bytes() == Path(path).read_bytes()
    loaded = json.loads(Path(files["json"]).read_text())
    assert report.validate(loaded) == []
    assert report.load_latest(tmp_path)["report_files"] == files


def test_validate_names_missing_and_wrong_keys():
    doc = sample_doc()
    del doc["disk"]
    doc["tiles"] = {}
    doc["decisions"].append({"setting": "x"})
    problems = report.validate(doc)
    assert "'disk' is missing" in problems
    assert any("'tiles'" in p for p in problems)
    assert any("decisions[2]" in p and "evidence" in p for p in problems)
    assert report.validate([]) == ["the document is not a JSON object"]


def test_markdown_has_every_section_and_the_estimate_label():
    md = report.to_markdown(sample_doc())
    headings = ["## What this machine can make", "## What calibration changed", "## Real workflow vs estimate",
                "## The model in ComfyUI's Python", "## Tile sweep", "## Disk", "## Machine", "## Profile",
                "## Appendix A: native kernels", "## Appendix B: scaled DiT", "## Appendix C: the native-kernel estimate"]
    positions = [md.index(h) for h in headings]
    assert positions == sorted(positions)  # the first screen first, the native-kernel figures last
    assert "**estimates**" in md
    assert "| vae_tile_size | 512 | 256 | tile 512 was fastest within budget |" in md
    # The kept decision is folded away, not dropped.
    assert "<details><summary>1 setting kept as planned</summary>" in md and "| preload_bytes | 0 B | kept |" in md


def test_an_older_report_without_clip_figures_still_says_what_it_knows():
    md = report.to_markdown(sample_doc())
    first = md.split("## What calibration changed")[0]
    # The plan's limits stand in for the canvas; the per-step estimate is said in minutes, never as 8.12e+02 s.
    assert "**608x352, 73 frames (3.0 s of video): about 14 min per step (this report has no step count)" in first
    assert "peak RAM 19.6 of 22.4 GiB" in first
    assert "formula estimate from h3kit's own native-kernel rate" in first
    assert "e+0" not in first


def test_html_is_self_contained_and_escapes_text():
    page = report.to_html(sample_doc())
    assert page.count('<svg class="chart') >= len(CHART_IDS)
    # Nothing to fetch: no scripts, no external URLs (the SVG namespace is an identifier, not a fetch).
    assert "<script" not in page
    urls = set(re.findall(r"(?:https?:)?//[^\s\"'<>)]+", page)) - {"http://www.w3.org/2000/svg"}
    assert not urls, urls
    assert "Test CPU &lt;&amp;&gt;" in page


def test_empty_charts_say_why():
    doc = sample_doc(with_tiles=False)
    ch = report.charts(doc)
    assert "tile sweep skipped" in ch["tiles"]


CHECK_SCRIPT = """<script>
const boxes = [...document.querySelectorAll('svg.chart')].map(s => {
  const b = s.getBoundingClientRect();
  const inner = [...s.querySelectorAll('rect,polyline,circle,text')].filter(e => {
    const r = e.getBoundingClientRect(); return r.width > 0 || r.height > 0; }).length;
  return {title: s.querySelector('title').textContent, w: b.width, h: b.height, drawn: inner,
          empty: s.classList.contains('empty')};
});
document.body.insertAdjacentHTML('beforeend', '<pre id="h3kit-' + 'check">' + JSON.stringify(boxes) + '</pre>');
</script>"""


@pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)
def test_every_chart_has_a_non_empty_box_in_headless_chromium(tmp_path):
    files = report.write(sample_doc(), tmp_path / "reports")
    page = Path(files["html"]).read_text(encoding="utf-8")
    # The report forbids scripts (CSP); the probe copy drops that one meta tag and adds the measuring script.
    probe = re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", page).replace("</body>", CHECK_SCRIPT + "</body>")
    probe_file = tmp_path / "probe.html"
    probe_file.write_text(probe, encoding="utf-8")
    proc = headless(tmp_path / "profile", "--virtual-time-budget=3000", "--dump-dom", probe_file.as_uri())
    m = re.search(r'<pre id="h3kit-check">(.*?)</pre>', proc.stdout, re.S)
    assert m, proc.stderr[-2000:]
    boxes = json.loads(m.group(1).replace("&quot;", '"'))
    assert len(boxes) >= len(CHART_IDS)
    for b in boxes:
        assert b["w"] > 100 and b["h"] > 50, b
        assert b["drawn"] >= (2 if b["empty"] else 4), b  # an empty chart is its box and the sentence why
    # The unmodified page renders too (screenshot), with its scripts-off policy in place.
    shot = tmp_path / "report.png"
    proc = headless(tmp_path / "profile2", "--window-size=1280,4000", f"--screenshot={shot}",
                    Path(files["html"]).as_uri())
    assert shot.is_file() and shot.stat().st_size > 10_000, proc.stderr[-2000:]
