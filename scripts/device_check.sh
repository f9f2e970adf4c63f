#!/usr/bin/env bash
# Usage: scripts/device_check.sh prepare [--no-wheels] [--limit-mib 64]   (here: fills .device_carry/, prints the program and calls)
#        scripts/device_check.sh program [--measured OUT/device_check.json]   (the program's arithmetic: a failed start,
#                                   start-ups, idle, close, compiles, overruns, the reserve, what falls outside the window)
#        scripts/device_check.sh run [--stages smoke gpu_check attention memory claims] [--compile-s S] [--toy]
#        scripts/device_check.sh render DEVICE_CHECK.json... [--results-md docs/results.md]
# PYTHON (default: python3) runs the driver, experiments/device_check. `run` installs the carried wheels into SITE
# (default: device_site in $TMPDIR, else in /tmp) when megatron-core, nltk or mteb does not import, then runs the stages, each under its own budget,
# writing to $OUT; the carried wheels are import-checked right after the install.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CARRY="${CARRY_DIR:-$REPO/.device_carry}"
SITE="${SITE:-${TMPDIR:-/tmp}/device_site}"
if [[ $# -lt 1 ]]; then sed -n '2,9p' "$0"; exit 2; fi
verb="$1"; shift
cd "$REPO"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
if [[ "$verb" == "run" ]] && ! "$PYTHON" -c "import megatron.core, nltk, mteb" 2>/dev/null; then
  shopt -s nullglob; wheels=("$CARRY"/wheels/*.whl)
  if [[ ${#wheels[@]} -eq 0 ]]; then echo "error: megatron-core/nltk/mteb missing and no wheels in $CARRY/wheels (run prepare)" >&2; exit 2; fi
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}"
  export PYTHONPATH="$PYTHONPATH:$SITE"
  # a clash with the image's packages fails here, in one line, not minutes later inside a stage
  "$PYTHON" -m experiments.device_check.wheel_check "${wheels[@]}"
fi
if [[ "$verb" == "run" ]]; then
  exec "$PYTHON" -m experiments.device_check run --command "scripts/device_check.sh run $*" "$@"
fi
exec "$PYTHON" -m experiments.device_check "$verb" "$@"
