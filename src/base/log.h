/* log.h: one logger, to stderr (stdout belongs to generated text).
 * Level threshold from iris_log_set_level() or $IRIS_LOG (debug|info|warn|error). */
#ifndef IRIS_LOG_H
#define IRIS_LOG_H

#include "iris.h"

void iris_log(int level, const char *tag, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
