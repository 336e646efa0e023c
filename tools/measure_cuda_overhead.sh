#!/bin/bash
# measure_cuda_overhead.sh: run tools/measure_cuda_overhead.cu on the GPU
# machine (lazy and eager module loading), with nvidia-smi's per-process view
# at the peak, and torch's context for comparison.  Output: $OUT/log.
set -o pipefail
OUT=${OUT:-/tmp}
log=$OUT/log
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.reserved,memory.used,memory.free --format=csv 2>&1 | tee $log
/usr/local/cuda/bin/nvcc -O2 -arch=sm_90 -o /tmp/mco tools/measure_cuda_overhead.cu -lcublasLt -lcublas 2>&1 | tee -a $log || exit 1
# mode: module loading, then the per-thread stack and malloc heap limits (-1: default)
for run in "LAZY -1 -1" "EAGER -1 -1" "LAZY 256 -1" "LAZY 256 1048576" "LAZY 128 0"; do
    set -- $run
    u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    echo "== CUDA_MODULE_LOADING=$1 stack=$2 heap=$3, memory.used before: $u MiB" | tee -a $log
    CUDA_MODULE_LOADING=$1 MCO_STACK=$2 MCO_HEAP=$3 /tmp/mco "$u" wait > /tmp/mco.out 2>&1 &
    pid=$!
    sleep 4
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>&1 | tee -a $log
    wait $pid
    cat /tmp/mco.out | tee -a $log
done
echo "== torch" | tee -a $log
python3 - <<'PY' 2>&1 | tee -a $log
import torch
torch.zeros(1, device="cuda")
f, t = torch.cuda.mem_get_info()
a = torch.zeros(2048, 2048, dtype=torch.bfloat16, device="cuda")
(a @ a).sum().item()
f2, t2 = torch.cuda.mem_get_info()
print({"torch": torch.__version__, "used_after_init": t - f, "used_after_bf16_matmul": t2 - f2,
       "torch_allocated": torch.cuda.memory_reserved()})
PY
