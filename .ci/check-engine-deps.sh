#!/usr/bin/env bash
# Check that autotune installs beside each engine release without changing any of its pins:
#
#   bash .ci/check-engine-deps.sh            # run by .ci/run before the tests
#
# For each engine requirement below, uv resolves, from the package index's metadata only (no
# wheel is downloaded whole, no sdist is built: --only-binary :all:):
#   1. the engine alone, for Linux x86_64 and the Python the engine ships for: its lock;
#   2. autotune's requirements (pyproject.toml, with the gp extra) together with the engine, the
#      engine's lock as constraints.
# Step 2 fails when autotune would need another version of anything the engine's lock holds;
# the lock of step 2 is then compared with the engine's, package by package, to say so plainly.
#
# The engines: SGLang 0.5.23, and the newest vLLM release that resolves on its own. vLLM 0.34.0
# (the newest release) does not: it pins flashinfer-python==0.7.3, which the index does not
# have; 0.33.0 is therefore the vLLM checked here. ENGINES="pkg==v ..." checks others instead.
#
# Needs a Python with pip (the project's environment: uv is installed into it when missing) and
# the package index. An index whose mirrors disagree for a moment (a version listed for the engine
# alone, missing a second later) is asked again, up to three times. Exit status: 0 all engines
# fit, 1 a conflict (named), 2 the check could not run (the index unreachable or contradicting
# itself, an engine that no longer resolves on its own).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C # one collation for sort and join

ENGINES="${ENGINES:-sglang==0.5.23 vllm==0.33.0}"
# the Python SGLang's and vLLM's wheels are built for, and their platform (SGLang 0.5.23 has
# manylinux_2_34 wheels only)
TARGET_PYTHON="${TARGET_PYTHON:-3.12}"
TARGET_PLATFORM="${TARGET_PLATFORM:-x86_64-manylinux_2_34}"
PY="${PYTHON:-python}"

say() { echo "check-engine-deps: $*" >&2; }

if ! "$PY" -m uv --version >/dev/null 2>&1; then
  say "installing uv into $("$PY" -c 'import sys; print(sys.prefix)')"
  "$PY" -m pip install -q 'uv>=0.5' >&2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

compile() {  # compile OUT INPUT... [uv options]: resolve; uv's messages go to OUT.err
  local out="$1"
  shift
  "$PY" -m uv pip compile --quiet --no-header --no-annotate \
    --python-version "$TARGET_PYTHON" --python-platform "$TARGET_PLATFORM" \
    --only-binary :all: --output-file "$out" "$@" 2>"$out.err"
}

pins() {  # the name==version lines of a lock, names normalised (PEP 503)
  sed -n 's/^\([A-Za-z0-9._-]*\)==\([^ ;]*\).*/\1 \2/p' "$1" |
    awk '{ n = tolower($1); gsub(/[._-]+/, "-", n); print n, $2 }' | sort
}

# check ENGINE: 0 fits, 1 a conflict (named), 2 cannot run, 3 the index contradicted itself
check() {
  local engine="$1" name culprits changed engine_n added missing
  name="${engine%%[=<>!~]*}"
  echo "$engine" >"$work/$name.in"
  if ! compile "$work/$name.lock" "$work/$name.in"; then
    cat "$work/$name.lock.err" >&2
    if grep -q 'Failed to fetch\|error sending request\|dns error' "$work/$name.lock.err"; then
      say "the package index could not be reached (above): the check could not run"
    elif grep -q 'building from source is disabled' "$work/$name.lock.err"; then
      say "$engine needs a package built from source (above), which this check never does" \
        "(metadata only): name a release with wheels in this script"
    else
      say "$engine does not resolve on its own (above), so nothing can be checked against it:" \
        "a release whose pins the index cannot serve; name another one in this script"
    fi
    return 2
  fi
  if ! compile "$work/both.lock" pyproject.toml "$work/$name.in" --extra gp \
    --constraint "$work/$name.lock"; then
    # "there is no version of P==V" for a P==V of the engine's lock: the index listed V a moment
    # ago (a mirror behind another); not a conflict of autotune's
    missing="$(sed -n 's/.*there is no version of \([^ ]*\)==\([^ ]*\) .*/\1 \2/p' \
      "$work/both.lock.err" | awk '{ n = tolower($1); gsub(/[._-]+/, "-", n); print n, $2 }' |
      sort -u)"
    if [[ -n "$missing" ]] && join <(echo "$missing") <(pins "$work/$name.lock") |
      awk '$2 == $3 { found = 1 } END { exit !found }'; then
      say "the index did not list $(echo "$missing" | awk '{ printf "%s==%s ", $1, $2 }')for" \
        "autotune beside $engine, though it did for $engine alone a moment ago"
      return 3
    fi
    cat "$work/both.lock.err" >&2
    culprits="$(grep -o 'autotune\(\[[a-z,]*\]\)\? depends on [^ ]*' "$work/both.lock.err" |
      sed 's/.* on //; s/,$//' | grep -v "^$engine\$" | sort -u | tr '\n' ' ' || true)"
    if [[ -z "$culprits" ]]; then
      say "FAIL: autotune cannot be resolved together with $engine without changing its pins" \
        "(uv's explanation above)"
    else
      say "FAIL: autotune's requirement ${culprits% } conflicts with $engine's pins" \
        "(uv's explanation above): widen it in pyproject.toml so that $engine's version fits"
    fi
    return 1
  fi
  changed="$(join <(pins "$work/$name.lock") <(pins "$work/both.lock") | awk '$2 != $3' || true)"
  if [[ -n "$changed" ]]; then
    say "FAIL: beside autotune, $engine's pins would change (package, engine's, with autotune):"
    echo "$changed" >&2
    return 1
  fi
  engine_n="$(pins "$work/$name.lock" | wc -l)"
  added="$(join -v 2 <(pins "$work/$name.lock") <(pins "$work/both.lock") | awk '{print $1}' |
    tr '\n' ' ')"
  say "ok: $engine: all $engine_n of its pins kept; autotune adds ${added% }"
}

status=0
for engine in $ENGINES; do
  started=$SECONDS
  for attempt in 1 2 3; do
    rc=0
    check "$engine" || rc=$?
    [[ $rc == 3 && $attempt -lt 3 ]] || break
    say "resolving $engine again ($((attempt + 1)) of 3)"
  done
  case $rc in
    0) say "$engine checked in $((SECONDS - started)) s" ;;
    1) status=1 ;;
    3) say "the index kept contradicting itself: the check could not run"; exit 2 ;;
    *) exit 2 ;;
  esac
done
exit "$status"
