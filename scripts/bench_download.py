"""Download throughput on 127.0.0.1: h3kit's Downloader (sha256 while streaming, 64 KiB reads) against a
baseline of plain requests streaming to a file without hashing, in the same run.

    python scripts/bench_download.py --json [--mb 128] [--runs 3]

Prints one JSON object last: size_mb, runs, baseline_s (median), h3kit_s (median), ratio (h3kit / baseline),
h3kit_mb_s. The loopback server is the one the tests use, so this measures client-side cost only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from model_server import ModelServer  # noqa: E402

from h3kit.models.download import Downloader, Want  # noqa: E402


def baseline(url: str, dest: Path) -> None:
    with requests.get(url, stream=True, timeout=60) as r, open(dest, "wb") as f:
        for block in r.iter_content(1 << 20):
            f.write(block)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    data = os.urandom(a.mb << 20)
    server = ModelServer().start()
    server.add("/f", data=data)
    base_t, ours_t = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            d = Path(tmp) / f"b{i}"
            t = time.perf_counter()
            baseline(server.url("/f"), d)
            base_t.append(time.perf_counter() - t)
            d.unlink()
            want = Want("f", Path(tmp) / f"o{i}", [server.url("/f")], len(data))
            t = time.perf_counter()
            Downloader(progress=False, token="").fetch(want)
            ours_t.append(time.perf_counter() - t)
            want.dest.unlink()
    server.stop()
    b, o = statistics.median(base_t), statistics.median(ours_t)
    doc = {"size_mb": a.mb, "runs": a.runs, "baseline_s": round(b, 3), "h3kit_s": round(o, 3),
           "ratio": round(o / b, 2), "h3kit_mb_s": round(a.mb / o, 1)}
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
