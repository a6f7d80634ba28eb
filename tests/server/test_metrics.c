/*
 * test_metrics.c — the Prometheus text that /metrics serves, read back by a
 * parser of the format written here (not the server's): every metric has
 * its HELP and TYPE lines before its samples, each sample line is a name
 * (with labels) and a number, and the numbers read back are what was put
 * in, counts above 2^53 included; the server's own exposition
 * (srv_metrics_render) passes the same reading, with its counters equal to
 * what the test recorded.
 */
#include "testutil.h"

#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the parser found: per metric, its type and its samples' values in order. */
#define MAX_METRICS 64
#define MAX_SAMPLES 32
typedef struct parsed {
    int n;
    struct {
        char name[96], type[16];
        int ns;
        char sample[MAX_SAMPLES][128]; /* the sample's name with its labels */
        char value[MAX_SAMPLES][48];   /* its number as written */
    } m[MAX_METRICS];
} parsed;

/* Reads the exposition; fails the test on any line out of the format. */
static void parse(const char *text, parsed *p) {
    memset(p, 0, sizeof *p);
    const char *s = text;
    while (*s) {
        const char *e = strchr(s, '\n');
        assert_non_null(e); /* every line ends in a newline */
        char line[512];
        assert_true((size_t)(e - s) < sizeof line);
        memcpy(line, s, (size_t)(e - s));
        line[e - s] = 0;
        s = e + 1;
        if (strncmp(line, "# HELP ", 7) == 0) {
            assert_true(p->n < MAX_METRICS);
            char *sp = strchr(line + 7, ' ');
            assert_non_null(sp); /* a help text follows the name */
            assert_true(sp[1] != 0);
            *sp = 0;
            strcpy(p->m[p->n].name, line + 7);
            p->n++;
        } else if (strncmp(line, "# TYPE ", 7) == 0) {
            assert_true(p->n > 0);
            char name[96], type[16];
            assert_int_equal(sscanf(line + 7, "%95s %15s", name, type), 2);
            assert_string_equal(name, p->m[p->n - 1].name); /* the TYPE of the metric just announced */
            assert_int_equal(p->m[p->n - 1].type[0], 0);
            strcpy(p->m[p->n - 1].type, type);
            assert_true(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 || strcmp(type, "histogram") == 0);
        } else {
            assert_true(p->n > 0 && p->m[p->n - 1].type[0]); /* a sample after its metric's TYPE */
            char *sp = strrchr(line, ' ');
            assert_non_null(sp);
            *sp = 0;
            const char *name = p->m[p->n - 1].name;
            assert_true(strncmp(line, name, strlen(name)) == 0); /* the metric's name, or name_bucket/_sum/_count */
            char *end;
            const char *num = sp + 1;
            if (strcmp(num, "+Inf") != 0) {
                (void)strtod(num, &end);
                assert_true(end != num && *end == 0); /* a whole number */
            }
            int k = p->m[p->n - 1].ns++;
            assert_true(k < MAX_SAMPLES);
            strcpy(p->m[p->n - 1].sample[k], line);
            strcpy(p->m[p->n - 1].value[k], num);
        }
    }
}

static int find(const parsed *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->m[i].name, name) == 0) return i;
    return -1;
}

static void test_helper_round_trip(void **state) {
    (void)state;
    const double reals[] = {0, 1, 0.1, 1e-9, 3.0e300, -2.5, 1.0 / 3.0};
    const unsigned long long counts[] = {0, 1, 9007199254740993ull /* 2^53 + 1: not a double */, 18446744073709551615ull};
    srv_prom b = {0};
    char name[64];
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        snprintf(name, sizeof name, "real_%zu", i);
        srv_prom_metric(&b, name, "gauge", "A real number.", reals[i]);
    }
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        snprintf(name, sizeof name, "count_%zu_total", i);
        srv_prom_count(&b, name, "counter", "A count.", counts[i]);
    }
    srv_prom_head(&b, "labelled_total", "counter", "Samples with labels.");
    for (int i = 0; i < 300; i++) srv_prom_put(&b, "labelled_total{k=\"%d\"} %d\n", i % 20, i); /* past the first 4 KiB */
    char *text = srv_prom_done(&b);
    assert_non_null(text);
    parsed *p = malloc(sizeof *p);
    assert_non_null(p);
    /* the 300 labelled lines do not fit the parser's sample slots: read the rest first */
    char *cut = strstr(text, "# HELP labelled_total");
    assert_non_null(cut);
    size_t lines = 0;
    for (const char *c = cut; *c; c++) lines += *c == '\n';
    assert_int_equal(lines, 2 + 300);
    *cut = 0;
    parse(text, p);
    assert_int_equal(p->n, 11);
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        snprintf(name, sizeof name, "real_%zu", i);
        int k = find(p, name);
        assert_true(k >= 0);
        assert_string_equal(p->m[k].type, "gauge");
        assert_int_equal(p->m[k].ns, 1);
        assert_true(strtod(p->m[k].value[0], NULL) == reals[i]); /* the double exactly */
    }
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        snprintf(name, sizeof name, "count_%zu_total", i);
        int k = find(p, name);
        assert_true(k >= 0);
        assert_string_equal(p->m[k].type, "counter");
        assert_true(strtoull(p->m[k].value[0], NULL, 10) == counts[i]); /* the integer exactly */
    }
    free(p);
    free(text);
}

/* The server's exposition: its format, and its counters as recorded. */
static void test_server_exposition(void **state) {
    (void)state;
    srv_metrics *m = srv_metrics_new();
    assert_non_null(m);
    srv_metrics_request(m, 200), srv_metrics_request(m, 200), srv_metrics_request(m, 404), srv_metrics_request(m, 299);
    srv_metrics_tokens(m, 10, 4, 7);
    srv_metrics_tokens(m, 5, 0, 3);
    srv_metrics_ttft(m, 0.02);
    srv_metrics_step(m, 0.003);
    tkv_stats st = {.cells_total = 512, .cells_used = 40};
    char *text = srv_metrics_render(m, &st, 3, 1);
    assert_non_null(text);
    parsed *p = malloc(sizeof *p);
    assert_non_null(p);
    parse(text, p);
    int k = find(p, "tokenkv_requests_total");
    assert_true(k >= 0);
    int seen = 0;
    for (int i = 0; i < p->m[k].ns; i++) {
        const char *s = p->m[k].sample[i];
        unsigned long long v = strtoull(p->m[k].value[i], NULL, 10);
        if (strcmp(s, "tokenkv_requests_total{status=\"200\"}") == 0) assert_int_equal(v, 2), seen++;
        else if (strcmp(s, "tokenkv_requests_total{status=\"404\"}") == 0) assert_int_equal(v, 1), seen++;
        else if (strcmp(s, "tokenkv_requests_total{status=\"other\"}") == 0) assert_int_equal(v, 1), seen++;
        else assert_int_equal(v, 0);
    }
    assert_int_equal(seen, 3);
    const struct {
        const char *name;
        double want;
    } want[] = {{"tokenkv_prompt_tokens_total", 15},   {"tokenkv_cached_prompt_tokens_total", 4},
                {"tokenkv_generated_tokens_total", 10}, {"tokenkv_queue_depth", 3},
                {"tokenkv_running_requests", 1},        {"tokenkv_cache_cells", 512},
                {"tokenkv_cache_cells_used", 40}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        k = find(p, want[i].name);
        assert_true(k >= 0);
        assert_true(strtod(p->m[k].value[0], NULL) == want[i].want);
    }
    /* a histogram: cumulative buckets ending in +Inf, then _sum and _count */
    k = find(p, "tokenkv_time_to_first_token_seconds");
    assert_true(k >= 0);
    assert_string_equal(p->m[k].type, "histogram");
    const int ns = p->m[k].ns;
    assert_true(ns >= 3);
    assert_string_equal(p->m[k].sample[ns - 3], "tokenkv_time_to_first_token_seconds_bucket{le=\"+Inf\"}");
    assert_string_equal(p->m[k].sample[ns - 1], "tokenkv_time_to_first_token_seconds_count");
    assert_true(strtod(p->m[k].value[ns - 2], NULL) == 0.02);
    double prev = 0;
    for (int i = 0; i < ns - 2; i++) {
        const double v = strtod(p->m[k].value[i], NULL);
        assert_true(v >= prev && v <= 1);
        prev = v;
    }
    assert_true(prev == 1);
    free(p);
    free(text);
    srv_metrics_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_helper_round_trip),
        cmocka_unit_test(test_server_exposition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
