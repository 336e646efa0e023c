#!/bin/bash
# bench/batch_vs_runs.sh: captioning N demo images in one `iris caption DIR` process (batch mode:
# the model loaded once, the images continuously batched) against N separate `iris caption IMAGE`
# runs, on the CPU with the demo model (issue 27's target: one process at least 5x faster).
#   bench/batch_vs_runs.sh [N] [IRIS]        (N default 200, IRIS default build/iris)
# The images are N distinct demo scenes (tools/demo_data.py, seeds 50000..; $PY, default the first
# of /usr/bin/python3 and python3 that has numpy), made once into $DIR (default /tmp/iris-demo-N).  Both sides are greedy and print the same
# captions: the script checks that every image's text is the same in both, and prints the two wall
# times, the ratio, and the CPU seconds (user + sys) of each side.  The one process runs three
# times, once before the separate runs and twice after, and its median wall time is the one the
# ratio takes (on a shared machine one sample of ~10 s swings with the other jobs' load; the
# separate runs already average over ~50 s); all three must print the same texts.  $IRIS_FLAGS go to both (e.g.
# --threads 1).  Exit status 1 when a text differs or a run fails.
set -o pipefail
cd "$(dirname "$0")/.." || exit 2
N=${1:-200}
IRIS=${2:-build/iris}
DIR=${DIR:-/tmp/iris-demo-$N}
if [ -z "$PY" ]; then
    for PY in /usr/bin/python3 python3; do "$PY" -c 'import numpy' 2>/dev/null && break; done
fi
WORK=$(mktemp -d /tmp/iris-bvr.XXXXXX) || exit 2
trap 'rm -rf "$WORK"' EXIT
FLAGS="--temperature 0 -q --device cpu $IRIS_FLAGS"
# a scripts/gpu-check pack's binary finds its libraries beside it
[ -d "$(dirname "$IRIS")/lib" ] && export LD_LIBRARY_PATH="$(cd "$(dirname "$IRIS")/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ "$(ls "$DIR" 2>/dev/null | grep -c '\.png$')" != "$N" ]; then
    rm -rf "$DIR" && mkdir -p "$DIR" || exit 2
    "$PY" -c "
import sys
sys.path.insert(0, 'tools')
import demo_data as d
for i in range($N):
    d.write_png('$DIR/%05d.png' % i, d.render(d.make_scene(50000 + i)))
" || { echo "could not make the demo images (numpy under $PY?)" >&2; exit 2; }
fi

# cpu_of FILE: the user + sys seconds /usr/bin/time wrote there
cpu_of() { awk '{u += $1; s += $2} END {printf "%.2f", u + s}' "$1"; }

# one_process K: the one process over the directory, its wall seconds in $WORK/batch$K.wall
one_process() {
    local a b
    a=$(date +%s.%N)
    /usr/bin/time -o "$WORK/batch$1.time" -f "%U %S" "$IRIS" caption "$DIR" $FLAGS -o "$WORK/batch$1.jsonl" || exit 1
    b=$(date +%s.%N)
    echo "$a $b" | awk '{printf "%.3f", $2 - $1}' > "$WORK/batch$1.wall"
}
one_process 1
# N separate runs, one after the other: one line each, "PATH<TAB>TEXT"
t0=$(date +%s.%N)
for f in "$DIR"/*.png; do
    txt=$(/usr/bin/time -a -o "$WORK/runs.time" -f "%U %S" "$IRIS" caption "$f" $FLAGS) || { echo "failed: $f" >&2; exit 1; }
    printf '%s\t%s\n' "$f" "$txt" >> "$WORK/runs.txt"
done
t1=$(date +%s.%N)
one_process 2
one_process 3

"$PY" - "$WORK" "$N" "$t0" "$t1" "$(cpu_of "$WORK/runs.time")" <<'EOF'
import json, sys
work, n, t0, t1, cpu_runs = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:])
runs = dict(l.rstrip("\n").split("\t", 1) for l in open(work + "/runs.txt"))
walls, cpus, diff, counts = [], [], [], []
for k in (1, 2, 3):
    walls.append(float(open("%s/batch%d.wall" % (work, k)).read()))
    u_s = open("%s/batch%d.time" % (work, k)).read().split()
    cpus.append(float(u_s[0]) + float(u_s[1]))
    batch = {o["image"]: o.get("text") for o in map(json.loads, open("%s/batch%d.jsonl" % (work, k)))}
    counts.append(len(batch))
    diff += [(k, p, runs[p], batch.get(p)) for p in runs if batch.get(p) != runs[p]]
s_runs = t1 - t0
med = sorted(range(3), key=lambda k: walls[k])[1]
s_batch, cpu_batch = walls[med], cpus[med]
print(json.dumps({"images": n, "separate_runs_s": round(s_runs, 2), "one_process_s": round(s_batch, 2),
                  "one_process_runs_s": [round(w, 2) for w in walls],
                  "ratio": round(s_runs / s_batch, 2), "separate_runs_cpu_s": cpu_runs, "one_process_cpu_s": round(cpu_batch, 2),
                  "cpu_ratio": round(cpu_runs / cpu_batch, 2) if cpu_batch else None,
                  "texts_compared": len(runs), "texts_different": len(diff)}))
for k, p, r, b in diff[:5]:
    print("different (one process, run %d): %s\n  runs:  %s\n  batch: %s" % (k, p, r, b), file=sys.stderr)
sys.exit(1 if diff or len(runs) != n or any(c != n for c in counts) else 0)
EOF
