#!/usr/bin/env bash
# vLLM's own `vllm serve` argument parsers, without their GPU stack, for the vLLM contract tests
# (tests/engines/vllm/test_contract_vllm.py); .ci/run installs them:
#
#   bash .ci/install-vllm-parser.sh DEST      # then: export AUTOTUNE_VLLM_PARSERS=DEST
#
# Each release of RELEASES (the newest on the index, and the one before it) goes into
# DEST/vllm-RELEASE with `pip install --no-deps` (wheels of 340-550 MB), and the packages their
# parsers' import needs into DEST/vllm-deps, each without its own dependencies (transformers,
# tokenizers, fastapi, ...: about 250 MB). The tests import them with VLLM_TARGET_DEVICE=cpu, so
# that vLLM does not look for a GPU platform. The parsers import torch: PYTHON must have it
# (default: this checkout's .venv, which has PyTorch's CPU build).
#
# OLD_RELEASE (vLLM 0.10.2, --no-deps, about 1.3 GB) is installed too unless WITH_OLD_RELEASE=0:
# that release cannot build its parser without a GPU platform, so the contract tests read its
# parser's source instead.
set -euo pipefail
DEST="${1:?usage: install-vllm-parser.sh DEST}"
PY="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"
RELEASES=(0.34.0 0.33.0)
OLD_RELEASE=0.10.2
DEPS=(
  aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 apache-tvm-ffi==0.1.15.post2
  cachetools==8.0.2 cbor2==6.3.0 cloudpickle==3.1.3 fastapi==0.165.0 frozenlist==1.8.0
  httpcore2==2.16.2 httpx2==2.16.2 huggingface_hub==2.4.0 llguidance==1.9.1 msgspec==0.23.0
  multidict==7.2.1 openai==3.60.0 openai-harmony==0.0.8 opentelemetry-api==1.45.2
  partial-json-parser==0.2.1.1.post7 prometheus_client==0.26.0 propcache==0.5.4
  py-cpuinfo==9.0.0 pybase64==1.5.1 regex==2026.11.19 requests==2.34.2 safetensors==0.8.0
  sniffio==1.3.1 tokenizers==0.23.3 transformers==5.25.0 truststore==0.10.5 urllib3==2.8.0
  uvloop==0.23.0 xgrammar==0.2.9 yarl==1.25.1
)
if [[ ! -d "$DEST/vllm-deps/transformers" ]]; then
  "$PY" -m pip install -q --no-deps --target "$DEST/vllm-deps" "${DEPS[@]}"
fi
for release in "${RELEASES[@]}"; do
  if [[ ! -d "$DEST/vllm-$release/vllm" ]]; then
    "$PY" -m pip install -q --no-deps --target "$DEST/vllm-$release" "vllm==$release"
  fi
  VLLM_TARGET_DEVICE=cpu PYTHONPATH="$DEST/vllm-$release:$DEST/vllm-deps" "$PY" -W ignore -c \
    "import vllm
from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
make_arg_parser(FlexibleArgumentParser())
assert vllm.__version__ == '$release', vllm.__version__
print('vLLM $release parser ready')"
done
if [[ "${WITH_OLD_RELEASE:-1}" != 0 && ! -d "$DEST/vllm-$OLD_RELEASE/vllm" ]]; then
  "$PY" -m pip install -q --no-deps --target "$DEST/vllm-$OLD_RELEASE" "vllm==$OLD_RELEASE"
fi
