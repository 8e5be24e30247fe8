#!/usr/bin/env bash
# Self-training on sroie-compact, measured with scripts/benchmark_accuracy.py at equal steps (issue 31):
#   1. labels-only: the labels of the first LABELS train images (the other train images are unlabelled);
#   2. the teacher: seed 0 of step 1 (its last.ckpt) pseudo-labels the unlabelled train images;
#   3. labels + pseudo-labels: the same protocol with the pseudo-labelled set as data.extra_train_roots.
# Each row is mean ± standard error over SEEDS; the tables go to OUT/<variant>/results.md.
#
#   INIT_FROM=<pretrain best .ckpt> scripts/benchmark_self_training.sh
#   INIT_FROM=... PYTHON=python3 HARDWARE=h100_80gb STEPS=600 CROP=640 scripts/benchmark_self_training.sh  # a GPU host
#
# Environment: INIT_FROM (required), PYTHON (default: .venv/bin/python, else python3), HARDWARE (a
# configs/hardware preset; default: the configs' own), STEPS (150), CROP (the preset's when empty), SEEDS
# ("0 1 2"), LABELS (50), DATA_ROOT (../shared/datasets/sroie-compact), OUT (outputs/benchmark_accuracy),
# JOBS (seeds side by side, 1), TEXT_SCORE / IGNORE_SCORE (pseudo.*: 0.7 / 0.4), EXTRA (more arguments of
# benchmark_accuracy.py for both variants, e.g. "--proxy-root <photographed copy>").
set -euo pipefail
cd "$(dirname "$0")/.."

: "${INIT_FROM:?set INIT_FROM to the pretrained checkpoint (runners/train.py experiment=synthetic_pretrain)}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
STEPS=${STEPS:-150}
SEEDS=${SEEDS:-0 1 2}
LABELS=${LABELS:-50}
DATA_ROOT=${DATA_ROOT:-../shared/datasets/sroie-compact}
OUT=${OUT:-outputs/benchmark_accuracy}
JOBS=${JOBS:-1}
TEXT_SCORE=${TEXT_SCORE:-0.7}
IGNORE_SCORE=${IGNORE_SCORE:-0.4}
export WANDB_MODE=offline NO_ALBUMENTATIONS_UPDATE=1 HF_HUB_OFFLINE=1

common=(--init-from "$INIT_FROM" --data-root "$DATA_ROOT" --steps "$STEPS" --seeds $SEEDS --python "$PYTHON"
        --out "$OUT" --jobs "$JOBS")
hardware=()
[[ -n "${CROP:-}" ]] && common+=(--override "data.train_transform.crop_size=$CROP")
[[ -n "${HARDWARE:-}" ]] && { common+=(--hardware "$HARDWARE"); hardware=("hardware=$HARDWARE"); }
# shellcheck disable=SC2206  # EXTRA is a list of arguments
extra=(${EXTRA:-})

labels_only="labels${LABELS}"
"$PYTHON" scripts/benchmark_accuracy.py "${common[@]}" "${extra[@]}" --variant "$labels_only" \
    --label-subset "$LABELS"

first_seed=${SEEDS%% *}
teacher="$OUT/$labels_only/seed$first_seed/train/checkpoints/last.ckpt"
pseudo="$OUT/pseudo${LABELS}"
"$PYTHON" runners/pseudo_label.py "ckpt=$(realpath "$teacher")" \
    "image_dir=$(realpath "$OUT/$labels_only/data_subset$LABELS/unlabelled")" "output=$(realpath -m "$pseudo")" \
    "pseudo.text_score=$TEXT_SCORE" "pseudo.ignore_score=$IGNORE_SCORE" "hydra.run.dir=$pseudo/run" \
    "${hardware[@]}"
cat "$pseudo/pseudo_labels.json"

"$PYTHON" scripts/benchmark_accuracy.py "${common[@]}" "${extra[@]}" --variant "${labels_only}_pseudo" \
    --label-subset "$LABELS" --extra-train-root "$pseudo"

cat "$OUT/$labels_only/results.md"
echo
cat "$OUT/${labels_only}_pseudo/results.md"
