#!/usr/bin/env bash
# One command for a GPU machine without uv or network: proves the CUDA-only paths (doctor, sanitizer,
# a 50-step h100_80gb run under the sync debug mode, injected NaN and bad index, benchmark_gpu.py,
# receipts training in bf16 and fp32 with CLEval on the test split) in one call of at most 9 minutes. Writes
# outputs/gpu_proof/<timestamp>/proof.json, summary.md and proof_files.tar.gz (--copy-to DIR copies them).
# Options: scripts/gpu_proof.sh --help (--dry-run prints the plan).
# PROOF_WHEELS=<folder of .whl files>: the project's missing dependencies, installed first (no index, no
# dependencies resolved) into a temporary folder on PYTHONPATH. Docs: docs/benchmarks.md ("GPU proof").
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export WANDB_MODE=offline NO_ALBUMENTATIONS_UPDATE=1 HF_HUB_OFFLINE=1
if [[ -n "${PROOF_WHEELS:-}" ]]; then
  SITE="$(mktemp -d)/site"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$PROOF_WHEELS"/*.whl || {
    echo "[gpu_proof] could not install the wheels of PROOF_WHEELS=$PROOF_WHEELS into $SITE" >&2; exit 2; }
  export PYTHONPATH="$PYTHONPATH:$SITE"
fi
exec "$PYTHON" -m tests.gpu_proof "$@"
