#!/usr/bin/env bash
# Double-click in Finder for 'h3kit update'; the window stays open to show the result.
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/update.sh" "$@"
rc=$?
echo
read -r -p "Finished (exit code $rc). Press Return to close this window. " _
exit $rc
