/* log.c: leveled logging to stderr; thread-safe (one fprintf per line). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_level = -1;

void iris_log_set_level(int level) { g_level = level; }

static int level_from_env(void) {
    const char *e = getenv("IRIS_LOG");
    if (!e) return IRIS_LOG_INFO;
    if (!strcmp(e, "debug")) return IRIS_LOG_DEBUG;
    if (!strcmp(e, "warn")) return IRIS_LOG_WARN;
    if (!strcmp(e, "error")) return IRIS_LOG_ERROR;
    return IRIS_LOG_INFO;
}

void iris_log(int level, const char *tag, const char *fmt, ...) {
    if (g_level < 0) g_level = level_from_env();
    if (level < g_level) return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "iris %s [%s] %s\n", names[level < 0 ? 0 : level > 3 ? 3 : level], tag, line);
}
