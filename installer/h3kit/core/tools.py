"""pip and git, run one way: one runner that honours the offline and mirror options, one reading of failures.

pip always runs as `python -m pip` of the interpreter it is to change (a
portable build's `pip.exe` launcher may point at a foreign path, so it is
never used), without its version check and without asking anything. Where
packages come from, in this order: the arguments of `PipOptions`, then the
environment (`H3KIT_PIP_FIND_LINKS`, a path list; `H3KIT_PIP_NO_INDEX=1`;
`H3KIT_PIP_INDEX_URL`, which replaces every index URL, e.g. a local mirror),
then pip's own configuration.

git is resolved to an absolute path and runs with `GIT_TERMINAL_PROMPT=0`: a
repository that asks for a login fails at once instead of waiting at a prompt
nobody sees.

A failed run raises NotReady with one sentence and a fix from `classify`:
a table of what pip and git print (their own wording, recorded in the
tests), read top to bottom, the first matching row winning.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import dataclass, field

from h3kit.core import subproc
from h3kit.core.errors import BadInput, NotReady

# pip subcommands that read a package index (uninstall and list would refuse --index-url).
INDEX_COMMANDS = ("install", "download", "wheel")


@dataclass
class PipOptions:
    find_links: list[str] = field(default_factory=list)
    no_index: bool = False
    index_url: str | None = None  # replaces the caller's index (a mirror, or a local one)
    links_from: str | None = None  # the variable the find-links came from, checked before pip runs

    @classmethod
    def from_env(cls, environ=None) -> "PipOptions":
        env = os.environ if environ is None else environ
        links = [p for p in env.get("H3KIT_PIP_FIND_LINKS", "").split(os.pathsep) if p]
        return cls(links, env.get("H3KIT_PIP_NO_INDEX", "") not in ("", "0"), env.get("H3KIT_PIP_INDEX_URL") or None,
                   links_from="H3KIT_PIP_FIND_LINKS" if links else None)

    def missing_links(self) -> list[str]:
        """The find-links that name a local path that is not there (URLs other than file:// are not checked)."""
        return [link for link in self.find_links
                if (path := local_path(link)) is not None and not os.path.exists(path)]

    def local_only(self) -> list[str] | None:
        """The local paths pip may take packages from when it may take them from nowhere else (no index, every
        find-link a path or file:// URL); None when pip may also reach a server."""
        paths = [local_path(link) for link in self.find_links]
        if not self.no_index or None in paths:
            return None
        return [p for p in paths if p is not None]

    def check_links(self) -> None:
        """BadInput naming the first missing folder of the variable the links came from: pip would only warn,
        go on without it, and then fail on what that folder held (a pin conflict, no matching version)."""
        missing = self.missing_links() if self.links_from else []
        if missing:
            raise BadInput(f"{self.links_from} names the wheel folder {missing[0]}, which does not exist.",
                           f"Point {self.links_from} at the folder that holds the wheels (several joined by "
                           f"'{os.pathsep}'), or unset it, then run the command again.")

    def index_args(self, index_url: str | None) -> list[str]:
        """pip arguments for the package sources: offline beats a mirror, a mirror beats `index_url`."""
        args: list[str] = []
        if self.no_index:
            args.append("--no-index")
        elif self.index_url or index_url:
            args += ["--index-url", self.index_url or index_url]
        for link in self.find_links:
            args += ["--find-links", link]
        return args


def local_path(link: str) -> str | None:
    """Pure: the filesystem path a find-links entry names (a path or a file:// URL), user-expanded; None for a URL
    of a server (http(s) and the like)."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    url = urlparse(link)
    if len(url.scheme) > 1 and url.scheme != "file":  # "C:" is a drive, not a scheme
        return None
    return os.path.expanduser(url2pathname(url.path) if url.scheme == "file" else link)


# -- what a failure means ---------------------------------------------------------------

@dataclass(frozen=True)
class Failure:
    tools: tuple[str, ...]  # which tools print this ("pip", "git")
    patterns: tuple[str, ...]  # regular expressions, searched in the lower-cased output
    sentence: str  # what went wrong; {0} is the first pattern's first group
    fix: str
    offline: bool = False  # the caller's offline alternative helps here


OFFLINE_PIP = "or set H3KIT_PIP_FIND_LINKS to a folder of wheels and H3KIT_PIP_NO_INDEX=1"
_FULL_FIX = ("Free some space on that disk (pip also unpacks into its temporary folder, TMPDIR), "
             "then run the command again.")
# pip goes on without a find-links location it cannot read, then fails on what that folder held (a pin
# conflict, no matching version): the missing folder is the cause, so it outranks those readings.
IGNORED_LINK = Failure(("pip",), (r"location '([^']+)' is ignored: it is either a non-existing path",),
                       "the wheel folder {0} does not exist, so pip looked for the packages without it.",
                       "Point H3KIT_PIP_FIND_LINKS (or pip's own find-links setting) at the folder that holds "
                       "the wheels, then run the command again.")
FAILURES: tuple[Failure, ...] = (
    Failure(("pip", "git"), (r"(?:no space left on device|disk quota exceeded): '([^']+)'",),
            "the disk that holds {0} is full.", _FULL_FIX),
    Failure(("pip", "git"), (r"no space left on device", r"errno 28", r"disk quota exceeded", r"errno 122"),
            "the disk is full.", _FULL_FIX),
    Failure(("pip", "git"), (r"read-only file system: '([^']+)'",), "{0} is on a read-only file system.",
            "Remount that disk read-write, or use a ComfyUI on a writable disk, then run the command again."),
    Failure(("pip", "git"), (r"proxyerror", r"407 proxy", r"received http code 407", r"proxy authentication required",
                             r"tunnel connection failed", r"proxy connect aborted"),
            "a proxy blocked the connection.",
            "Set HTTPS_PROXY to a proxy that lets the connection through (with credentials if it needs them), "
            "or point H3KIT_PIP_INDEX_URL at a reachable mirror.", offline=True),
    Failure(("pip", "git"), (r"certificate verify failed", r"ssl certificate problem"),
            "the server's TLS certificate was not trusted.",
            "If a company proxy re-signs connections, point PIP_CERT and git's http.sslCAInfo at its CA bundle; "
            "never switch verification off.", offline=True),
    Failure(("pip", "git"), (r"failed to establish a new connection", r"temporary failure in name resolution",
                             r"name or service not known", r"network is unreachable", r"could not resolve host",
                             r"could not resolve proxy", r"failed to connect", r"connection timed out"),
            "there is no network connection to the server.", "Connect to the internet and run the command again.",
            offline=True),
    Failure(("git",), (r"authentication failed", r"could not read username", r"terminal prompts disabled",
                       r"permission denied \(publickey", r"http code 40[13]\b", r"returned error: 40[13]\b"),
            "the repository asked for a login, so it is private or not at that address.",
            "Check the URL (a public repository needs no login), or set up git credentials for it."),
    Failure(("pip", "git"), (r"permission denied", r"errno 13", r"access is denied"),
            "the files it had to change are not writable by this user.",
            "Run h3kit as the user that owns that folder (never with sudo); or fix the folder's permissions."),
    Failure(("pip",), (r"could not find a version that satisfies the requirement ([^\s(]+)",),
            "no wheel of {0} fits this Python and platform on the index.",
            "Check the index URL and the Python version (see 'h3kit doctor').", offline=True),
    Failure(("pip",), (r"no matching distribution",),
            "a package was not found on the index.", "Check the index URL or H3KIT_PIP_FIND_LINKS.", offline=True),
    Failure(("git",), (r"repository '[^']*' not found", r"repository not found", r"does not appear to be a git repository",
                       r"not found"),
            "the repository does not exist at that address.", "Check the URL."),
)
STATUS_FAILURES = {  # (tool, status) -> (sentence, fix, the offline alternative helps)
    ("pip", "timeout"): ("pip did not finish in time.",
                         "Check the network connection and run the same command again; finished steps are kept.", True),
    ("pip", "missing"): ("the Python interpreter could not be started.", "Check that the Python path exists and runs.",
                         False),
    ("git", "timeout"): ("git did not finish in time.", "Check the network connection and run the same command again.",
                         True),
    ("git", "missing"): ("git is not installed.", "Install git (https://git-scm.com/downloads, or your package manager).",
                         True),
}


def classify(tool: str, text: str, status: str = "error", *, alternative: str | None = None) -> tuple[str, str]:
    """(sentence, fix) for a failed pip or git run, from its status and output; pure.

    `alternative` is the caller's way around the network ('pass a .zip with
    --comfyui-source'); it is added to the fix where it helps (pip's default:
    a folder of wheels).
    """
    hint = alternative or (OFFLINE_PIP if tool == "pip" else None)
    if (tool, status) in STATUS_FAILURES:
        sentence, fix, offline = STATUS_FAILURES[(tool, status)]
        return sentence, _with(fix, hint if offline else None)
    ignored = _match(IGNORED_LINK, tool, text, hint)
    if ignored is not None:
        return ignored
    conflict = pin_conflict(text) if tool == "pip" else None
    if conflict is not None:
        return conflict
    for row in FAILURES:
        said = _match(row, tool, text, hint)
        if said is not None:
            return said
    return f"{tool} reported: {telling_line(text)[:200]}", \
        f"Run the command again with -v and read the log for {tool}'s full output."


def telling_line(text: str) -> str:
    """The line of a tool's output that says what went wrong: its first `fatal:` line, else its first `error:`
    line (git ends a failed checkout with advice, pip with a notice), else its last line; pure."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for prefix in ("fatal:", "error:"):
        said = next((ln for ln in lines if ln.lower().startswith(prefix)), None)
        if said is not None:
            return said
    return lines[-1] if lines else "no output"


def _match(row: Failure, tool: str, text: str, hint: str | None) -> tuple[str, str] | None:
    if tool not in row.tools:
        return None
    for pattern in row.patterns:
        m = re.search(pattern, text, re.IGNORECASE)  # the patterns are lower-case; a path keeps its case
        if m:
            return row.sentence.format(*(m.groups() or ("",))), _with(row.fix, hint if row.offline else None)
    return None


def pin_conflict(text: str) -> tuple[str, str] | None:
    """(sentence, fix) naming the two pins of pip's "The conflict is caused by:" block; None without one. Pure.

    pip's own advice ("remove package versions to allow pip to attempt to solve the dependency conflict")
    names neither pin, and with H3KIT_PIP_NO_INDEX=1 no other version could be found anyway."""
    m = re.search(r"The conflict is caused by:\n((?:[ \t]+\S.*\n?)+)", text)
    if m is None:
        return None
    causes = [ln.strip() for ln in m.group(1).splitlines() if ln.strip()]
    asked = [re.sub(r"^The user requested\s*", "", c) for c in causes if c.startswith("The user requested")]
    needs = [c for c in causes if " depends on " in c]
    if not asked or not needs:
        return None
    sentence = f"two pins conflict: {needs[0]}, but {asked[0]} is requested" + (
        f" (and {len(causes) - 2} more)" if len(causes) > 2 else "") + "."
    fix = ("Provide versions that agree (the wheel built for that pin, in H3KIT_PIP_FIND_LINKS when "
           "H3KIT_PIP_NO_INDEX=1 leaves pip nothing else), or drop one of the two pins.")
    return sentence, fix


def _with(fix: str, alternative: str | None) -> str:
    """The fix, then the caller's alternative (a clause: 'or pass ...') after a semicolon."""
    if not alternative:
        return fix
    return f"{fix.rstrip('.')}; {alternative.rstrip('.')}."


# -- running them ---------------------------------------------------------------------------

def ticking(label: str, fn, *args, **kwargs):
    """Run fn while a progress line counts seconds on stderr (pip and git print nothing useful captured)."""
    from tqdm import tqdm

    done = threading.Event()
    bar = tqdm(desc=label, unit="s", total=None, file=sys.stderr, leave=False,
               disable=not sys.stderr.isatty(), bar_format="{desc}: {elapsed}")

    def tick():
        while not done.wait(1.0):
            bar.update(1)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        return fn(*args, **kwargs)
    finally:
        done.set()
        ticker.join()
        bar.close()


def run_pip(ctx, python, args: list[str], label: str, *, timeout: float, opts: PipOptions | None = None,
            index_url: str | None = None, alternative: str | None = None) -> subproc.ToolResult:
    """`python -m pip ARGS` with the package sources of `opts` (default: from the environment); NotReady on failure."""
    opts = PipOptions.from_env() if opts is None else opts
    sources = opts.index_args(index_url) if args and args[0] in INDEX_COMMANDS else []
    if sources:
        opts.check_links()
    argv = [os.fspath(python), "-m", "pip", *args, *sources, "--disable-pip-version-check", "--no-input"]
    return _run(ctx, "pip", argv, label, timeout=timeout, alternative=alternative)


def run_git(ctx, args: list[str], label: str, *, timeout: float, cwd=None,
            alternative: str | None = None) -> subproc.ToolResult:
    """`git ARGS` (git found on PATH, never in the current folder), never prompting; NotReady on failure."""
    git = subproc.which("git")
    if git is None:
        sentence, fix = classify("git", "", "missing", alternative=alternative)
        raise NotReady(f"{label} failed: {sentence}", fix)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    return _run(ctx, "git", [git, *args], label, timeout=timeout, cwd=cwd, env=env, alternative=alternative)


def _run(ctx, tool: str, argv: list[str], label: str, *, timeout: float, alternative: str | None,
         **kwargs) -> subproc.ToolResult:
    ctx.log.debug("%s: %s", tool, argv)
    result = ticking(label, subproc.run, argv, timeout=timeout, **kwargs)
    ctx.log.debug("%s exit %s\n%s\n%s", tool, result.returncode, result.stdout[-4000:], result.stderr[-4000:])
    if not result.ok:
        sentence, fix = classify(tool, result.stderr + result.stdout, result.status, alternative=alternative)
        raise NotReady(f"{label} failed: {sentence}", fix, details={"argv": result.argv, "detail": result.detail})
    return result
