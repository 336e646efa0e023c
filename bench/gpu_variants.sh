#!/bin/bash
# gpu_variants.sh: iris bench on synth checkpoints under several settings of the CUDA backend's
# switches, in one go on a GPU machine (build here with `scripts/gpu-check --pack`, carry build/gpu
# and .cache/assets).  Each line of VARIANTS is "NAME ENV=VALUE ..."; SHAPES is like gpu-check's
# SYNTH ("2B fp8,4B fp8"); ARGS are iris bench's.  One JSON line per (shape, variant) on stdout,
# full outputs under $OUT.
BUILD=${BUILD:-build/gpu}
OUT=${OUT:-/tmp/gpu-variants}
mkdir -p "$OUT"
[ -f "$BUILD/lib.tar.xz" ] && [ ! -d "$BUILD/lib" ] && tar -C "$BUILD" -xJf "$BUILD/lib.tar.xz"
[ -d "$BUILD/lib" ] && export LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SHAPES=${SHAPES:-2B fp8}
ARGS=${ARGS:---batch 1,8,64 --prompt-tokens 1024 --gen-tokens 64}
VARIANTS=${VARIANTS:-"default X=
no-mma IRIS_CUDA_GEMV_MMA=0
no-pdl IRIS_CUDA_PDL=0"}
tokf=()
[ -f .cache/assets/qwen3/tokenizer.json ] && tokf=(--tokenizer .cache/assets/qwen3/tokenizer.json)
IFS=',' read -ra shapes <<<"$SHAPES"
for sh in "${shapes[@]}"; do
    set -- $sh
    dir=/tmp/iris-synth/$1-$2
    mkdir -p /tmp/iris-synth
    [ -f "$dir/config.json" ] || "$BUILD/iris" synth --like "$1" --dtype "$2" "${tokf[@]}" "$dir" >/dev/null || exit 1
    while read -r name envs; do
        [ -n "$name" ] || continue
        f="$OUT/bench-$1-$2-$name.json"
        # shellcheck disable=SC2086
        env $envs "$BUILD/iris" bench "$dir" $ARGS 2>"$f.log" >"$f"
        python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); dec=" ".join("b%d=%.0f"%(x["batch"],x["tok_per_s"]) for x in d.get("decode",[]))
img=d.get("image") or {}
print(sys.argv[2], sys.argv[3], "prefill=%.0f"%d["prefill"]["tok_per_s"], dec, "ttft=%s"%img.get("ttft_ms"), "vision=%s"%img.get("vision_ms"))' "$f" "$sh" "$name" || tail -3 "$f.log"
    done <<<"$VARIANTS"
done
