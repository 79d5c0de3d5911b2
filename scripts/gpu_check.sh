#!/usr/bin/env bash
# The prepared check of the GPU path (docs/gpu.md, "Checking a GPU machine"): generation, the probe,
# a training cycle (one process, then DeepSpeed ZeRO-2 under torchrun) and a smoke cycle on one
# device, each step's outcome, seconds and memory in one JSON file. The logic is in
# src/resail_pipeline/gpu_check.py; every option but --wheels goes to it.
#
#   scripts/gpu_check.sh [--wheels DIR] [--device cuda|cpu] [--out FILE] [--work DIR] ...
#
# --wheels DIR: first make .venv-gpu-check on top of this Python (--system-site-packages: its own
# torch and transformers stay in use) and install every wheel or source archive of DIR into it,
# offline (pip --no-index --find-links DIR), then run the check with it. Without it the check runs
# with $PYTHON (default python3). Exits with the check's status: 0 when no step failed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WHEELS=""
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS=${2:?"--wheels: a folder of wheels is needed"}; shift 2 ;;
    --wheels=*) WHEELS=${1#--wheels=}; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done

if [ -n "$WHEELS" ]; then
  if [ ! -d "$WHEELS" ]; then
    echo "--wheels: $WHEELS is not a folder" >&2
    exit 2
  fi
  VENV=.venv-gpu-check
  if [ ! -x "$VENV/bin/python" ]; then
    # without ensurepip in the image, the venv uses the system's pip (visible through its site)
    "$PYTHON" -m venv --system-site-packages "$VENV" 2>/dev/null \
      || "$PYTHON" -m venv --system-site-packages --without-pip "$VENV"
  fi
  shopt -s nullglob
  PACKAGES=("$WHEELS"/*.whl "$WHEELS"/*.tar.gz "$WHEELS"/*.zip)
  shopt -u nullglob
  if [ ${#PACKAGES[@]} -gt 0 ]; then
    # --no-deps: the folder holds what the image lacks, the image the rest; a step whose package
    # is still missing is skipped by the check, naming it. --no-build-isolation: a source archive
    # (DeepSpeed publishes only one) builds against the image's torch, offline.
    "$VENV/bin/python" -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps \
      --no-build-isolation "${PACKAGES[@]}"
    "$VENV/bin/python" -m pip check || echo "pip check: the requirements above are unmet" >&2
  fi
  PYTHON=$VENV/bin/python
fi

export KEDRO_DISABLE_TELEMETRY=true PYTHONHASHSEED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m resail_pipeline.gpu_check ${ARGS[@]+"${ARGS[@]}"}
