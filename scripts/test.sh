#!/usr/bin/env bash
# The test command: one step on a fresh clone. Makes (or reuses) a private
# venv with h3kit and its test extras, then runs the whole suite. pytest's
# exit 5 ("no tests ran") is a failure here, never a pass.
#
#   scripts/test.sh                 # the whole suite (what CI runs: .ci/run)
#   scripts/test.sh --fast          # the quick check: nothing slow, nothing compiled (-m "not slow and not native")
#   scripts/test.sh -k workflows    # anything else is passed to pytest
#
# Offline: put wheels in wheelhouse/ (python -m pip wheel -w wheelhouse '.[test]')
# and pip takes everything from there. H3KIT_TEST_VENV moves the venv.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${H3KIT_TEST_VENV:-$repo/.venv-test}"
python="${H3KIT_PYTHON:-$(command -v python3 || command -v python)}"

# Reinstall only when what pip would install changed: the dependency list.
stamp="$("$python" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
  "$repo/pyproject.toml")"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.h3kit-test-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "test.sh: preparing the test environment in $venv ..." >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip_args=(-q)
  if [ -d "$repo/wheelhouse" ]; then
    pip_args+=(--no-index --find-links "$repo/wheelhouse")
  else
    "$venv/bin/python" -m pip install -q --upgrade pip
  fi
  "$venv/bin/python" -m pip install "${pip_args[@]}" -e "$repo[test]"
  echo "$stamp" > "$venv/.h3kit-test-stamp"
fi

# --fast, anywhere in the arguments: leave out the tests marked slow (a real ComfyUI, the C library's own
# tests and compile step, the big fixtures) and those that need the compiled C library (marked native, by hand
# or by tests/conftest.py for asking for a library fixture: installs, deploys, uninstalls, the bridge), so the
# quick check never waits for a compiler; the rest goes to pytest as given.
args=()
for arg in "$@"; do
  if [ "$arg" = "--fast" ]; then
    args+=(-m "not slow and not native")
  else
    args+=("$arg")
  fi
done

# Tests never touch the real home: every test gets its own H3KIT_HOME, and so does the run.
export H3KIT_HOME="${H3KIT_HOME:-$(mktemp -d)}"
cd "$repo"
set +e
"$venv/bin/python" -m pytest -q ${args[@]+"${args[@]}"}
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure." >&2
  exit 1
fi
exit "$rc"
