/*
 * bench_stream.c — how much arithmetic a stream from memory can carry at
 * the read rate, and which software prefetch keeps it there
 * (`bench_stream [-t THREADS] [-b MIB] [-r ROUNDS]`, AVX-512 VNNI only).
 *
 * Each thread reads its share of a buffer no cache holds, four lines a
 * step, and runs K vpdpbusd per line on what it read (eight accumulators,
 * no dependence between lines): K = 0 is the read probe (bench_limits),
 * K = 4 .. 16 the arithmetic of a weight product per byte (the one-token
 * products run 4-8 a line; a product's in-L2 rate says which). A row per
 * K: the rate with the buffer in L2 (256 KiB, one thread: the arithmetic's
 * own bound), then from memory with no software prefetch, with one
 * prefetch a line at 4, 8, 16 or 32 KiB ahead (T0, or NTA at 8 and 16),
 * and at compute/x86/util.h's two distances (T0 4 KiB, T1 32 KiB). Each
 * from-memory rate is the best of 3 passes; -r repeats the table and
 * prints one line of the read rate (K = 0, none) per round, so that rounds
 * can be sorted by this VM's memory phase afterwards. A benchmark: it
 * asserts nothing.
 */
#define _GNU_SOURCE /* MADV_HUGEPAGE */
#include "bench_clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vnni"), noinline))

enum pf_kind { PF_NONE, PF_T0, PF_NTA, PF_NEAR_FAR };

/* One variant: its prefetch and distance. */
typedef struct variant {
    const char *name;
    enum pf_kind kind;
    size_t dist;
} variant;

static const variant variants[] = {
    {"none", PF_NONE, 0},        {"T0 4K", PF_T0, 4096},   {"T0 8K", PF_T0, 8192},
    {"T0 16K", PF_T0, 16384},    {"T0 32K", PF_T0, 32768}, {"NTA 8K", PF_NTA, 8192},
    {"NTA 16K", PF_NTA, 16384},  {"T0 4K + T1 32K", PF_NEAR_FAR, 32768},
};
enum { N_VARIANTS = sizeof variants / sizeof variants[0] };
static const int ks[] = {0, 4, 8, 16};
enum { N_KS = sizeof ks / sizeof ks[0] };

/* Bytes [0, n) of w (n a multiple of 256), K products a line, prefetching as `kind` says; returns a sum so that
   nothing is dead. */
#define STREAM_FN(NAME, K)                                                                                          \
    TARGET static long long NAME(const char *w, size_t n, enum pf_kind kind, size_t dist) {                         \
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;           \
        __m512i x = _mm512_set1_epi8(3);                                                                             \
        for (size_t i = 0; i < n; i += 256) {                                                                        \
            if (kind == PF_T0)                                                                                       \
                for (int q = 0; q < 4; q++) _mm_prefetch(w + i + dist + 64 * q, _MM_HINT_T0);                      \
            else if (kind == PF_NTA)                                                                                 \
                for (int q = 0; q < 4; q++) _mm_prefetch(w + i + dist + 64 * q, _MM_HINT_NTA);                     \
            else if (kind == PF_NEAR_FAR)                                                                            \
                for (int q = 0; q < 4; q++) {                                                                        \
                    _mm_prefetch(w + i + 4096 + 64 * q, _MM_HINT_T0);                                               \
                    _mm_prefetch(w + i + dist + 64 * q, _MM_HINT_T1);                                               \
                }                                                                                                    \
            const __m512i v0 = _mm512_load_si512(w + i), v1 = _mm512_load_si512(w + i + 64);                        \
            const __m512i v2 = _mm512_load_si512(w + i + 128), v3 = _mm512_load_si512(w + i + 192);                 \
            if (K == 0) {                                                                                            \
                a0 = _mm512_add_epi32(a0, v0), a1 = _mm512_add_epi32(a1, v1);                                        \
                a2 = _mm512_add_epi32(a2, v2), a3 = _mm512_add_epi32(a3, v3);                                        \
            }                                                                                                        \
            for (int k = 0; k < K; k += 2) {                                                                         \
                __asm__("" : "+v"(x)); /* a fresh operand each pass: the products are not folded */                \
                a0 = _mm512_dpbusd_epi32(a0, v0, x), a1 = _mm512_dpbusd_epi32(a1, v1, x);                            \
                a2 = _mm512_dpbusd_epi32(a2, v2, x), a3 = _mm512_dpbusd_epi32(a3, v3, x);                            \
                a4 = _mm512_dpbusd_epi32(a4, v0, x), a5 = _mm512_dpbusd_epi32(a5, v1, x);                            \
                a6 = _mm512_dpbusd_epi32(a6, v2, x), a7 = _mm512_dpbusd_epi32(a7, v3, x);                            \
            }                                                                                                        \
        }                                                                                                            \
        const __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),     \
                                           _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));    \
        return _mm512_reduce_add_epi32(s);                                                                           \
    }
STREAM_FN(stream_k0, 0)
STREAM_FN(stream_k4, 4)
STREAM_FN(stream_k8, 8)
STREAM_FN(stream_k16, 16)
typedef long long (*stream_fn)(const char *, size_t, enum pf_kind, size_t);
static const stream_fn fns[N_KS] = {stream_k0, stream_k4, stream_k8, stream_k16};

/* The threads run the same pass on their shares between two barriers; thread 0 times it. */
typedef struct shared {
    pthread_barrier_t bar;
    char *buf;
    size_t bytes; /* the whole buffer: each thread reads bytes / threads (a multiple of 256) */
    int threads, rounds;
} shared;

typedef struct worker {
    shared *s;
    int id;
    volatile long long sink; /* the passes' sums, each thread its own: nothing they compute is dead */
} worker;

static double pass(worker *w, stream_fn fn, const variant *v) {
    shared *s = w->s;
    const size_t share = s->bytes / (size_t)s->threads;
    pthread_barrier_wait(&s->bar);
    const double t0 = now();
    w->sink += fn(s->buf + (size_t)w->id * share, share, v->kind, v->dist);
    pthread_barrier_wait(&s->bar);
    return now() - t0;
}

static void *run(void *arg) {
    worker *w = arg;
    shared *s = w->s;
    const size_t share = s->bytes / (size_t)s->threads;
    memset(s->buf + (size_t)w->id * share, 1, share); /* each thread's pages first touched by it */
    for (int r = 0; r < s->rounds; r++) {
        if (w->id == 0) printf("\nround %d\n\n| K | in L2, 1 thread |", r + 1);
        if (w->id == 0) {
            for (int v = 0; v < N_VARIANTS; v++) printf(" %s |", variants[v].name);
            printf("\n| ---: | ---: |");
            for (int v = 0; v < N_VARIANTS; v++) printf(" ---: |");
            printf("\n");
        }
        for (int k = 0; k < N_KS; k++) {
            if (w->id == 0) { /* the arithmetic's own rate: 256 KiB again and again */
                double best = 1e30;
                for (int i = 0; i < 400; i++) {
                    const double t0 = now();
                    w->sink += fns[k](s->buf, 256 << 10, PF_NONE, 0);
                    const double t = now() - t0;
                    if (t < best) best = t;
                }
                printf("| %d | %.1f |", ks[k], (double)(256 << 10) / best / 1e9);
            }
            for (int v = 0; v < N_VARIANTS; v++) {
                double best = 1e30;
                for (int i = 0; i < 3; i++) {
                    const double t = pass(w, fns[k], &variants[v]);
                    if (t < best) best = t;
                }
                if (w->id == 0) printf(" %.1f |", (double)s->bytes / best / 1e9);
            }
            if (w->id == 0) printf("\n");
        }
        if (w->id == 0) fflush(stdout);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 2, rounds = 1;
    size_t mib = 256;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) mib = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_stream [-t THREADS] [-b BUFFER_MIB] [-r ROUNDS]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 256 || mib < 1 || rounds < 1) {
        fprintf(stderr, "bench_stream: -t must be 1-256, -b and -r >= 1\n");
        return 2;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vnni")) {
        fprintf(stderr, "bench_stream: this CPU has no AVX-512 VNNI\n");
        return 1;
    }
    shared s = {.bytes = (mib << 20) / (256 * (size_t)threads) * 256 * (size_t)threads, .threads = threads,
                .rounds = rounds};
    /* 32 KiB past the end: the prefetches ahead of the last lines stay inside the allocation */
    const size_t alloc = (s.bytes + (32 << 10) + (2 << 20) - 1) / (2 << 20) * (2 << 20);
    s.buf = aligned_alloc(2 << 20, alloc);
    if (!s.buf) {
        fprintf(stderr, "bench_stream: no memory for %zu MiB\n", mib);
        return 1;
    }
    (void)madvise(s.buf, alloc, MADV_HUGEPAGE); /* as the packed weights ask (tkv_model_params.huge_pages) */
    memset(s.buf + s.bytes, 0, alloc - s.bytes);
    printf("bench_stream: %d thread(s), %zu MiB, GB/s; from memory: best of 3 passes\n", threads, s.bytes >> 20);
    pthread_barrier_init(&s.bar, NULL, (unsigned)threads);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    worker *ws = calloc((size_t)threads, sizeof *ws);
    if (!th || !ws) return 1;
    for (int i = 0; i < threads; i++) {
        ws[i] = (worker){.s = &s, .id = i};
        pthread_create(&th[i], NULL, run, &ws[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&s.bar);
    free(th), free(ws), free(s.buf);
    return 0;
}

#else
int main(void) {
    fprintf(stderr, "bench_stream: x86-64 with gcc or clang only\n");
    return 1;
}
#endif
