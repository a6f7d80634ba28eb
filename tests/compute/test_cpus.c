/*
 * test_cpus.c — the default thread count from fake system trees: cgroup v2
 * and v1 quotas (nested, namespaced, unlimited, malformed), SMT siblings
 * counted once, an affinity mask; and on the real system, never more than
 * the affinity mask allows.
 */
#define _GNU_SOURCE /* sched_getaffinity, mkdtemp */
#include "testutil.h"

#include "compute/cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

/* Write `text` at root/path, making the folders on the way. */
static void put(const char *path, const char *text) {
    char full[512];
    snprintf(full, sizeof full, "%s%s", root, path);
    for (char *s = full + strlen(root) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        mkdir(full, 0755);
        *s = '/';
    }
    FILE *f = fopen(full, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state) {
    (void)state;
    snprintf(root, sizeof root, "/tmp/tkv-cpus-XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* A fresh tree: n CPUs, `smt` hardware threads per core (siblings adjacent). */
static void fresh_tree(int n, int smt) {
    teardown(NULL);
    mkdir(root, 0755);
    for (int c = 0; c < n; c++) {
        char path[128], list[32];
        int first = c / smt * smt;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_cpus_list", c);
        snprintf(list, sizeof list, smt > 1 ? "%d-%d\n" : "%d\n", first, first + smt - 1);
        put(path, list);
    }
}

static const int ids4[] = {0, 1, 2, 3};

static const char v2_mount[] = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

static void test_v2_quota_caps_cores(void **state) {
    (void)state;
    fresh_tree(4, 2); /* 4 CPUs, 2 cores */
    put("/proc/self/mountinfo", v2_mount);
    put("/proc/self/cgroup", "0::/\n");
    put("/sys/fs/cgroup/cpu.max", "150000 100000\n");
    tkv__cpus c;
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.affinity, 4);
    assert_int_equal(c.cores, 2);
    assert_true(c.quota > 1.49 && c.quota < 1.51);
    assert_int_equal(c.cgroup, 2);
    assert_int_equal(c.threads, 1); /* floor(1.5) */
    char why[128];
    int n = tkv__cpus_describe(&c, why, sizeof why);
    assert_int_equal(n, (int)strlen(why));
    assert_string_equal(why, "1 thread (affinity 4, cores 2, cgroup quota 1.50 CPUs (cgroup v2))");
}

static void test_v2_nested_smallest_wins(void **state) {
    (void)state;
    fresh_tree(8, 1);
    put("/proc/self/mountinfo", v2_mount);
    put("/proc/self/cgroup", "0::/a/b\n");
    put("/sys/fs/cgroup/cpu.max", "max 100000\n");
    put("/sys/fs/cgroup/a/cpu.max", "300000 100000\n");
    put("/sys/fs/cgroup/a/b/cpu.max", "max 100000\n");
    tkv__cpus c;
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.cores, 4);
    assert_true(c.quota > 2.99 && c.quota < 3.01);
    assert_int_equal(c.threads, 3);
    /* a tighter limit below it */
    put("/sys/fs/cgroup/a/b/cpu.max", "200000 100000\n");
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.threads, 2);
}

static void test_v2_unlimited_and_namespaced(void **state) {
    (void)state;
    fresh_tree(4, 1);
    /* the mount shows the hierarchy from /docker/x on: the process's
       cgroup /docker/x is the mount point itself */
    put("/proc/self/mountinfo", "30 23 0:26 /docker/x /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put("/proc/self/cgroup", "0::/docker/x\n");
    put("/sys/fs/cgroup/cpu.max", "max 100000\n");
    tkv__cpus c;
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.quota, 0);
    assert_int_equal(c.threads, 4);
    put("/sys/fs/cgroup/cpu.max", "250000 100000\n");
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.threads, 2);
}

static void test_v1_cfs_quota(void **state) {
    (void)state;
    fresh_tree(4, 1);
    put("/proc/self/mountinfo",
        "25 24 0:22 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "26 24 0:23 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n");
    put("/proc/self/cgroup", "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n");
    put("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    tkv__cpus c;
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.cgroup, 1);
    assert_true(c.quota > 1.99 && c.quota < 2.01);
    assert_int_equal(c.threads, 2);
    /* -1: no limit */
    put("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.cgroup, 0);
    assert_int_equal(c.threads, 4);
}

static void test_affinity_and_missing_facts(void **state) {
    (void)state;
    fresh_tree(8, 2);
    /* no cgroup files at all; an affinity of 3 CPUs on 2 cores (0-1, 2-3) */
    static const int ids[] = {1, 2, 3};
    tkv__cpus c;
    tkv__cpus_detect(root, ids, 3, &c);
    assert_int_equal(c.affinity, 3);
    assert_int_equal(c.cores, 2);
    assert_int_equal(c.quota, 0);
    assert_int_equal(c.threads, 2);
    /* no topology either: the affinity count */
    fresh_tree(0, 1);
    tkv__cpus_detect(root, ids, 3, &c);
    assert_int_equal(c.cores, 0);
    assert_int_equal(c.threads, 3);
    char why[128];
    tkv__cpus_describe(&c, why, sizeof why);
    assert_string_equal(why, "3 threads (affinity 3, cores unknown, cgroup quota none)");
    /* truncation reports the whole length */
    char small[8];
    int n = tkv__cpus_describe(&c, small, sizeof small);
    assert_int_equal(n, (int)strlen(why));
    assert_string_equal(small, "3 threa");
}

static void test_malformed_files(void **state) {
    (void)state;
    fresh_tree(4, 1);
    put("/sys/devices/system/cpu/cpu2/topology/core_cpus_list", "garbage\n");
    put("/proc/self/mountinfo", "nonsense without the separator\n30 23 0:26 / /sys/fs/cgroup rw - cgroup2\n");
    put("/proc/self/cgroup", "::::\n0::/\n");
    put("/sys/fs/cgroup/cpu.max", "-5 0\n");
    tkv__cpus c;
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.cores, 0); /* one CPU's core unknown: the count is */
    assert_int_equal(c.quota, 0);
    assert_int_equal(c.threads, 4);
    put("/proc/self/mountinfo", v2_mount);
    put("/sys/fs/cgroup/cpu.max", "0 100000\n");
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.quota, 0);
    put("/sys/fs/cgroup/cpu.max", "50000 100000\n"); /* half a CPU: still one thread */
    tkv__cpus_detect(root, ids4, 4, &c);
    assert_int_equal(c.threads, 1);
}

/* The real system: within the affinity mask, and what the public API says. */
static void test_real_system(void **state) {
    (void)state;
    cpu_set_t set;
    assert_int_equal(sched_getaffinity(0, sizeof set, &set), 0);
    int mask = CPU_COUNT(&set);
    char why[160];
    int t = tkv_default_threads(why, sizeof why);
    assert_true(t >= 1 && t <= mask);
    assert_non_null(strstr(why, "thread"));
    assert_int_equal(tkv_context_default_params().n_threads, t);
    /* one CPU in the mask: one thread */
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            CPU_SET(c, &one);
            break;
        }
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    assert_int_equal(tkv_default_threads(NULL, 0), 1);
    assert_int_equal(sched_setaffinity(0, sizeof set, &set), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v2_quota_caps_cores),
        cmocka_unit_test(test_v2_nested_smallest_wins),
        cmocka_unit_test(test_v2_unlimited_and_namespaced),
        cmocka_unit_test(test_v1_cfs_quota),
        cmocka_unit_test(test_affinity_and_missing_facts),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_real_system),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
