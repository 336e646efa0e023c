#!/usr/bin/env bash
# tools/demo_run.sh: run 22 of the demo model, on the GPU machine (PyTorch 2.11, transformers 5.17,
# no network), in one device call of at most 600 s, from the repository root:
#
#   OUT=/some/dir bash tools/demo_run.sh
#
# Trains from models/demo's weights (run 21) on scenes 21,000,000 and up (run 22's range in
# tools/demo_seeds.py; train_demo.py refuses any other) for 380 s, with the grounding conversation
# added (six a scene), then transformers' evaluation of the new weights on the first 500 scenes of the
# evaluation range and the greedy fixture on the fixture range; then, in the time left, the same
# evaluation of the shipped weights (run 21) for comparison.  Nothing is fetched.  Into $OUT (at most
# 8 files of 16 MB): model.safetensors (the new weights), run22.tar.gz (the other model files,
# eval/eval.json, eval/images, fixture/greedy.json, fixture/images), train.log, and, if there was
# time, run21-eval.tar.gz and run21-eval.log.
set -uo pipefail
: "${OUT:?OUT must name the output folder}"
T0=$(date +%s)
RUN=/tmp/demo-run22
BASE=/tmp/demo-run21-eval
rm -rf "$RUN" "$BASE"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee "$OUT/train.log"

timeout 575 python3 tools/train_demo.py train "$RUN" --init models/demo --seconds 380 --lr 1.5e-4 --warmup 50 \
    --first-scene 21000000 --eval-seconds 90 --autocast 0 --batch-scenes 96 --pixels 131072 --grounding 1 \
    2>&1 | tee -a "$OUT/train.log"
echo "train exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/train.log"

if [ -f "$RUN/demo/model.safetensors" ]; then
    cp "$RUN/demo/model.safetensors" "$OUT/model.safetensors"
    (cd "$RUN" && tar czf "$OUT/run22.tar.gz" --exclude=model.safetensors demo \
        $( [ -d eval ] && echo eval ) $( [ -d fixture ] && echo fixture ))
fi
ls -la "$OUT" | tee -a "$OUT/train.log"

LEFT=$(( 585 - ($(date +%s) - T0) ))
if [ "$LEFT" -gt 50 ]; then
    timeout $(( LEFT - 5 )) python3 tools/train_demo.py hf-eval models/demo "$BASE" --eval-seconds $(( LEFT - 40 )) \
        > "$OUT/run21-eval.log" 2>&1
    echo "run 21 eval exit $? after $(( $(date +%s) - T0 )) s" >> "$OUT/run21-eval.log"
    [ -f "$BASE/eval/eval.json" ] && (cd "$BASE" && tar czf "$OUT/run21-eval.tar.gz" eval/eval.json)
else
    echo "no time left for the run 21 evaluation ($LEFT s)" | tee -a "$OUT/train.log"
fi
echo "done after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/train.log"
