#!/bin/bash
# bench/images_gpu.sh: issue 27's image throughput on one GPU, the same work three ways:
#   bench  iris bench MODEL --images N --image WxH --concurrency C --gen-tokens G (the engine)
#   serve  bench/serve_load.py: iris serve over HTTP, C clients, the same pictures and lengths
#   cli    the command line's batch mode over the same pictures as PNG files:
#          iris ask DIR -m MODEL QUESTION --max-tokens G --ignore-eos (its last stderr line: images/s)
# and ttft: the single-request time to first token (iris bench --batch 1 --image WxH); steps: the
# bench's per-step times from the engine's debug log (decoder, when its forward was issued).  One step a
# call, each well under a minute at the defaults:
#   bench/images_gpu.sh synth|pictures|ttft|bench|serve|cli|steps|summary [SHAPE]     (or: all)
# SHAPE is 2B or 4B (synth FP8 in $SYNTH_DIR, default /tmp/iris-synth, made by the synth step with
# the Qwen tokenizer of .cache/assets/qwen3) or a model directory.  Environment: IRIS (default
# build/gpu/iris, a scripts/gpu-check --pack folder, unpacked here when needed; else build/iris),
# OLD (another iris: ttft and bench run it too, old vs new), N (256), C (64), G (64), IMAGE
# (1024x1024), OUT (build/images-gpu), IRIS_FLAGS (more engine flags, e.g. --device cpu for a dry
# run), SHAPES (for all: "2B 4B").  Every figure goes to $OUT; summary prints the table.
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
STEP=${1:?give a step: synth pictures ttft bench serve cli summary all}
SHAPE=${2:-2B}
N=${N:-256} C=${C:-64} G=${G:-64} IMAGE=${IMAGE:-1024x1024}
SYNTH_DIR=${SYNTH_DIR:-/tmp/iris-synth} OUT=${OUT:-build/images-gpu}
if [ -z "$IRIS" ]; then IRIS=build/iris; [ -e build/gpu/iris ] || [ -f build/gpu/bins.tar.xz ] && IRIS=build/gpu/iris; fi
pack=$(dirname "$IRIS")
if [ -f "$pack/bins.tar.xz" ] && [ ! -x "$IRIS" ]; then tar -C "$pack" -xJf "$pack/bins.tar.xz" || exit 1; fi
if [ -f "$pack/lib.tar.xz" ] && [ ! -d "$pack/lib" ]; then tar -C "$pack" -xJf "$pack/lib.tar.xz" || exit 1; fi
[ -d "$pack/lib" ] && export LD_LIBRARY_PATH="$PWD/$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PIX=$(( ${IMAGE%x*} * ${IMAGE#*x} ))
Q='Write a one-sentence caption for this image.'  # bench --images' and serve_load.py's question
ENGINE=(--max-num-seqs "$C" --max-image-pixels "$PIX" $IRIS_FLAGS)
mkdir -p "$OUT" "$SYNTH_DIR"
pics=$OUT/pictures-$IMAGE-$N
dir=$SYNTH_DIR/$SHAPE-fp8 name=$SHAPE
[ -d "$SHAPE" ] && dir=$SHAPE && name=${SHAPE##*/}

# binaries: new, and old when OLD is given
bins() { echo "new $IRIS"; [ -n "$OLD" ] && echo "old $OLD"; }

case $STEP in
synth)
    [ -f "$dir/config.json" ] && { echo "$dir is there"; exit 0; }
    tok=()
    [ -f .cache/assets/qwen3/tokenizer.json ] && tok=(--tokenizer .cache/assets/qwen3/tokenizer.json)
    timeout 300 "$IRIS" synth --like "$SHAPE" --dtype fp8 "${tok[@]}" "$dir" >/dev/null && echo "made $dir" ;;
pictures)
    if [ "$(ls "$pics" 2>/dev/null | wc -l)" != "$N" ]; then
        python3 bench/serve_load.py "$IRIS" none --requests "$N" --image "$IMAGE" --write "$pics" || exit 1
    fi
    echo "$pics: $(ls "$pics" | wc -l) pictures" ;;
ttft)
    bins | while read -r b bin; do
        timeout 120 "$bin" bench "$dir" --batch 1 --prompt-tokens 64 --gen-tokens 8 --image "$IMAGE" $IRIS_FLAGS \
            > "$OUT/ttft-$name-$b.json" 2> "$OUT/ttft-$name-$b.log"
        echo "$name ttft $b rc=$?: $(head -c 400 "$OUT/ttft-$name-$b.json")"
    done ;;
bench)
    bins | while read -r b bin; do
        timeout 150 "$bin" bench "$dir" --images "$N" --image "$IMAGE" --concurrency "$C" --gen-tokens "$G" $IRIS_FLAGS \
            > "$OUT/bench-$name-$b.json" 2> "$OUT/bench-$name-$b.log"
        echo "$name bench $b rc=$?: $(head -c 700 "$OUT/bench-$name-$b.json")"
    done ;;
serve)
    SERVE_LOG=$OUT/serve-$name.log timeout 200 python3 bench/serve_load.py "$IRIS" "$dir" --requests "$N" \
        --concurrency "$C" --image "$IMAGE" --max-tokens "$G" -- "${ENGINE[@]}" > "$OUT/serve-$name.json"
    echo "$name serve rc=$?: $(cat "$OUT/serve-$name.json")" ;;
cli)
    [ -d "$pics" ] || { echo "no $pics: run the pictures step first" >&2; exit 2; }
    timeout 150 "$IRIS" ask "$pics" -m "$dir" "$Q" --temperature 0 --max-tokens "$G" --ignore-eos "${ENGINE[@]}" \
        -o "$OUT/cli-$name.jsonl" 2> "$OUT/cli-$name.log"
    echo "$name cli rc=$?: $(tail -1 "$OUT/cli-$name.log")" ;;
steps)
    # the engine's own per-step times, untraced (IRIS_LOG=debug): a step's decoder time and when its
    # forward was issued (the host's part before the GPU runs it), medians for decode-only steps and
    # steps with prompt rows, and the sums
    IRIS_LOG=debug timeout 150 "$IRIS" bench "$dir" --images "$N" --image "$IMAGE" --concurrency "$C" --gen-tokens "$G" \
        $IRIS_FLAGS > "$OUT/steps-$name.json" 2> "$OUT/steps-$name.log"
    echo "$name steps rc=$?: $(grep -o '"images_per_s":[0-9.]*' "$OUT/steps-$name.json")"
    python3 - "$OUT/steps-$name.log" <<'EOF'
import re, statistics as st, sys
rows = []
for line in open(sys.argv[1]):
    m = re.search(r"step: (\d+) seqs, (\d+) rows: vision ([\d.]+) ms, inputs ([\d.]+) ms, decoder ([\d.]+) ms "
                  r"\(issued after ([\d.]+)\), sampling ([\d.]+) ms", line)
    if m:
        rows.append([float(x) for x in m.groups()])
for name, rs in (("decode-only", [r for r in rows if r[0] == r[1]]), ("with prompt rows", [r for r in rows if r[0] != r[1]])):
    if rs:
        print("%-16s %4d steps: decoder %.2f ms, issued after %.2f ms, sampling %.2f ms (medians); issued-after sum %.0f "
              "of decoder sum %.0f ms" % (name, len(rs), st.median(r[4] for r in rs), st.median(r[5] for r in rs),
                                         st.median(r[6] for r in rs), sum(r[5] for r in rs), sum(r[4] for r in rs)))
EOF
    ;;
all)
    for s in ${SHAPES:-2B 4B}; do
        "$0" synth "$s" && "$0" pictures && "$0" ttft "$s" && "$0" bench "$s"; "$0" serve "$s"; "$0" cli "$s"
    done
    SHAPES=${SHAPES:-2B 4B} "$0" summary ;;
summary)
    python3 - "$OUT" "$(for s in ${SHAPES:-2B 4B}; do printf '%s ' "${s##*/}"; done)" <<'EOF'
import json, os, re, sys
out, shapes = sys.argv[1], sys.argv[2].split()
def load(p):
    try:
        return json.load(open(os.path.join(out, p)))
    except Exception:
        return {}
print("%-4s %-28s %10s" % ("", "", "images/s"))
for s in shapes:
    rows = []
    for b in ("new", "old"):
        j = load("bench-%s-%s.json" % (s, b))
        if j:
            rows.append(("iris bench --images (%s)" % b, j.get("images_per_s")))
    rows.append(("serve_load.py (HTTP)", load("serve-%s.json" % s).get("images_per_s")))
    try:
        m = re.search(r"\(([\d.]+) images/s\)", open(os.path.join(out, "cli-%s.log" % s)).read())
        rows.append(("iris ask DIR (CLI batch)", float(m.group(1)) if m else None))
    except OSError:
        pass
    for name, v in rows:
        print("%-4s %-28s %10s" % (s, name, "%.2f" % v if isinstance(v, (int, float)) else "-"))
    for b in ("new", "old"):
        t = load("ttft-%s-%s.json" % (s, b))
        if t:
            print("%-4s single-request TTFT (%s): %s" % (s, b, json.dumps(t)[:300]))
EOF
    ;;
*)
    echo "unknown step $STEP" >&2; exit 2 ;;
esac
