#!/usr/bin/env bash
# The prepared check of the GPU path (docs/gpu.md, "Checking a GPU machine"): generation, the probe,
# a training cycle (one process, then DeepSpeed ZeRO-2 under torchrun) and a smoke cycle on one
# device, each step's outcome, seconds and memory in one JSON file. The logic is the package
# scripts/gpu_check (python -m gpu_check); every option but --wheels goes to it.
#
#   scripts/gpu_check.sh [--wheels DIR] [--device cuda|cpu] [--out FILE] [--work DIR] ...
#
# --wheels DIR: first install every wheel or source archive of DIR, offline (pip --no-index
# --find-links DIR), into the folder .gpu-check-site, which goes first on PYTHONPATH: this Python's
# own torch and transformers stay in use. (A virtual environment would not do: where the machine's
# python3 is itself a virtual environment, as on the lent H100 image, --system-site-packages sees
# the base interpreter's packages, not that environment's torch.) Without it the check runs with
# $PYTHON (default python3) as it is. Exits with the check's status: 0 when no step failed.
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

SITE=""
if [ -n "$WHEELS" ]; then
  if [ ! -d "$WHEELS" ]; then
    echo "--wheels: $WHEELS is not a folder" >&2
    exit 2
  fi
  SITE=$PWD/.gpu-check-site
  shopt -s nullglob
  PACKAGES=("$WHEELS"/*.whl "$WHEELS"/*.tar.gz "$WHEELS"/*.zip)
  shopt -u nullglob
  if [ ${#PACKAGES[@]} -gt 0 ]; then
    # --no-deps: the folder holds what the image lacks, the image the rest; a step whose package
    # is still missing is skipped by the check, naming it. --no-build-isolation: a source archive
    # (DeepSpeed publishes only one) builds against the image's torch, offline.
    "$PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps --no-compile \
      --no-build-isolation --upgrade --target "$SITE" "${PACKAGES[@]}"
    PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m pip check \
      || echo "pip check: the requirements above are unmet" >&2
  fi
fi

export KEDRO_DISABLE_TELEMETRY=true PYTHONHASHSEED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONPATH="$PWD/scripts:$PWD/src${SITE:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"
exec "$PYTHON" -m gpu_check ${ARGS[@]+"${ARGS[@]}"}
