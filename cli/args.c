/*
 * args.c — reading the numbers of command-line options, and the clock the
 * subcommands time with: one reader for every subcommand, so that each
 * refuses a bad value with the same message (the option, the value, the
 * range).
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

bool cli_uint(const char *sub, const char *opt, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end = NULL;
    unsigned long long x = 0;
    if (v && *v >= '0' && *v <= '9') { /* strtoull would take a sign or spaces */
        errno = 0;
        x = strtoull(v, &end, 10);
    }
    if (!end || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "tokenkv %s: %s: '%s' is not an integer in [%llu, %llu]\n", sub, opt, v ? v : "",
                (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    *out = x;
    return true;
}

bool cli_num(const char *sub, const char *opt, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    const double d = v ? strtod(v, &end) : 0;
    if (!v || end == v || *end || !(d >= lo && d <= hi)) { /* NaN fails the range */
        fprintf(stderr, "tokenkv %s: %s: '%s' is not a number in [%g, %g]\n", sub, opt, v ? v : "", lo, hi);
        return false;
    }
    *out = d;
    return true;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
