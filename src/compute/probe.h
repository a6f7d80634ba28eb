/*
 * probe.h — what this machine can do at most, measured with the threads the
 * forward pass uses.
 *
 *   read   bytes per second that the pool's threads read from a buffer no
 *          cache holds. Generation reads every weight once per token, so
 *          this is its bound: tokens/s <= read rate / weight bytes.
 *   int8   8-bit multiply-adds per second of the instruction the level's
 *          integer products are built on (AVX-512 VNNI's vpdpbusd, AVX2's
 *          vpmaddubsw + vpmaddwd + vpaddd), on independent accumulators so
 *          nothing waits: prefill's bound, since a prompt token costs one
 *          multiply-add per weight.
 *
 * Each level's loops live in its folder (x86/avx2/probe.c,
 * x86/avx512/probe.c); the scalar level's here are what the baseline
 * compiler makes of plain C. The results carry checksums a test can
 * compute independently, which also keeps the compiler from dropping the
 * loops.
 */
#ifndef TKV_PROBE_H
#define TKV_PROBE_H

#include "kernels.h"
#include "threadpool.h"

#include <stddef.h>
#include <stdint.h>

/* One level's loops. read_sum: the sum (mod 2^64) of n 64-bit words
   (w 64-byte aligned, n a multiple of 8). int8_run: `iters` rounds of the
   level's multiply-add over its independent accumulators with every input
   byte 1, returning the sum of all accumulator lanes (an exact count of the
   multiply-adds done) in *macs. */
typedef uint64_t (*tkv__probe_read_fn)(const uint64_t *w, size_t n);
typedef void (*tkv__probe_int8_fn)(uint64_t iters, uint64_t *macs);

uint64_t tkv__probe_read_scalar(const uint64_t *w, size_t n);
void tkv__probe_int8_scalar(uint64_t iters, uint64_t *macs);
uint64_t tkv__probe_read_avx2(const uint64_t *w, size_t n);
void tkv__probe_int8_avx2(uint64_t iters, uint64_t *macs);
uint64_t tkv__probe_read_avx512(const uint64_t *w, size_t n);
void tkv__probe_int8_avx512(uint64_t iters, uint64_t *macs);

/* The word the read probe's buffer holds at index i (a test recomputes the
   checksum from it). */
static inline uint64_t tkv__probe_word(uint64_t i) { return (i + 1) * 0x9E3779B97F4A7C15ull; }

typedef struct tkv__probe_read_result {
    double bytes_per_s; /* best of the repetitions */
    uint64_t checksum;  /* sum of the buffer's words, mod 2^64, from the last repetition */
    int threads;        /* threads that ran the last repetition */
} tkv__probe_read_result;

/*
 * Fill a buffer of `bytes` (rounded down to 64; at least 64) with
 * tkv__probe_word(i), then time `reps` reads of it on the pool at `level`.
 * TKV_ERR_NOMEM when the buffer cannot be allocated; nothing is left
 * allocated on return.
 */
tkv_status tkv__probe_read(tkv__pool *pool, tkv__kernel_level level, size_t bytes, int reps,
                           tkv__probe_read_result *out);

typedef struct tkv__probe_int8_result {
    double macs_per_s; /* best of the repetitions, all threads */
    uint64_t macs;     /* multiply-adds the last repetition counted in its accumulators, all threads */
    uint64_t expected; /* what it should have counted: threads x iters x the level's per-round count */
    int threads;
} tkv__probe_int8_result;

/* Time `reps` runs of `iters` rounds per thread of the level's int8 loop. */
void tkv__probe_int8(tkv__pool *pool, tkv__kernel_level level, uint64_t iters, int reps,
                     tkv__probe_int8_result *out);

/* Multiply-adds per round of a level's int8 loop. */
uint64_t tkv__probe_int8_per_round(tkv__kernel_level level);

/* The instruction a level's int8 loop measures ("vpdpbusd zmm", ...). */
const char *tkv__probe_int8_instr(tkv__kernel_level level);

#endif
