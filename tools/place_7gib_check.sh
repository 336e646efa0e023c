#!/bin/sh
# place_7gib_check.sh OUTDIR: Qwen3-VL-8B with 4-bit linears (iris synth --like 8B --dtype int4,
# random weights) under --gpu-memory-limit 7GiB with an 8,192-token context, measured whole
# process by nvidia-smi: the plan (placement lines), one `iris run` with an image and a ~5,000
# token prompt, then `iris serve` with two requests (text + image, then the same again).
# Writes plan.txt, run.log, serve.log, reply*.json, smi.csv and summary.txt into OUTDIR.
# Run from the repository root after `make all` on the GPU machine.
set -u
OUT=${1:?usage: tools/place_7gib_check.sh OUTDIR}
mkdir -p "$OUT"
M=${IRIS_PLACE_MODEL:-/tmp/s8-int4-place}
IMG=examples/images/scene1.png
CAP=${IRIS_PLACE_CAP:-"--gpu-memory-limit 7GiB --max-model-len 8192"}
# Qwen's tokenizer when the checkout has it (its ids match synth's config); else the demo's, with
# the config's special-token ids set to the demo tokenizer's
TOK=.cache/assets/qwen3/tokenizer.json
[ -f "$TOK" ] || TOK=models/demo/tokenizer.json
if [ ! -f "$M/model.safetensors" ]; then
  timeout 400 build/iris synth --like 8B --dtype int4 --tokenizer "$TOK" "$M" >"$OUT/synth.log" 2>&1 ||
    { echo "synth failed"; tail -3 "$OUT/synth.log"; exit 1; }
  if [ "$TOK" = models/demo/tokenizer.json ]; then
    python3 - "$M/config.json" models/demo/config.json <<'PY'
import json, sys
c, d = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
    if k in d: c[k] = d[k]
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
    cp models/demo/generation_config.json "$M/" 2>/dev/null
  fi
fi
build/iris plan "$M" $CAP >"$OUT/plan.txt" 2>&1
echo "plan exit $?" >>"$OUT/plan.txt"
# a long prompt: lines added while the model's tokenizer counts under 5,000 tokens (IRIS_PLACE_TOKENS)
: >"$OUT/prompt.txt"
while [ "$(build/iris tokenize "$M" <"$OUT/prompt.txt" | tr -cd ',' | wc -c)" -lt "${IRIS_PLACE_TOKENS:-5000}" ]; do
  i=0; while [ $i -lt 20 ]; do echo "The quick brown fox jumps over the lazy dog near the river bank." >>"$OUT/prompt.txt"; i=$((i+1)); done
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 100 >"$OUT/smi.csv" 2>&1 &
SMI=$!
timeout 240 build/iris run "$M" $CAP --image "$IMG" --prompt-file "$OUT/prompt.txt" --max-tokens 64 --temperature 0 -v \
    >"$OUT/run.out" 2>"$OUT/run.log"
echo "run exit $?" >>"$OUT/run.log"
timeout 200 build/iris serve "$M" $CAP --port 18931 >"$OUT/serve.log" 2>&1 &
SRV=$!
healthy() {
  if command -v curl >/dev/null; then curl -sf http://127.0.0.1:18931/health >/dev/null 2>&1
  else python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:18931/health", timeout=2)' 2>/dev/null; fi
}
n=0; until healthy || [ $n -ge 150 ]; do sleep 1; n=$((n+1)); done
B64=$(base64 -w0 "$IMG")
P=$(tr '\n' ' ' <"$OUT/prompt.txt")
printf '{"model":"%s","max_tokens":64,"temperature":0,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}},{"type":"text","text":"%s"}]}]}' \
    "$M" "$B64" "$P" >"$OUT/req.json"
for k in 1 2; do
  if command -v curl >/dev/null; then
    curl -s -m 120 http://127.0.0.1:18931/v1/chat/completions -H 'Content-Type: application/json' \
        --data-binary @"$OUT/req.json" >"$OUT/reply$k.json"
  else
    python3 -c 'import sys, urllib.request as u
r = u.Request("http://127.0.0.1:18931/v1/chat/completions", data=open(sys.argv[1], "rb").read(),
              headers={"Content-Type": "application/json"})
sys.stdout.write(u.urlopen(r, timeout=120).read().decode())' "$OUT/req.json" >"$OUT/reply$k.json" 2>&1
  fi
done
kill "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null
kill "$SMI" 2>/dev/null
{
  echo "plan: $(grep -E 'total|context:' "$OUT/plan.txt" | head -2 | tr -s ' ')"
  grep -E 'token embeddings:|lm_head:' "$OUT/plan.txt"
  echo "run: $(tail -1 "$OUT/run.log")"; grep -iE 'tok/s|prompt' "$OUT/run.log" | tail -2
  echo "replies: $(grep -c '"choices"' "$OUT"/reply*.json | tr '\n' ' ')"
  echo "peak MiB per process (nvidia-smi): $(awk -F', ' '$2+0>m{m=$2+0} END{print m+0}' "$OUT/smi.csv") (7 GiB = 7168 MiB)"
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
