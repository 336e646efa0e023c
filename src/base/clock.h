/* clock.h: the one clock for timings and deadlines: monotonic seconds (CLOCK_MONOTONIC). */
#ifndef IRIS_CLOCK_H
#define IRIS_CLOCK_H

#include <time.h>

static inline double iris_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
