#!/bin/bash
# bench/before_after.sh: `iris bench` of two builds side by side on one GPU (the check of a
# change that must not make anything slower), alternating builds in each round.
#   bench/before_after.sh BEFORE_PACK AFTER_PACK [rounds]
# Each PACK is a folder made by `scripts/gpu-check --pack` (bins.tar.xz, lib.tar.xz).  Models:
# `iris synth --like 2B|4B --dtype fp8` (SHAPES, default "2B 4B") into $SYNTH_DIR (/tmp/iris-synth),
# with the Qwen tokenizer from .cache/assets/qwen3 for the --image time to first token.
# Output: $OUT/bench-<shape>-<build>-<round>.json (OUT default build/before-after).
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
BEFORE=$1 AFTER=$2 ROUNDS=${3:-2}
OUT=${OUT:-build/before-after}
SYNTH_DIR=${SYNTH_DIR:-/tmp/iris-synth}
mkdir -p "$OUT" "$SYNTH_DIR"
for p in "$BEFORE" "$AFTER"; do
    [ -x "$p/iris" ] || tar -C "$p" -xJf "$p/bins.tar.xz" || exit 1
    [ -d "$p/lib" ] || tar -C "$p" -xJf "$p/lib.tar.xz" || exit 1
done
# run SECONDS PACK ARGS...: that build's iris with its libraries, under a time limit
run() { local s=$1 p=$2; shift 2; timeout "$s" env LD_LIBRARY_PATH="$PWD/$p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$p/iris" "$@"; }
tok=()
[ -f .cache/assets/qwen3/tokenizer.json ] && tok=(--tokenizer .cache/assets/qwen3/tokenizer.json)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
for shape in ${SHAPES:-2B 4B}; do
    dir=$SYNTH_DIR/$shape-fp8
    [ -f "$dir/config.json" ] || run 300 "$AFTER" synth --like "$shape" --dtype fp8 "${tok[@]}" "$dir" >/dev/null || exit 1
    for r in $(seq 1 "$ROUNDS"); do
        for b in before after; do
            p=$BEFORE; [ $b = after ] && p=$AFTER
            run 240 "$p" bench "$dir" --batch 1,8,64 --prompt-tokens 1024 --gen-tokens 32 \
                ${tok[*]:+--image 1024x1024} > "$OUT/bench-$shape-$b-$r.json" 2> "$OUT/bench-$shape-$b-$r.log"
            echo "$shape $b $r rc=$?: $(cat "$OUT/bench-$shape-$b-$r.json")"
        done
    done
done
