/*
 * disk_tier.c — the disk tier (disk_tier.h): staging of evicted runs, the disk
 * thread (reads first, then writes), the in-memory index of the files.
 *
 * The directory gets the cache directory's rules: it must be ours and not
 * writable by others, one server holds it (a lock file), every name is
 * opened relative to the directory's descriptor, never through a link and
 * never blocking (a FIFO planted there is refused by fstat, not waited on),
 * a file is read only when it is a regular file of ours of the size the
 * index recorded (and no larger than any image this cache writes), and
 * writes go to an unguessable temporary name created exclusively, mode 0600.
 */
#define _GNU_SOURCE
#include "disk_tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

/* One evicted run in a staging buffer, then its image, padded to 8 bytes. */
typedef struct staged {
    uint64_t key, skey;
    uint32_t from, end;
    uint64_t size;
} staged;

/* A slot of the open-addressing table of files. */
typedef enum slot_state {
    SLOT_EMPTY, /* never used: a probe stops here */
    SLOT_LIVE,  /* a file on disk */
    SLOT_DEAD,  /* deleted: a probe goes on past it */
} slot_state;

/* A file on disk. */
typedef struct entry {
    uint64_t key, skey; /* of the prefixes 0..end-1 and 0..from-1 */
    uint32_t from, end;
    uint64_t size;
    uint64_t used; /* logical clock of the last write or fetch */
    slot_state state;
} entry;

struct srv_disk {
    char *dir;
    int dirfd, lockfd; /* every name is opened relative to dirfd; lockfd holds the directory's lock */
    uint64_t max_file; /* no image this cache writes is larger (srv_disk_limit_files); 0: not known yet */
    uint64_t max_bytes;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    /* under mu: the index, an open-addressing table by key */
    entry *tab;
    size_t cap, n_live, n_dead;
    uint64_t clock;
    srv_disk_stats st;
    srv_disk_fetch *reads, **reads_tail;
    /* staging: the inference thread fills buf[fill], the disk thread writes the other */
    uint8_t *buf[2];
    size_t used[2], stage_bytes;
    int fill;
    /* inference thread only */
    uint64_t *keys; /* (keys_cap) a prompt's prefix keys */
    size_t keys_cap;
};

/* ---- keys ------------------------------------------------------------------ */

static uint64_t key_start(uint64_t ns) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(ns >> (8 * i));
    return XXH3_64bits(b, sizeof b);
}

static uint64_t key_next(uint64_t h, tkv_token t) { return XXH3_64bits_withSeed(&t, sizeof t, h); }

/* ---- the index (under mu) ----------------------------------------------------- */

static entry *find(const srv_disk *d, uint64_t key) {
    if (!d->cap) return NULL;
    for (size_t i = key & (d->cap - 1);; i = (i + 1) & (d->cap - 1)) {
        entry *e = &d->tab[i];
        if (e->state == SLOT_EMPTY) return NULL;
        if (e->state == SLOT_LIVE && e->key == key) return e;
    }
}

static bool grow(srv_disk *d) {
    const size_t cap = d->cap ? 2 * d->cap : 1024;
    entry *t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < d->cap; i++) {
        if (d->tab[i].state != SLOT_LIVE) continue;
        size_t j = d->tab[i].key & (cap - 1);
        while (t[j].state != SLOT_EMPTY) j = (j + 1) & (cap - 1);
        t[j] = d->tab[i];
    }
    free(d->tab);
    d->tab = t;
    d->cap = cap;
    d->n_dead = 0;
    return true;
}

static void file_name(char *out, size_t cap, const entry *e) {
    snprintf(out, cap, "%016" PRIx64 "-%016" PRIx64 "-%08" PRIx32 "-%08" PRIx32 ".tkvc", e->key, e->skey, e->from,
             e->end);
}

static void unlink_entry(srv_disk *d, const entry *e) {
    char name[64];
    file_name(name, sizeof name, e);
    unlinkat(d->dirfd, name, 0);
}

/* A file that may be read: a regular file of this user that no other may write (the cache directory's rule). */
static bool trusted_file(const struct stat *sb) {
    return S_ISREG(sb->st_mode) && sb->st_uid == geteuid() && !(sb->st_mode & (S_IWGRP | S_IWOTH));
}

static void drop(srv_disk *d, entry *e) {
    d->st.files--;
    d->st.bytes -= e->size;
    e->state = SLOT_DEAD;
    d->n_live--;
    d->n_dead++;
}

/* Add (or replace) the file of key; false when out of memory. */
static bool insert(srv_disk *d, const entry *add) {
    const uint64_t key = add->key;
    entry *old = find(d, key);
    if (old) {
        if (old->from != add->from) unlink_entry(d, old); /* another run of the same prefix: the newer wins */
        drop(d, old);
    }
    if ((d->n_live + d->n_dead + 1) * 2 > d->cap && !grow(d)) return false;
    size_t i = key & (d->cap - 1);
    while (d->tab[i].state == SLOT_LIVE) i = (i + 1) & (d->cap - 1);
    if (d->tab[i].state == SLOT_DEAD) d->n_dead--;
    d->tab[i] = *add;
    d->tab[i].used = ++d->clock;
    d->tab[i].state = SLOT_LIVE;
    d->n_live++;
    d->st.files++;
    d->st.bytes += add->size;
    return true;
}

/* Remove least recently used files until the directory fits its limit. */
static void enforce_limit(srv_disk *d) {
    while (d->max_bytes && d->st.bytes > d->max_bytes && d->n_live) {
        entry *lru = NULL;
        for (size_t i = 0; i < d->cap; i++)
            if (d->tab[i].state == SLOT_LIVE && (!lru || d->tab[i].used < lru->used)) lru = &d->tab[i];
        unlink_entry(d, lru);
        drop(d, lru);
        d->st.removed++;
    }
}

/* ---- the inference thread ------------------------------------------------------ */

void srv_disk_cache_event(srv_disk *d, const tkv_context *ctx, const tkv_cache_event *ev) {
    if (ev->kind != TKV_CACHE_EVENT_REMOVED) return;
    uint64_t key = key_start(ev->ns), skey = key;
    for (uint32_t i = 0; i < ev->end; i++) {
        if (i == ev->from) skey = key;
        key = key_next(key, ev->tokens[i]);
    }
    size_t size = 0;
    tkv_cache_event_image(ctx, NULL, 0, &size); /* TKV_ERR_FULL: the size */
    const size_t need = sizeof(staged) + ((size + 7) & ~(size_t)7);
    pthread_mutex_lock(&d->mu);
    entry *e = find(d, key);
    if (e && e->from == ev->from && e->end == ev->end) { /* the same run is on disk: written once */
        e->used = ++d->clock;
        d->st.skipped++;
    } else if (d->used[d->fill] + need > d->stage_bytes) {
        d->st.dropped++; /* the disk is behind: a miss later, never a wait now */
    } else {
        uint8_t *p = d->buf[d->fill] + d->used[d->fill];
        const staged s = {key, skey, ev->from, ev->end, size};
        memcpy(p, &s, sizeof s);
        if (tkv_cache_event_image(ctx, p + sizeof s, size, &size) == TKV_OK) {
            d->used[d->fill] += need;
            pthread_cond_signal(&d->cv);
        } else {
            d->st.dropped++;
        }
    }
    pthread_mutex_unlock(&d->mu);
}

srv_disk_fetch *srv_disk_lookup(srv_disk *d, uint64_t ns, const tkv_token *tokens, size_t n, size_t cached) {
    if (n <= cached) return NULL;
    if (n + 1 > d->keys_cap) {
        uint64_t *k = realloc(d->keys, (n + 1) * sizeof *k);
        if (!k) return NULL;
        d->keys = k, d->keys_cap = n + 1;
    }
    d->keys[0] = key_start(ns);
    for (size_t i = 0; i < n; i++) d->keys[i + 1] = key_next(d->keys[i], tokens[i]);
    const entry *chain[SRV_DISK_MAX_CHAIN];
    size_t n_chain = 0, end = 0;
    pthread_mutex_lock(&d->mu);
    /* the longest prefix on disk whose files lead back to what RAM holds */
    for (size_t i = n; i > cached && !end; i--) {
        const entry *e = find(d, d->keys[i]);
        if (e && e->end != i) e = NULL; /* another prefix's key: a collision */
        n_chain = 0;
        while (e && n_chain < SRV_DISK_MAX_CHAIN) {
            chain[n_chain++] = e;
            if (e->from <= cached) {
                end = i;
                break;
            }
            const entry *p = find(d, d->keys[e->from]);
            e = p && p->end == e->from ? p : NULL;
        }
    }
    if (!end) end = cached, n_chain = 0;
    /* then one file that starts where that ends and goes on past the prompt (a reply evicted with it, say):
       the load keeps the part that agrees with the prompt, and where it agrees with all of it, the reply too
       (srv_disk_load); and the files that go on from its end, each the one most recently used of those whose
       prefix key is the last one's key (the reply's later pieces: their tokens are in the files, not the
       request). O(files) a file, once per request. */
    if (n_chain < SRV_DISK_MAX_CHAIN) {
        const entry *best = NULL;
        for (size_t i = 0; i < d->cap; i++) {
            const entry *e = &d->tab[i];
            if (e->state == SLOT_LIVE && e->from <= end && e->end > n && e->from < n && e->skey == d->keys[e->from] &&
                (!best || e->end < best->end))
                best = e;
        }
        if (best) {
            memmove(chain + 1, chain, n_chain * sizeof *chain); /* chain[] is backwards: it loads last */
            chain[0] = best;
            n_chain++;
            end = n;
        }
        for (const entry *last = best; last && n_chain < SRV_DISK_MAX_CHAIN;) {
            const entry *next = NULL;
            for (size_t i = 0; i < d->cap; i++) {
                const entry *e = &d->tab[i];
                if (e->state == SLOT_LIVE && e->from == last->end && e->skey == last->key &&
                    (!next || e->used > next->used))
                    next = e;
            }
            if (next) {
                memmove(chain + 1, chain, n_chain * sizeof *chain);
                chain[0] = next;
                n_chain++;
            }
            last = next;
        }
    }
    if (end <= cached) n_chain = 0;
    srv_disk_fetch *f = n_chain ? calloc(1, sizeof *f) : NULL;
    if (f) f->tokens = malloc(end * sizeof *tokens);
    if (f && f->tokens) {
        f->ns = ns;
        f->n = end;
        memcpy(f->tokens, tokens, end * sizeof *tokens);
        f->n_files = n_chain;
        for (size_t k = 0; k < n_chain; k++) { /* load order: the chain backwards */
            entry *e = (entry *)chain[n_chain - 1 - k];
            e->used = ++d->clock;
            file_name(f->file[k].name, sizeof f->file[k].name, e);
            f->file[k].size = e->size; /* what the index recorded: a file of another size is refused unread */
        }
        d->st.fetches++;
    } else if (f) {
        free(f);
        f = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    return f;
}

size_t srv_disk_load(srv_disk *d, tkv_context *ctx, const srv_disk_fetch *f) {
    size_t got = 0;
    uint64_t refused = 0;
    for (size_t k = 0; k < f->n_files; k++) {
        size_t len = 0;
        if (!f->file[k].data) break;
        /* the image must hold this namespace and these tokens: a file misnamed, damaged or of another
           model is refused here. A file that goes on past the whole prompt brings the rest too (an answer
           evicted with it): its cells' known tokens then answer a retry without decoding it again */
        if (tkv_cache_load_image_ex(ctx, f->file[k].data, f->file[k].size, f->ns, f->tokens, f->n,
                                    TKV_IMAGE_CONTINUATION, &len) != TKV_OK) {
            refused++;
            break;
        }
        got = len;
    }
    pthread_mutex_lock(&d->mu);
    d->st.loaded_tokens += got;
    d->st.refused += refused;
    pthread_mutex_unlock(&d->mu);
    return got;
}

void srv_disk_fetch_free(srv_disk_fetch *f) {
    if (!f) return;
    for (size_t k = 0; k < f->n_files; k++) free(f->file[k].data);
    free(f->tokens);
    free(f);
}

void srv_disk_read(srv_disk *d, srv_disk_fetch *f) {
    pthread_mutex_lock(&d->mu);
    f->next = NULL;
    *d->reads_tail = f;
    d->reads_tail = &f->next;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void srv_disk_stats_get(srv_disk *d, srv_disk_stats *out) {
    pthread_mutex_lock(&d->mu);
    *out = d->st;
    pthread_mutex_unlock(&d->mu);
}

/* ---- the disk thread ---------------------------------------------------------- */

/* The file name of the directory, when it is a trusted regular file of exactly `expect` bytes (no larger than
   max_file): never through a link, never waiting (O_NONBLOCK: a FIFO opens at once and fails fstat's check),
   and nothing allocated before the size is known to be the one promised. */
static uint8_t *read_whole(const srv_disk *d, const char *name, uint64_t expect, size_t *size) {
    int fd = openat(d->dirfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sb;
    uint8_t *p = NULL;
    if (fstat(fd, &sb) == 0 && trusted_file(&sb) && sb.st_size > 0 && (uint64_t)sb.st_size == expect &&
        (!d->max_file || expect <= d->max_file) && (p = malloc((size_t)sb.st_size))) {
        size_t got = 0;
        while (got < (size_t)sb.st_size) {
            ssize_t r = read(fd, p + got, (size_t)sb.st_size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got != (size_t)sb.st_size) free(p), p = NULL;
        else *size = got;
    }
    close(fd);
    return p;
}

static void do_read(srv_disk *d, srv_disk_fetch *f) {
    uint64_t refused = 0;
    for (size_t k = 0; k < f->n_files; k++) {
        const uint64_t expect = f->file[k].size;
        f->file[k].size = 0;
        f->file[k].data = read_whole(d, f->file[k].name, expect, &f->file[k].size);
        if (!f->file[k].data) { /* removed meanwhile, or replaced by something else: the chain ends here */
            struct stat sb;
            refused += fstatat(d->dirfd, f->file[k].name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
            break;
        }
    }
    if (refused) {
        pthread_mutex_lock(&d->mu);
        d->st.refused += refused;
        pthread_mutex_unlock(&d->mu);
    }
    f->ready(f);
}

/* 64 bits no other process can guess: a temporary name is no target to plant anything at. */
static unsigned long long unguessable(void) {
    unsigned long long r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        const unsigned long long mix[3] = {(unsigned long long)ts.tv_nsec, (unsigned long long)ts.tv_sec,
                                           (unsigned long long)(uintptr_t)&r};
        r = XXH3_64bits(mix, sizeof mix);
    }
    return r;
}

/* Write one staged run (a temporary name, then rename: a reader never sees half a file). */
static void do_write(srv_disk *d, const staged *s, const uint8_t *image) {
    char name[64], tmp[128];
    const entry add = {.key = s->key, .skey = s->skey, .from = s->from, .end = s->end, .size = s->size};
    file_name(name, sizeof name, &add);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%016llx", name, (long)getpid(), unguessable());
    int fd = openat(d->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    bool ok = fd >= 0;
    for (size_t off = 0; ok && off < s->size;) {
        ssize_t w = write(fd, image + off, s->size - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) ok = false;
        else off += (size_t)w;
    }
    /* no fsync: a file lost in a crash is a miss, and a torn one fails its checksums on load */
    if (fd >= 0 && close(fd) != 0) ok = false;
    if (ok && renameat(d->dirfd, tmp, d->dirfd, name) != 0) ok = false;
    if (!ok) unlinkat(d->dirfd, tmp, 0);
    pthread_mutex_lock(&d->mu);
    if (ok && insert(d, &add)) {
        d->st.written++;
        enforce_limit(d);
    } else {
        if (ok) unlinkat(d->dirfd, name, 0);
        d->st.dropped++;
    }
    pthread_mutex_unlock(&d->mu);
}

static void *run(void *arg) {
    srv_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->stop && !d->reads && !d->used[d->fill]) pthread_cond_wait(&d->cv, &d->mu);
        if (d->reads) { /* a request waits on a read: before any write */
            srv_disk_fetch *f = d->reads;
            d->reads = f->next;
            if (!d->reads) d->reads_tail = &d->reads;
            pthread_mutex_unlock(&d->mu);
            do_read(d, f);
            pthread_mutex_lock(&d->mu);
            continue;
        }
        if (!d->used[d->fill]) break; /* stopping, everything written */
        const int mine = d->fill;
        d->fill = 1 - mine;
        const size_t used = d->used[mine];
        pthread_mutex_unlock(&d->mu);
        for (size_t off = 0; off < used;) {
            staged s;
            memcpy(&s, d->buf[mine] + off, sizeof s);
            do_write(d, &s, d->buf[mine] + off + sizeof s);
            off += sizeof s + ((s.size + 7) & ~(size_t)7);
        }
        pthread_mutex_lock(&d->mu);
        d->used[mine] = 0;
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* NAME.tkvc.tmp.PID.RANDOM of a process that no longer runs (a write cut short), or NAME.tkvc.tmp of an older
   tokenkv: removed at start. A live writer's files are left alone (the lock keeps other servers out, but a
   process of this user may still be writing). */
static bool orphan_tmp(const char *name) {
    const char *t = strstr(name, ".tkvc.tmp");
    if (!t) return false;
    if (!t[9]) return true;
    if (t[9] != '.') return false;
    char *end;
    const long pid = strtol(t + 10, &end, 10);
    if (*end != '.' || pid <= 0 || pid == (long)getpid()) return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* The files already in dir (KEY-FROM-END.tkvc), least recently modified first in the LRU order. Only trusted
   regular files are indexed (the others are counted as refused and left alone). */
static bool index_dir(srv_disk *d) {
    const int fd = dup(d->dirfd);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0) close(fd);
        return false;
    }
    rewinddir(dir);
    for (struct dirent *de; (de = readdir(dir));) {
        entry e = {0};
        int len = 0;
        if (sscanf(de->d_name, "%16" SCNx64 "-%16" SCNx64 "-%8" SCNx32 "-%8" SCNx32 ".tkvc%n", &e.key, &e.skey, &e.from,
                   &e.end, &len) != 4 ||
            len != 56 || de->d_name[len] || e.from >= e.end) {
            if (orphan_tmp(de->d_name)) unlinkat(d->dirfd, de->d_name, 0);
            continue;
        }
        struct stat sb;
        if (fstatat(d->dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!trusted_file(&sb) || sb.st_size <= 0) {
            d->st.refused++;
            continue;
        }
        e.size = (uint64_t)sb.st_size;
        if (!insert(d, &e)) break;
        find(d, e.key)->used = (uint64_t)sb.st_mtime; /* seconds: older files go first */
    }
    closedir(dir);
    /* the clock continues past the files' times */
    for (size_t i = 0; i < d->cap; i++)
        if (d->tab[i].state == SLOT_LIVE && d->tab[i].used > d->clock) d->clock = d->tab[i].used;
    return true; /* the limit is enforced once files too large to be ours are out (srv_disk_limit_files) */
}

/* The directory's descriptor, created 0700 when missing; -1 with a message when it is not a directory of this
   user that only this user may write (the cache directory's rule: someone else's directory could be made to
   hold anything). */
static int open_dir(const char *dir) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "tokenkv serve: --cache-disk %s: cannot create: %s\n", dir, strerror(errno));
        return -1;
    }
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        fprintf(stderr, "tokenkv serve: --cache-disk %s: cannot open: %s\n", dir, strerror(errno));
    } else if (sb.st_uid != geteuid()) {
        fprintf(stderr, "tokenkv serve: --cache-disk %s is owned by uid %u, not by this user (uid %u): refused\n", dir,
                (unsigned)sb.st_uid, (unsigned)geteuid());
    } else if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
        fprintf(stderr, "tokenkv serve: --cache-disk %s is writable by other users (mode %04o): refused (chmod go-w)\n",
                dir, (unsigned)(sb.st_mode & 07777));
    } else {
        return fd;
    }
    if (fd >= 0) close(fd);
    return -1;
}

/* The lock file's descriptor, holding an exclusive lock on it: -1 with a message when another process holds
   the directory (two servers would remove each other's files). */
static int lock_dir(const char *dir, int dirfd) {
    const int fd = openat(dirfd, "lock", O_RDWR | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !trusted_file(&sb)) {
        fprintf(stderr, "tokenkv serve: --cache-disk %s: its lock file cannot be used: %s\n", dir,
                fd < 0 ? strerror(errno) : "not a regular file of this user that only this user may write");
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        fprintf(stderr, "tokenkv serve: --cache-disk %s: %s\n", dir,
                errno == EWOULDBLOCK ? "in use by another process (its lock file is held)" : strerror(errno));
    } else {
        return fd;
    }
    if (fd >= 0) close(fd);
    return -1;
}

srv_disk *srv_disk_start(const char *dir, uint64_t max_bytes) {
    const int dirfd = open_dir(dir);
    if (dirfd < 0) return NULL;
    const int lockfd = lock_dir(dir, dirfd);
    srv_disk *d = lockfd >= 0 ? calloc(1, sizeof *d) : NULL;
    if (!d) {
        close(dirfd);
        if (lockfd >= 0) close(lockfd);
        return NULL;
    }
    d->dirfd = dirfd;
    d->lockfd = lockfd;
    d->dir = strdup(dir);
    d->max_bytes = max_bytes;
    /* room for the evictions of a burst; beyond it runs are dropped, never waited for */
    d->stage_bytes = max_bytes && max_bytes < (64u << 20) ? (size_t)max_bytes : (size_t)64 << 20;
    d->buf[0] = malloc(d->stage_bytes);
    d->buf[1] = malloc(d->stage_bytes);
    d->reads_tail = &d->reads;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (!d->dir || !d->buf[0] || !d->buf[1] || !index_dir(d)) {
        fprintf(stderr, "tokenkv serve: --cache-disk %s: cannot open: %s\n", dir, strerror(errno ? errno : ENOMEM));
        goto fail;
    }
    if (pthread_create(&d->thread, NULL, run, d) != 0) {
        fprintf(stderr, "tokenkv serve: --cache-disk: cannot start the disk thread\n");
        goto fail;
    }
    fprintf(stderr, "tokenkv serve: cache disk: %s holds %" PRIu64 " files (%" PRIu64 " bytes)\n", dir, d->st.files,
            d->st.bytes);
    if (d->st.refused)
        fprintf(stderr, "tokenkv serve: cache disk: %" PRIu64 " files refused (not regular files of this user that "
                "only this user may write)\n", d->st.refused);
    return d;
fail:
    close(d->dirfd);
    close(d->lockfd);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d->buf[0]);
    free(d->buf[1]);
    free(d->tab);
    free(d->dir);
    free(d);
    return NULL;
}

void srv_disk_stop(srv_disk *d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    close(d->dirfd);
    close(d->lockfd); /* the lock goes with it */
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d->buf[0]);
    free(d->buf[1]);
    free(d->tab);
    free(d->keys);
    free(d->dir);
    free(d);
}

void srv_disk_limit_files(srv_disk *d, uint64_t max_file) {
    pthread_mutex_lock(&d->mu);
    d->max_file = max_file;
    uint64_t n = 0;
    for (size_t i = 0; i < d->cap; i++)
        if (d->tab[i].state == SLOT_LIVE && d->tab[i].size > max_file) drop(d, &d->tab[i]), n++;
    d->st.refused += n;
    enforce_limit(d);
    pthread_mutex_unlock(&d->mu);
    if (n)
        fprintf(stderr, "tokenkv serve: cache disk: %" PRIu64 " files refused (larger than any image this cache "
                "writes, %" PRIu64 " bytes)\n", n, max_file);
}
