/*
 * bench_limits.c — this machine's limits at every kernel level it has and
 * every thread count up to N (`bench_limits [-t N] [-b MIB]`): the rate at
 * which the threads read a buffer no cache holds (generation's bound) and
 * the int8 multiply-add rate of each level's product instruction
 * (prefill's bound). `tokenkv bench --limits` holds a model's figures to
 * the active level's; this table says what each level and thread count
 * gives. Run it on a quiet machine: other processes lower both.
 */
#include "compute/kernels.h"
#include "compute/probe.h"
#include "compute/threadpool.h"
#include "tokenkv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int max_threads = tkv_default_threads(NULL, 0);
    size_t mib = 512;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) max_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) mib = (size_t)strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_limits [-t THREADS] [-b BUFFER_MIB]\n");
            return 2;
        }
    }
    if (max_threads < 1 || mib < 1) {
        fprintf(stderr, "bench_limits: -t and -b must be >= 1\n");
        return 2;
    }
    printf("| level | threads | read GB/s (%zu MiB, best of 5) | int8 GMAC/s (best of 5) | instruction |\n", mib);
    printf("| --- | ---: | ---: | ---: | --- |\n");
    for (int l = 0; l <= (int)tkv__kernel_level_best(); l++) {
        for (int t = 1; t <= max_threads; t++) {
            tkv__pool *pool = NULL;
            if (tkv__pool_create(t, &pool) != TKV_OK) return 1;
            tkv__probe_read_result rd;
            if (tkv__probe_read(pool, (tkv__kernel_level)l, mib << 20, 5, &rd) != TKV_OK) {
                fprintf(stderr, "bench_limits: %s\n", tkv_last_error(NULL));
                tkv__pool_free(pool);
                return 1;
            }
            tkv__probe_int8_result i8;
            tkv__probe_int8(pool, (tkv__kernel_level)l, 20000000, 5, &i8);
            tkv__pool_free(pool);
            if (i8.macs != i8.expected) {
                fprintf(stderr, "bench_limits: the int8 loop counted %llu multiply-adds, not %llu\n",
                        (unsigned long long)i8.macs, (unsigned long long)i8.expected);
                return 1;
            }
            printf("| %s | %d | %.2f | %.1f | %s |\n", tkv__kernel_level_name((tkv__kernel_level)l), rd.threads,
                   rd.bytes_per_s / 1e9, i8.macs_per_s / 1e9, tkv__probe_int8_instr((tkv__kernel_level)l));
            fflush(stdout);
        }
    }
    return 0;
}
