"""The HTTP side of a download: the session, the Hugging Face token and mirror, and what a server announces.

Network settings are requests' own: `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`
are honoured because the session keeps `trust_env` on, and TLS verification
is never switched off. `HF_TOKEN` (or the token file `huggingface-cli login`
wrote) is sent only to Hugging Face hosts and to a mirror the user configured
(h3kit.models.download decides per URL; requests drops it on redirects to
other hosts).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import requests

from h3kit import __version__

HF_HOSTS = ("huggingface.co", "hf.co")
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def apply_mirror(url: str, mirror: str | None) -> str:
    """Point a Hugging Face URL at a mirror base (HF_ENDPOINT-style); other URLs are unchanged."""
    if not mirror:
        return url
    parts = urlsplit(url)
    if parts.hostname not in HF_HOSTS:
        return url
    base = urlsplit(mirror.rstrip("/"))
    return urlunsplit((base.scheme, base.netloc, base.path + parts.path, parts.query, ""))


def mirror_base(config=None, environ: dict | None = None) -> str | None:
    """The mirror base URL: `models.mirror` of the user's Config, else env HF_ENDPOINT (huggingface_hub's own)."""
    mirror = getattr(config, "mirror", None) if config is not None else None
    if mirror:
        return str(mirror)
    env = (os.environ if environ is None else environ).get("HF_ENDPOINT")
    return env if env and env.rstrip("/") != DEFAULT_HF_ENDPOINT else None


def hf_token(environ: dict | None = None) -> str | None:
    """The Hugging Face token: env HF_TOKEN, else the file `huggingface-cli login` wrote
    ($HF_TOKEN_PATH, else $HF_HOME/token, else ~/.cache/huggingface/token)."""
    env = os.environ if environ is None else environ
    if env.get("HF_TOKEN"):
        return env["HF_TOKEN"].strip()
    home = Path(env.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    path = Path(env["HF_TOKEN_PATH"]) if env.get("HF_TOKEN_PATH") else home / "token"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def make_session() -> requests.Session:
    """A session that keeps requests' proxy and certificate handling on."""
    s = requests.Session()
    s.trust_env = True  # HTTPS_PROXY / HTTP_PROXY / NO_PROXY / REQUESTS_CA_BUNDLE
    s.verify = True
    s.headers["User-Agent"] = f"h3kit/{__version__} (+model downloader)"
    return s


def content_range(header: str | None) -> tuple[int | None, int | None]:
    """Parse 'bytes START-END/TOTAL' or 'bytes */TOTAL' -> (start, total)."""
    if not header:
        return None, None
    m = re.match(r"bytes\s+(?:(\d+)-\d+|\*)/(\d+|\*)", header.strip())
    if not m:
        return None, None
    start = int(m.group(1)) if m.group(1) is not None else None
    total = int(m.group(2)) if m.group(2) != "*" else None
    return start, total


def published_by_server(resp: requests.Response) -> tuple[str | None, int | None]:
    """sha256 and size Hugging Face announces for large files (on the redirect or the answer)."""
    sha, size = None, None
    for r in list(resp.history) + [resp]:
        etag = (r.headers.get("X-Linked-Etag") or "").strip().strip('"').lower()
        if etag.startswith("w/"):
            etag = etag[2:].strip('"')
        if _HEX64.match(etag):
            sha = etag
        linked = r.headers.get("X-Linked-Size")
        if linked and linked.isdigit():
            size = int(linked)
    return sha, size


def model_page(url: str) -> str:
    """https://huggingface.co/ORG/REPO/resolve/... -> https://huggingface.co/ORG/REPO (best effort)."""
    parts = urlsplit(url)
    segs = [s for s in parts.path.split("/") if s]
    if len(segs) >= 2:
        return urlunsplit((parts.scheme, parts.netloc, "/" + "/".join(segs[:2]), "", ""))
    return url
