#!/usr/bin/env bash
# The GPU check: h3kit's CUDA paths proved on a card in one short run (docs/development.md, "The GPU check").
#
#   scripts/gpu_check.sh prepare        # here, with PyPI: builds gpu-carry/ (git-ignored), at most 64 MiB
#                                       # with the working tree; prints its size
#   scripts/gpu_check.sh run            # on the GPU machine (no network): unpacks gpu-carry/, makes ComfyUI's
#                                       # venv on the image's PyTorch, runs every check within 8 minutes,
#                                       # writes gpu_check.json and gpu_check.md to $OUT
#   scripts/gpu_check.sh run --cpu      # here: the same checks on the CPU, on H3KIT_COMFYUI_DIR's ComfyUI
#
# H3KIT_COMFYUI_DIR: the ComfyUI (default /root/ComfyUI-h3); H3KIT_COMFYUI_GGUF_GIT: ComfyUI-GGUF's git
# repository (default the project's mirror); H3KIT_PYTHON: the Python that runs h3kit here (--cpu and
# prepare; default python3); H3KIT_GPU_CHECK_WORK: the work folder (default /tmp/h3kit-gpu-check);
# OUT: where the two files go (default WORK/out). Exit: 0 every check ok; 4 a check failed (the files
# say why); 2 bad usage; 3 the carry or ComfyUI is not there.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$repo/scripts/gpu_check"
python="${H3KIT_PYTHON:-$(command -v python3 || command -v python)}"
work="${H3KIT_GPU_CHECK_WORK:-/tmp/h3kit-gpu-check}"
out="${OUT:-$work/out}"
comfy="${H3KIT_COMFYUI_DIR:-/root/ComfyUI-h3}"
gguf_git="${H3KIT_COMFYUI_GGUF_GIT:-/work/.mirror/city96+ComfyUI-GGUF/repo}"
started="$(date +%s)"

usage() {
  echo "usage: scripts/gpu_check.sh prepare | run [--cpu] [--only CHECK,...]" >&2
  exit 2
}

run_cpu() {
  if ! "$python" -c "import h3kit" 2>/dev/null; then
    echo "gpu_check: $python cannot import h3kit; set H3KIT_PYTHON to a Python with h3kit installed (pip install -e .)." >&2
    exit 3
  fi
  # ComfyUI-GGUF from its git repository, as prepare packs it
  local pack="$work/ComfyUI-GGUF"
  rm -rf "$pack" && mkdir -p "$pack"
  if git --git-dir="$gguf_git" archive --format=tar HEAD 2>/dev/null | tar -x -C "$pack"; then :; else
    echo "gpu_check: no ComfyUI-GGUF at $gguf_git; the gguf check will say so" >&2
    rm -rf "$pack"
  fi
  exec "$python" "$here/run.py" --cpu --comfyui "$comfy" --gguf-pack "$pack" --work "$work/cpu" --out "$out" \
    --started "$started" "$@"
}

run_gpu() {
  local image_python
  image_python="$(command -v python3)"
  rm -rf "$work/gpu" && mkdir -p "$work/gpu"
  echo "gpu_check: setting up from $repo/gpu-carry with $image_python ($("$image_python" -V 2>&1))" >&2
  "$image_python" "$here/setup_env.py" --carry "$repo/gpu-carry" --work "$work/gpu" >/dev/null
  exec "$work/gpu/ComfyUI/venv/bin/python" "$here/run.py" --comfyui "$work/gpu/ComfyUI" \
    --gguf-pack "$work/gpu/ComfyUI-GGUF" --work "$work/gpu/run" --out "$out" --started "$started" \
    --env-json "$work/gpu/env.json" "$@"
}

case "${1:-}" in
  prepare) shift; exec "$python" "$here/prepare.py" "$@" ;;
  run)
    shift
    if [ "${1:-}" = "--cpu" ]; then shift; run_cpu "$@"; else run_gpu "$@"; fi ;;
  *) usage ;;
esac
