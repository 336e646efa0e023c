#!/bin/bash
# place_7gib_check.sh OUTDIR [synth|plan|run|serve|all]: Qwen3-VL-8B with 4-bit linears (iris synth
# --like 8B --dtype int4, random weights) under --gpu-memory-limit 7GiB with an 8,192-token
# context, the whole process measured by nvidia-smi (issue 31).  Phases, each well under a minute
# once the synth exists (run them as separate commands):
#   synth  the checkpoint in $IRIS_PLACE_MODEL (default /tmp/s8-int4, shared with wt-int4's bench;
#          written when missing), given the demo tokenizer when it has none (config.json's special
#          token ids set to that tokenizer's)
#   plan   iris plan -> plan.txt
#   run    iris run with an image (IRIS_PLACE_IMAGE, default examples/images/scene1.png) and a
#          5,000-token prompt (IRIS_PLACE_TOKENS) -> run.out, run.log,
#          smi-run.csv
#   serve  iris serve, two chat completions (image + the long text) -> serve.log, reply1/2.json,
#          smi-serve.csv
# then summary.txt.  Binaries: $BUILD (default build/gpu, the pack of scripts/gpu-check --pack,
# unpacked here when needed; build when it has no iris).  IRIS_PLACE_CAP replaces the flags (tests).
set -u
OUT=${1:?usage: tools/place_7gib_check.sh OUTDIR [synth|plan|run|serve|all]}
PHASE=${2:-all}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT"
B=${BUILD:-build/gpu}
[ -x "$B/iris" ] || [ ! -f "$B/bins.tar.xz" ] || tar -C "$B" -xJf "$B/bins.tar.xz" || exit 1
[ -d "$B/lib" ] || [ ! -f "$B/lib.tar.xz" ] || tar -C "$B" -xJf "$B/lib.tar.xz" || exit 1
[ -d "$B/lib" ] && export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ -x "$B/iris" ] || B=build
IRIS=$B/iris
M=${IRIS_PLACE_MODEL:-/tmp/s8-int4}
IMG=${IRIS_PLACE_IMAGE:-examples/images/scene1.png}
CAP=${IRIS_PLACE_CAP:-"--gpu-memory-limit 7GiB --max-model-len 8192"}

phase_synth() {
  if [ ! -f "$M/model.safetensors" ]; then
    timeout 300 "$IRIS" synth --like 8B --dtype int4 "$M" >"$OUT/synth.log" 2>&1 ||
      { echo "synth failed"; tail -3 "$OUT/synth.log"; return 1; }
  fi
  [ -f "$M/tokenizer.json" ] && return 0
  cp models/demo/tokenizer.json models/demo/tokenizer_config.json models/demo/chat_template.json "$M/" || return 1
  for k in image_token_id video_token_id vision_start_token_id vision_end_token_id; do
    v=$(grep -o "\"$k\": *[0-9]*" models/demo/config.json | grep -o '[0-9]*$')
    [ -n "$v" ] && sed -i "s/\"$k\": *[0-9]*/\"$k\": $v/" "$M/config.json"
  done
  grep -o '"image_token_id": *[0-9]*' "$M/config.json"
}

phase_plan() {
  "$IRIS" plan "$M" $CAP >"$OUT/plan.txt" 2>&1
  echo "plan exit $?" >>"$OUT/plan.txt"
  grep -E "^  total|^context:|token embeddings:|lm_head:|plan exit" "$OUT/plan.txt"
}

smi_start() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 100 >"$OUT/$1" 2>&1 & SMI=$!; }
smi_peak() { awk -F', ' '$2+0>m{m=$2+0} END{print m+0}' "$OUT/$1" 2>/dev/null; }

phase_run() {
  # a long prompt: lines added while the model's tokenizer counts under IRIS_PLACE_TOKENS
  : >"$OUT/prompt.txt"
  while [ "$("$IRIS" tokenize "$M" <"$OUT/prompt.txt" | tr -cd ',' | wc -c)" -lt "${IRIS_PLACE_TOKENS:-5000}" ]; do
    for i in $(seq 20); do echo "The quick brown fox jumps over the lazy dog near the river bank." >>"$OUT/prompt.txt"; done
  done
  smi_start smi-run.csv
  timeout 120 "$IRIS" run "$M" $CAP --image "$IMG" --prompt-file "$OUT/prompt.txt" --max-tokens 64 --temperature 0 -v \
    >"$OUT/run.out" 2>"$OUT/run.log"
  echo "run exit $?" >>"$OUT/run.log"
  kill "$SMI" 2>/dev/null
  grep -E "token embeddings:|lm_head:|quantized|tok/s|run exit" "$OUT/run.log"
  echo "run peak MiB (nvidia-smi, the process): $(smi_peak smi-run.csv)"
}

# the system's curl / python3, without the pack's libraries (its libcurl is not the system curl's)
host() { env -u LD_LIBRARY_PATH "$@"; }

post() {  # POST $OUT/req.json to the server into $1
  if command -v curl >/dev/null; then
    host curl -s -m 90 http://127.0.0.1:18931/v1/chat/completions -H 'Content-Type: application/json' \
      --data-binary @"$OUT/req.json" >"$1"
  else
    host python3 -c 'import sys, urllib.request as u
r = u.Request("http://127.0.0.1:18931/v1/chat/completions", data=open(sys.argv[1], "rb").read(),
              headers={"Content-Type": "application/json"})
sys.stdout.write(u.urlopen(r, timeout=90).read().decode())' "$OUT/req.json" >"$1" 2>&1
  fi
}

healthy() {
  if command -v curl >/dev/null; then host curl -sf http://127.0.0.1:18931/health >/dev/null 2>&1
  else host python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:18931/health", timeout=2)' 2>/dev/null; fi
}

phase_serve() {
  [ -s "$OUT/prompt.txt" ] || { echo "run the run phase first"; return 1; }
  smi_start smi-serve.csv
  timeout 100 "$IRIS" serve "$M" $CAP --port 18931 >"$OUT/serve.log" 2>&1 &
  SRV=$!
  n=0; until healthy || [ $n -ge 60 ]; do sleep 1; n=$((n+1)); done
  printf '{"model":"%s","max_tokens":64,"temperature":0,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}},{"type":"text","text":"%s"}]}]}' \
    "$M" "$(base64 -w0 "$IMG")" "$(tr '\n' ' ' <"$OUT/prompt.txt")" >"$OUT/req.json"
  post "$OUT/reply1.json"
  post "$OUT/reply2.json"
  kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null
  kill "$SMI" 2>/dev/null
  echo "replies with choices: $(cat "$OUT"/reply1.json "$OUT"/reply2.json 2>/dev/null | grep -o '"choices"' | wc -l) of 2"
  echo "serve peak MiB (nvidia-smi, the process): $(smi_peak smi-serve.csv)"
}

rc=0
case $PHASE in
  synth) phase_synth || rc=1 ;;
  plan) phase_plan || rc=1 ;;
  run) phase_run || rc=1 ;;
  serve) phase_serve || rc=1 ;;
  all) phase_synth && phase_plan && phase_run && phase_serve || rc=1 ;;
  *) echo "phase: synth, plan, run, serve or all"; exit 2 ;;
esac
{ echo "== $PHASE (7 GiB = 7168 MiB)"; grep -hE "^  total|^context:|plan exit" "$OUT/plan.txt" 2>/dev/null
  tail -1 "$OUT/run.log" 2>/dev/null; echo "run peak $(smi_peak smi-run.csv) MiB, serve peak $(smi_peak smi-serve.csv) MiB"; } \
  >>"$OUT/summary.txt"
exit $rc
