/*
 * bench_clock.h — the benchmark programs' clock: seconds on the monotonic
 * clock (a difference of two calls is a duration; the origin means
 * nothing). Header-only: each program is built alone (bench/CMakeLists.txt).
 */
#ifndef TKV_BENCH_CLOCK_H
#define TKV_BENCH_CLOCK_H

#include <time.h>

static inline double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
