"""Getting one weight file onto disk: resumable, verified, honest about failures.

A weight file is tens of gigabytes, so every download must survive a dropped
connection and must never leave a half-written file where ComfyUI looks.
The rules, in the order they apply:

1. Free disk is checked before any byte is written (`check_free_space`); the
   refusal names the shortfall.
2. Bytes go to `<name>.part` beside the destination. A `.part` left by an
   earlier try is resumed with an HTTP `Range` request; a server that answers
   a range request with the whole file (status 200) gets a restart from zero.
3. Connection errors, a stream that ends before the length the server
   announced, and 408/425/429/5xx answers are retried with exponential
   backoff. A try that takes the `.part` further than ever before resets
   the retry count (a flaky line that keeps making progress must be allowed
   to finish 40 GB; a server that always cuts at the same byte must not).
4. 401/403/404/410 are not retried: the next URL is tried, and when none is
   left the error is one sentence (for 401/403: accept the license / log in,
   set HF_TOKEN).
5. sha256 is computed while the bytes arrive (a resumed file is re-read
   once). The `.part` becomes the final name only when the size, and the
   hash when one is known, match. On a mismatch the `.part` is kept for
   inspection and the error exits 4.

Where the expected hash comes from: the catalog (only hashes published by the
model's authors), else the `X-Linked-Etag` header Hugging Face sends for
large files (it is the file's sha256). Expected size: the catalog when its
size is exact, else what the server announced (`X-Linked-Size`,
`Content-Range`, `Content-Length`).

Proxies, TLS, the token and the mirror are h3kit.models.http's; copying or
hard-linking from a local folder (`--from DIR`) is h3kit.models.local's.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import requests
from tqdm import tqdm

from h3kit.core import files as core_files
from h3kit.core import net
from h3kit.core.errors import NotReady, VerificationFailed
from h3kit.core.files import sha256_file
from h3kit.core.units import human_bytes
from h3kit.models.http import (
    HF_HOSTS,
    apply_mirror,
    content_range,
    hf_token,
    make_session,
    model_page,
    published_by_server,
)

log = logging.getLogger("h3kit.models.download")

CHUNK = 1 << 20
# Network reads are smaller: bytes of a read torn by a dropped connection are
# lost (urllib3 discards them), so this bounds what a resume fetches again.
NET_CHUNK = 1 << 16
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
REFUSED_STATUS = frozenset({401, 403, 404, 410})
# Kept free on top of what the files need, so a full download never leaves
# the disk at zero bytes (the OS and ComfyUI still have to write).
DISK_RESERVE_BYTES = 1 << 30
# A size the catalog knows only rounded ("19.9 GB") must still match within this share.
ROUNDED_SIZE_TOLERANCE = 0.01


@dataclass
class Want:
    """One file to get: where it goes, where it comes from, what it must be."""

    name: str
    dest: Path
    urls: list[str]
    bytes: int | None = None
    sha256: str | None = None
    bytes_exact: bool = True  # False: the catalog size is a rounded model-card figure

    @property
    def part(self) -> Path:
        return self.dest.with_name(self.dest.name + ".part")


@dataclass
class Fetched:
    path: Path
    bytes: int
    sha256: str
    source: str  # the URL or local file it came from
    verified_by: str  # "sha256" or "size"
    resumed_from: int = 0
    restarts: int = 0
    method: str = "download"  # download | copy | hardlink | present
    notes: list[str] = field(default_factory=list)


class _Transient(Exception):
    """A try failed in a way worth retrying (connection cut, 5xx, short stream)."""


class HostsUnreachable(NotReady):
    """No host that serves a file answered the connect probe; `hosts` maps each host to why (h3kit.core.net)."""

    def __init__(self, want: "Want", hosts: dict[str, str]):
        listed = "; ".join(f"{h}: {why}" for h, why in hosts.items())
        super().__init__(f"{want.name} cannot be downloaded: no host that serves it can be reached ({listed}).",
                         "Check the network (and HTTPS_PROXY if you need a proxy), set models.mirror in config.yaml "
                         "(or HF_ENDPOINT) to a reachable mirror, or copy the file from another machine and use "
                         "'h3kit models fetch --from DIR'.",
                         details={"name": want.name, "dest": str(want.dest), "hosts": hosts})
        self.want = want
        self.hosts = hosts


class _Refused(Exception):
    def __init__(self, status: int, url: str):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.url = url


# -- plain helpers -------------------------------------------------------------

def check_free_space(folder: Path, need_bytes: int, *, free_bytes: Callable[[Path], int | None] | None = None,
                     reserve: int = DISK_RESERVE_BYTES) -> int | None:
    """Refuse (NotReady) before any byte is written when the disk is too small; returns free bytes (None: unknown)."""
    measure = free_bytes or core_files.free_bytes
    free = measure(Path(folder))
    if need_bytes <= 0 or free is None:
        if free is None:
            log.warning("free space at %s cannot be read; downloading without the check", folder)
        return free
    if need_bytes + reserve > free:
        short = need_bytes + reserve - free
        raise NotReady(
            f"Not enough free disk at {folder}: the model files need {human_bytes(need_bytes)} "
            f"(plus {human_bytes(reserve)} kept free) but only {human_bytes(free)} is free, "
            f"{human_bytes(short)} short.",
            "Free that much space, or put ComfyUI's models on a bigger disk (extra_model_paths.yaml), "
            "or pick a smaller profile ('h3kit profile list').",
            details={"need_bytes": need_bytes, "free_bytes": free, "short_bytes": short, "folder": str(folder)},
        )
    return free


def hash_so_far(path: Path) -> "hashlib._Hash":
    """A sha256 already fed with the bytes in `path`, to go on with the rest of a resumed file
    (h3kit.core.files.sha256_file gives only the finished digest)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h


def progress_bar(total: int | None, initial: int, desc: str, enabled: bool | None) -> tqdm:
    """A byte bar on stderr; enabled=None: tqdm decides (off when stderr is not a terminal)."""
    disable = None if enabled is None else not enabled
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1000,
                desc=desc[:40], file=sys.stderr, leave=False, disable=disable, dynamic_ncols=True)


# -- the downloader ------------------------------------------------------------

class Downloader:
    """Downloads `Want`s one at a time; every knob that tests need is an argument."""

    def __init__(self, *, session: requests.Session | None = None, token: str | None = None,
                 mirror: str | None = None, retries: int = 5, backoff: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep, timeout: tuple[float, float] = (15.0, 60.0),
                 progress: bool | None = None, probe: Callable[[str], str | None] | None = net.unreachable):
        self.session = session or make_session()
        self.probe = probe  # None: no connect probe (a test's fake session)
        self.token = token if token is not None else hf_token()
        self.mirror = mirror
        self.retries = retries
        self.backoff = backoff
        self.sleep = sleep
        self.timeout = timeout
        self.progress = progress

    # which hosts may see the token
    def _token_for(self, url: str) -> str | None:
        if not self.token:
            return None
        host = urlsplit(url).hostname or ""
        mirror_host = urlsplit(self.mirror).hostname if self.mirror else None
        if host in HF_HOSTS or host.endswith(".huggingface.co") or (mirror_host and host == mirror_host):
            return self.token
        return None

    def urls_for(self, want: Want) -> list[str]:
        seen: list[str] = []
        for u in want.urls:
            m = apply_mirror(u, self.mirror)
            if m not in seen:
                seen.append(m)
        return seen

    def fetch(self, want: Want, overall: tqdm | None = None) -> Fetched:
        """Download `want` to `want.dest` via its URLs in order; raises NotReady or VerificationFailed."""
        urls = self.urls_for(want)
        if not urls:
            raise NotReady(f"The catalog lists no download address for {want.name}.",
                           "Download it yourself and use 'h3kit models fetch --from DIR'.")
        dead = {net.host_of(u): why for u in urls if self.probe and (why := self.probe(u))}
        urls = [u for u in urls if net.host_of(u) not in dead]
        if not urls:
            # Every host failed a connect probe of a few seconds: say so now instead of retrying with backoff.
            raise HostsUnreachable(want, dead)
        want.dest.parent.mkdir(parents=True, exist_ok=True)
        refusals: list[_Refused] = []
        transient_failures: list[str] = []
        for url in urls:
            try:
                return self._fetch_from(url, want, overall)
            except _Refused as r:
                log.warning("%s: %s refused with HTTP %d", want.name, url, r.status)
                refusals.append(r)
            except _Transient as t:
                log.warning("%s: giving up on %s: %s", want.name, url, t)
                transient_failures.append(f"{url}: {t}")
        raise self._final_error(want, refusals, transient_failures)

    def _final_error(self, want: Want, refusals: list[_Refused], transient: list[str]) -> NotReady:
        auth = [r for r in refusals if r.status in (401, 403)]
        if auth:
            r = auth[0]
            page = model_page(r.url)
            if self.token:
                fix = (f"HF_TOKEN was sent but was not accepted: open {page} while logged in with the token's "
                       "account, accept the license, and check the token has read access.")
            else:
                fix = (f"This repository needs you to accept its license / log in: accept it on {page}, "
                       "create a read token at https://huggingface.co/settings/tokens and set HF_TOKEN "
                       "to it, then run the same command again.")
            return NotReady(f"The server refused to send {want.name} (HTTP {r.status} from "
                            f"{urlsplit(r.url).hostname}).", fix, details={"status": r.status, "url": r.url})
        if refusals:
            r = refusals[0]
            return NotReady(f"{want.name} is not at {r.url} (HTTP {r.status}).",
                            "The catalog entry or the mirror is out of date: download the file yourself and "
                            "use 'h3kit models fetch --from DIR', or update h3kit.",
                            details={"status": r.status, "url": r.url})
        return NotReady(f"Downloading {want.name} failed after {self.retries} retries ({transient[-1]}).",
                        "Check the network (and HTTPS_PROXY if you need a proxy), then run the same command "
                        "again: it resumes where it stopped.")

    def _fetch_from(self, url: str, want: Want, overall: tqdm | None) -> Fetched:
        attempt = 0
        restarts = 0
        resumed_from = want.part.stat().st_size if want.part.exists() else 0
        furthest = resumed_from
        while True:
            try:
                result = self._one_try(url, want, overall)
            except _Transient as t:
                # Only a try that took the file further than ever before earns a fresh retry budget:
                # a server that ignores Range and always cuts at the same byte must not loop forever.
                size = want.part.stat().st_size if want.part.exists() else 0
                attempt = 0 if size > furthest else attempt + 1
                furthest = max(furthest, size)
                if attempt > self.retries:
                    raise
                delay = min(30.0, self.backoff * (2 ** max(attempt - 1, 0)))
                log.info("%s: %s; retrying in %.1f s", want.name, t, delay)
                self.sleep(delay)
                continue
            if result == "restart":
                restarts += 1
                continue
            result.resumed_from = resumed_from
            result.restarts = restarts
            return result

    def _one_try(self, url: str, want: Want, overall: tqdm | None):
        part = want.part
        have = part.stat().st_size if part.exists() else 0
        if have and want.bytes and want.bytes_exact and have > want.bytes:
            log.info("%s: .part is larger than the file (%d > %d); starting over", want.name, have, want.bytes)
            part.unlink()
            have = 0
        resp = self._get(url, have)
        with resp:
            status = resp.status_code
            if status in REFUSED_STATUS:
                raise _Refused(status, url)
            if status in RETRYABLE_STATUS:
                raise _Transient(f"server answered HTTP {status}")
            server_sha, linked_size = published_by_server(resp)
            if status == 416 and have:
                _, total = content_range(resp.headers.get("Content-Range"))
                total = total or linked_size
                if total is not None and total == have:
                    return self._finish(want, url, sha256_file(part), have, total, server_sha)
                log.info("%s: server refused the range; starting over", want.name)
                part.unlink()
                return "restart"
            if status not in (200, 206):
                raise _Refused(status, url) if 400 <= status < 500 else _Transient(f"server answered HTTP {status}")

            if status == 206:
                start, total = content_range(resp.headers.get("Content-Range"))
                if start != have:
                    log.info("%s: server resumed at %s instead of %d; starting over", want.name, start, have)
                    part.unlink(missing_ok=True)
                    return "restart"
                mode, hasher = "ab", hash_so_far(part)
            else:
                if have:
                    log.info("%s: server ignored the Range header; starting over from zero", want.name)
                    if overall is not None:
                        overall.update(-have)
                have = 0
                length = resp.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                mode, hasher = "wb", hashlib.sha256()
            total = total or linked_size
            size = have + self._write_part(resp, want, mode, hasher, have, total, overall)
            if total is not None and size < total:
                raise _Transient(f"stream ended at {size} of {total} bytes")
            return self._finish(want, url, hasher.hexdigest(), size, total, server_sha)

    def _get(self, url: str, have: int):
        """The server's streamed answer for `url` from byte `have` on (a token where the host needs one)."""
        headers = {"Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
        token = self._token_for(url)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            return self.session.get(url, headers=headers, stream=True, timeout=self.timeout, allow_redirects=True)
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise _Transient(f"cannot connect ({type(exc).__name__})") from None

    def _write_part(self, resp, want: Want, mode: str, hasher, have: int, total: int | None,
                    overall: tqdm | None) -> int:
        """The answer's body onto the .part (appended or written anew, `mode`), hashed as it goes; the bytes received."""
        bar = progress_bar(total, have, want.name, self.progress)
        received = 0
        try:
            with core_files.naming(want.part), open(want.part, mode) as f:  # a full disk names the .part
                for block in resp.iter_content(NET_CHUNK):
                    if not block:
                        continue
                    f.write(block)
                    hasher.update(block)
                    received += len(block)
                    bar.update(len(block))
                    if overall is not None:
                        overall.update(len(block))
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError, requests.Timeout) as exc:
            raise _Transient(f"connection lost after {human_bytes(have + received)} ({type(exc).__name__})") from None
        finally:
            bar.close()
        return received

    def _finish(self, want: Want, url: str, digest: str, size: int, server_total: int | None,
                server_sha: str | None) -> Fetched:
        verified_by = verify_or_raise(want, want.part, size, digest, server_total=server_total, server_sha=server_sha)
        core_files.replace(want.part, want.dest)  # through h3kit.core.files: the crash harness stops here too
        return Fetched(want.dest, size, digest, url, verified_by)



def verify_or_raise(want: Want, path: Path, size: int, digest: str | None, *, server_total: int | None = None,
                    server_sha: str | None = None) -> str:
    """Compare size (and sha256 when known) with what `want` must be; VerificationFailed keeps the file.

    Returns what the check rested on: "sha256", "size" (exact, from the catalog or the server) or
    "rounded size" (only the catalog's rounded figure was known, matched within 1%).
    """
    keep = (f"The file was kept at {path} for inspection and was not put into ComfyUI; delete it and run "
            "'h3kit models fetch' again, or fetch it from another source with --from DIR.")
    exact = want.bytes if (want.bytes is not None and want.bytes_exact) else server_total
    exp_sha = (want.sha256 or server_sha or "").lower() or None
    # A rounded catalog figure ("19.9 GB") still bounds the file: it rejects an error page served with 200.
    if want.bytes is not None and not want.bytes_exact and abs(size - want.bytes) > want.bytes * ROUNDED_SIZE_TOLERANCE:
        raise VerificationFailed(
            f"{want.name} has {size} bytes, far from its published size of about {human_bytes(want.bytes)}.", keep,
            details={"path": str(path), "bytes": size, "published_bytes": want.bytes})
    if exact is not None and size != exact:
        raise VerificationFailed(f"{want.name} has the wrong size: {size} bytes, expected {exact}.", keep,
                                 details={"path": str(path), "bytes": size, "expected_bytes": exact})
    if exp_sha is not None:
        if digest is None:
            digest = sha256_file(path)
        if digest != exp_sha:
            raise VerificationFailed(
                f"{want.name} failed its sha256 check: got {digest[:16]}..., expected {exp_sha[:16]}....", keep,
                details={"path": str(path), "sha256": digest, "expected_sha256": exp_sha})
        return "sha256"
    if exact is not None:
        return "size"
    if want.bytes is not None:
        return "rounded size"
    raise VerificationFailed(
        f"{want.name} cannot be verified: neither the catalog nor the server states its size or hash.",
        f"It was kept at {path}; check it yourself and move it into place, or update h3kit's catalog.")

