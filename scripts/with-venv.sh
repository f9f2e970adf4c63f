#!/usr/bin/env bash
# Usage: scripts/with-venv.sh COMMAND [ARGS...]
# Creates .venv (Python 3.12) and installs the project with its [dev] extras on first use, then runs
# COMMAND inside it. Idempotent: later calls only re-install when pyproject.toml changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${CROSSBERT_PYTHON:-}"
if [ -z "$py" ]; then
  # python3.12 on PATH, else any pyenv 3.12 ($PYENV_ROOT, `pyenv root`, or the default ~/.pyenv)
  pyenv_root="${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}"
  for candidate in python3.12 "$pyenv_root"/versions/3.12*/bin/python3.12; do
    if "$candidate" -c 'import sys; assert sys.version_info[:2] >= (3, 12)' 2>/dev/null; then py="$candidate"; break; fi
  done
fi
[ -n "$py" ] || { echo "error: Python >= 3.12 not found (set CROSSBERT_PYTHON)" >&2; exit 1; }
stamp="$venv/.installed-$(sha1sum "$root/pyproject.toml" | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "[with-venv] setting up $venv (torch + megatron-core; first run takes a few minutes)" >&2
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # torch is pinned first so no dependency can pull a newer, unpinned build.
  "$venv/bin/python" -m pip install -q "torch==2.13.0"
  "$venv/bin/python" -m pip install -q -e "$root[dev]" "torch==2.13.0"
  rm -f "$venv"/.installed-*
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
cd "$root"
exec "$@"
