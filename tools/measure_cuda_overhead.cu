// measure_cuda_overhead.cu: what the driver takes on the device beside the
// memory iris allocates itself, as cudaMemGetInfo sees it: the CUDA context,
// the cuBLASLt and cuBLAS handles, the first (lazily loaded) GEMM kernels, and
// instantiated CUDA graphs of decode-sized kernel counts.  Grounds the two
// estimates of src/engine/planner.h (IRIS_PLAN_CONTEXT_ESTIMATE,
// IRIS_PLAN_GRAPH_ESTIMATE).  Run on an idle GPU:
//   nvcc -O2 -arch=sm_90 -o mco tools/measure_cuda_overhead.cu -lcublasLt -lcublas
//   ./mco USED_BEFORE_MIB [wait]   (nvidia-smi's memory.used before the process;
//                                   "wait": stay 6 s at the peak so that
//                                   nvidia-smi --query-compute-apps can see it)
// Prints one JSON object (bytes).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));      \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)
#define CKB(x)                                                                                      \
    do {                                                                                            \
        int s_ = (int)(x);                                                                          \
        if (s_ != 0) {                                                                              \
            fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, s_);                   \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

__global__ void k_axpy(float *x, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 0.5f + a;
}

static long long used_bytes(void) {
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    return (long long)(t - f);
}

int main(int argc, char **argv) {
    long long before = argc > 1 ? atoll(argv[1]) * (1ll << 20) : 0;
    CK(cudaFree(0));
    long long u_ctx0 = used_bytes();
    // Optional: shrink the per-thread stack (the context reserves local
    // memory for it on every SM: SMs x max threads x stack) and the device
    // malloc heap, before any kernel runs.
    long long stack = getenv("MCO_STACK") ? atoll(getenv("MCO_STACK")) : -1;
    long long heap = getenv("MCO_HEAP") ? atoll(getenv("MCO_HEAP")) : -1;
    if (stack >= 0) CK(cudaDeviceSetLimit(cudaLimitStackSize, (size_t)stack));
    if (heap >= 0) CK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, (size_t)heap));
    long long u_ctx = used_bytes();

    cublasLtHandle_t lt;
    CKB(cublasLtCreate(&lt));
    long long u_lt = used_bytes();
    cublasHandle_t bl;
    CKB(cublasCreate(&bl));
    long long u_bl = used_bytes();

    // Buffers of our own (what the plan carves): 2048x2048 bf16 operands and a 32 MiB workspace.
    const int n = 2048;
    size_t ws_bytes = 32u << 20;
    __nv_bfloat16 *A, *B, *C;
    void *ws;
    CK(cudaMalloc(&A, (size_t)n * n * 2));
    CK(cudaMalloc(&B, (size_t)n * n * 2));
    CK(cudaMalloc(&C, (size_t)n * n * 2));
    CK(cudaMalloc(&ws, ws_bytes));
    CK(cudaMemset(A, 0, (size_t)n * n * 2));
    CK(cudaMemset(B, 0, (size_t)n * n * 2));
    long long u_bufs = used_bytes();

    // One bf16 GEMM through cuBLASLt (fp32 accumulation) with our workspace.
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    CKB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CKB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, n, n));
    CKB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, n, n));
    CKB(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, n, n));
    cublasLtMatmulPreference_t pref;
    CKB(cublasLtMatmulPreferenceCreate(&pref));
    CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                             sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t h;
    int nh = 0;
    CKB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &h, &nh));
    if (nh < 1) {
        fprintf(stderr, "no cuBLASLt algorithm\n");
        return 1;
    }
    float one = 1, zero = 0;
    CKB(cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, C, lc, C, lc, &h.algo, ws, ws_bytes, 0));
    CK(cudaDeviceSynchronize());
    long long u_lt_gemm = used_bytes();
    // Decode-shaped GEMM (m = 1..64 rows) picks other kernels.
    for (int m = 1; m <= 64; m *= 4) {
        cublasLtMatrixLayout_t lm_b, lm_c;
        CKB(cublasLtMatrixLayoutCreate(&lm_b, CUDA_R_16BF, n, m, n));
        CKB(cublasLtMatrixLayoutCreate(&lm_c, CUDA_R_16BF, n, m, n));
        CKB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lm_b, lm_c, lm_c, pref, 1, &h, &nh));
        if (nh > 0) CKB(cublasLtMatmul(lt, op, &one, A, la, B, lm_b, &zero, C, lm_c, C, lm_c, &h.algo, ws, ws_bytes, 0));
        cublasLtMatrixLayoutDestroy(lm_b);
        cublasLtMatrixLayoutDestroy(lm_c);
    }
    CK(cudaDeviceSynchronize());
    long long u_lt_decode = used_bytes();
    CKB(cublasGemmEx(bl, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, CUDA_R_16BF, n, B, CUDA_R_16BF, n, &zero, C,
                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CK(cudaDeviceSynchronize());
    long long u_cublas_gemm = used_bytes();

    // Our own first kernel (module load).
    float *x;
    CK(cudaMalloc(&x, 1 << 20));
    long long u_x = used_bytes();
    k_axpy<<<256, 256>>>(x, 1 << 16, 1.0f);
    CK(cudaDeviceSynchronize());
    long long u_kernel = used_bytes();

    // Graphs: 11 decode graphs of 600 kernel nodes each (a 36-layer decoder
    // step is ~15 kernels a layer), captured, instantiated, uploaded, launched.
    const int n_graphs = 11, nodes = 600;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    long long u_stream = used_bytes();
    cudaGraphExec_t ex[n_graphs];
    long long u_graph[n_graphs];
    for (int g = 0; g < n_graphs; g++) {
        cudaGraph_t gr;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < nodes; i++) k_axpy<<<64 * (g + 1), 256, 0, st>>>(x, 1 << 16, (float)i);
        CK(cudaStreamEndCapture(st, &gr));
        CK(cudaGraphInstantiate(&ex[g], gr, 0));
        CK(cudaGraphUpload(ex[g], st));
        CK(cudaGraphLaunch(ex[g], st));
        CK(cudaStreamSynchronize(st));
        CK(cudaGraphDestroy(gr));
        u_graph[g] = used_bytes();
    }
    // A graph with cuBLASLt nodes (decode GEMMs are captured too).
    cudaGraph_t gr;
    cudaGraphExec_t ex_lt;
    CKB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &h, &nh));
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 200; i++)
        CKB(cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, C, lc, C, lc, &h.algo, ws, ws_bytes, st));
    CK(cudaStreamEndCapture(st, &gr));
    CK(cudaGraphInstantiate(&ex_lt, gr, 0));
    CK(cudaGraphUpload(ex_lt, st));
    CK(cudaGraphLaunch(ex_lt, st));
    CK(cudaStreamSynchronize(st));
    long long u_graph_lt = used_bytes();

    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("{\"device\": \"%s\", \"driver\": %d, \"runtime\": %d, \"total\": %zu, \"used_before_process\": %lld,\n", prop.name,
           drv, rt, t, before);
    size_t lim_stack = 0, lim_heap = 0;
    cudaDeviceGetLimit(&lim_stack, cudaLimitStackSize);
    cudaDeviceGetLimit(&lim_heap, cudaLimitMallocHeapSize);
    printf(" \"sms\": %d, \"max_threads_per_sm\": %d, \"stack_limit\": %zu, \"heap_limit\": %zu, \"context_default\": %lld,\n",
           prop.multiProcessorCount, prop.maxThreadsPerMultiProcessor, lim_stack, lim_heap, u_ctx0 - before);
    printf(" \"context\": %lld, \"cublaslt_handle\": %lld, \"cublas_handle\": %lld,\n", u_ctx - before, u_lt - u_ctx,
           u_bl - u_lt);
    printf(" \"own_buffers\": %lld, \"own_buffers_asked\": %zu,\n", u_bufs - u_bl, (size_t)n * n * 2 * 3 + ws_bytes);
    printf(" \"first_cublaslt_gemm\": %lld, \"decode_shaped_gemms\": %lld, \"first_cublas_gemm\": %lld,\n",
           u_lt_gemm - u_bufs, u_lt_decode - u_lt_gemm, u_cublas_gemm - u_lt_decode);
    printf(" \"own_first_kernel\": %lld, \"stream\": %lld,\n", u_kernel - u_x, u_stream - u_kernel);
    printf(" \"graphs_600_nodes\": [");
    for (int g = 0; g < n_graphs; g++) printf("%s%lld", g ? ", " : "", u_graph[g] - (g ? u_graph[g - 1] : u_stream));
    printf("],\n \"graph_200_cublaslt_nodes\": %lld,\n", u_graph_lt - u_graph[n_graphs - 1]);
    printf(" \"driver_total_beside_own_buffers\": %lld}\n",
           (u_graph_lt - before) - (u_bufs - u_bl) - (1 << 20));
    printf("own buffers in MiB (for nvidia-smi's per-process figure): %.1f\n", (double)((size_t)n * n * 2 * 3 + ws_bytes + (1 << 20)) / (1 << 20));
    fflush(stdout);
    if (argc > 2) sleep(6);
    return 0;
}
