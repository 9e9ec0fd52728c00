#!/usr/bin/env bash
# Double-click in Finder for 'h3kit history'; the window stays open to show the result.
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/history.sh" "$@"
rc=$?
echo
read -r -p "Finished (exit code $rc). Press Return to close this window. " _
exit $rc
