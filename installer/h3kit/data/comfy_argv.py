"""ComfyUI's command line, read as ComfyUI's own parser reads it.

ComfyUI's flags reach h3kit three ways: the profile's `comfyui_args`, the
arguments an app starts it with (its saved settings), and a running
ComfyUI's argv (/system_stats). All three are read here, by one rule, which
is ComfyUI's: comfy/cli_args.py builds a plain `argparse.ArgumentParser()`
(line 61) and calls `parser.parse_args()` (line 278) -- line numbers of
ComfyUI v0.33.0-40 (89550779); v0.30.0 to v0.33.0 declare the same shapes:

- A flag given twice: the last one counts, with its values (`--port 1 --port
  2` is port 2). The flags whose action appends are the exception: every
  occurrence counts, in order (`APPEND`: --extra-model-paths-config,
  `nargs='+', action='append'` at line 71, whose lists main.py's
  apply_custom_paths chains; --feature-flag, `action='append'`, line 274;
  --verbose, whose VerboseAction adds to the list, lines 38-47 and 218).
- `--flag=value` is `--flag value`; after `=` comes exactly that one value.
- A flag may be shortened to any prefix that names one flag only (cli_args.py
  leaves allow_abbrev at argparse's default, True); an exact name always wins
  (`--cpu` is --cpu, not --cpu-vae). Which prefixes name one flag depends on
  the ComfyUI: callers that know its flags (main.py --help) pass `known`;
  the rest get `COMFYUI_FLAGS`, the union over the versions h3kit has read.
  A prefix that names one flag of the union names no other in any version,
  so the union never reads a prefix as the wrong flag; it may miss one that
  only a smaller, older list makes unique.
- A value is a token that is not an option: one not starting with '-', a
  lone '-', a negative number (-5, -1.5: ComfyUI has no option that looks
  like one), or one with a space that names no flag. Any other `-x` or `--x`
  is an option even when ComfyUI does not know it (it then stops with an
  error), so it is never a value: `--base-directory -x` gives no directory.
  A newer argparse takes any token opening with `-` and a digit (`-1e5`)
  as a number; this follows Python 3.9-3.12's test (the tests run 3.11).
- `--` ends the options; all after it is positional, and ComfyUI has none.

What argparse refuses (an unknown or ambiguous flag, a missing or extra
value) ComfyUI refuses too: it stops at start. The reader never raises on it
and reads what it can, as each function says. Pure: no I/O, no h3kit import;
tests/data/test_comfy_argv.py checks it against argparse given the same shapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection, Sequence

# argparse's own test for a negative number (Python 3.9-3.12), which is a value when no flag looks like one.
NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")
END = "--"
# The flags whose every occurrence counts (module docstring); every other flag's last occurrence counts.
APPEND = frozenset({"--extra-model-paths-config", "--feature-flag", "--verbose"})
# Every option of comfy/cli_args.py from v0.30.0 to v0.33.0-40, argparse's -h/--help, and the flags of older
# versions since removed (--normalvram, --disable-ipex-optimize: tests/fixtures/comfyui/help-0.8.0.txt).
COMFYUI_FLAGS = frozenset("""
-h --help --listen --port --tls-keyfile --tls-certfile --enable-cors-header --max-upload-size --base-directory
--extra-model-paths-config --output-directory --temp-directory --input-directory --auto-launch --disable-auto-launch
--cuda-device --default-device --cuda-malloc --disable-cuda-malloc --force-fp32 --force-fp16 --fp32-unet
--fp64-unet --bf16-unet --fp16-unet --fp8_e4m3fn-unet --fp8_e5m2-unet --fp8_e8m0fnu-unet --fp16-vae --fp32-vae
--bf16-vae --cpu-vae --fp8_e4m3fn-text-enc --fp8_e5m2-text-enc --fp16-text-enc --fp32-text-enc --bf16-text-enc
--fp16-intermediates --force-channels-last --directml --oneapi-device-selector --supports-fp8-compute
--enable-triton-backend --disable-triton-backend --preview-method --preview-size --cache-ram --cache-classic
--cache-lru --cache-none --high-ram --use-split-cross-attention --use-quad-cross-attention
--use-pytorch-cross-attention --use-sage-attention --use-flash-attention --use-ck-attention --disable-xformers
--force-upcast-attention --dont-upcast-attention --enable-manager --disable-manager-ui --enable-manager-legacy-ui
--gpu-only --highvram --lowvram --novram --cpu --reserve-vram --vram-headroom --disable-nvml-pressure
--async-offload --disable-async-offload --disable-dynamic-vram --enable-dynamic-vram --fast-disk
--disable-cuda-graphs --force-non-blocking --default-hashing-function --disable-smart-memory --deterministic --fast
--debug-hang --disable-pinned-memory --mmap-torch-files --disable-mmap --dont-print-server --quick-test-for-ci
--windows-standalone-build --disable-metadata --disable-all-custom-nodes --whitelist-custom-nodes
--disable-api-nodes --multi-user --verbose --log-stdout --front-end-version --front-end-root --user-directory
--models-directory --enable-compress-response-body --comfy-api-base --database-url --enable-assets
--enable-asset-hashing --feature-flag --list-feature-flags
--normalvram --disable-ipex-optimize
""".split())


@dataclass(frozen=True)
class Option:
    """One flag as given, with the values ComfyUI's parser hands it."""

    flag: str  # its full name; one ComfyUI does not know, or a prefix of several: as written, up to any '='
    values: tuple[str, ...]  # after '=' the one value, else the values that follow it
    tokens: tuple[str, ...]  # the tokens it spans as written: the flag, its values, any stray value after '='
    known: bool = True  # False: ComfyUI would stop on it (unknown or ambiguous), or END and what follows


def _prefixed(token: str, known: Collection[str]) -> list[tuple[str, str | None]]:
    """The (flag, value after it) that `token` may abbreviate, by argparse's _get_option_tuples: a '--' token up
    to its '=', a '-x' one as a short flag with its value glued on (`-hfoo`) or as a prefix."""
    if token.startswith("--"):
        prefix, eq, after = token.partition("=")
        return [(f, after if eq else None) for f in known if f.startswith(prefix)]
    short, glued = token[:2], token[2:]
    return [(f, glued) if f == short else (f, None) for f in known if f == short or f.startswith(token)]


def _option(token: str, known: Collection[str]) -> tuple[str, str | None, bool] | None:
    """(flag, value after '=', known) when argparse reads `token` as an option, None when it is a value
    (argparse's _parse_optional, step for step)."""
    if not token.startswith("-"):
        return None
    if token in known:
        return token, None, True
    if len(token) == 1:
        return None
    name, eq, after = token.partition("=")
    if eq and name in known:
        return name, after, True
    found = _prefixed(token, known)
    if len(found) == 1:
        return found[0][0], found[0][1], True
    if not found and (NEGATIVE.match(token) or " " in token):
        return None
    return name, (after if eq else None), False  # argparse stops here: no such flag, or several


def options(argv: Sequence[str], known: Collection[str] = COMFYUI_FLAGS) -> tuple[Option, ...]:
    """Every flag in `argv`, in order, each with its values. Values before the first flag (argv[0], the
    script) belong to none and are left out; END and all after it come last, as one Option named END."""
    groups: list[tuple[str, list[str], list[str], bool, bool]] = []  # flag, values, tokens, known, closed by '='
    argv = [str(t) for t in argv]
    for i, token in enumerate(argv):
        if token == END:
            groups.append((END, argv[i + 1:], argv[i:], False, True))
            break
        opt = _option(token, known)
        if opt is not None:
            flag, after, is_known = opt
            groups.append((flag, [] if after is None else [after], [token], is_known, after is not None))
        elif groups:
            _flag, values, tokens, _known, closed = groups[-1]
            tokens.append(token)
            if not closed:
                values.append(token)
    return tuple(Option(f, tuple(v), tuple(t), k) for f, v, t, k, _closed in groups)


def values(argv: Sequence[str], flag: str, known: Collection[str] = COMFYUI_FLAGS) -> tuple[str, ...] | None:
    """What ComfyUI reads for `flag` (its full name): None when it is not given; else its last occurrence's
    values (`--listen` alone: ()), or, for an APPEND flag, every occurrence's values in order, as one tuple."""
    given = [o for o in options(argv, known) if o.flag == flag]
    if not given:
        return None
    if flag in APPEND:
        return tuple(v for o in given for v in o.values)
    return given[-1].values


def value(argv: Sequence[str], flag: str, known: Collection[str] = COMFYUI_FLAGS) -> str | None:
    """The value of a one-value flag (--port, --base-directory, --reserve-vram): its last occurrence's; None
    when it is not given or given without one."""
    given = [o for o in options(argv, known) if o.flag == flag]
    return given[-1].values[0] if given and given[-1].values else None
