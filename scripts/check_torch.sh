#!/usr/bin/env bash
# Usage: scripts/check_torch.sh VERSION [VENV]
# Builds (once) a separate venv with torch==VERSION and this checkout installed with its [dev] extras, torch held at
# VERSION, then runs the device check's CPU dry run (`run --toy`, through its end-to-end test on generated data)
# and the device path's tests in it. Why: a lent GPU image ships its own torch
# (the H200 image: 2.11), older than the project's pin; this shows on the CPU whether the device path runs on it.
# VENV defaults to venv-torchVERSION beside the checkout (outside it, so the project's .venv is never touched).
set -euo pipefail
if [[ $# -lt 1 ]]; then sed -n '2,6p' "$0"; exit 2; fi
version="$1"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${2:-$(dirname "$REPO")/venv-torch${version//./}}"
py="${CROSSBERT_PYTHON:-}"
if [[ -z "$py" ]]; then  # python3.12 on PATH, else a pyenv 3.12 (as scripts/with-venv.sh finds it)
  pyenv_root="${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}"
  for candidate in python3.12 "$pyenv_root"/versions/3.12*/bin/python3.12; do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then py="$candidate"; break; fi
  done
fi
[[ -n "$py" ]] || { echo "error: CROSSBERT_PYTHON: no Python 3.12 found (set it)" >&2; exit 2; }
stamp="$venv/.installed-torch-$version"
if [[ ! -f "$stamp" ]]; then
  echo "[check_torch] installing torch==$version and the project into $venv" >&2
  [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "torch==$version"
  "$venv/bin/python" -m pip install -q -e "$REPO[dev]" "torch==$version"
  touch "$stamp"
fi
"$venv/bin/python" -c "import torch; assert torch.__version__.split('+')[0] == '$version', torch.__version__; print('torch', torch.__version__)"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="$REPO"
cd "$REPO"
# the device check's --toy dry run through scripts/device_check.sh on generated toy data (the e2e test), its
# plan and stage tests, and the compiled-flex and core-attention tests: the device path's torch-facing code
"$venv/bin/python" -m pytest -q -x -p no:cacheprovider tests/experiments/test_device_check.py \
  tests/experiments/test_device_plan.py tests/models/test_flex_compile.py tests/models/test_core_attention.py \
  tests/config/test_fp8_shapes.py tests/checkpoint/test_layer_impls.py
echo "[check_torch] torch $version: the --toy dry run and the device path's tests passed" >&2
