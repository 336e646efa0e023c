#!/bin/bash
# bench/images_gpu.sh: issue 27's image throughput on one GPU, the same work three ways, per shape:
#   1. iris bench MODEL --images N --image WxH --concurrency C --gen-tokens G (through the engine)
#   2. bench/serve_load.py: iris serve over HTTP, C clients, the same pictures and answer lengths
#   3. the command line's batch mode over the same pictures written as PNG files:
#      iris ask DIR -m MODEL QUESTION --max-tokens G --ignore-eos (its last stderr line: images/s)
# and the single-request time to first token (iris bench --batch 1 --image WxH), with OLD's binary
# too when given (old vs new, alternating).
#   bench/images_gpu.sh [NEW_IRIS] [OLD_IRIS]      (NEW default build/iris)
# Environment: SHAPES ("2B 4B"), N (256), C (64), G (64), IMAGE (1024x1024), SYNTH_DIR
# (/tmp/iris-synth; `iris synth --like SHAPE --dtype fp8` made there when missing, with the Qwen
# tokenizer of .cache/assets/qwen3; a SHAPE that is a directory is that model), OUT
# (build/images-gpu), IRIS_FLAGS (more engine flags for every run, e.g. --device cpu for a dry run).  Every figure is in $OUT as JSON
# (or the CLI's log); a summary table is printed at the end.
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
NEW=${1:-build/iris}
OLD=${2:-}
SHAPES=${SHAPES:-2B 4B} N=${N:-256} C=${C:-64} G=${G:-64} IMAGE=${IMAGE:-1024x1024}
SYNTH_DIR=${SYNTH_DIR:-/tmp/iris-synth} OUT=${OUT:-build/images-gpu}
PIX=$(( ${IMAGE%x*} * ${IMAGE#*x} ))
Q='Write a one-sentence caption for this image.'  # bench --images' and serve_load.py's question
ENGINE=(--max-num-seqs "$C" --max-image-pixels "$PIX" $IRIS_FLAGS)
mkdir -p "$OUT" "$SYNTH_DIR"
tok=()
[ -f .cache/assets/qwen3/tokenizer.json ] && tok=(--tokenizer .cache/assets/qwen3/tokenizer.json)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

pics=$OUT/pictures-$IMAGE-$N
if [ "$(ls "$pics" 2>/dev/null | wc -l)" != "$N" ]; then
    python3 bench/serve_load.py "$NEW" none --requests "$N" --image "$IMAGE" --write "$pics" >/dev/null || exit 1
fi

for shape in $SHAPES; do
    dir=$SYNTH_DIR/$shape-fp8
    [ -d "$shape" ] && dir=$shape && shape=${shape##*/}
    [ -f "$dir/config.json" ] || timeout 600 "$NEW" synth --like "$shape" --dtype fp8 "${tok[@]}" "$dir" >/dev/null || exit 1
    for b in new old; do
        bin=$NEW; [ $b = old ] && bin=$OLD
        [ -n "$bin" ] || continue
        timeout 300 "$bin" bench "$dir" --batch 1 --prompt-tokens 64 --gen-tokens 8 --image "$IMAGE" $IRIS_FLAGS \
            > "$OUT/ttft-$shape-$b.json" 2> "$OUT/ttft-$shape-$b.log"
        timeout 300 "$bin" bench "$dir" --images "$N" --image "$IMAGE" --concurrency "$C" --gen-tokens "$G" $IRIS_FLAGS \
            > "$OUT/bench-$shape-$b.json" 2> "$OUT/bench-$shape-$b.log"
        echo "$shape $b bench rc=$?: $(head -c 600 "$OUT/bench-$shape-$b.json")"
    done
    SERVE_LOG=$OUT/serve-$shape.log timeout 400 python3 bench/serve_load.py "$NEW" "$dir" --requests "$N" \
        --concurrency "$C" --image "$IMAGE" --max-tokens "$G" -- "${ENGINE[@]}" > "$OUT/serve-$shape.json"
    echo "$shape serve rc=$?: $(cat "$OUT/serve-$shape.json")"
    timeout 300 "$NEW" ask "$pics" -m "$dir" "$Q" --temperature 0 --max-tokens "$G" --ignore-eos "${ENGINE[@]}" \
        -o "$OUT/cli-$shape.jsonl" 2> "$OUT/cli-$shape.log"
    echo "$shape cli rc=$?: $(tail -1 "$OUT/cli-$shape.log")"
done

python3 - "$OUT" "$(for s in $SHAPES; do printf '%s ' "${s##*/}"; done)" <<'EOF'
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
