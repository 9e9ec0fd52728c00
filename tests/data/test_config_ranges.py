"""Numbers in config.yaml are range-checked before any arithmetic, and a config path that is not a regular file is
named for what it is: exit 2, one sentence naming file:line (and the allowed range), never an OverflowError."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from h3kit.core.errors import BadInput
from h3kit.data import config
from h3kit.data.settings import RANGES, range_text

FP = str(Path(__file__).parents[1] / "fixtures" / "fingerprints" / "nvidia-rtx4090-24gb-64gb.json")
HUGE = "9" * 400
PLAN_DOC = Path(__file__).parents[2] / "docs" / "plan.md"


def _first(err: str) -> str:
    assert "Traceback" not in err and "internal error" not in err, err
    return err.splitlines()[0]


@pytest.mark.parametrize("key, value", [
    ("disk_read_bytes_per_s", HUGE),
    ("disk_read_bytes_per_s", f'"{HUGE} TB"'),
    ("preload_bytes", HUGE),
    ("preload_bytes", f'"{HUGE}.5 GiB"'),
    ("shard_size_bytes", f'"{HUGE} TB"'),
    ("os_ram_headroom", HUGE),
    ("os_ram_headroom", f'"{HUGE} TB"'),
    ("target_minutes", HUGE),
    ("cfg", HUGE),
    ("steps", HUGE),
    ("disk_read_bytes_per_s", "0"),
    ("preload_bytes", '"101 TB"'),
], ids=lambda x: x if len(x) < 30 else f"{len(x)}-chars")
def test_an_absurd_number_is_exit_2_naming_line_and_range(run_cli, h3kit_home, key, value):
    cfg = h3kit_home / "config.yaml"
    cfg.write_text(f"profile: auto\n# the user's note\noverrides:\n  vae_tile_size: 384\n  {key}: {value}\n")
    code, out, err = run_cli("plan", "--fingerprint", FP)
    assert code == 2, err
    first = _first(err)
    assert first.startswith(f"error: {cfg}:5: 'overrides.{key}'"), first
    assert f"allowed: {range_text(key)}" in first, first
    assert len(first) < 300, first  # the 400 digits are named by their count, not printed


def test_calibrated_rates_are_checked_the_same_way(run_cli, h3kit_home):
    cfg = h3kit_home / "config.yaml"
    cfg.write_text(f"calibrated:\n  disk_read_bytes_per_s: {HUGE}\n  timing:\n    block_s_per_token: {HUGE}\n"
                   "    block_s_per_token2: 0.1\n    step_fixed_s: 1\n")
    code, out, err = run_cli("plan", "--fingerprint", FP)
    assert code == 2, err
    first = _first(err)
    assert first.startswith(f"error: {cfg}:2: 'calibrated.disk_read_bytes_per_s'") and "1 MB/s to 1 TB/s" in first
    assert "'calibrated.timing' has block_s_per_token a number 400 digits long" in first, first


def test_a_number_past_pythons_digit_limit_is_exit_2_with_its_line(run_cli, h3kit_home):
    cfg = h3kit_home / "config.yaml"
    cfg.write_text("profile: auto\noverrides:\n  steps: " + "9" * 5000 + "\n")
    code, out, err = run_cli("plan", "--fingerprint", FP)
    assert code == 2, err
    assert _first(err).startswith(f"error: {cfg}:3: a number 5000 digits long"), err


@pytest.mark.parametrize("text", [
    'overrides:\n  preload_bytes: "100 TB"\n  os_ram_headroom: 0\n  shard_size_bytes: auto\n',
    "overrides:\n  disk_read_bytes_per_s: 1000000\n  target_minutes: 10080\n  cfg: 30\n  steps: 200\n",
    'calibrated:\n  disk_read_bytes_per_s: "1 TB"\n  target_minutes: 0.5\n',
])
def test_the_edges_of_each_range_are_allowed(h3kit_home, text):
    cfg = h3kit_home / "config.yaml"
    cfg.write_text(text)
    config.load(cfg)


def test_each_range_is_written_in_the_docs():
    doc = PLAN_DOC.read_text()
    for key in RANGES:
        assert range_text(key) in doc, f"docs/plan.md does not list the range of {key}: {range_text(key)}"
    assert {"shard_size_bytes", "preload_bytes", "os_ram_headroom", "disk_read_bytes_per_s",
            "target_minutes"} <= set(RANGES)


def _make(kind: str, cfg: Path) -> str:
    if kind == "fifo":
        os.mkfifo(cfg)
        return "is a FIFO (named pipe), not a file"
    if kind == "dev-zero":
        cfg.symlink_to("/dev/zero")
        return "is a link to /dev/zero, which is a character device, not a file"
    if kind == "link-to-folder":
        (cfg.parent / "elsewhere").mkdir()
        cfg.symlink_to(cfg.parent / "elsewhere")
        return "which is a folder, not a file"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(cfg))
    sock.close()
    return "is a socket, not a file"


@pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, sockets and /dev/zero are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "socket", "link-to-folder"])
def test_a_config_that_is_not_a_regular_file_is_named_for_what_it_is(h3kit_home, kind):
    """In a child with a timeout: opening the FIFO would block for ever."""
    cfg = h3kit_home / "config.yaml"
    if kind == "socket" and len(str(cfg)) > 100:
        pytest.skip("a Unix socket path is limited to about 107 bytes")
    words = _make(kind, cfg)
    proc = subprocess.run([sys.executable, "-m", "h3kit", "plan", "--fingerprint", FP], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "H3KIT_HOME": str(h3kit_home)})
    assert proc.returncode == 2, proc.stderr
    first = _first(proc.stderr)
    assert first.startswith(f"error: {cfg}:1: the config file ") and words in first, first
    fix = proc.stderr.splitlines()[1]
    assert "Move that folder away" not in fix and "plain YAML file" in fix, fix
    with pytest.raises(BadInput):
        config.load(cfg)
