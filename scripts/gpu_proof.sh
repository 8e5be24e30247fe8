#!/usr/bin/env bash
# One command for a GPU machine without uv or network: proves the CUDA-only paths (doctor, sanitizer,
# a 50-step h100_80gb run under the sync debug mode, injected NaN and bad index, receipts training in
# bf16 and fp32 with CLEval on the test split). Writes outputs/gpu_proof/<timestamp>/proof.{json,md}.
# Options: scripts/gpu_proof.sh --help. Docs: docs/benchmarks.md ("GPU proof").
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export WANDB_MODE=offline NO_ALBUMENTATIONS_UPDATE=1 HF_HUB_OFFLINE=1
exec "$PYTHON" -m ocr.debug.gpu_proof "$@"
