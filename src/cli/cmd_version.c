/* cmd_version.c: `iris version`: the version and what this build has. */
#include <stdio.h>

#include "cli.h"

int iris_cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
#ifdef IRIS_CUDA
    const char *cuda = "yes";
#else
    const char *cuda = "no";
#endif
    printf("iris %s (cuda: %s)\n", IRIS_VERSION, cuda);
    return 0;
}
