/* iris.h: the public API of libiris.
 *
 * iris runs Qwen3-VL vision-language models on the CPU or one GPU.  This
 * header is the narrow surface for programs linking libiris: status codes,
 * the error value, logging.  The engine API (requests, parameters,
 * callbacks) grows here as the engine lands; internal modules keep their
 * own headers under src/.
 */
#ifndef IRIS_H
#define IRIS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IRIS_VERSION "0.1.0"

/* Status codes: 0 is success, negative is failure. */
enum {
    IRIS_OK = 0,
    IRIS_EINVAL = -1,      /* a bad argument or setting */
    IRIS_ENOMEM = -2,      /* host allocation failed */
    IRIS_EIO = -3,         /* open/read/write/mmap failed */
    IRIS_EFORMAT = -4,     /* malformed file or input */
    IRIS_EUNSUPPORTED = -5,/* valid but not supported (model type, dtype, ...) */
    IRIS_ENOTFOUND = -6,   /* a file, tensor or model that is not there */
    IRIS_ELIMIT = -7,      /* over a configured or hard limit */
    IRIS_EDEVICE = -8,     /* the GPU failed */
    IRIS_ECANCELLED = -9,
};

/* The error value: fallible functions take `iris_err *err` last. */
typedef struct iris_err {
    int code;
    char msg[1024];
} iris_err;

const char *iris_strerror(int code);

enum { IRIS_LOG_DEBUG = 0, IRIS_LOG_INFO = 1, IRIS_LOG_WARN = 2, IRIS_LOG_ERROR = 3 };
void iris_log_set_level(int level);

#ifdef __cplusplus
}
#endif
#endif
