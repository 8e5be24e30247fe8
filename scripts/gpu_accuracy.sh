#!/usr/bin/env bash
# One command for a lent GPU machine (no uv, no network), about 9 minutes: issue 31's variants compared at
# equal steps with scripts/benchmark_accuracy.py, and issue 33's GPU speed goals.
#   1. the synthetic pretrain set (all cores) and the photographed proxy of $DATA's test split (seed 0);
#   2. each decoder of $MODELS pretrained on the synthetic set, side by side, for $PRE_STEPS steps;
#   3. side by side, each over $SEEDS (seeds side by side too), $FT_STEPS fine-tuning steps on $DATA:
#      every pretrained decoder; r18-FPN with the photo augmentation (p 0.5; it costs about 24 times the
#      plain transform per photographed sample on a CPU, so this variant gets three times the workers);
#      the self-training chain
#      (scripts/benchmark_self_training.sh: 50 labels, then 50 labels + pseudo-labels of the other 100);
#   4. scripts/gpu_speed_goals.py (predict at batch 16 / long side 1024, a validation of 50 images) on
#      the first fine-tuned r18-FPN.
# Every phase has a deadline, so what finished comes back: summary.md and files.tar.gz in --copy-to.
# Measured on an H200 (docs/benchmarks.md, "On a GPU"): side by side, r18-FPN pretrained 1200 steps in
# 157 s while DBNet++ reached 974 and PAN 747 in 150 s; the 15 fine-tuning runs of phase 3 took 2-3 min of
# training each plus about 1.5 min of evaluation. So PRE_STEPS is 700 and the deadlines these; all of it
# (the self-training chain's second half too) needs about 12 minutes: raise --ft-seconds where a call may
# last that long, or run the self-training chain in a call of its own (scripts/benchmark_self_training.sh).
#   WHEELS=.whl PYTHON=python3 scripts/gpu_accuracy.sh --data .data/sroie-compact --copy-to "$OUT"
#   PYTHON=.venv/bin/python scripts/gpu_accuracy.sh --cpu --seeds "0" ...   # tiny sizes: tests the script
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export WANDB_MODE=offline NO_ALBUMENTATIONS_UPDATE=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if [[ -n "${WHEELS:-}" ]]; then
  SITE="$(mktemp -d)/site"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl || exit 2
  export PYTHONPATH="$PYTHONPATH:$SITE"
fi

DATA=.data/sroie-compact COPY_TO="" CPU=0
MODELS="dbnet_resnet18_fpn dbnetpp_resnet18 dbnet_resnet18_pan"
SEEDS="0 1 2" PRE_STEPS=700 FT_STEPS=200 NUM_TRAIN=3000 NUM_EVAL=100 LONG=1024 LABELS=50
T_GEN=45 T_PRE=200 T_FT=330 T_PRED=60
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) DATA="$2"; shift 2;; --copy-to) COPY_TO="$2"; shift 2;; --models) MODELS="$2"; shift 2;;
    --seeds) SEEDS="$2"; shift 2;; --pre-steps) PRE_STEPS="$2"; shift 2;; --ft-steps) FT_STEPS="$2"; shift 2;;
    --pre-seconds) T_PRE="$2"; shift 2;; --ft-seconds) T_FT="$2"; shift 2;;
    --cpu) CPU=1; shift;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
n_runs=$(( ($(wc -w <<< "$MODELS") + 2) * $(wc -w <<< "$SEEDS") ))
workers=$(( $(nproc) / n_runs )); [[ $workers -lt 1 ]] && workers=1
PRE_EXTRA=() TINY=() PRED_EXTRA=()
if [[ $CPU == 1 ]]; then
  PRE_STEPS=4 FT_STEPS=3 NUM_TRAIN=8 NUM_EVAL=4 LONG=256 LABELS=4 workers=0
  T_GEN=300 T_PRE=1200 T_FT=3000 T_PRED=600
  PRE_EXTRA=(data.train_transform.crop_size=64 data.train_transform.train_long_side=256
             data.eval_transform.long_side=256 data.batch_size=2)
  TINY=(--crop 64 --override data.batch_size=2 --override data.eval_transform.long_side=256
        --override data.train_transform.train_long_side=256)
  PRED_EXTRA=(--device cpu --batch 2 --long-side 128 --images 4 --val-images 4 --passes 1)
fi
WORK="outputs/gpu_accuracy/$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$WORK"
SET="data/generated/synthetic_pretrain_receipt_line_${NUM_TRAIN}_${LONG}"
PROXY="$WORK/proxy"
log() { echo "[gpu_accuracy $(date -u +%T)] $*" | tee -a "$WORK/summary.md"; }
finish() {
  tar czf "$WORK/files.tar.gz" --exclude='*.ckpt' --exclude='*.pth' --exclude='*.png' --exclude='*.jpg' \
    --exclude='images' --exclude='cache' -C "$WORK" . 2>/dev/null
  if [[ -n "$COPY_TO" ]]; then mkdir -p "$COPY_TO" && cp "$WORK/summary.md" "$WORK/files.tar.gz" "$COPY_TO/"; fi
}
trap finish EXIT
log "machine: $("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")' 2>&1), $(nproc) cores"
log "models $MODELS; pretrain $PRE_STEPS steps on $NUM_TRAIN synthetic receipts; fine-tune $FT_STEPS steps, seeds $SEEDS; $workers loader workers a run"

timeout "$T_GEN" "$PYTHON" -m ocr.data.synthetic --out "$SET" --num-train "$NUM_TRAIN" --num-val "$NUM_EVAL" \
  --num-test "$NUM_EVAL" --seed 0 --long-side "$LONG" --style receipt --granularity line \
  --workers "$(nproc)" > "$WORK/generate.log" 2>&1
log "phase 1: synthetic set, exit $?"
"$PYTHON" scripts/make_photographed.py --root "$DATA" --split test --seed 0 --out "$PROXY" > "$WORK/proxy.log" 2>&1 &
proxy_pid=$!

pretrain_pids=()
for m in $MODELS; do
  timeout "$T_PRE" "$PYTHON" runners/train.py experiment=synthetic_pretrain "model=$m" hardware=auto \
    "data.synthetic.num_train=$NUM_TRAIN" "data.synthetic.num_val=$NUM_EVAL" "data.synthetic.num_test=$NUM_EVAL" \
    "data.synthetic.long_side=$LONG" "trainer.max_steps=$PRE_STEPS" "trainer.val_check_interval=$PRE_STEPS" \
    trainer.check_val_every_n_epoch=null time_budget_minutes=null test_after_fit=false \
    "data.num_workers=$(( $(nproc) / 3 ))" pipeline.workers=2 "hydra.run.dir=$WORK/pretrain_$m" \
    "${PRE_EXTRA[@]}" > "$WORK/pretrain_$m.log" 2>&1 &
  pretrain_pids+=($!)
done
wait "${pretrain_pids[@]}"
for m in $MODELS; do
  log "phase 2: pretrain $m: $(grep -Eo 'val/hmean +[0-9.]+' "$WORK/pretrain_$m.log" | tail -1), $(grep -Eo 'step [0-9]+/[0-9]+' "$WORK/pretrain_$m.log" | tail -1)"
done
wait "$proxy_pid"; log "phase 1: photographed proxy, exit $? ($(ls "$PROXY/images/test" 2>/dev/null | wc -l) images)"

# shellcheck disable=SC2086
common=(--data-root "$DATA" --seeds $SEEDS --steps "$FT_STEPS" --python "$PYTHON" --hardware auto
        --jobs "$(wc -w <<< "$SEEDS")" --out "$WORK/accuracy" --override "data.num_workers=$workers"
        --override pipeline.workers=1 "${TINY[@]}")
[[ -d "$PROXY/images/test" ]] && common+=(--proxy-root "$PROXY")
fpn="$WORK/pretrain_dbnet_resnet18_fpn/checkpoints/last.ckpt"
for m in $MODELS; do
  ckpt="$WORK/pretrain_$m/checkpoints/last.ckpt"
  [[ -f $ckpt ]] || { log "no pretrained checkpoint for $m"; continue; }
  timeout "$T_FT" "$PYTHON" scripts/benchmark_accuracy.py "${common[@]}" --init-from "$ckpt" \
    --variant "$m" --override "model=$m" > "$WORK/accuracy_$m.log" 2>&1 &
done
if [[ -f $fpn ]]; then
  timeout "$T_FT" "$PYTHON" scripts/benchmark_accuracy.py "${common[@]}" --init-from "$fpn" \
    --variant dbnet_resnet18_fpn_photo --override data.train_transform.photo.p=0.5 \
    --override "data.num_workers=$(( workers * 3 ))" \
    > "$WORK/accuracy_photo.log" 2>&1 &
  INIT_FROM="$fpn" PYTHON="$PYTHON" HARDWARE=auto STEPS="$FT_STEPS" SEEDS="$SEEDS" LABELS="$LABELS" \
    DATA_ROOT="$DATA" OUT="$WORK/accuracy" JOBS="$(wc -w <<< "$SEEDS")" \
    EXTRA="--override data.num_workers=$workers --override pipeline.workers=1 ${TINY[*]}" \
    timeout "$T_FT" bash scripts/benchmark_self_training.sh > "$WORK/accuracy_self_training.log" 2>&1 &
fi
wait
for d in "$WORK"/accuracy/*/; do
  if [[ -f "$d/results.md" ]]; then cat "$d/results.md" >> "$WORK/summary.md"
  else log "$(basename "$d"): no results.md; $(cat "$d"/seed*/figures.json 2>/dev/null | head -c 3000)"; fi
done

ckpt=$(ls "$WORK"/accuracy/dbnet_resnet18_fpn/seed*/train/checkpoints/last.ckpt 2>/dev/null | head -1)
timeout "$T_PRED" "$PYTHON" scripts/gpu_speed_goals.py --data-root "$DATA" ${ckpt:+--ckpt "$ckpt"} \
  --json "$WORK/gpu_speed.json" "${PRED_EXTRA[@]}" > "$WORK/speed.log" 2>&1
log "phase 4: speed goals, exit $?"; tail -n 6 "$WORK/speed.log" >> "$WORK/summary.md"
log "done"
