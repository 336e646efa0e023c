/* sbuf.h: a growable, NUL-terminated byte string for renderers and reports.
 *
 * Appends never fail on the spot: the first allocation failure sets `oom`, later appends do
 * nothing, and the caller checks `oom` once at the end.  p is always NUL-terminated once
 * anything was appended (NULL before).  The caller frees p. */
#ifndef IRIS_SBUF_H
#define IRIS_SBUF_H

#include <stddef.h>
#include <string.h>

typedef struct iris_sbuf {
    char *p;
    size_t n, cap;
    int oom;
} iris_sbuf;

void iris_sbuf_put(iris_sbuf *b, const char *s, size_t n);
static inline void iris_sbuf_puts(iris_sbuf *b, const char *s) { iris_sbuf_put(b, s, strlen(s)); }

#endif
