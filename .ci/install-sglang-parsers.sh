#!/usr/bin/env bash
# Install SGLang's own argument parser, without its GPU dependencies, for the releases the
# contract tests check (tests/engines/test_contract_sglang.py):
#
#   .ci/install-sglang-parsers.sh [DEST]        # DEST defaults to .ci-venvs
#
# For each release V: DEST/sglang-V holds `pip install --no-deps sglang==V`, DEST/deps-V the
# packages `sglang.srt.server_args` needs at import time that the project's environment lacks,
# and, for a release with `sglang serve` (0.5.5 and newer), those its console script
# (DEST/sglang-V/bin/sglang) needs to print `sglang serve --help`.
# Everything else (torch, numpy, pydantic, starlette, pyzmq, psutil, packaging, tqdm, IPython,
# PyYAML, filelock, httpx, anyio, ...) comes from the project's environment: nothing is installed
# into it, nothing in it is upgraded or downgraded, and no second torch is installed. The
# dependency lists below were found by importing each parser until it loaded; they are pinned to
# versions that import with the release (0.5.3 needs the transformers, huggingface-hub and openai of its time).
# A release already installed and importable is left as it is.
#
# Run with the project's interpreter first on PATH (CI: after `. .venv/bin/activate`), or set
# PYTHON. The tests find the installs through AUTOTUNE_SGLANG_PARSERS (default: <repo>/.ci-venvs).
set -euo pipefail

DEST="${1:-.ci-venvs}"
PYTHON="${PYTHON:-python}"
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"

# Import-time dependencies that the project's environment does not provide, per release.
DEPS_0_5_23=(
  orjson==3.13.0 pybase64==1.5.1 msgspec==0.23.0 pillow==13.0.0 triton==3.9.0
  requests==2.34.2 urllib3==2.8.0 charset-normalizer==3.5.3
  aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0
  multidict==7.2.1 propcache==0.5.4 yarl==1.25.1
)
# What `sglang serve --help` of 0.5.23 imports beyond the parser's dependencies.
CLI_DEPS_0_5_23=(huggingface-hub==2.4.0 httpx2==2.16.2)
DEPS_0_5_3=(
  pybase64==1.5.1 pillow==13.0.0 triton==3.9.0 safetensors==0.8.0
  requests==2.34.2 urllib3==2.8.0 charset-normalizer==3.5.3
  aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0
  multidict==7.2.1 propcache==0.5.4 yarl==1.25.1
  fastapi==0.165.0 opentelemetry-api==1.45.2 openai==1.99.1 distro==1.9.0 sniffio==1.3.1
  partial-json-parser==0.2.1.1.post7 huggingface-hub==0.35.3 transformers==4.57.1
  tokenizers==0.22.1 regex==2026.11.19 sentencepiece==0.2.3
)

probe_cli() {
  # Exit 0 when release $1 has no `sglang serve`, or its console script prints its help.
  [ -e "$DEST/sglang-$1/sglang/cli/serve.py" ] || return 0
  local help
  help="$(PYTHONPATH="$DEST/sglang-$1:$DEST/deps-$1" "$PYTHON" "$DEST/sglang-$1/bin/sglang" \
    serve --model-type llm --help 2>/dev/null)" || return 1
  [[ "$help" == *"usage: sglang serve"* ]]
}

probe() {
  # Exit 0 when release $1's parser imports and registers its options.
  PYTHONPATH="$DEST/sglang-$1:$DEST/deps-$1" "$PYTHON" - "$1" <<'EOF' >/dev/null 2>&1
import argparse, sys
import sglang
from sglang.srt.server_args import ServerArgs
assert sglang.__version__ == sys.argv[1], sglang.__version__
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
assert len(parser._actions) > 100
EOF
}

install_cli() {
  # Release $1's console-script dependencies ($2...), into deps-$1 beside the parser's.
  local version="$1"
  shift
  probe_cli "$version" && return
  echo "sglang $version: installing $# dependencies of sglang serve into $DEST/deps-$version"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$DEST/deps-$version" "$@"
  if ! probe_cli "$version"; then
    echo "sglang $version: sglang serve --help fails; the error:" >&2
    PYTHONPATH="$DEST/sglang-$version:$DEST/deps-$version" "$PYTHON" \
      "$DEST/sglang-$version/bin/sglang" serve --model-type llm --help 2>&1 | tail -3 >&2 || true
    exit 1
  fi
}

install() {
  local version="$1"
  shift
  if probe "$version"; then
    echo "sglang $version: parser already installed in $DEST"
    return
  fi
  echo "sglang $version: installing the parser into $DEST/sglang-$version"
  rm -rf "$DEST/sglang-$version" "$DEST/deps-$version"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$DEST/sglang-$version" "sglang==$version"
  echo "sglang $version: installing $# import-time dependencies into $DEST/deps-$version"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps \
    --target "$DEST/deps-$version" "$@"
  if ! probe "$version"; then
    echo "sglang $version: the parser does not import; the error:" >&2
    PYTHONPATH="$DEST/sglang-$version:$DEST/deps-$version" "$PYTHON" -c \
      "from sglang.srt.server_args import ServerArgs" >&2 || true
    exit 1
  fi
  echo "sglang $version: parser ready"
}

install 0.5.23 "${DEPS_0_5_23[@]}"
install_cli 0.5.23 "${CLI_DEPS_0_5_23[@]}"
install 0.5.3 "${DEPS_0_5_3[@]}"
