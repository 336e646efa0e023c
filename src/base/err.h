/* err.h: the error value every fallible function fills.
 *
 * Convention (STYLE.md): 0 is success, a negative IRIS_E* code is failure;
 * fallible functions take `iris_err *err` last and write one message that
 * names the value and the fix.  `err` may be NULL (the message is dropped).
 * Nothing below main() calls exit(). */
#ifndef IRIS_ERR_H
#define IRIS_ERR_H

#include "iris.h"

int iris_err_set(iris_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepend "prefix: " to the message already in err (adds context on the way up). */
int iris_err_prefix(iris_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
