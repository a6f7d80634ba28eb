/*
 * limits.c — tkv_limits_measure: the machine's read rate and int8 peak
 * (compute/probe.h) for the public API, with a pool of its own so that it
 * never runs on a context's threads.
 */
#include "tokenkv.h"

#include "base/error.h"
#include "compute/kernels.h"
#include "compute/probe.h"
#include "compute/threadpool.h"

#include <stddef.h>
#include <string.h>

/* int8 rounds per thread and repetition: enough for ~0.2 s, from a first run of 2^20 rounds (a slower
   build or a busy machine takes as long, not longer) */
static uint64_t int8_rounds(tkv__pool *pool, tkv__kernel_level level) {
    const uint64_t probe = 1u << 20;
    tkv__probe_int8_result r;
    tkv__probe_int8(pool, level, probe, 1, &r);
    const double s = r.macs_per_s > 0 ? (double)probe * (double)tkv__probe_int8_per_round(level) * r.threads / r.macs_per_s
                                      : 0.2;
    const double want = 0.2 / (s > 1e-6 ? s : 1e-6) * (double)probe;
    return want < (double)probe ? probe : want > 5e8 ? 500000000ull : (uint64_t)want;
}

tkv_status tkv_limits_measure(int n_threads, size_t buffer_bytes, tkv_limits *out, size_t out_size) {
    tkv__clear_error();
    if (!out) return tkv__fail(TKV_ERR_INVALID, "tkv_limits_measure: out is NULL");
    if (out_size < offsetof(tkv_limits, level) + sizeof out->level)
        return tkv__fail(TKV_ERR_INVALID, "tkv_limits_measure: out_size %zu is smaller than its first two fields",
                         out_size);
    if (n_threads < 0) return tkv__fail(TKV_ERR_INVALID, "tkv_limits_measure: n_threads %d is negative", n_threads);
    if (buffer_bytes == 0) buffer_bytes = (size_t)512 << 20;
    if (buffer_bytes < ((size_t)64 << 10))
        return tkv__fail(TKV_ERR_INVALID, "tkv_limits_measure: buffer_bytes %zu is under 64 KiB", buffer_bytes);
    if (n_threads == 0) n_threads = tkv_default_threads(NULL, 0);

    tkv__pool *pool = NULL;
    tkv_status st = tkv__pool_create(n_threads, &pool);
    if (st) return st;
    const tkv__kernel_level level = tkv__kernel_level_active();
    tkv__probe_read_result rd;
    st = tkv__probe_read(pool, level, buffer_bytes, 3, &rd);
    if (st) {
        tkv__pool_free(pool);
        return st;
    }
    tkv__probe_int8_result i8;
    tkv__probe_int8(pool, level, int8_rounds(pool, level), 3, &i8);
    tkv__pool_free(pool);

    const tkv_limits r = {
        .n_threads = rd.threads > i8.threads ? rd.threads : i8.threads,
        .level = tkv__kernel_level_name(level),
        .read_bytes = buffer_bytes & ~(size_t)63,
        .read_gbs = rd.bytes_per_s / 1e9,
        .int8_instr = tkv__probe_int8_instr(level),
        .int8_gmacs = i8.macs_per_s / 1e9,
    };
    memcpy(out, &r, out_size < sizeof r ? out_size : sizeof r);
    return TKV_OK;
}
