/* cmd_version.c: `iris version`: the version and what this build has. */
#include <stdio.h>

#include "cli.h"
#ifdef IRIS_CUDA
#include "backend/cuda/cuda_info.h"
#endif

int iris_cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
#ifdef IRIS_CUDA
    /* what GPUs it can run on: the kernels' targets and the runtime the driver must support */
    int rt = iris_cuda_runtime_version();
    printf("iris %s (cuda: yes; CUDA %d.%d, CUDA_ARCHS=\"%s\")\n", IRIS_VERSION, rt / 1000, rt % 1000 / 10,
           iris_cuda_archs());
#else
    printf("iris %s (cuda: no)\n", IRIS_VERSION);
#endif
    return 0;
}
