#!/usr/bin/env bash
# Record a real SGLang's behaviour for tests/data/real/ (tests/gpu/README.md), on a GPU box:
#   bash tests/gpu/record-real.sh smoke   # smoke, then noise: 5 runs on one server, a restart
#   bash tests/gpu/record-real.sh study   # the gpu tier: a real study of real-h100-tiny.yaml
#   bash tests/gpu/record-real.sh all     # smoke, then the study, in one call
# Everything goes under $RECORD (default /tmp/realrun) and is packed into $OUT/realrun-PHASE.tgz
# (model weights left out) when $OUT is set.
set -uo pipefail
phase="${1:?smoke, study or all}"
R="${RECORD:-/tmp/realrun}"
mkdir -p "$R"
# shellcheck disable=SC1091
source tests/gpu/setup-box.sh .bundle >"$R/setup-$phase.log" 2>&1 || { cat "$R/setup-$phase.log"; exit 1; }
space=search_spaces/real-h100-tiny.yaml
snap() { nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv >"$R/nvidia-smi-$1.csv" 2>&1; nvidia-smi >"$R/nvidia-smi-$1.txt" 2>&1; }
snap "$phase-before"
ngram='{"speculative_algorithm": "NGRAM", "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8, "cuda_graph_max_bs": 16, "mem_fraction_static": 0.3}'
case "$phase" in
  smoke)
    timeout "${SMOKE_TIMEOUT:-240}" python3 -m autotune smoke --space "$space" --dir "$R/smoke" --json >"$R/smoke.json" 2>"$R/smoke.err"
    echo "smoke exit $?"; python3 -c "import json,sys; [print(s['name'], s['passed'], s['detail']) for s in json.load(open(sys.argv[1]))['steps']]" "$R/smoke.json"
    snap after-smoke
    if [[ "${NOISE_RUNS:-5}" -gt 0 ]]; then
      timeout 150 python3 tests/gpu/record_server.py --space "$space" --config "$ngram" --runs "${NOISE_RUNS:-5}" --out "$R/noise-1" >"$R/noise-1.out" 2>&1
      echo "noise-1 exit $?"; tail -c 1500 "$R/noise-1.out"
    fi
    if [[ "${NOISE_RESTARTS:-0}" -gt 0 ]]; then
      for n in $(seq 2 $((NOISE_RESTARTS + 1))); do
        timeout 100 python3 tests/gpu/record_server.py --space "$space" --config "$ngram" --runs 3 --out "$R/noise-$n" >"$R/noise-$n.out" 2>&1
        echo "noise-$n exit $?"; tail -c 800 "$R/noise-$n.out"
      done
    fi
    ;;
  all)
    # the study first, then smoke in what is left (its server starts are warm by then)
    start=$SECONDS
    AUTOTUNE_GPU_TRIALS="${AUTOTUNE_GPU_TRIALS:-6}" AUTOTUNE_GPU_KEEP="$R" timeout "${STUDY_TIMEOUT:-420}" \
      python3 -m pytest tests/gpu -q -x -p no:cacheprovider -k real_study -o addopts="" 2>&1 \
      | tee "$R/pytest-study.txt" | tail -30
    snap after-study
    left=$(( ${BUDGET_S:-560} - (SECONDS - start) ))
    if (( left > 90 )); then
      timeout "$left" python3 -m autotune smoke --space "$space" --dir "$R/smoke" --json >"$R/smoke.json" 2>"$R/smoke.err"
      echo "smoke exit $? after $((SECONDS - start)) s"
      python3 -c "import json,sys; [print(s['name'], s['passed'], s['detail']) for s in json.load(open(sys.argv[1]))['steps']]" "$R/smoke.json"
    fi
    ;;
  study)
    AUTOTUNE_GPU_KEEP="$R" timeout "${STUDY_TIMEOUT:-540}" python3 -m pytest tests/gpu -q -x -p no:cacheprovider \
      -k real_study -o addopts="" 2>&1 | tee "$R/pytest-study.txt" | tail -40
    ;;
esac
snap "$phase-after"
pgrep -af "sglang" >"$R/processes-$phase-after.txt" 2>&1
if [[ -n "${OUT:-}" ]]; then
  tar czf "$OUT/realrun-$phase.tgz" -C "$(dirname "$R")" --exclude='*.safetensors' --exclude='tokenizer.json' "$(basename "$R")"
fi
