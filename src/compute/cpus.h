/*
 * cpus.h — how many threads to run by default: the CPUs this process may
 * actually use, not the CPUs the machine has.
 *
 *   affinity  the CPUs in the process's affinity mask (taskset, cpusets)
 *   cores     the physical cores among them (SMT siblings count once: the
 *             kernels keep a core's vector units busy, and a second thread
 *             on the same core only competes for them)
 *   quota     the cgroup CPU limit (v2 cpu.max, v1 cpu.cfs_quota_us over
 *             cpu.cfs_period_us), the smallest along the cgroup's path, in
 *             CPUs; containers with `--cpus` have one
 *
 * threads = cores (or affinity, or online CPUs, whichever is known first),
 * at most floor(quota), at least 1. More threads than that share CPUs, and
 * a forward pass with a hundred barriers per token then waits on the
 * scheduler at each.
 */
#ifndef TKV_CPUS_H
#define TKV_CPUS_H

#include <stddef.h>

typedef struct tkv__cpus {
    int online;   /* CPUs online (sysconf), 0 if unknown */
    int affinity; /* CPUs in the affinity mask, 0 if unknown */
    int cores;    /* physical cores among them, 0 if unknown */
    double quota; /* cgroup limit in CPUs, 0 for none */
    int cgroup;   /* the cgroup version the quota came from (1, 2), 0 for none */
    int threads;  /* the choice, >= 1 */
} tkv__cpus;

/*
 * Find the facts and make the choice. `root` prefixes every file read
 * ("" for the real system; tests give a folder with proc/self/mountinfo,
 * proc/self/cgroup, sys/fs/cgroup/..., sys/devices/system/cpu/...).
 * cpu_ids lists the CPUs of the affinity mask (n_ids of them), or is NULL
 * for this process's own mask. Files that are missing or malformed leave
 * their fact unknown; never fails.
 */
void tkv__cpus_detect(const char *root, const int *cpu_ids, int n_ids, tkv__cpus *out);

/* "2 threads (affinity 2, cores 2, cgroup quota none)" into buf (truncated
   to cap); returns the length the whole text needs, as snprintf does. */
int tkv__cpus_describe(const tkv__cpus *c, char *buf, size_t cap);

#endif
