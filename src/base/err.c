/* err.c: filling iris_err messages. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int iris_err_set(iris_err *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int iris_err_prefix(iris_err *err, const char *fmt, ...) {
    if (!err) return IRIS_EINVAL;
    char pre[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
    return err->code;
}

const char *iris_strerror(int code) {
    switch (code) {
    case IRIS_OK: return "ok";
    case IRIS_EINVAL: return "invalid argument";
    case IRIS_ENOMEM: return "out of memory";
    case IRIS_EIO: return "I/O error";
    case IRIS_EFORMAT: return "malformed input";
    case IRIS_EUNSUPPORTED: return "unsupported";
    case IRIS_ENOTFOUND: return "not found";
    case IRIS_ELIMIT: return "over a limit";
    case IRIS_EDEVICE: return "device error";
    case IRIS_ECANCELLED: return "cancelled";
    default: return "unknown error";
    }
}
