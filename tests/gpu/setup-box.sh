#!/usr/bin/env bash
# Prepare a GPU box with no network for the real-server tier (tests/gpu/README.md):
#   source tests/gpu/setup-box.sh [BUNDLE_DIR]
# installs the SGLang bundle (default .bundle, built by `autotune bundle build`) into
# /tmp/autotune-bundle, puts it and this checkout on PYTHONPATH, and makes the tiny models the
# real space uses (/tmp/autotune-real/model) unless they exist.
set -euo pipefail
bundle="${1:-.bundle}"
target="${AUTOTUNE_BUNDLE_TARGET:-/tmp/autotune-bundle}"
PYTHON="${PYTHON:-python3}"
if [[ ! -f "$target/.bundle-manifest.json" ]]; then
  PYTHONPATH="$PWD" "$PYTHON" -m autotune.bundle install "$bundle" --target "$target"
fi
export PYTHONPATH="$target:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export FLASHINFER_CUDA_ARCH_LIST="${FLASHINFER_CUDA_ARCH_LIST:-9.0a}"
if [[ "${MAKE_STUDY_MODEL:-1}" != 0 && ! -f /tmp/autotune-real/model/model.safetensors ]]; then
  "$PYTHON" -m autotune make-tiny-model /tmp/autotune-real/model \
    --layers 8 --hidden 2048 --heads 16 --intermediate 5632
fi
set +euo pipefail
