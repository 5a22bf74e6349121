#!/usr/bin/env bash
# The benchmarks of docs/user_guides/benchmark.md on one CUDA GPU, fp32 and AMP:
#   DeiT-B 224x224 dense / pruned / merged at batch 64 and 256 (the paper's
#   H800 figure is fp32, batch 64), DETR 800x1216 and UperNet 512x512 end to
#   end at batch $DENSE_BATCH.  Random weights: speed does not depend on them.
#
#   tools/benchmark_gpu.sh [OUT_DIR]         (default work_dirs/benchmark_gpu)
#
# Environment: PYTHON (default python), DEVICE (default cuda), AMP_DTYPE
# (bf16 or fp16, default bf16), BATCHES (default "64 256"), DENSE_BATCH
# (default 16), REPEATS (default 5), EXTRA_ARGS (words added to every
# tools/benchmark.py call, e.g. "--threads 8"; DEVICE=cpu with a tiny
# --arch and --img-size is a quick check of this script on any machine).  Existing results in OUT_DIR are kept
# (the tool refuses to overwrite them): use a new OUT_DIR to measure again.
# Each run writes NAME.json and NAME.md; all tables are joined in summary.md.
set -euo pipefail

OUT_DIR=$(realpath -m "${1:-work_dirs/benchmark_gpu}")
PYTHON=${PYTHON:-python}
DEVICE=${DEVICE:-cuda}
AMP_DTYPE=${AMP_DTYPE:-bf16}
BATCHES=${BATCHES:-64 256}
DENSE_BATCH=${DENSE_BATCH:-16}
REPEATS=${REPEATS:-5}
read -r -a EXTRA <<< "${EXTRA_ARGS:-}"
cd "$(dirname "$0")/.."
mkdir -p "$OUT_DIR"

"$PYTHON" - "$DEVICE" <<'EOF'
import sys, torch
if sys.argv[1] == 'cpu':
    print('CPU run (a check of this script, not GPU figures)')
elif not torch.cuda.is_available():
    sys.exit(f'error: no CUDA device for {sys.argv[1]}; '
             'tools/benchmark.py --device cpu measures on the CPU')
else:
    print('GPU:', torch.cuda.get_device_name(sys.argv[1]))
EOF

bench() {  # NAME TASK ARGS...
  local name=$1
  shift
  if [[ -e "$OUT_DIR/$name.json" ]]; then
    echo "[benchmark_gpu] $OUT_DIR/$name.json exists, skipping"
    return
  fi
  echo "[benchmark_gpu] $name"
  "$PYTHON" tools/benchmark.py "$@" --device "$DEVICE" --repeats "$REPEATS" \
    --json "$OUT_DIR/$name.json" --md "$OUT_DIR/$name.md" "${EXTRA[@]}"
}

# Small batches finish in milliseconds on a GPU: several batches per timing
# (--iters) keep launch jitter out of the figures.
for dtype in fp32 "$AMP_DTYPE"; do
  for batch in $BATCHES; do
    bench "deit-b_224_b${batch}_${dtype}" backbone --batch-size "$batch" \
      --dtype "$dtype" --warmup 3 --iters 10
  done
  bench "detr_800x1216_b${DENSE_BATCH}_${dtype}" detr \
    --batch-size "$DENSE_BATCH" --dtype "$dtype" --warmup 2 --iters 2
  bench "upernet_512_b${DENSE_BATCH}_${dtype}" upernet \
    --batch-size "$DENSE_BATCH" --dtype "$dtype" --warmup 2 --iters 2
done

for table in "$OUT_DIR"/*.md; do
  [[ "$(basename "$table")" == summary.md ]] || cat "$table"
done > "$OUT_DIR/summary.md.tmp"
mv "$OUT_DIR/summary.md.tmp" "$OUT_DIR/summary.md"
echo "[benchmark_gpu] tables: $OUT_DIR/summary.md"
