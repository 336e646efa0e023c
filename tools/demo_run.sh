#!/usr/bin/env bash
# tools/demo_run.sh: run 23 of the demo model, on the GPU machine (PyTorch 2.11, transformers 5.17,
# no network), in one device call of at most 600 s, from the repository root:
#
#   OUT=/some/dir bash tools/demo_run.sh          (build/init-23/model.safetensors: run 22's weights)
#
# Continues run 22's weights (build/init-23: models/demo's json files, written here, and run 22's
# model.safetensors, which the caller puts there) on scenes 22,000,000 and up (run 23's range in
# tools/demo_seeds.py; train_demo.py refuses any other) for 470 s.  Run 22 (380 s, one grounding
# conversation a scene, peak LR 1.5e-4) learnt the answer format but not the boxes (5 % of objects at
# IoU >= 0.5), so run 23 gives grounding more of each step: a scene's six conversations are a caption,
# an analysis, two questions (three before) and two grounding conversations, each grounding one
# weighted by its answer tokens / 50 (1 to 2: its loss is a mean over 60-200 tokens, mostly format),
# peak LR 2e-4.  Then transformers' evaluation of the new weights (500 scenes of the evaluation range)
# and the greedy fixture.  Nothing is fetched.  Into $OUT (at most 8 files of 16 MB): model.safetensors
# (the new weights), run23.tar.gz (the other model files, eval/eval.json, eval/images,
# fixture/greedy.json, fixture/images), train.log.
set -uo pipefail
: "${OUT:?OUT must name the output folder}"
T0=$(date +%s)
RUN=/tmp/demo-run23
INIT=build/init-23
rm -rf "$RUN"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee "$OUT/train.log"
if [ ! -f "$INIT/model.safetensors" ]; then
    echo "demo_run.sh: $INIT/model.safetensors (run 22's weights) is missing" | tee -a "$OUT/train.log"
    exit 1
fi
for f in config.json generation_config.json preprocessor_config.json tokenizer.json tokenizer_config.json \
         chat_template.json; do
    cp "models/demo/$f" "$INIT/$f"
done
sha256sum "$INIT/model.safetensors" models/demo/model.safetensors | tee -a "$OUT/train.log"

timeout 590 python3 tools/train_demo.py train "$RUN" --init "$INIT" --seconds 470 --lr 2e-4 --warmup 50 \
    --first-scene 22000000 --eval-seconds 60 --autocast 0 --batch-scenes 96 --pixels 131072 \
    --questions 2 --grounding 2 --ground-tokens 50 \
    2>&1 | tee -a "$OUT/train.log"
echo "train exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/train.log"

if [ -f "$RUN/demo/model.safetensors" ]; then
    cp "$RUN/demo/model.safetensors" "$OUT/model.safetensors"
    (cd "$RUN" && tar czf "$OUT/run23.tar.gz" --exclude=model.safetensors demo \
        $( [ -d eval ] && echo eval ) $( [ -d fixture ] && echo fixture ))
fi
ls -la "$OUT" | tee -a "$OUT/train.log"
echo "done after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/train.log"
