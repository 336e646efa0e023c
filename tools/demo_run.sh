#!/usr/bin/env bash
# tools/demo_run.sh: runs 24-27 of the demo model, on the GPU machine (PyTorch 2.11, transformers
# 5.17, no network), in one device call of at most 600 s each, from the repository root:
#
#   OUT=/some/dir bash tools/demo_run.sh                        run 24, from models/demo (run 23)
#   OUT=/some/dir RUN_N=25 INIT_WEIGHTS=PATH bash tools/demo_run.sh
#                                                               run N (25-27), from run N-1's weights at PATH
#
# Run N continues the given weights (copied with models/demo's json files into build/init-N) on
# scenes (N - 1),000,000 and up (run N's range in tools/demo_seeds.py; train_demo.py refuses any other)
# for 470 s.
# Run 23 (two grounding conversations of six, each weighted by its answer tokens / 50, peak LR 2e-4)
# reached 18.8 % of objects at IoU >= 0.5 with its grounding loss still falling, and questions were at
# 99.87 %, so run 24 moves one question to grounding: a scene's six conversations are a caption, an
# analysis, one question and three grounding conversations (weighted as in run 23), peak LR 2e-4.
# Then transformers' evaluation of the new weights (500 scenes of the evaluation range) and the greedy
# fixture.  Nothing is fetched.  Into $OUT (at most 8 files of 16 MB): model.safetensors (the new
# weights), runN.tar.gz (the other model files, eval/eval.json, eval/images, fixture/greedy.json,
# fixture/images), train.log.
set -uo pipefail
: "${OUT:?OUT must name the output folder}"
T0=$(date +%s)
RUN_N=${RUN_N:-24}
INIT_WEIGHTS=${INIT_WEIGHTS:-models/demo/model.safetensors}
RUN=/tmp/demo-run$RUN_N
INIT=build/init-$RUN_N
rm -rf "$RUN"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader | tee "$OUT/train.log"
rm -rf "$INIT" && mkdir -p "$INIT"
cp "$INIT_WEIGHTS" "$INIT/model.safetensors" || exit 1
for f in config.json generation_config.json preprocessor_config.json tokenizer.json \
         tokenizer_config.json chat_template.json; do
    cp "models/demo/$f" "$INIT/$f" || { echo "demo_run.sh: models/demo/$f is missing" | tee -a "$OUT/train.log"; exit 1; }
done
sha256sum "$INIT/model.safetensors" | tee -a "$OUT/train.log"

timeout 590 python3 tools/train_demo.py train "$RUN" --init "$INIT" --seconds 470 --lr 2e-4 --warmup 50 \
    --first-scene $(( (RUN_N - 1) * 1000000 )) --eval-seconds 60 --autocast 0 --batch-scenes 96 --pixels 131072 \
    --questions 1 --grounding 3 --ground-tokens 50 \
    2>&1 | tee -a "$OUT/train.log"
echo "train exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/train.log"

if [ -f "$RUN/demo/model.safetensors" ]; then
    cp "$RUN/demo/model.safetensors" "$OUT/model.safetensors"
    (cd "$RUN" && tar czf "$OUT/run$RUN_N.tar.gz" --exclude=model.safetensors demo \
        $( [ -d eval ] && echo eval ) $( [ -d fixture ] && echo fixture ))
fi
ls -la "$OUT" | tee -a "$OUT/train.log"
echo "done after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/train.log"
