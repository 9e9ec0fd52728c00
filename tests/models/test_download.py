"""download.py against a real HTTP server on 127.0.0.1: resume, restart, retry, refuse, verify."""

from __future__ import annotations

import hashlib
import os

import pytest
import requests

from h3kit.models.download import Downloader, Want, check_free_space
from h3kit.models.http import apply_mirror, make_session
from h3kit.models.local import find_local, place_from_local
from h3kit.core.errors import NotReady, VerificationFailed
from model_server import ModelServer

PAYLOAD = os.urandom(3 * (1 << 20) + 12345)  # a bit over 3 chunks
SHA = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture
def server():
    s = ModelServer().start()
    yield s
    s.stop()


def _want(tmp_path, server, path="/org/repo/resolve/main/w.safetensors", **kw) -> Want:
    kw.setdefault("bytes", len(PAYLOAD))
    return Want(name="w.safetensors", dest=tmp_path / "models" / "vae" / "w.safetensors",
                urls=[server.url(path)], **kw)


def _dl(**kw) -> Downloader:
    kw.setdefault("sleep", lambda s: None)
    kw.setdefault("progress", False)
    kw.setdefault("token", "")
    return Downloader(**kw)


def test_normal_download_verifies_hash_and_leaves_no_part(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD)
    want = _want(tmp_path, server, sha256=SHA)
    got = _dl().fetch(want)
    assert want.dest.read_bytes() == PAYLOAD
    assert got.sha256 == SHA and got.verified_by == "sha256" and got.bytes == len(PAYLOAD)
    assert not want.part.exists()


def test_cut_connection_is_resumed_with_range(tmp_path, server):
    route = server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD, cut_after=1_500_000)
    want = _want(tmp_path, server, sha256=SHA)
    got = _dl().fetch(want)
    assert want.dest.read_bytes() == PAYLOAD and got.sha256 == SHA
    ranges = [r.range for r in server.requests]
    assert ranges[0] is None
    # the second request asks only for what was missing (bytes of a chunk torn
    # by the cut are not trusted, so the resume point may be a little earlier)
    start = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= 1_500_000, ranges
    assert route.served == 2


def test_part_left_by_an_earlier_run_is_resumed(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD)
    want = _want(tmp_path, server, sha256=SHA)
    want.part.parent.mkdir(parents=True)
    want.part.write_bytes(PAYLOAD[:1000])
    got = _dl().fetch(want)
    assert server.requests[0].range == "bytes=1000-"
    assert got.resumed_from == 1000 and want.dest.read_bytes() == PAYLOAD


def test_server_ignoring_range_restarts_from_zero(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD, ignore_range=True, cut_after=1_500_000)
    want = _want(tmp_path, server, sha256=SHA)
    got = _dl().fetch(want)
    assert server.requests[1].range.startswith("bytes=")  # we asked to resume ...
    assert want.dest.read_bytes() == PAYLOAD  # ... got the whole file and still ended up correct
    assert got.sha256 == SHA


def test_a_server_that_always_cuts_and_ignores_range_is_given_up(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD, ignore_range=True, cut_after=1_500_000,
               cut_times=100)
    with pytest.raises(NotReady) as exc:
        _dl(retries=2).fetch(_want(tmp_path, server))
    assert "after 2 retries" in exc.value.message
    assert len(server.requests) == 4  # the first try made progress, then 1 + 2 retries without any


def test_wrong_size_is_rejected_and_part_kept(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD[:-10])
    want = _want(tmp_path, server)  # catalog says the full length
    with pytest.raises(VerificationFailed) as exc:
        _dl().fetch(want)
    assert exc.value.exit_code == 4
    assert "wrong size" in exc.value.message
    assert not want.dest.exists()
    assert want.part.read_bytes() == PAYLOAD[:-10]


def test_wrong_hash_is_rejected_and_part_kept(tmp_path, server):
    bad = bytearray(PAYLOAD)
    bad[12345] ^= 0xFF
    server.add("/org/repo/resolve/main/w.safetensors", data=bytes(bad))
    want = _want(tmp_path, server, sha256=SHA)
    with pytest.raises(VerificationFailed) as exc:
        _dl().fetch(want)
    assert "sha256" in exc.value.message and str(want.part) in exc.value.fix
    assert not want.dest.exists() and want.part.exists()


def test_hash_published_by_the_server_is_checked(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD, headers={"X-Linked-Etag": '"' + "0" * 64 + '"'})
    want = _want(tmp_path, server)  # no catalog hash
    with pytest.raises(VerificationFailed):
        _dl().fetch(want)


def test_approximate_catalog_size_uses_server_length(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD)
    want = _want(tmp_path, server, bytes=len(PAYLOAD) // 10_000 * 10_000, bytes_exact=False)
    got = _dl().fetch(want)
    assert got.verified_by == "size" and got.bytes == len(PAYLOAD)


def test_rounded_catalog_size_still_rejects_an_error_page(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=b"<html>Please log in</html>")
    want = _want(tmp_path, server, bytes=len(PAYLOAD) // 10_000 * 10_000, bytes_exact=False)
    with pytest.raises(VerificationFailed) as exc:
        _dl().fetch(want)
    assert "far from its published size" in exc.value.message and want.part.exists()


def test_local_file_with_only_a_rounded_size_is_checked_within_one_percent(tmp_path):
    (tmp_path / "usb").mkdir()
    src = tmp_path / "usb" / "te.safetensors"
    src.write_bytes(PAYLOAD)
    want = Want("te.safetensors", tmp_path / "dest" / "te.safetensors", [], len(PAYLOAD) + 20_000, bytes_exact=False)
    assert place_from_local(want, src, progress=False).verified_by == "rounded size"
    want.dest.unlink()
    want.bytes = len(PAYLOAD) * 2
    with pytest.raises(VerificationFailed):
        place_from_local(want, src, progress=False)


def test_404_names_the_url(tmp_path, server):
    want = _want(tmp_path, server, path="/org/repo/resolve/main/missing.safetensors")
    with pytest.raises(NotReady) as exc:
        _dl().fetch(want)
    assert "HTTP 404" in exc.value.message and "missing.safetensors" in exc.value.message
    assert "--from DIR" in exc.value.fix
    assert len(server.requests) == 1  # a 404 is not retried


def test_403_says_accept_license_and_set_hf_token(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD, status=403)
    with pytest.raises(NotReady) as exc:
        _dl().fetch(_want(tmp_path, server))
    assert "HTTP 403" in exc.value.message
    assert "accept its license / log in" in exc.value.fix and "HF_TOKEN" in exc.value.fix


def test_hf_token_is_sent_to_the_mirror_and_opens_a_gated_file(tmp_path, server):
    server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD, token="hf_secret")
    want = Want("w.safetensors", tmp_path / "w.safetensors",
                ["https://huggingface.co/org/repo/resolve/main/w.safetensors"], len(PAYLOAD), SHA)
    with pytest.raises(NotReady) as exc:
        _dl(mirror=server.base).fetch(want)
    assert "HTTP 401" in exc.value.message
    _dl(mirror=server.base, token="hf_secret").fetch(want)
    assert server.requests[-1].authorization == "Bearer hf_secret"
    assert want.dest.read_bytes() == PAYLOAD


def test_hf_token_comes_from_env_then_the_login_file(tmp_path):
    from h3kit.models.http import hf_token

    (tmp_path / "token").write_text("hf_from_file\n")
    assert hf_token({"HF_TOKEN": "hf_env", "HF_HOME": str(tmp_path)}) == "hf_env"
    assert hf_token({"HF_HOME": str(tmp_path)}) == "hf_from_file"
    assert hf_token({"HF_HOME": str(tmp_path / "nowhere")}) is None


def test_token_is_not_sent_to_unrelated_hosts(tmp_path, server):
    server.add("/f", data=PAYLOAD)
    want = Want("f", tmp_path / "f", [server.url("/f")], len(PAYLOAD))
    _dl(token="hf_secret").fetch(want)
    assert server.requests[0].authorization is None


def test_5xx_is_retried_with_backoff(tmp_path, server):
    route = server.add("/org/repo/resolve/main/w.safetensors", data=PAYLOAD, status=503)
    delays = []
    with pytest.raises(NotReady) as exc:
        _dl(retries=3, backoff=0.5, sleep=delays.append).fetch(_want(tmp_path, server))
    assert delays == [0.5, 1.0, 2.0]
    assert "after 3 retries" in exc.value.message
    route.status = None
    assert _dl().fetch(_want(tmp_path, server)).bytes == len(PAYLOAD)


def test_next_url_is_tried_after_a_404(tmp_path, server):
    server.add("/good", data=PAYLOAD)
    want = Want("w", tmp_path / "w", [server.url("/gone"), server.url("/good")], len(PAYLOAD), SHA)
    got = _dl().fetch(want)
    assert got.source.endswith("/good")


def test_disk_check_refuses_before_any_byte_with_shortfall(tmp_path, server):
    want = _want(tmp_path, server)
    with pytest.raises(NotReady) as exc:
        check_free_space(want.dest.parent, 10 * 10**9, free_bytes=lambda p: 4 * 10**9, reserve=10**9)
    assert "7.00 GB short" in exc.value.message
    assert exc.value.details["short_bytes"] == 7 * 10**9
    assert not want.part.exists() and server.requests == []


def test_mirror_rewrites_only_hugging_face_urls():
    assert apply_mirror("https://huggingface.co/a/b/resolve/main/x", "https://hf-mirror.com") == \
        "https://hf-mirror.com/a/b/resolve/main/x"
    assert apply_mirror("https://github.com/a/b", "https://hf-mirror.com") == "https://github.com/a/b"
    assert apply_mirror("https://huggingface.co/a", None) == "https://huggingface.co/a"


def test_session_keeps_proxy_and_tls_settings(monkeypatch):
    s = make_session()
    assert s.trust_env is True and s.verify is True
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    settings = s.merge_environment_settings("https://huggingface.co/x", {}, None, None, None)
    assert settings["proxies"].get("https") == "http://proxy.example:3128"


def test_download_goes_through_the_configured_proxy(tmp_path, server, monkeypatch):
    # The test server answers absolute-URI (proxy) requests too: point HTTP_PROXY at it
    # and ask for a host that does not exist; only a proxied request can succeed.
    server.add("/via-proxy", data=PAYLOAD)
    monkeypatch.setenv("HTTP_PROXY", server.base)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    want = Want("p", tmp_path / "p", ["http://weights.invalid/via-proxy"], len(PAYLOAD), SHA)
    _dl().fetch(want)
    assert want.dest.read_bytes() == PAYLOAD


def test_from_dir_copies_or_links_with_verification(tmp_path):
    src = tmp_path / "usb" / "vae"
    src.mkdir(parents=True)
    (src / "w.safetensors").write_bytes(PAYLOAD)
    want = Want("w.safetensors", tmp_path / "comfy" / "models" / "vae" / "w.safetensors", [], len(PAYLOAD), SHA)
    found = find_local(tmp_path / "usb", "w.safetensors", "vae")
    got = place_from_local(want, found, progress=False)
    assert got.method == "hardlink" and want.dest.read_bytes() == PAYLOAD
    want.dest.unlink()
    got = place_from_local(want, found, link=False, progress=False)
    assert got.method == "copy" and got.sha256 == SHA


def test_from_dir_rejects_a_wrong_file(tmp_path):
    (tmp_path / "usb").mkdir()
    (tmp_path / "usb" / "w.safetensors").write_bytes(PAYLOAD[:100])
    want = Want("w.safetensors", tmp_path / "dest" / "w.safetensors", [], len(PAYLOAD), SHA)
    with pytest.raises(VerificationFailed):
        place_from_local(want, find_local(tmp_path / "usb", "w.safetensors"), progress=False)
    assert not want.dest.exists()


def test_connection_refused_is_transient_then_reported(tmp_path):
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    want = Want("w", tmp_path / "w", [f"http://127.0.0.1:{port}/w"], 10)
    with pytest.raises(NotReady) as exc:
        _dl(retries=1, probe=None).fetch(want)  # no connect probe: the retry loop itself meets the refusal
    assert "cannot connect" in exc.value.message and "HTTPS_PROXY" in exc.value.fix


def test_a_host_that_refuses_the_probe_is_reported_at_once_without_retries(tmp_path):
    import time

    from h3kit.core import net
    from h3kit.models.download import HostsUnreachable
    from model_server import closed_port

    port = closed_port()
    slept = []
    want = Want("w", tmp_path / "w", [f"http://127.0.0.1:{port}/w"], 10)
    start = time.monotonic()
    with pytest.raises(HostsUnreachable) as exc:
        _dl(sleep=slept.append).fetch(want)
    assert time.monotonic() - start < net.PROBE_SECONDS and slept == []  # no backoff on a dead host
    assert exc.value.hosts == {"127.0.0.1": "the connection was refused"}
    assert "models.mirror" in exc.value.fix and "--from DIR" in exc.value.fix
    assert not want.part.exists()


def test_requests_is_the_http_client():
    assert isinstance(make_session(), requests.Session)
