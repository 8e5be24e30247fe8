#!/usr/bin/env bash
# CUDA crash triage: see docs/troubleshooting/CUDA_DEBUGGING.md.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
STEPS="${DEBUG_STEPS:-20}"

usage() {
  cat <<'EOF'
Usage: scripts/debug_cuda.sh <subcommand> [args...]

Subcommands (use them in this order when a run dies with a CUDA error):
  doctor                      Preflight report: versions, GPU arch vs torch build, CPU flags, WSL2,
                              smoke conv fp32/bf16 with cuDNN on/off, DataLoader workers, wandb import,
                              disk. Start here. Report: outputs/debug/<timestamp>-doctor/doctor.json
  cpu [overrides...]          The short training run on the CPU. Fails too => data/model bug, not CUDA.
  blocking [overrides...]     The short run with CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 (DSA only
                              acts on torch builds compiled with it), cudnn.benchmark off, deterministic
                              algorithms (warn-only), 0 workers: the traceback then points at the
                              kernel that failed instead of a later, unrelated line.
  sanitizer [TOOL] [overrides...]
                              The short run under compute-sanitizer (TOOL: memcheck (default),
                              racecheck, initcheck, synccheck). Finds the out-of-bounds access and
                              names the kernel. Exit status non-zero when it reports errors. Slow:
                              batch 2, 256 px crops, eval at 512 px (your overrides win) and
                              PYTORCH_NO_CUDA_MEMORY_CACHING=1, so memcheck sees every allocation.
  replay <bundle dir> [--device cpu|cuda] [--blocking] [--sanitizer TOOL]
                              Re-run the failed step from a crash bundle (<run dir>/crash). Exit 1 =
                              the failure reproduced, 0 = it did not, 2 = bundle unusable.
  oom-probe [--device cuda] [--min N] [--max N] [overrides...]
                              Largest data.batch_size that trains one step for the configured model.

Overrides are Hydra overrides for runners/train.py (e.g. data.batch_size=4 model=dbnet_resnet18_unet).
The short run is DEBUG_STEPS (default 20) training steps; output goes to outputs/debug/<timestamp>-<sub>/
(DEBUG_OUT changes outputs/debug).
Python: `uv run python` when uv is installed and $PYTHON is unset; otherwise $PYTHON (or python3) with
PYTHONPATH=<repo>, for clusters and containers without uv or network.
EOF
}

if [[ -n "${PYTHON:-}" ]]; then
  PY=("$PYTHON"); export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
elif command -v uv >/dev/null 2>&1; then
  PY=(uv run python)
else
  PY=(python3); export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi

say() { printf '[debug_cuda] %s\n' "$*" >&2; }
new_outdir() { local d="${DEBUG_OUT:-outputs/debug}/$(date +%Y-%m-%d_%H-%M-%S)-$1"; mkdir -p "$d"; echo "$d"; }
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
short_run_args() {  # $1 = run dir; sets RUN_ARGS (an array: a run dir with spaces stays one argument)
  RUN_ARGS=(runners/train.py "hydra.run.dir=$1" task_name=debug "trainer.max_steps=$STEPS" trainer.max_epochs=-1
            trainer.limit_val_batches=2 trainer.num_sanity_val_steps=0 test_after_fit=false
            data.num_workers=0 data.persistent_workers=false)
}
finish() {  # $1 = status, $2 = run dir
  if [[ "$1" -eq 0 ]]; then say "finished OK; run dir: $2"
  elif [[ -e "$2/.FAILURE" ]]; then say "FAILED (exit $1); run dir: $2 (see .FAILURE, crash/)"
  else say "FAILED (exit $1) before a run started; the messages above say why"; fi
  return "$1"
}

cmd_doctor() {
  local out; out="$(new_outdir doctor)"
  say "running the preflight doctor (${PY[*]} -m ocr.doctor); report: $out/doctor.json"
  has_gpu || say "no NVIDIA GPU visible (nvidia-smi missing or failing): GPU checks will say so"
  "${PY[@]}" -m ocr.doctor --out "$out" "$@"
}

cmd_cpu() {
  local out; out="$(new_outdir cpu)"
  say "short training run on the CPU ($STEPS steps): tells a CUDA-specific fault from a data/model bug"
  say "logs: $out"
  short_run_args "$out"
  "${PY[@]}" "${RUN_ARGS[@]}" hardware=cpu trainer.accelerator=cpu trainer.precision=32-true "$@"
  finish $? "$out"
}

cmd_blocking() {
  local out; out="$(new_outdir blocking)"
  has_gpu || say "no NVIDIA GPU visible: CUDA_LAUNCH_BLOCKING has no effect here; use 'cpu' instead"
  say "short run with CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 (DSA only acts on torch builds compiled with it)"
  say "cudnn.benchmark off, deterministic algorithms (warn only), 0 workers; logs: $out"
  short_run_args "$out"
  CUDA_LAUNCH_BLOCKING=1 TORCH_USE_CUDA_DSA=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 \
    "${PY[@]}" "${RUN_ARGS[@]}" trainer.benchmark=false trainer.deterministic=warn "$@"
  finish $? "$out"
}

cmd_sanitizer() {
  local tool=memcheck
  case "${1:-}" in memcheck|racecheck|initcheck|synccheck) tool="$1"; shift ;; esac
  local out; out="$(new_outdir "sanitizer-$tool")"
  has_gpu || say "no NVIDIA GPU visible: compute-sanitizer needs one; use 'cpu' to test the data/model path"
  say "short run under compute-sanitizer --tool $tool (slow: every kernel is instrumented)"
  say "report: $out/sanitizer-$tool.txt"
  say "small sizes (batch 2, 256 px crops, eval 512 px) and PYTORCH_NO_CUDA_MEMORY_CACHING=1: memcheck"
  say "cannot see overruns inside the caching allocator's blocks, and full sizes would take hours"
  short_run_args "$out"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    "${PY[@]}" -m ocr.debug.sanitizer --tool "$tool" --report "$out/sanitizer-$tool.txt" -- \
    "${RUN_ARGS[@]}" trainer.benchmark=false data.batch_size=2 data.eval_batch_size=2 \
    data.train_transform.crop_size=256 data.eval_transform.long_side=512 "$@"
  finish $? "$out"
}

cmd_replay() {
  [[ $# -ge 1 ]] || { say "replay needs a bundle dir: scripts/debug_cuda.sh replay <run dir>/crash"; return 2; }
  say "replaying crash bundle $1 (exit 1 = reproduced, 0 = not reproduced, 2 = unusable)"
  "${PY[@]}" -m ocr.debug.replay "$@"
}

cmd_oom_probe() {
  local out; out="$(new_outdir oom-probe)"
  say "searching the largest data.batch_size that trains one step; report: $out/oom_probe.json"
  "${PY[@]}" -m ocr.debug.oom_probe --out "$out" "$@"
}

sub="${1:-}"; shift || true
case "$sub" in
  doctor) cmd_doctor "$@" ;;
  cpu) cmd_cpu "$@" ;;
  blocking) cmd_blocking "$@" ;;
  sanitizer) cmd_sanitizer "$@" ;;
  replay) cmd_replay "$@" ;;
  oom-probe) cmd_oom_probe "$@" ;;
  -h|--help|help) usage ;;
  "") usage; exit 2 ;;
  *) say "unknown subcommand '$sub'"; usage; exit 2 ;;
esac
