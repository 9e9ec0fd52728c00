"""h3kit.core.bounded_read: a file h3kit does not own is read only when it is a regular file within its cap, and
text, JSON and YAML that would block, never end, fail to decode or nest past the parsers' recursion become one
sentence naming the file (UnreadableFile), never a hang, a RecursionError or a UnicodeDecodeError."""

from __future__ import annotations

import os

import pytest

from h3kit.core import bounded_read as br
from within import within

posix_only = pytest.mark.skipif(os.name != "posix", reason="FIFOs and /dev/zero are POSIX")




@posix_only
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "installations.json"
    os.mkfifo(fifo)
    with pytest.raises(br.UnreadableFile) as err:
        within(5, br.read_json, fifo)
    assert "named pipe (FIFO), not a file" in err.value.why and not err.value.absent
    assert err.value.skipped.startswith(f"skipped {fifo}: it is a named pipe")


@posix_only
def test_a_link_to_dev_zero_and_a_folder_are_refused(tmp_path):
    link = tmp_path / "settings.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(br.UnreadableFile) as err:
        within(5, br.read_json, link)
    assert "a link to /dev/zero, a character device, not a file" in err.value.why
    with pytest.raises(br.UnreadableFile, match="is a folder, not a file"):
        br.read_text(tmp_path)


def test_a_file_past_its_cap_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "config.ini"
    with open(big, "wb") as f:
        f.truncate(3 << 30)  # sparse: 3 GB that would take seconds and gigabytes to read
    with pytest.raises(br.UnreadableFile) as err:
        within(5, br.read_text, big, 1 << 20)
    assert err.value.too_big and "it holds 3.22 GB, more than the 1 MiB h3kit reads" in err.value.why
    small = tmp_path / "ok.json"
    small.write_text('{"a": 1}')
    assert br.read_json(small, cap=8) == {"a": 1}
    with pytest.raises(br.UnreadableFile, match="more than"):
        br.read_json(small, cap=7)


def test_an_absent_file_and_a_dangling_link_are_told_apart(tmp_path):
    with pytest.raises(br.UnreadableFile) as err:
        br.read_text(tmp_path / "gone.json")
    assert err.value.absent and "does not exist" in err.value.why
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(br.UnreadableFile) as err:
        br.read_text(tmp_path / "dangling")
    assert not err.value.absent and "leads nowhere" in err.value.why


def test_bytes_that_are_not_utf8_are_named_with_their_offset(tmp_path):
    path = tmp_path / "config.ini"
    path.write_bytes(b"[DEFAULT]\nrecent_workspace = /home/caf\xe9/ComfyUI\n")
    with pytest.raises(br.UnreadableFile) as err:
        br.read_text(path)
    assert "it is not UTF-8 text (byte 0xe9 at offset 38" in err.value.why
    assert str(path) in err.value.message


def test_json_nested_200000_deep_is_one_sentence(tmp_path):
    path = tmp_path / "installations.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(br.UnreadableFile, match="nested deeper than h3kit reads"):
        br.read_json(path)
    path.write_text('{"a": [1, 2')
    with pytest.raises(br.UnreadableFile, match="it is not JSON"):
        br.read_json(path)


@pytest.mark.parametrize("deep", ["[" * 100_000 + "]" * 100_000, "- " * 100_000 + "x\n",
                                  "".join(" " * i + "a:\n" for i in range(2000)) + " " * 2000 + "b\n"])
def test_yaml_nested_past_the_limit_is_one_sentence(tmp_path, deep):
    path = tmp_path / "extra_model_paths.yaml"
    path.write_text("x: " + deep if deep.startswith("[") else deep)
    with pytest.raises(br.UnreadableFile, match=r"nested more than 64 levels deep \(line \d+\)"):
        br.read_yaml(path, cap=8 << 20)


def test_yaml_as_safe_load_reads_it(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("a:\n  base_path: /x\n  vae: |\n    one\n    two\n")
    assert br.read_yaml(path) == {"a": {"base_path": "/x", "vae": "one\ntwo\n"}}
    path.write_text("a: [unclosed\n")
    with pytest.raises(br.UnreadableFile, match="it is not YAML at line 2"):
        br.read_yaml(path)
    path.write_text("a: 2001-13-01\n")  # the safe loader's own ValueError
    with pytest.raises(br.UnreadableFile, match="YAML value that cannot be read"):
        br.read_yaml(path)
