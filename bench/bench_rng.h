/*
 * bench_rng.h — the benchmark programs' random numbers: xorshift64 from a
 * fixed seed, so each run of a program times the same data. Header-only,
 * as bench_clock.h.
 */
#ifndef TKV_BENCH_RNG_H
#define TKV_BENCH_RNG_H

#include <stdint.h>

static uint64_t rng = 88172645463325252ull;

/* The next number: bits 11..42 of the state after one step. */
static inline uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

#endif
