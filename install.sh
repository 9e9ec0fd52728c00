#!/usr/bin/env bash
# h3kit one-click installer for Linux and macOS.
# Finds a Python >= 3.10 and hands over to scripts/bootstrap.py, which makes a
# private environment, installs h3kit into it and runs 'h3kit install'.
# Any argument is passed on (try --help).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/scripts/find_python.sh"
exec "$PY" "$here/scripts/bootstrap.py" "$@"
