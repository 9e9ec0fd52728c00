#!/usr/bin/env bash
# Build a small bare git repo holding one commit per ComfyUI release that has MiniMax H3 (0.30.0 on), for
# h3kit's real-ComfyUI test tier across releases (scripts/compat_table.py, docs/comfyui-versions.md).
#
#   scripts/make_comfyui_release_repo.sh [MIRROR_GIT_DIR] [OUT_GIT_DIR]
#
# MIRROR_GIT_DIR: a git directory of ComfyUI's public history (default: the fetched yzkee/ComfyUI snapshot,
# /work/.mirror/yzkee+ComfyUI/repo). OUT_GIT_DIR: the bare repo to (re)make (default /root/comfy-releases.git;
# it is deleted first). Each release becomes one commit whose tree is the upstream release commit's tree,
# with the upstream author/commit dates and "(from <upstream commit>)" at the end of its message, tagged
# v0.30.0 ... v0.33.0 (v0.33.0-40: 0.33.0 plus 40 commits, the newest the snapshot holds); the commits are
# chained oldest first, so `git diff v0.32.0 v0.33.0` is the change between two releases.
#
# Why blobs are dropped: the snapshot is not a complete clone. Two large files are missing from its object
# store (comfy/text_encoders/llama_tokenizer/tokenizer.json and comfy/text_encoders/qwen35_tokenizer/
# vocab.json), so a plain checkout or `git archive` of any of these commits fails. Every path whose blob is
# absent is removed from the release's tree instead (the loop below finds them; it is those two today).
# Neither is H3's: its text encoder tokenizes with qwen25_tokenizer (comfy/text_encoders/qwen3vl.py); the
# dropped ones are HunyuanVideo's Llama tokenizer and Qwen3.5's vocabulary, which ComfyUI reads only when
# such a model is loaded, so the trees are complete for h3kit's tier. The result is repacked with every object
# it needs, so it no longer depends on the mirror.
set -euo pipefail
MIRROR="${1:-/work/.mirror/yzkee+ComfyUI/repo}"
OUT="${2:-/root/comfy-releases.git}"
# tag:upstream commit, oldest first
RELEASES="v0.30.0:b1693ecb v0.31.0:43cb4fff v0.32.0:c2bcbecd v0.33.0:2f35f4a0 v0.33.0-40:783545f6"

[ -d "$MIRROR/objects" ] || {
  echo "no git directory at $MIRROR (give the mirror's git dir as the first argument)" >&2; exit 2; }
MIRROR="$(cd "$MIRROR" && pwd)"
rm -rf "$OUT"; git init -q --bare "$OUT"
echo "$MIRROR/objects" > "$OUT/objects/info/alternates"
export GIT_DIR="$OUT" GIT_WORK_TREE=$(mktemp -d)
parent=""
for pair in $RELEASES; do
  tag=${pair%%:*}; c=${pair##*:}
  export GIT_INDEX_FILE=$(mktemp -u)
  git read-tree "$c"
  git ls-tree -r "$c" | while read -r mode type blob path; do
    git cat-file -e "$blob" 2>/dev/null || git update-index --force-remove "$path"
  done
  tree=$(git write-tree)
  rm -f "$GIT_INDEX_FILE"
  msg=$(git log -1 --format=%s "$c")
  export GIT_AUTHOR_DATE=$(git log -1 --format=%aD "$c") GIT_COMMITTER_DATE=$(git log -1 --format=%cD "$c")
  new=$(echo "$msg (from $c)" | git -c user.name=h3kit -c user.email=h3kit@localhost \
    commit-tree "$tree" ${parent:+-p "$parent"})
  git tag "$tag" "$new"; parent=$new; echo "$tag $c -> $new"
done
git update-ref refs/heads/master "$parent"
git symbolic-ref HEAD refs/heads/master
git repack -a -d -q && rm "$OUT/objects/info/alternates"
rmdir "$GIT_WORK_TREE" 2>/dev/null || true
git count-objects -vH
