"""The report's first screen: what this machine makes and how long a clip takes, in Markdown, HTML and Chromium.

The documents are tests/fixtures/report (SOURCES.md there): a real calibration in ComfyUI 0.33 on the
2-core CPU, a full calibration with every field of the calibration document (RTX 4090, --with-model), a table
estimate without ComfyUI (the recorded 2-core run plus the table's clip time), the recorded run as it is
(before those fields), and a Mac that streams the DiT from disk. Each expected sentence is written out here by hand from the fixture's
numbers, so a change in how the report reads them shows up as a failing test.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from browser_support import NO_CHROMIUM, chromium, headless
from h3kit.calibrate import report
from h3kit.core import units

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "report"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def older(doc: dict) -> dict:
    """The same run as an older report wrote it: no workflow defaults or warnings in the plan, fewer decision keys."""
    doc = json.loads(json.dumps(doc))
    for key in ("canvas", "frames", "steps"):
        doc["plan"]["settings"].pop(key, None)
    doc["plan"].pop("warnings", None)
    doc.pop("h3_model", None)
    doc["decisions"] = [{"setting": d["setting"], "value": d["value"], "evidence": d["evidence"]}
                        for d in doc["decisions"]]
    return doc


# name -> (document, what the first screen must say)
CASES = {
    "full": ("full-rtx4090.json", ["864x480", "124 frames (5.2 s of video)", "20 steps (balanced preset)",
                                   "about 5 min per clip", "peak GPU 14.2 of 24.0 GiB",
                                   "measured in ComfyUI's Python (ComfyUI 0.33.0, cuda, bfloat16"]),
    "table": ("table-cpu-2core.json", ["608x352", "73 frames (3.0 s of video)", "20 steps",
                                       "about 2 h 57 min per clip", "peak RAM 20.1 of 23.5 GiB",
                                       "table estimate: no ComfyUI was measured",
                                       "One clip takes about 3 h on this machine"]),
    "old": ("quick-cpu-2core.json", ["608x352", "73 frames (3.0 s of video)", "20 steps",
                                     "about 12 h 15 min per clip (sampling only)", "peak RAM 20.1 of 23.5 GiB",
                                     "formula estimate from h3kit's own native-kernel rate",
                                     "One clip takes about 12 h 15 min"]),
    "comfy33": ("comfy33-cpu-2core.json", ["512x288", "22 frames (0.9 s of video)", "6 steps (fast preset)",
                                          "about 43 min per clip", "peak RAM 34.1 of 23.5 GiB",
                                          "measured in ComfyUI's Python (ComfyUI 0.33.0, cpu, float32",
                                          "The estimated peak (34.1 GiB) is more than this machine's memory"]),
    "streaming": ("streaming-m2pro-32gb.json", ["640x352", "73 frames (3.0 s of video)", "6 steps (fast preset)",
                                                "about 3 min per clip", "peak RAM 18.4 of 32.0 GiB (unified memory)",
                                                "measured in ComfyUI's Python"]),
}


def md_first_screen(md: str) -> str:
    return md.split("\n## ", 2)[1]  # the section after the title, up to the next heading


def html_first_screen(page: str) -> str:
    m = re.search(r"<section class='first'>(.*?)</section>", page, re.S)
    assert m, "no first-screen section"
    return m.group(1)


class _Text(HTMLParser):
    """The visible text of an HTML fragment, with entities decoded (what a reader sees)."""

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


def text_of(fragment: str) -> str:
    p = _Text()
    p.feed(fragment)
    return re.sub(r"\s+", " ", "".join(p.parts))


@pytest.mark.parametrize("case", sorted(CASES))
def test_first_screen_says_canvas_frames_video_seconds_steps_time_and_peak(case):
    name, expected = CASES[case]
    doc = load(name)
    md, page = report.to_markdown(doc), report.to_html(doc)
    first_md, first_html = md_first_screen(md), text_of(html_first_screen(page))
    assert first_md.startswith("What this machine can make")
    for text in expected:
        assert text in first_md, (text, first_md[:800])
        assert text in first_html, (text, first_html[:800])
    # Human units only: no 8.51e+03 s on the first screen (the appendix keeps raw rates).
    assert not re.search(r"\d(\.\d+)?e[+-]?\d", first_md), first_md
    # The first screen comes before every other section in both formats.
    assert md.index("## What this machine can make") < md.index("## What calibration changed")
    assert page.index("<section class='first'>") < page.index("What calibration changed")


def test_an_older_report_and_an_empty_one_still_render():
    old = older(load("quick-cpu-2core.json"))
    md = report.to_markdown(old)
    first = md_first_screen(md)
    # The plan's memory limits stand in for the workflow defaults; without a step count the time is per step.
    assert "**608x352, 73 frames (3.0 s of video): about 37 min per step (this report has no step count)" in first
    assert "Not measured: this report predates the measurement in ComfyUI's Python." in md
    assert "Calibration changed nothing" in md and "4 settings kept as planned" in md
    bare = {"schema": report.SCHEMA, "decisions": [{"setting": "x"}], "plan": {"estimates": None}, "native": []}
    for text in (report.to_markdown(bare), text_of(report.to_html(bare))):
        assert "no time estimate" in text and "the plan's canvas" in text


def test_decisions_show_what_changed_with_evidence_and_fold_the_rest():
    doc = load("full-rtx4090.json")
    md, page = report.to_markdown(doc), report.to_html(doc)
    assert ("| canvas | 864x480 | 1344x768 | measured 74 min per clip at 1344x768; 864x480 is the largest canvas "
            "within target_minutes 15 (5.4 min) |") in md
    # The timing mapping is named by its source, not dumped as a dict.
    assert "| timing | calibrated 2026-12-01 in ComfyUI's Python (cuda, bfloat16) | table: nvidia ada 24 GB |" in md
    assert "<details><summary>2 settings kept as planned</summary>" in page
    kept = page.split("<details><summary>2 settings kept as planned</summary>")[1].split("</details>")[0]
    assert "balanced meets target_minutes with the best quality; kept" in kept
    assert md.index("## What calibration changed") < md.index("## Faster or better") < md.index(
        "## Real workflow vs estimate") < md.index("## The model in ComfyUI's Python") < md.index("## Appendix A")


def test_alternatives_table_gives_each_option_its_time_and_memory():
    md = report.to_markdown(load("full-rtx4090.json"))
    table = md.split("## Faster or better")[1].split("\n## ")[0]
    assert "| this plan | 864x480, 124 frames, 20 steps, balanced preset, bf16 | 5 min | GPU 14.2 of 24.0 GiB |" in table
    assert "| fast preset | 864x480, 124 frames, 6 steps, fast preset, bf16 | 3 min | GPU 14.6 of 24.0 GiB |" in table
    assert "| another quantization | 864x480, 124 frames, 20 steps, balanced preset, fp8_scaled | 5 min |" in table
    assert "| better: the plan's largest canvas | 1344x768, 243 frames, 20 steps, quality preset, bf16 | 74 min |" in table
    chart = report.charts(load("full-rtx4090.json"))["alternatives"]
    assert "fast preset: 3 min" in chart and "74 min" in chart


def test_with_model_puts_measured_beside_estimated_with_the_difference_in_percent():
    doc = load("full-rtx4090.json")
    md = report.to_markdown(doc)
    section = md.split("## Real workflow vs estimate")[1].split("\n## ")[0]
    estimated = doc["real_model"]["compare"]["seconds_per_step"]["estimated"]
    assert f"| seconds per step | 12.4 s | {units.precise_seconds(estimated)} | -3% |" in section
    assert "| peak RAM (RSS) | 16.7 GiB | 17.1 GiB | +3% |" in section
    # Without --with-model the section is one sentence saying so.
    assert "not run: pass --with-model" in report.to_markdown(load("table-cpu-2core.json"))


def test_streaming_split_compute_vs_waiting_for_disk():
    doc = load("streaming-m2pro-32gb.json")
    md = report.to_markdown(doc)
    section = md.split("## Streaming: computing vs waiting for disk")[1].split("\n## ")[0]
    assert "computing a block takes 234 ms, reading one 277 ms at 2.90 GB/s, 2 blocks read ahead" in section
    assert "about 3% of the sampling time waits for the disk" in section
    svg = report.charts(doc)["streaming_split"]
    assert "computing 97%" in svg and "waiting for disk 3%" in svg
    assert "<rect" in report.charts(doc)["streaming_block"]
    # A measured split (the streamed loader's stats) is drawn from its seconds.
    doc["streaming"].update({"wait_s": 1.0, "compute_s": 3.0})
    assert "waiting for disk 25%" in report.charts(doc)["streaming_split"]
    # A plan that does not stream has no such section.
    assert "Streaming" not in report.to_markdown(load("full-rtx4090.json"))


def test_streaming_on_a_cpu_counts_the_in_place_read_beside_compute_and_waiting():
    doc = load("streaming-m2pro-32gb.json")
    doc["streaming"].update({"copy_s_per_block": 0.039, "direct_read_bytes_per_s": 8.8e9, "pass_overhead": 0.2})
    section = report.to_markdown(doc).split("## Streaming: computing vs waiting for disk")[1].split("\n## ")[0]
    assert "read into its fp32 buffers while the model waits: 39 ms a block at 8.80 GB/s" in section
    assert "streaming makes each model call about 20% longer" in section
    assert "| added to each model call | 20% |" in section
    svg = report.charts(doc)["streaming_split"]
    assert "reading into buffers" in svg and "computing" in svg and "waiting for disk" in svg


def test_native_kernel_figures_are_an_appendix_after_the_measurements():
    md = report.to_markdown(load("quick-cpu-2core.json"))
    assert md.index("## The model in ComfyUI's Python") < md.index("## Appendix A: native kernels")
    appendix = md.split("## Appendix A: native kernels")[1]
    assert "not** what the clip time above is based on" in appendix
    assert "| q4_0 | matmul |" in appendix  # the kernel table itself moved, it did not go away


def test_model_section_shows_points_fit_and_chart():
    doc = load("full-rtx4090.json")
    md = report.to_markdown(doc)
    section = md.split("## The model in ComfyUI's Python")[1].split("\n## ")[0]
    assert "2 of 50 blocks built" in section and "| 12555 | 1 | 436 ms | 436 ms | 236 ms | 236 ms |" in section
    assert "| fit residual | 2% | 1.8 |" in section
    chart = report.charts(doc)["h3_fit"]
    assert chart.count("<circle") == 3  # the measured points; the fit is drawn as a line through them
    assert chart.count("<polyline") == 2


def test_units_additions():
    assert units.gib_of(14.2 * 2**30, 16 * 2**30) == "14.2 of 16.0 GiB"
    assert units.gib_of(None, 16) == "?" and units.gib_of(2**30, None) == "1.0 GiB"
    assert units.human_rate(1.8e9) == "1.80 GB/s" and units.human_rate(None) == "unknown"
    assert [units.percent(x, signed=True) for x in (0.12, -0.08, 0.004, 0.0)] == ["+12%", "-8%", "+0.4%", "0%"]
    assert [units.precise_seconds(x) for x in (0.0288, 12.4, 124.3, 8510.0)] == ["28.8 ms", "12.4 s", "124 s",
                                                                                  "2 h 22 min"]


# --- headless Chromium -------------------------------------------------------------------------------

def page_requests(netlog: Path) -> list[str]:
    """URLs the page itself asked the network for: requests keyed to the file:// page (the browser's own
    background requests carry no such key)."""
    log = json.loads(netlog.read_text(encoding="utf-8"))
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [e["params"]["url"] for e in log["events"] if e.get("type") == start
            and "file://" in str((e.get("params") or {}).get("network_isolation_key", ""))]


RECT_SCRIPT = """<script>
const r = e => { const b = e.getBoundingClientRect(); return {top: b.top, bottom: b.bottom}; };
const out = {viewport: window.innerHeight, headline: r(document.querySelector('p.headline')),
             warn: document.querySelector('ul.warn li') ? r(document.querySelector('ul.warn li')) : null};
document.body.insertAdjacentHTML('beforeend', '<pre id="h3kit-' + 'rect">' + JSON.stringify(out) + '</pre>');
</script>"""

STATIC_RESOURCE = re.compile(r"""\b(?:src|href|srcset|poster|data)\s*=|url\(|@import|<link\b|<script\b|<img\b|<iframe\b|
                                 <object\b|<embed\b|<video\b|<audio\b""", re.I | re.X)


@pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)
@pytest.mark.parametrize("case", ["full", "table", "comfy33"])
def test_chromium_renders_the_first_screen_and_fetches_nothing(case, tmp_path):
    name, expected = CASES[case]
    files = report.write(load(name), tmp_path / "reports")
    page = Path(files["html"]).read_text(encoding="utf-8")
    assert not STATIC_RESOURCE.search(page), STATIC_RESOURCE.search(page)
    # 1. The page as written (scripts forbidden by its CSP): the first screen's text is in the rendered DOM.
    proc = headless(tmp_path / "p1", "--dump-dom", Path(files["html"]).as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = text_of(html_first_screen(proc.stdout.replace('"first"', "'first'")))
    for text in expected:
        assert text in first, (text, first[:600])
    # 2. A probe copy without the CSP and with a measuring script, in a 1280x900 window: the headline and the
    #    first warning lie on the first screen, and the page asks the network for nothing (net log).
    probe = re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", page).replace("</body>", RECT_SCRIPT + "</body>")
    probe_file = tmp_path / "probe.html"
    probe_file.write_text(probe, encoding="utf-8")
    netlog = tmp_path / "net.json"
    proc = headless(tmp_path / "p2", "--window-size=1280,900", "--virtual-time-budget=3000",
                    f"--log-net-log={netlog}", "--dump-dom", probe_file.as_uri())
    m = re.search(r'<pre id="h3kit-rect">(.*?)</pre>', proc.stdout, re.S)
    assert m, proc.stderr[-2000:]
    rect = json.loads(m.group(1).replace("&quot;", '"'))
    assert 0 <= rect["headline"]["top"] and rect["headline"]["bottom"] <= rect["viewport"], rect
    if case != "full":
        assert rect["warn"] and rect["warn"]["top"] < rect["viewport"], rect
    assert page_requests(netlog) == []


@pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)
def test_the_network_check_sees_a_page_that_fetches(tmp_path):
    """Negative control for the check above: a page with one external image and one stylesheet is caught."""
    page = tmp_path / "fetching.html"
    page.write_text("<html><body><img src='http://127.0.0.1:9/x.png'>"
                    "<link rel=stylesheet href='http://127.0.0.1:9/a.css'>hi</body></html>", encoding="utf-8")
    netlog = tmp_path / "net.json"
    headless(tmp_path / "p", "--virtual-time-budget=2000", f"--log-net-log={netlog}", "--dump-dom", page.as_uri())
    assert sorted(page_requests(netlog)) == ["http://127.0.0.1:9/a.css", "http://127.0.0.1:9/x.png"]
    assert STATIC_RESOURCE.search(page.read_text(encoding="utf-8"))


def _paths(d: dict, depth: int, path: tuple = ()):
    for key, value in d.items():
        yield path + (key,)
        if isinstance(value, dict) and depth > 1:
            yield from _paths(value, depth - 1, path + (key,))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted({c[0] for c in CASES.values()}))
def test_a_part_missing_or_of_another_type_never_stops_the_report(name):
    """Older and hand-edited documents: every key down to depth 3 deleted, None or a string, one at a time."""
    base = load(name)
    for path in _paths(base, 3):
        for replacement in ("delete", None, "x"):
            doc = json.loads(json.dumps(base))
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            if replacement == "delete":
                del parent[path[-1]]
            else:
                parent[path[-1]] = replacement
            md = report.to_markdown(doc)
            assert "## What this machine can make" in md, path
            assert "<section class='first'>" in report.to_html(doc), path
            assert report.summary_lines(doc), path
