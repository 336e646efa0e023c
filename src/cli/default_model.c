/* default_model.c: finds the demo model relative to the running executable
 * (/proc/self/exe) or through $IRIS_DEMO_MODEL: models/demo of the source tree
 * (the executable in build/ or build/NAME/), or share/iris/models/demo of an
 * installation (make install).  No allocation; one static
 * buffer. */
#include "default_model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char found[PATH_MAX + 64];

const char *iris_default_model_dir(void) {
    const char *env = getenv("IRIS_DEMO_MODEL");
    if (env && *env) return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = 0;
    static const char *const rel[] = {"/../models/demo", "/../../models/demo", "/../share/iris/models/demo"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cfg[sizeof found + 16];
        snprintf(found, sizeof found, "%s%s", exe, rel[i]);
        snprintf(cfg, sizeof cfg, "%s/config.json", found);
        if (access(cfg, R_OK) == 0) {
            char *real = realpath(found, NULL);
            if (real) {
                snprintf(found, sizeof found, "%s", real);
                free(real);
            }
            return found;
        }
    }
    return NULL;
}
