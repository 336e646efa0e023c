/* cmd_version.c: `iris version`: the version and what this build has. */
#include <stdio.h>

#include "cli.h"
#include "opts.h"
#ifdef IRIS_CUDA
#include "backend/cuda/cuda_info.h"
#endif

int iris_cmd_version(int argc, char **argv) {
    iris_opt none[] = {IRIS_OPT_TABLE_END};
    iris_cli_spec sp = {.cmd = "version", .usage = "", .about = "Prints the version and what this build has.",
                        .tables = {none}};
    int n_pos, st = iris_cli_parse(&sp, argc, argv, NULL, &n_pos);
    if (st >= 0) return st;
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
