#!/bin/bash
# ds_ceiling.sh: how fast could the persistent decode kernel (src/backend/cuda/cuda_decode.cu) be
# with some of its work left out?  Builds iris with IRIS_DS_CEILING set (timing only: the numbers it
# computes are wrong), then times batch-1 decode of each build beside the product build.
#
#   scripts/gpu-check --pack && bench/ds_ceiling.sh --build
#         here: the product build (build/c90a by default, CUDA_ARCHS 90a) and, per ceiling, cuda_decode.cu
#         compiled with -DIRIS_DS_CEILING=N into a copy of its libiris.a, linked as iris-ceilN, stripped,
#         into build/gpu/ceil.tar.xz (~1 MB: carried beside the pack)
#   BUILD=build/gpu bench/ds_ceiling.sh
#         on the GPU machine (carry build/gpu): iris bench --batch 1 on synth 2B and 4B FP8 checkpoints,
#         each build in turn, REPS rounds; then a per-phase trace (bench/ds_trace.py) of each for 2B
#
# CEILINGS: the IRIS_DS_CEILING values (bits: 1 products, 2 attention, 4 / 8 / 16 the grid barriers
# after o_proj / gate-up / down_proj); 0 is the product build.
# Measured (H100 80GB HBM3, 2026-11-26, this script, 2 rounds; 1,024-token context, graphs on), batch-1
# tok/s 2B-FP8 / 4B-FP8: product build (0) 801-808 / 437-440; no grid barriers after the GEMV phases
# (28) 886-893 / 470-474; no products (1) 865-871 / 457-460; neither (29) 981-983 / 495-502; no
# attention and no barriers (30) 1,075-1,087 / 549; none of the three (31) 1,240-1,246 / 610-613.
# So the batch-1 targets (1,000 / 500) are out of this design's reach even with its arithmetic and
# its barriers free: see cuda_decode.cu's header.
CEILINGS=${CEILINGS:-"0 28 1 29 30 31"}
ARCHS=${CUDA_ARCHS:-90a}
cd "$(dirname "$0")/.." || exit 2

if [ "$1" = "--build" ]; then
    set -e
    B=${BASE:-build/c90a}
    PACK=build/gpu
    make --no-print-directory BUILD="$B" CUDA_ARCHS="$ARCHS" -j"$(nproc)" "$B/iris"
    mkdir -p "$PACK"
    bins=$(mktemp -d)
    link=$(make -s -n -W "$B/libiris.a" BUILD="$B" CUDA_ARCHS="$ARCHS" "$B/iris" | grep -v '^ar ' | tail -1)
    comp=$(make -s -n -W src/backend/cuda/cuda_decode.cu BUILD="$B" CUDA_ARCHS="$ARCHS" \
        "$B/src/backend/cuda/cuda_decode.o" | grep -- '-c src/backend/cuda/cuda_decode.cu')
    for n in $CEILINGS; do
        d=$(mktemp -d)
        cp "$B/libiris.a" "$d/libiris.a"
        eval "${comp/ -o */ -o $d/cuda_decode.o} -DIRIS_DS_CEILING=$n"
        (cd "$d" && ar r libiris.a cuda_decode.o 2>/dev/null)
        l=${link//$B\/libiris.a/$d/libiris.a}
        eval "${l/-o $B\/iris /-o $d/iris-ceil$n }"
        strip "$d/iris-ceil$n" && mv "$d/iris-ceil$n" "$bins/"
        rm -rf "$d"
    done
    tar -C "$bins" -cJf "$PACK/ceil.tar.xz" . && rm -rf "$bins"
    ls -l "$PACK/ceil.tar.xz"
    exit 0
fi

BUILD=${BUILD:-build/gpu}
[ -f "$BUILD/lib.tar.xz" ] && [ ! -d "$BUILD/lib" ] && tar -C "$BUILD" -xJf "$BUILD/lib.tar.xz"
[ -x "$BUILD/iris" ] || tar -C "$BUILD" -xJf "$BUILD/bins.tar.xz" || exit 1
tar -C "$BUILD" -xJf "$BUILD/ceil.tar.xz" || exit 1
[ -d "$BUILD/lib" ] && export LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
dir=/tmp/iris-synth
mkdir -p $dir
for m in 2B 4B; do
    [ -f "$dir/$m-fp8/config.json" ] || "$BUILD/iris" synth --like $m --dtype fp8 "$dir/$m-fp8" >/dev/null || exit 1
done
for rep in $(seq 1 "${REPS:-2}"); do
    for m in 2B 4B; do
        for n in $CEILINGS; do
            r=$("$BUILD/iris-ceil$n" bench "$dir/$m-fp8" --batch 1 --prompt-tokens 1024 --gen-tokens 64 2>/dev/null |
                python3 -c 'import json,sys; print(json.load(sys.stdin)["decode"][0]["tok_per_s"])')
            echo "round $rep $m-fp8 ceiling $n: batch 1 $r tok/s"
        done
    done
done
for n in $CEILINGS; do
    IRIS_CUDA_GRAPHS=0 IRIS_CUDA_DS_TRACE=/tmp/ds-ceil$n "$BUILD/iris-ceil$n" bench "$dir/2B-fp8" --batch 1 \
        --prompt-tokens 1024 --gen-tokens 8 >/dev/null 2>&1 && echo "== trace, ceiling $n, 2B-fp8" &&
        python3 bench/ds_trace.py /tmp/ds-ceil$n
done
