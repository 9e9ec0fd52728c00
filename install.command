#!/usr/bin/env bash
# Double-click in Finder to install h3kit; the window stays open to show the result.
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/install.sh" "$@"
rc=$?
echo
read -r -p "Finished (exit code $rc). Press Return to close this window. " _
exit $rc
