#!/usr/bin/env bash
# One click for 'h3kit history' in h3kit's private environment (no PATH needed).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/find_python.sh"
exec "$PY" "$here/bootstrap.py" --run history "$@"
