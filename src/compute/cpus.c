/*
 * cpus.c — see cpus.h.
 *
 * Finding the cgroup's quota: /proc/self/mountinfo says where the cgroup2
 * hierarchy (and the v1 hierarchy with the "cpu" controller) is mounted and
 * which part of the hierarchy the mount shows; /proc/self/cgroup says which
 * cgroup the process is in. The folder is the mount point plus the path
 * below the mount's root; every folder from there up to the mount point may
 * limit the CPU, and the smallest limit wins.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "cpus.h"

#include "base/alloc.h"

#include <math.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CPUS 4096 /* CPU ids at or above it leave the core count unknown */
#define PATH_CAP 4096

/* Read a small text file (root-prefixed) into buf; false if it cannot be read. */
static bool read_text(const char *root, const char *path, char *buf, size_t cap) {
    char full[PATH_CAP];
    if ((size_t)snprintf(full, sizeof full, "%s%s", root, path) >= sizeof full) return false;
    FILE *f = fopen(full, "re");
    if (!f) return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

/* The first CPU id of a list such as "0,4" or "2-3"; -1 if there is none. */
static int first_id(const char *list) {
    char *end;
    long v = strtol(list, &end, 10);
    return end == list || v < 0 || v >= MAX_CPUS ? -1 : (int)v;
}

/* Physical cores among ids[]: distinct first siblings; 0 if any is unknown. */
static int count_cores(const char *root, const int *ids, int n) {
    static const char *const lists[] = {"core_cpus_list", "thread_siblings_list"};
    unsigned char seen[MAX_CPUS / 8] = {0};
    int cores = 0;
    for (int i = 0; i < n; i++) {
        char path[128], text[256];
        int key = -1;
        for (int l = 0; l < 2 && key < 0; l++) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", ids[i], lists[l]);
            if (read_text(root, path, text, sizeof text)) key = first_id(text);
        }
        if (key < 0) return 0;
        if (!(seen[key / 8] & (1u << (key % 8)))) cores++;
        seen[key / 8] |= (unsigned char)(1u << (key % 8));
    }
    return cores;
}

/* One limit in CPUs from the folder's files, or 0 for none. */
static double folder_quota(const char *root, const char *dir, int version) {
    char path[PATH_CAP], text[128];
    if (version == 2) {
        if ((size_t)snprintf(path, sizeof path, "%s/cpu.max", dir) >= sizeof path) return 0;
        if (!read_text(root, path, text, sizeof text)) return 0;
        double q, p;
        if (sscanf(text, "%lf %lf", &q, &p) != 2 || q <= 0 || p <= 0) return 0; /* "max 100000": none */
        return q / p;
    }
    double q, p;
    if ((size_t)snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir) >= sizeof path) return 0;
    if (!read_text(root, path, text, sizeof text) || sscanf(text, "%lf", &q) != 1 || q <= 0) return 0; /* -1: none */
    if ((size_t)snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir) >= sizeof path) return 0;
    if (!read_text(root, path, text, sizeof text) || sscanf(text, "%lf", &p) != 1 || p <= 0) return 0;
    return q / p;
}

/* Is `item` one of the comma-separated words of `list`? */
static bool has_word(const char *list, const char *item) {
    size_t n = strlen(item);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && !memcmp(s, item, n)) return true;
        if (!e) break;
        s = e + 1;
    }
    return false;
}

/*
 * The mount of a hierarchy: version 2 (cgroup2) or 1 (cgroup with "cpu"
 * among its super options). Writes its root in the hierarchy and its mount
 * point; false if none.
 */
static bool find_mount(const char *root, int version, char *mroot, char *mpoint) {
    const size_t cap = 1 << 18;
    char *text = tkv__malloc(cap), *save = NULL;
    bool found = false;
    if (!text || !read_text(root, "/proc/self/mountinfo", text, cap)) {
        tkv__free(text);
        return false;
    }
    for (char *line = strtok_r(text, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save)) {
        /* id parent major:minor root mount-point options [optional...] - type source super-options */
        char r[PATH_CAP], m[PATH_CAP];
        if (sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2) continue;
        const char *dash = strstr(line, " - ");
        if (!dash) continue;
        char type[32], super[512];
        if (sscanf(dash + 3, "%31s %*s %511s", type, super) != 2) continue;
        bool match = version == 2 ? !strcmp(type, "cgroup2") : !strcmp(type, "cgroup") && has_word(super, "cpu");
        if (match) {
            strcpy(mroot, r);
            strcpy(mpoint, m);
            found = true;
        }
    }
    tkv__free(text);
    return found;
}

/* The process's cgroup path in a hierarchy (from /proc/self/cgroup); false if none. */
static bool find_cgroup(const char *root, int version, char *path) {
    char text[8192], *save = NULL;
    if (!read_text(root, "/proc/self/cgroup", text, sizeof text)) return false;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        /* hierarchy-id:controllers:path; cgroup2 is "0::path" */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *controllers = c1 + 1;
        bool match = version == 2 ? !strncmp(line, "0:", 2) && !*controllers : has_word(controllers, "cpu");
        if (match && strlen(c2 + 1) < PATH_CAP) {
            strcpy(path, c2 + 1);
            return true;
        }
    }
    return false;
}

/* The smallest quota along the cgroup's path in one hierarchy, or 0. */
static double hierarchy_quota(const char *root, int version) {
    char mroot[PATH_CAP], mpoint[PATH_CAP], cg[PATH_CAP], dir[2 * PATH_CAP];
    if (!find_mount(root, version, mroot, mpoint) || !find_cgroup(root, version, cg)) return 0;
    /* the part of the cgroup's path below the mount's root (all of it when
       the mount shows the whole hierarchy; none when a namespace hides it) */
    size_t rl = strcmp(mroot, "/") ? strlen(mroot) : 0;
    const char *below = !strncmp(cg, mroot, rl) && (cg[rl] == '/' || !cg[rl]) ? cg + rl : "";
    snprintf(dir, sizeof dir, "%s%s", mpoint, below);
    size_t floor_len = strlen(mpoint);
    double best = 0;
    for (;;) {
        double q = folder_quota(root, dir, version);
        if (q > 0 && (best == 0 || q < best)) best = q;
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= floor_len || !slash || (size_t)(slash - dir) < floor_len) break;
        *slash = '\0'; /* the parent folder */
    }
    return best;
}

void tkv__cpus_detect(const char *root, const int *cpu_ids, int n_ids, tkv__cpus *out) {
    memset(out, 0, sizeof *out);
    if (!root) root = "";
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    out->online = online > 0 ? (int)online : 0;

    int own[CPU_SETSIZE];
    if (!cpu_ids) {
        cpu_set_t set;
        n_ids = 0;
        if (sched_getaffinity(0, sizeof set, &set) == 0)
            for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &set)) own[n_ids++] = c;
        cpu_ids = own;
    }
    out->affinity = n_ids;
    if (n_ids > 0) out->cores = count_cores(root, cpu_ids, n_ids);

    double q2 = hierarchy_quota(root, 2), q1 = q2 > 0 ? 0 : hierarchy_quota(root, 1);
    out->quota = q2 > 0 ? q2 : q1;
    out->cgroup = q2 > 0 ? 2 : q1 > 0 ? 1 : 0;

    int t = out->cores ? out->cores : out->affinity ? out->affinity : out->online ? out->online : 1;
    if (out->quota > 0 && floor(out->quota) < t) t = (int)floor(out->quota);
    out->threads = t < 1 ? 1 : t;
}

int tkv__cpus_describe(const tkv__cpus *c, char *buf, size_t cap) {
    char quota[48] = "none";
    if (c->quota > 0) snprintf(quota, sizeof quota, "%.2f CPUs (cgroup v%d)", c->quota, c->cgroup);
    char aff[16] = "unknown", cores[16] = "unknown";
    if (c->affinity) snprintf(aff, sizeof aff, "%d", c->affinity);
    if (c->cores) snprintf(cores, sizeof cores, "%d", c->cores);
    return snprintf(buf, cap, "%d thread%s (affinity %s, cores %s, cgroup quota %s)", c->threads,
                    c->threads == 1 ? "" : "s", aff, cores, quota);
}
