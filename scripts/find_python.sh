# Sourced by install.sh and the scripts/*.sh shims: sets PY to a Python >= 3.10.
# Search order: $H3KIT_PYTHON, then python3.13 .. python3.10, python3, python on PATH.
PY=""
for cand in "${H3KIT_PYTHON:-}" python3.13 python3.12 python3.11 python3.10 python3 python; do
  [ -n "$cand" ] || continue
  command -v "$cand" >/dev/null 2>&1 || continue
  if "$cand" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' >/dev/null 2>&1; then
    PY="$(command -v "$cand")"
    break
  fi
done
if [ -z "$PY" ]; then
  echo "error: h3kit needs Python 3.10 or newer, and none was found on PATH." >&2
  echo "fix: install Python from https://www.python.org/downloads/ (macOS: or 'brew install python'), then run this again." >&2
  exit 3
fi
