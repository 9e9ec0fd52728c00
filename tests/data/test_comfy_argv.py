"""ComfyUI's command line read as ComfyUI reads it (h3kit.data.comfy_argv), checked against argparse itself.

The parser below has the shapes comfy/cli_args.py declares (nargs and action, copied as facts with their line
numbers in ComfyUI v0.33.0-40, not imported; `type` and `default` left out, since they change which values
pass, never how the tokens split). Both read the same argv lists, written out and drawn at random from flags,
their prefixes and values that start with '-', hold spaces or are not ASCII; wherever argparse accepts a
list, the reader must say what argparse says.
"""

from __future__ import annotations

import argparse
import itertools
import random
import re

import pytest

from conftest import FIXTURES
from h3kit.data import comfy_argv as ca

CONST = "0.0.0.0,::"
SHAPES = {  # flag -> (nargs, action), cli_args.py line
    "--listen": ("?", "store"),  # 63, const 0.0.0.0,::
    "--port": (None, "store"),  # 64
    "--base-directory": (None, "store"),  # 70
    "--extra-model-paths-config": ("+", "append"),  # 71
    "--output-directory": (None, "store"),  # 72
    "--cpu-vae": (0, "store_true"),  # 102
    "--preview-method": (None, "store"),  # 135
    "--preview-size": (None, "store"),  # 137
    "--cache-ram": ("*", "store"),  # 140
    "--lowvram": (0, "store_true"),  # 170
    "--cpu": (0, "store_true"),  # 172
    "--reserve-vram": (None, "store"),  # 174
    "--vram-headroom": (None, "store"),  # 175
    "--fast": ("*", "store"),  # 198
    "--whitelist-custom-nodes": ("+", "store"),  # 213
    "--verbose": ("*", "append"),  # 218: VerboseAction adds one entry per occurrence, as append does
    "--user-directory": (None, "store"),  # 256
    "--models-directory": (None, "store"),  # 257
    "--feature-flag": (None, "append"),  # 274
}
KNOWN = frozenset(SHAPES) | {"-h", "--help"}


class Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse as ComfyUI uses it, stopping with an exception where ComfyUI would exit."""

    def error(self, message):
        raise Refused(message)

    def exit(self, status=0, message=None):
        raise Refused(message or "exit")

    def print_help(self, file=None):
        pass  # -h: ComfyUI prints its help and exits, which exit() above stands for


def _parser() -> argparse.ArgumentParser:
    parser = _Parser()
    for flag, (nargs, action) in SHAPES.items():
        kwargs = {"action": action}
        if action != "store_true":
            kwargs.update(nargs=nargs, default=None)
        if nargs == "?":
            kwargs["const"] = CONST
        parser.add_argument(flag, **kwargs)
    return parser


PARSER = _parser()


def _argparse_reading(argv: list[str]) -> dict | None:
    """argparse's namespace, the lists of an append of lists chained as main.py chains them; None: refused."""
    try:
        ns = vars(PARSER.parse_args(argv))
    except Refused:
        return None
    for flag, (nargs, action) in SHAPES.items():
        dest = flag[2:].replace("-", "_")
        if action == "append" and nargs in ("+", "*") and ns[dest] is not None:
            ns[dest] = list(itertools.chain(*ns[dest]))
    return ns


def _our_reading(argv: list[str]) -> dict:
    """The reader's answers, put as argparse would store them."""
    out = {}
    for flag, (nargs, action) in SHAPES.items():
        got = ca.values(argv, flag, KNOWN)
        if got is None:
            read = False if action == "store_true" else None
        elif action == "store_true":
            read = True
        elif nargs is None and action == "store":
            read = ca.value(argv, flag, KNOWN)
        elif nargs == "?":
            read = got[0] if got else CONST
        else:
            read = list(got)
        out[flag[2:].replace("-", "_")] = read
    return out


FLAGS = [*SHAPES, "--extra", "--base", "--base=/b", "--user", "--models", "--reserve", "--po", "--preview-m",
         "--cpu-", "--lo", "--output=o", "--extra-model-paths-config=e.yaml", "--port=8000", "--reserve-vram=1.5",
         "--listen=::1", "--feature-flag=k=v", "--extra=x y.yaml",
         # ambiguous or unknown: argparse refuses them, and the reader must not read them as another flag
         "--cp", "--p", "--prev", "--v", "--c", "--no-such-flag", "-x", "-h", "--"]
VALUES = ["a.yaml", "/p/with space/x.yaml", r"C:\Users\Jürgen\Comfy UI", "日本/モデル.yaml", "8188", "1.5", "-5",
          "-1.5", "-.5", "-", "", "-x", "--no such", "--po rt", "a=b", "-1e5", "k=v"]


def _draw(rng: random.Random) -> list[str]:
    return [rng.choice(FLAGS) if rng.random() < 0.45 else rng.choice(VALUES) for _ in range(rng.randint(0, 7))]


WRITTEN = [
    ["--port", "1", "--port=2"],
    ["--base-directory", "/a", "--base=/b", "--base-directory", "/c d"],
    ["--extra-model-paths-config", "a.yaml", "b c.yaml", "--extra-model-paths-config=d.yaml", "--extra", "é.yaml"],
    ["--listen", "--port", "8000"],
    ["--listen", "::1", "--listen"],
    ["--reserve-vram", "-1.5", "--vram-headroom", "-.5"],
    ["--reserve-vram", "2", "--reserve=3"],
    ["--cpu", "--cpu-vae", "--lowvram"],
    ["--cache-ram", "--fast", "a", "b"],
    ["--whitelist-custom-nodes", "x", "--whitelist-custom-nodes", "y", "z"],
    ["--verbose", "--verbose", "INFO", "--verbose", "DEBUG", "log.txt"],
    ["--feature-flag", "a=1", "--feature-flag=b", "--feature-flag", "-5"],
    ["--user-directory", "--po rt", "--models", "/m"],
    ["--preview-m", "auto", "--po", "8188"],
    ["--port", "-x"], ["--cp"], ["--base-directory"], ["--no-such-flag", "1"],
]


@pytest.mark.parametrize("argv", WRITTEN, ids=" ".join)
def test_written_argv_lists_read_as_argparse_reads_them(argv):
    theirs = _argparse_reading(argv)
    if theirs is not None:
        assert _our_reading(argv) == theirs
    else:
        _our_reading(argv)  # refused by ComfyUI: the reader still answers, without raising


def test_random_argv_lists_read_as_argparse_reads_them():
    rng = random.Random(46)
    accepted = 0
    for _ in range(2000):
        argv = _draw(rng)
        theirs = _argparse_reading(argv)
        ours = _our_reading(argv)  # never raises, accepted or not
        if theirs is not None:
            accepted += 1
            assert ours == theirs, argv
    assert accepted > 300  # the draw reaches past the lists argparse refuses


def test_a_repeated_flag_the_last_counts_and_extra_model_paths_every_one():
    argv = ("main.py", "--port", "8188", "--extra-model-paths-config", "/a b.yaml", "/c.yaml", "--port=8000",
            "--extra-model-paths-config=/Jürgen/日本.yaml")
    assert ca.value(argv, "--port") == "8000"
    assert ca.values(argv, "--extra-model-paths-config") == ("/a b.yaml", "/c.yaml", "/Jürgen/日本.yaml")
    assert ca.value(argv, "--base-directory") is None and ca.values(argv, "--cpu") is None


def test_shortened_flags_follow_the_flags_comfyui_has():
    assert ca.value(["--reserve", "2"], "--reserve-vram") == "2"
    assert ca.value(["--base=/x"], "--base-directory") == "/x"
    assert ca.value(["--cpu"], "--cpu") is None and ca.values(["--cpu"], "--cpu") == ()
    assert ca.values(["--cp"], "--cpu") is None  # several flags begin so: ComfyUI stops on it
    (opt,) = ca.options(["--cp", "1"])
    assert (opt.flag, opt.known, opt.tokens) == ("--cp", False, ("--cp", "1"))
    # given the flags of one ComfyUI (its --help), a prefix unique there is read as that flag
    assert ca.value(["--res", "1"], "--reserve-vram", {"--reserve-vram", "--port"}) == "1"


def test_values_that_start_with_a_dash_and_the_end_of_options():
    assert ca.value(["--reserve-vram", "-1.5"], "--reserve-vram") == "-1.5"  # a negative number is a value
    assert ca.value(["--base-directory", "-x"], "--base-directory") is None  # an option, never a value
    assert ca.value(["--base-directory", "-x y"], "--base-directory") == "-x y"  # a space: a value
    assert ca.value(["--port", "1", "--", "--port", "2"], "--port") == "1"
    assert ca.options(["--cpu", "--", "x"])[-1] == ca.Option("--", ("x",), ("--", "x"), False)


def test_after_an_equals_sign_only_that_value_counts():
    (opt,) = ca.options(["--extra-model-paths-config=a.yaml", "b.yaml"])
    assert opt.values == ("a.yaml",) and opt.tokens == ("--extra-model-paths-config=a.yaml", "b.yaml")


def test_every_flag_a_recorded_help_names_is_known():
    text = (FIXTURES / "comfyui" / "help-0.8.0.txt").read_text(encoding="utf-8")
    named = set(re.findall(r"^  (?:-h, )?(--[\w-]+)", text, re.M))  # the option lines, not the prose
    assert {"--listen", "--extra-model-paths-config", "--normalvram", "--help"} <= named
    assert named - ca.COMFYUI_FLAGS == set()
    assert ca.APPEND <= ca.COMFYUI_FLAGS
