/*
 * probe.c — the read and int8 probes (see probe.h): the pool's tasks, the
 * timing, and the scalar level's loops.
 */
#include "probe.h"

#include "base/alloc.h"
#include "base/error.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the scalar level --------------------------------------------------------------- */

uint64_t tkv__probe_read_scalar(const uint64_t *w, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0; /* four chains, so the adds do not wait on each other */
    size_t i = 0;
    for (; i + 4 <= n; i += 4) s0 += w[i], s1 += w[i + 1], s2 += w[i + 2], s3 += w[i + 3];
    for (; i < n; i++) s0 += w[i];
    return s0 + s1 + s2 + s3;
}

/* 8 lanes of u8 x s8 per round, one int32 accumulator each. The inputs pass
   through an empty asm every round, so the compiler cannot see they are
   constant and fold the loop into one multiplication. */
void tkv__probe_int8_scalar(uint64_t iters, uint64_t *macs) {
    int32_t acc[8] = {0};
    uint64_t a = 0x0101010101010101ull, b = 0x0101010101010101ull;
    for (uint64_t it = 0; it < iters; it++) {
#if defined(__GNUC__)
        __asm__ volatile("" : "+r"(a), "+r"(b));
#endif
        for (int j = 0; j < 8; j++) acc[j] += (int32_t)(uint8_t)(a >> (8 * j)) * (int32_t)(int8_t)(b >> (8 * j));
    }
    uint64_t s = 0;
    for (int j = 0; j < 8; j++) s += (uint64_t)(uint32_t)acc[j];
    *macs = s;
}

/* ---- the level tables -------------------------------------------------------------- */

static const struct {
    tkv__probe_read_fn read;
    tkv__probe_int8_fn int8;
    uint64_t per_round; /* multiply-adds per round of int8 */
    const char *instr;
} levels[TKV__KERNEL_LEVELS] = {
    [TKV__KERNEL_SCALAR] = {tkv__probe_read_scalar, tkv__probe_int8_scalar, 8, "scalar C (baseline x86-64)"},
#if defined(__x86_64__)
    /* 6 chains x 8 int32 lanes x 4 products per round */
    [TKV__KERNEL_AVX2] = {tkv__probe_read_avx2, tkv__probe_int8_avx2, 6 * 8 * 4, "vpmaddubsw+vpmaddwd+vpaddd ymm"},
#if !defined(TKV_NO_AVX512) /* the build's option: an empty AVX-512 level, never selected */
    /* 12 chains x 16 int32 lanes x 4 products per round */
    [TKV__KERNEL_AVX512] = {tkv__probe_read_avx512, tkv__probe_int8_avx512, 12 * 16 * 4, "vpdpbusd zmm"},
#else
    [TKV__KERNEL_AVX512] = {tkv__probe_read_scalar, tkv__probe_int8_scalar, 8, "scalar C (baseline)"},
#endif
#else
    [TKV__KERNEL_AVX2] = {tkv__probe_read_scalar, tkv__probe_int8_scalar, 8, "scalar C (baseline)"},
    [TKV__KERNEL_AVX512] = {tkv__probe_read_scalar, tkv__probe_int8_scalar, 8, "scalar C (baseline)"},
#endif
};

uint64_t tkv__probe_int8_per_round(tkv__kernel_level level) { return levels[level].per_round; }
const char *tkv__probe_int8_instr(tkv__kernel_level level) { return levels[level].instr; }

/* ---- the read probe --------------------------------------------------------------- */

#define PROBE_MAX_THREADS 1024

typedef struct read_task {
    uint64_t *w;   /* (n) words, 64-byte aligned */
    size_t lines;  /* n / 8: threads split whole 64-byte lines */
    bool fill;     /* write the words instead of reading them */
    tkv__probe_read_fn read;
    uint64_t sums[PROBE_MAX_THREADS];
    atomic_int nth;
} read_task;

static void read_run(void *arg, int ith, int nth) {
    read_task *t = arg;
    size_t l0, l1;
    tkv__split(t->lines, ith, nth, &l0, &l1);
    uint64_t *w = t->w + 8 * l0;
    const size_t n = 8 * (l1 - l0);
    if (t->fill) { /* each thread writes its own share, so its pages are first touched where it reads them */
        for (size_t i = 0; i < n; i++) w[i] = tkv__probe_word(8 * l0 + i);
    } else {
        t->sums[ith] = t->read(w, n);
    }
    if (ith == 0) atomic_store(&t->nth, nth);
}

tkv_status tkv__probe_read(tkv__pool *pool, tkv__kernel_level level, size_t bytes, int reps,
                           tkv__probe_read_result *out) {
    memset(out, 0, sizeof *out);
    bytes &= ~(size_t)63;
    if (bytes < 64) bytes = 64;
    if (reps < 1) reps = 1;
    read_task *t = tkv__calloc(1, sizeof *t);
    /* on 2 MiB pages, as the packed weights ask for (tkv_model_params.huge_pages): the limit is the best read */
    void *raw = tkv__malloc(bytes + TKV__HUGE_PAGE);
    if (!t || !raw) {
        tkv__free(t);
        tkv__free(raw);
        return tkv__fail(TKV_ERR_NOMEM, "the read probe: no memory for a buffer of %zu bytes", bytes);
    }
    t->w = (uint64_t *)(((uintptr_t)raw + TKV__HUGE_PAGE - 1) & ~(uintptr_t)(TKV__HUGE_PAGE - 1));
    tkv__advise_huge_pages(t->w, bytes);
    t->lines = bytes / 64;
    t->read = levels[level].read;
    t->fill = true;
    tkv__pool_run(pool, read_run, t);
    t->fill = false;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        memset(t->sums, 0, sizeof t->sums);
        const double t0 = now_s();
        tkv__pool_run(pool, read_run, t);
        const double dt = now_s() - t0;
        const double rate = (double)bytes / (dt > 0 ? dt : 1e-9);
        if (rate > best) best = rate;
    }
    uint64_t sum = 0;
    for (int i = 0; i < PROBE_MAX_THREADS; i++) sum += t->sums[i];
    out->bytes_per_s = best;
    out->checksum = sum;
    out->threads = atomic_load(&t->nth);
    tkv__free(raw);
    tkv__free(t);
    return TKV_OK;
}

/* ---- the int8 probe -------------------------------------------------------------- */

typedef struct int8_task {
    uint64_t iters;
    tkv__probe_int8_fn run;
    uint64_t macs[PROBE_MAX_THREADS];
    atomic_int nth;
} int8_task;

static void int8_run(void *arg, int ith, int nth) {
    int8_task *t = arg;
    t->run(t->iters, &t->macs[ith]);
    if (ith == 0) atomic_store(&t->nth, nth);
}

void tkv__probe_int8(tkv__pool *pool, tkv__kernel_level level, uint64_t iters, int reps,
                     tkv__probe_int8_result *out) {
    memset(out, 0, sizeof *out);
    if (reps < 1) reps = 1;
    /* each int32 lane gains 4 per round: stay below 2^31 */
    if (iters > 500000000ull) iters = 500000000ull;
    int8_task t = {.iters = iters, .run = levels[level].int8};
    double best = 0;
    for (int r = 0; r < reps; r++) {
        memset(t.macs, 0, sizeof t.macs);
        const double t0 = now_s();
        tkv__pool_run(pool, int8_run, &t);
        const double dt = now_s() - t0;
        const int nth = atomic_load(&t.nth);
        const double rate = (double)nth * (double)iters * (double)levels[level].per_round / (dt > 0 ? dt : 1e-9);
        if (rate > best) best = rate;
    }
    out->threads = atomic_load(&t.nth);
    for (int i = 0; i < PROBE_MAX_THREADS; i++) out->macs += t.macs[i];
    out->expected = (uint64_t)out->threads * iters * levels[level].per_round;
    out->macs_per_s = best;
}
