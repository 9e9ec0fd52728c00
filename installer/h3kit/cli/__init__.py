"""The `h3kit` command line: parse, dispatch, print, exit.

Each command lives in `h3kit.cli.<name>` with three names: `HELP` (one
line for --help), `add_arguments(parser)` and `run(args, ctx) -> Outcome`.
This module owns only what is common: global flags, logging, printing the
outcome, and turning errors into the contract's exit codes.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import traceback

from h3kit import __version__
from h3kit.cli.context import Context, Outcome
from h3kit.core.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, BadInput, H3kitError
from h3kit.core.logs import setup as setup_logging
from h3kit.core.oserrors import environment_errors
from h3kit.core.paths import locations
from h3kit.core.subproc import Terminated, interrupt_on_signals

# Order is the order of --help. Names and meanings are promises to users and scripts (docs/commands.md): extend, never rename.
COMMANDS = (
    "fingerprint",
    "plan",
    "profile",
    "build",
    "install",
    "apply",
    "calibrate",
    "doctor",
    "update",
    "rollback",
    "history",
    "models",
    "uninstall",
)

# Commands that change something take --yes and --dry-run.
CHANGING = {"profile", "build", "install", "apply", "calibrate", "doctor", "update", "rollback", "models", "uninstall"}


class _Parser(argparse.ArgumentParser):
    """argparse that raises BadInput (exit 2, one sentence) instead of printing usage and exiting."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise BadInput(f"{self.prog}: {message}.", f"Run '{self.prog} --help' to see the accepted arguments.")


def _common(changing: bool, suppress: bool) -> argparse.ArgumentParser:
    default = argparse.SUPPRESS if suppress else None
    p = _Parser(add_help=False)
    p.add_argument("--json", action="store_true", default=default if suppress else False,
                   help="print one JSON document on stdout (logs and progress go to stderr)")
    p.add_argument("-v", "--verbose", action="count", default=default if suppress else 0,
                   help="more detail on stderr (repeat for debug)")
    if changing:
        p.add_argument("--yes", "-y", action="store_true", default=default if suppress else False,
                       help="answer yes to every question (for scripts)")
        p.add_argument("--dry-run", action="store_true", default=default if suppress else False,
                       help="say what would change, change nothing")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="h3kit",
        description="Fit MiniMax H3 and other large video models into ComfyUI on this machine.",
        parents=[_common(changing=True, suppress=False)],
        epilog="Exit codes: 0 ok, 1 internal error, 2 bad input, 3 environment not ready, "
        "4 installed but verification failed, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"h3kit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        module = importlib.import_module(f"h3kit.cli.{name}")
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=module.HELP,
            parents=[_common(changing=name in CHANGING, suppress=True)],
        )
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def _print_outcome(outcome: Outcome, as_json: bool) -> None:
    if as_json:
        doc = outcome.doc if outcome.doc is not None else {}
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n")
    elif outcome.text:
        sys.stdout.write(outcome.text.rstrip("\n") + "\n")
    # Flush first so that in a pipe the warnings come after the text they qualify; with --json they go to
    # stderr too, so stdout stays one JSON document.
    sys.stdout.flush()
    for w in outcome.warnings:
        sys.stderr.write(f"warning: {w}\n")


def _print_error(exc: H3kitError, as_json: bool, log_path) -> None:
    if as_json:
        doc = exc.to_json()
        doc["log"] = str(log_path) if log_path else None
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    lines = [f"error: {exc.message}"]
    if exc.fix:
        lines.append(f"fix: {exc.fix}")
    if log_path:
        lines.append(f"log: {log_path}")
    sys.stderr.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    restore = interrupt_on_signals()  # SIGTERM / SIGHUP: the tree-kill and cleanup of Ctrl-C
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    finally:
        restore()


def _main(argv: list[str]) -> int:
    as_json = "--json" in argv
    loc = locations()
    log_path = None
    logging_ready = False
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        as_json = bool(getattr(args, "json", False))
        log_path = setup_logging(loc.log_file, getattr(args, "verbose", 0) or 0)
        logging_ready = True
        if not getattr(args, "command", None):
            parser.print_help()
            return 0
        ctx = Context(
            json=as_json,
            verbose=args.verbose or 0,
            yes=bool(getattr(args, "yes", False)),
            dry_run=bool(getattr(args, "dry_run", False)),
            locations=loc,
        )
        with environment_errors(f"the files 'h3kit {args.command}' writes"):
            outcome = args._module.run(args, ctx)
        _print_outcome(outcome, as_json)
        return outcome.code
    except H3kitError as exc:
        logging.getLogger("h3kit").debug("error exit %d: %s", exc.exit_code, traceback.format_exc())
        _print_error(exc, as_json, log_path)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        by = f" by {exc.args[0]}" if isinstance(exc, Terminated) else ""
        sys.stderr.write(f"\ninterrupted{by}.\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: say so, keep the traceback in the log
        logging.getLogger("h3kit").error("internal error: %s", traceback.format_exc())
        if not logging_ready:
            log_path = setup_logging(loc.log_file, 0)
            logging.getLogger("h3kit").error("internal error: %s", traceback.format_exc())
        err = H3kitError(
            f"h3kit hit an internal error ({type(exc).__name__}: {exc}).",
            "This is a bug in h3kit: please report it with the log file.",
        )
        err.exit_code = EXIT_INTERNAL
        _print_error(err, as_json, log_path)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
