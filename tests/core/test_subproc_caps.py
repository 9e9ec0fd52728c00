"""h3kit.core.subproc.run keeps a head and a tail of a child's output, not all of it: a child that prints without
end costs h3kit a few MB while its timeout still applies, the first and last lines survive (the marked JSON line
a probe prints last), a line says how much was dropped, and short output comes back exactly as printed."""

from __future__ import annotations

import resource
import sys

import pytest

from h3kit.core import subproc

ENDLESS = "import sys\nblock = b'x' * 65536\nwhile True:\n    sys.stdout.buffer.write(block)\n"


@pytest.fixture
def small_caps(monkeypatch):
    monkeypatch.setattr(subproc, "HEAD_BYTES", 64 << 10, raising=False)
    monkeypatch.setattr(subproc, "TAIL_BYTES", 64 << 10, raising=False)


def _peak_rss_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


@pytest.mark.skipif(sys.platform == "win32", reason="ru_maxrss is POSIX")
def test_a_child_printing_without_end_is_stopped_by_its_timeout_in_bounded_memory():
    before = _peak_rss_mb()
    result = subproc.run([sys.executable, "-c", ENDLESS], timeout=2)
    assert result.status == "timeout" and "no answer within 2 s" in result.detail
    assert len(result.stdout) < 3 << 20  # a head and a tail of 1 MiB each, and the line between
    dropped = result.extra["dropped_bytes"]["stdout"]
    assert dropped > 50 << 20, "the child printed too little to tell"  # it prints hundreds of MB a second
    assert f"h3kit dropped {dropped} bytes of this output here" in result.stdout
    assert _peak_rss_mb() - before < 200, "h3kit kept what the child printed"


def test_the_head_and_the_tail_are_kept_with_a_line_between(small_caps):
    script = ("import sys\nprint('FIRST LINE')\nsys.stdout.write('x' * 1000000 + '\\n')\n"
              "print('H3KIT-FOLDERS {\"ok\": true}')\nsys.stderr.write('e' * 300000 + 'LAST ERR')\nsys.exit(3)\n")
    result = subproc.run([sys.executable, "-c", script], timeout=20)
    assert result.status == "error" and result.returncode == 3
    assert result.stdout.startswith("FIRST LINE\n") and result.stdout.endswith('H3KIT-FOLDERS {"ok": true}\n')
    assert len(result.stdout) < 140_000 and len(result.stderr) < 140_000
    assert "bytes of this output here, keeping the first 65536 and the last 65536" in result.stdout
    assert result.stderr.endswith("LAST ERR")
    assert result.extra["dropped_bytes"] == {"stdout": 11 + 1_000_001 + 27 - 2 * 65536,
                                             "stderr": 300_008 - 2 * 65536}


def test_a_cut_inside_a_utf8_character_is_not_mojibake(small_caps):
    result = subproc.run([sys.executable, "-c", "import sys; sys.stdout.buffer.write('é€'.encode() * 100000)"],
                         timeout=20)
    assert result.ok and "dropped" in result.stdout
    head, _, tail = result.stdout.partition("\n[...")
    assert set(head) <= {"é", "€"} and set(tail.split("...]\n", 1)[1]) <= {"é", "€"}


def test_short_output_and_input_come_back_exactly():
    result = subproc.run([sys.executable, "-c", "import sys; d = sys.stdin.read(); print(d.upper()); "
                                                "print('warn', file=sys.stderr)"], timeout=20, input_text="héllo")
    assert (result.status, result.stdout, result.stderr, result.extra) == ("ok", "HÉLLO\n", "warn\n", {})
