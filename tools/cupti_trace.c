/* cupti_trace.c: a CUDA injection library that writes every kernel and copy a process runs on the
 * GPU (start and end in ns, grid, name) to a CSV file, for machines without Nsight Systems.
 *
 *   cc -shared -fPIC -O2 -I/usr/local/cuda/include -o build/gpu/libcupti_trace.so tools/cupti_trace.c \
 *      -L/usr/local/cuda/lib -lcupti
 *   CUDA_INJECTION64_PATH=$PWD/build/gpu/libcupti_trace.so IRIS_TRACE_OUT=trace.csv build/gpu/iris bench ...
 *   python3 bench/ttft_profile.py trace.csv
 *
 * IRIS_TRACE_API=1 adds the host's runtime calls (rows named "api NAME", on the same clock), to
 * see what the host does between a step's kernels.
 * The driver calls InitializeInjection at cuInit; the records are flushed at exit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cupti.h>

static FILE *g_out;

static void CUPTIAPI buf_request(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buf_complete(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    CUpti_Activity *r = NULL;
    (void)ctx, (void)stream, (void)size;
    while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || r->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
            fprintf(g_out, "%llu,%llu,%d.%d.%d,\"%s\"\n", (unsigned long long)k->start,
                    (unsigned long long)(k->end - k->start), k->gridX, k->gridY, k->gridZ, k->name ? k->name : "?");
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
            fprintf(g_out, "%llu,%llu,%llu,\"memcpy kind %d\"\n", (unsigned long long)m->start,
                    (unsigned long long)(m->end - m->start), (unsigned long long)m->bytes, m->copyKind);
        } else if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
            const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
            const char *name = NULL;
            cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
            fprintf(g_out, "%llu,%llu,0,\"api %s\"\n", (unsigned long long)a->start,
                    (unsigned long long)(a->end - a->start), name ? name : "?");
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
            fprintf(g_out, "%llu,%llu,%llu,\"memset\"\n", (unsigned long long)m->start,
                    (unsigned long long)(m->end - m->start), (unsigned long long)m->bytes);
        }
    }
    free(buf);
}

static void flush_at_exit(void) {
    cuptiActivityFlushAll(1);
    if (g_out) fclose(g_out);
}

int InitializeInjection(void) {
    const char *path = getenv("IRIS_TRACE_OUT");
    g_out = fopen(path ? path : "cupti_trace.csv", "w");
    if (!g_out) return 0;
    fprintf(g_out, "Start (ns),Duration (ns),Grid,Name\n");
    cuptiActivityRegisterCallbacks(buf_request, buf_complete);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    const char *api = getenv("IRIS_TRACE_API");
    if (api && *api == '1') cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
    atexit(flush_at_exit);
    return 1;
}
