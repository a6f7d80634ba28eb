/*
 * persist_save.c — saving the whole cache to a directory: tkv_cache_save and
 * the incremental saver (tkv_cache_saver_*), and the directory's manifest.
 *
 * A directory holds one file per prefix-index node, named HHHHHHHHHHHHHHHH.tkvc
 * after a hash of what it holds (namespace, the tokens of its whole path,
 * where its K/V start), and DIR/manifest: the names of the files of the
 * last complete save, most recently used subtree first (every parent before
 * its children). The order lives in the manifest rather than in the names
 * so that a change of LRU order renames and rewrites nothing: a node whose
 * file is on disk (same name, same size) is never written again.
 *
 * A save is a snapshot then a write. The snapshot (the context's thread)
 * plans the files and copies the images of those not on disk into the
 * saver, within a bound. The write (any thread) removes the files of
 * earlier saves that the plan drops (first, so that the directory never
 * holds more than max_bytes of files), writes the new ones (each to a
 * temporary name, fsync, rename), then the manifest the same way, then
 * fsyncs the directory. Whatever a crash interrupts, each file is whole,
 * and the manifest is the old one or the new one; a file the manifest
 * names but a crash removed is simply absent to the loader, and files it
 * does not name load after those it does, in the order of their headers'
 * ranks (those of one save are written in plan order).
 */
#include "persist.h"

#include "base/alloc.h"
#include "base/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#define NO_IMAGE UINT64_MAX
#define MANIFEST_MAGIC "tokenkv-manifest 1 "
#define MANIFEST_MAX_BYTES ((size_t)64 << 20)

/* One file of the plan. */
typedef struct pent {
    uint64_t hash, size;
    uint64_t off;     /* its image in buf; NO_IMAGE: on disk already */
    uint32_t node;    /* (during the snapshot) its node id */
    bool verified;    /* on disk and read back whole, or written, by this saver */
    bool present;     /* (during the write) on disk, or written */
    bool blocked;     /* (during the write) a directory we cannot remove holds its name: not written */
} pent;

/* A slot of the set of files on disk, by hash (open addressing). idx: 0 empty, else a plan index + 1 (while
   writing) or 1 (between saves). */
typedef struct kent {
    uint64_t hash, size;
    uint32_t idx;
    bool verified; /* not just found in the directory: written, or read back whole */
} kent;

struct tkv_cache_saver {
    char *dir;
    uint64_t max_bytes, max_copy;
    kent *known; /* (known_cap, a power of two, at most half full) */
    size_t known_cap, n_known;
    pent *plan;
    uint32_t n_plan, plan_cap;
    uint8_t *buf; /* the images of the snapshot */
    size_t buf_cap;
    tkv__pexpect expect; /* what the snapshot's context requires of a file */
    bool snapped;
    tkv_cache_save_info info;
};

/* ---- names ------------------------------------------------------------------ */

static bool is_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

bool tkv__persist_parse_name(const char *s, uint64_t *hash) {
    if (strlen(s) != 16 + strlen(TKV__CACHEFILE_EXT) || !is_hex(s, 16) || strcmp(s + 16, TKV__CACHEFILE_EXT) != 0)
        return false;
    *hash = strtoull(s, NULL, 16); /* 16 hex digits: no overflow */
    return true;
}

/* "RRRRRRRR-HHHHHHHHHHHHHHHH.tkvc": the names of saves before the manifest; stale once a save runs. */
static bool is_old_name(const char *s) {
    return strlen(s) == 8 + 1 + 16 + strlen(TKV__CACHEFILE_EXT) && is_hex(s, 8) && s[8] == '-' && is_hex(s + 9, 16) &&
           strcmp(s + 25, TKV__CACHEFILE_EXT) == 0;
}

char *tkv__persist_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = tkv__malloc(a + b + 2);
    if (p) memcpy(p, dir, a), p[a] = '/', memcpy(p + a + 1, name, b + 1);
    return p;
}

/* "dir/HASH.tkvc" in a tkv__malloc'd string. */
static char *file_path(const char *dir, uint64_t hash) {
    char name[40];
    snprintf(name, sizeof name, "%016llx%s", (unsigned long long)hash, TKV__CACHEFILE_EXT);
    return tkv__persist_join(dir, name);
}

/* NAME.tkvc.tmp.PID.RANDOM of a process that no longer runs: a save cut short (a crash, kill -9). Files of a
   live writer are left alone. */
static bool is_orphan_tmp(const char *name) {
    const char *t = strstr(name, TKV__CACHEFILE_EXT ".tmp.");
    if (!t) t = strstr(name, "manifest.tmp.");
    if (!t) return false;
    t = strstr(t, ".tmp.") + 5;
    char *end;
    long pid = strtol(t, &end, 10);
    if ((*end && *end != '.') || pid <= 0 || pid == (long)getpid()) return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

tkv_status tkv__persist_open_dir(const char *dir, bool create) {
    if (create && mkdir(dir, 0700) != 0 && errno != EEXIST)
        return tkv__fail(TKV_ERR_IO, "cache directory '%s': cannot create: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0) return tkv__fail(TKV_ERR_IO, "cache directory '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return tkv__fail(TKV_ERR_IO, "cache directory '%s': not a directory", dir);
    return tkv__cachefile_trusted(dir, &sb);
}

/* ---- the manifest ------------------------------------------------------------ */

/* "tokenkv-manifest 1 N\n", N lines "HASH\n", "checksum HASH\n" (XXH3-64 of all before it). */
static tkv_status write_manifest(const char *dir, const pent *plan, uint32_t n) {
    const size_t cap = 64 + 17 * (size_t)n + 32;
    char *text = tkv__malloc(cap);
    char *path = tkv__persist_join(dir, "manifest");
    tkv_status st = TKV_OK;
    if (!text || !path) {
        st = tkv__fail(TKV_ERR_NOMEM, "out of memory writing the manifest of '%s'", dir);
        goto done;
    }
    uint32_t count = 0;
    for (uint32_t k = 0; k < n; k++) count += plan[k].present;
    size_t len = (size_t)snprintf(text, cap, MANIFEST_MAGIC "%u\n", count);
    for (uint32_t k = 0; k < n; k++)
        if (plan[k].present) len += (size_t)snprintf(text + len, cap - len, "%016llx\n", (unsigned long long)plan[k].hash);
    len += (size_t)snprintf(text + len, cap - len, "checksum %016llx\n", (unsigned long long)XXH3_64bits(text, len));
    st = tkv__cachefile_write_bytes(path, text, len);
done:
    tkv__free(text);
    tkv__free(path);
    return st;
}

tkv_status tkv__persist_read_manifest(const char *dir, uint64_t **hashes, uint32_t *n) {
    *hashes = NULL;
    *n = 0;
    char *path = tkv__persist_join(dir, "manifest");
    if (!path) return tkv__fail(TKV_ERR_NOMEM, "out of memory reading the manifest of '%s'", dir);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    tkv__free(path);
    if (fd < 0) return TKV_OK; /* none (or not a file we may read): the headers' ranks order the files */
    struct stat sb;
    char *text = NULL;
    uint64_t *v = NULL;
    tkv_status st = TKV_OK;
    size_t len = 0;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || tkv__cachefile_trusted(dir, &sb) != TKV_OK ||
        sb.st_size <= 0 || (size_t)sb.st_size > MANIFEST_MAX_BYTES)
        goto done;
    len = (size_t)sb.st_size;
    if (!(text = tkv__malloc(len + 1))) {
        st = tkv__fail(TKV_ERR_NOMEM, "out of memory reading the manifest of '%s'", dir);
        goto done;
    }
    for (size_t got = 0; got < len;) {
        ssize_t r = read(fd, text + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) goto done;
        got += (size_t)r;
    }
    text[len] = '\0';
    /* the whole of it, or nothing: a torn or edited manifest orders nothing */
    const size_t head = strlen(MANIFEST_MAGIC);
    if (len < head + 2 + 26 || memcmp(text, MANIFEST_MAGIC, head) != 0) goto done;
    const size_t body = len - 26; /* "checksum " + 16 + "\n" */
    if (memcmp(text + body, "checksum ", 9) != 0 || text[len - 1] != '\n' || !is_hex(text + body + 9, 16) ||
        strtoull(text + body + 9, NULL, 16) != XXH3_64bits(text, body))
        goto done;
    const char *p = text + head;
    char *end;
    const unsigned long count = strtoul(p, &end, 10);
    if (*end != '\n' || count > len / 17) goto done;
    p = end + 1;
    if (!(v = tkv__malloc((count ? count : 1) * sizeof *v))) {
        st = tkv__fail(TKV_ERR_NOMEM, "out of memory reading the manifest of '%s'", dir);
        goto done;
    }
    uint32_t k = 0;
    while (p + 17 <= text + body && is_hex(p, 16) && p[16] == '\n' && k < count) v[k++] = strtoull(p, NULL, 16), p += 17;
    if (p != text + body || k != count) goto done;
    *hashes = v, *n = k;
    v = NULL;
done:
    close(fd);
    tkv__free(text);
    tkv__free(v);
    return st;
}

/* ---- the set of files on disk -------------------------------------------------- */

static kent *known_find(const tkv_cache_saver *s, uint64_t hash) {
    if (!s->known_cap) return NULL;
    for (size_t i = hash & (s->known_cap - 1);; i = (i + 1) & (s->known_cap - 1)) {
        kent *e = &s->known[i];
        if (!e->idx) return NULL;
        if (e->hash == hash) return e;
    }
}

/* Empty the set, with room for n. */
static bool known_reset(tkv_cache_saver *s, size_t n) {
    size_t cap = 64;
    while (cap < 2 * n + 2) cap *= 2;
    if (cap > s->known_cap) {
        kent *k = tkv__calloc(cap, sizeof *k);
        if (!k) return false;
        tkv__free(s->known);
        s->known = k, s->known_cap = cap;
    } else {
        memset(s->known, 0, s->known_cap * sizeof *s->known);
    }
    s->n_known = 0;
    return true;
}

/* Add (the set has room: known_reset was told how many). */
static void known_add(tkv_cache_saver *s, uint64_t hash, uint64_t size, uint32_t idx, bool verified) {
    size_t i = hash & (s->known_cap - 1);
    while (s->known[i].idx && s->known[i].hash != hash) i = (i + 1) & (s->known_cap - 1);
    if (!s->known[i].idx) s->n_known++;
    s->known[i] = (kent){hash, size, idx, verified};
}

/* ---- the saver --------------------------------------------------------------- */

tkv_status tkv_cache_saver_new(const char *dir, uint64_t max_bytes, uint64_t max_copy_bytes, tkv_cache_saver **out) {
    if (!dir || !out) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_saver_new: NULL argument");
    *out = NULL;
    tkv_status st = tkv__persist_open_dir(dir, true);
    if (st) return st;
    tkv_cache_saver *s = tkv__calloc(1, sizeof *s);
    if (!s || !(s->dir = tkv__malloc(strlen(dir) + 1))) {
        tkv__free(s);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory saving the cache");
    }
    strcpy(s->dir, dir);
    s->max_bytes = max_bytes;
    s->max_copy = max_copy_bytes;
    /* the files a save left: the first snapshot writes only what they lack */
    DIR *d = opendir(dir);
    if (!d) {
        st = tkv__fail(TKV_ERR_IO, "cache directory '%s': cannot open: %s", dir, strerror(errno));
        goto fail;
    }
    size_t n = 0;
    uint64_t hash;
    for (struct dirent *de; (de = readdir(d));) n += tkv__persist_parse_name(de->d_name, &hash);
    if (!known_reset(s, n)) {
        closedir(d);
        st = tkv__fail(TKV_ERR_NOMEM, "out of memory saving the cache");
        goto fail;
    }
    rewinddir(d);
    for (struct dirent *de; (de = readdir(d)) && s->n_known < n;) {
        struct stat sb;
        if (!tkv__persist_parse_name(de->d_name, &hash) || fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(sb.st_mode) || tkv__cachefile_trusted(de->d_name, &sb) != TKV_OK)
            continue; /* a link or a file others may write: written again (over it, never through it) */
        known_add(s, hash, (uint64_t)sb.st_size, 1, false);
    }
    closedir(d);
    *out = s;
    return TKV_OK;
fail:
    tkv_cache_saver_free(s);
    return st;
}

void tkv_cache_saver_free(tkv_cache_saver *s) {
    if (!s) return;
    tkv__free(s->dir);
    tkv__free(s->known);
    tkv__free(s->plan);
    tkv__free(s->buf);
    tkv__free(s);
}

typedef struct snode {
    uint32_t id, depth;
    uint64_t recency; /* the latest use in its subtree */
} snode;

typedef struct collect {
    snode *v;
    uint32_t n;
    uint32_t *idx; /* (node ids) index into v */
} collect;

static void collect_node(const tkv__pindex *ix, uint32_t id, void *user) {
    collect *c = user;
    const tkv__pnode *nd = tkv__pindex_node(ix, id);
    if (nd->parent == TKV__PNONE) return;
    c->idx[id] = c->n;
    c->v[c->n++] = (snode){id, nd->depth, nd->last_use};
}

/* Most recently used first; a parent (as recent as its subtree, shallower) before its children. */
static int by_recency(const void *a, const void *b) {
    const snode *x = a, *y = b;
    if (x->recency != y->recency) return x->recency > y->recency ? -1 : 1;
    if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static tkv__phdr node_header(const tkv__phdr *h0, const tkv__pnode *nd, uint32_t rank) {
    tkv__phdr h = *h0;
    h.ns = nd->ns;
    h.n_tokens = nd->depth + nd->n;
    h.kv_from = nd->depth;
    h.rank = rank;
    return h;
}

static tkv_status saver_snapshot(tkv_cache_saver *s, tkv_context *ctx) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_saver_snapshot: ctx is NULL");
    tkv_status st;
    if (!s) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_saver_snapshot: saver is NULL"));
    s->snapped = false;
    s->n_plan = 0;
    memset(&s->info, 0, sizeof s->info);
    tkv__phdr h0;
    if ((st = tkv__persist_header(ctx, &h0)) || (st = tkv__persist_expect(ctx, &s->expect)))
        return tkv__ctx_fail(ctx, st);
    const tkv__pindex *ix = tkv__kv_index(ctx->kv);
    tkv__pindex_stats ps;
    tkv__pindex_stats_get(ix, &ps);
    const uint32_t max_id = 2 * ctx->kv->rows.n_cells + 1; /* the index's node pool */
    const uint32_t n_nodes = ps.nodes ? (uint32_t)ps.nodes : 1;
    collect c = {tkv__malloc(n_nodes * sizeof *c.v), 0, tkv__calloc(max_id, sizeof *c.idx)};
    uint32_t *cells = tkv__malloc(ctx->kv->rows.n_cells * sizeof *cells);
    if (!c.v || !c.idx || !cells) goto nomem;
    if (n_nodes > s->plan_cap) {
        pent *p = tkv__realloc(s->plan, n_nodes * sizeof *p);
        if (!p) goto nomem;
        s->plan = p, s->plan_cap = n_nodes;
    }
    tkv__pindex_foreach(ix, collect_node, &c);
    /* parents come before children: walk back to give each node its subtree's latest use */
    for (uint32_t i = c.n; i-- > 0;) {
        uint32_t p = tkv__pindex_node(ix, c.v[i].id)->parent;
        if (tkv__pindex_node(ix, p)->parent == TKV__PNONE) continue;
        snode *P = &c.v[c.idx[p]];
        if (P->recency < c.v[i].recency) P->recency = c.v[i].recency;
    }
    qsort(c.v, c.n, sizeof *c.v, by_recency);
    /* The plan: the files the write leaves, most recent first, within max_bytes; of them, those not on disk
       are copied, within max_copy (the others wait, with their children, for a later save). */
    uint32_t *taken = c.idx; /* reused: 1 for a node in the plan */
    memset(taken, 0, max_id * sizeof *taken);
    uint64_t total = 0, copy = 0;
    for (uint32_t k = 0; k < c.n; k++) {
        const tkv__pnode *nd = tkv__pindex_node(ix, c.v[k].id);
        if (tkv__pindex_node(ix, nd->parent)->parent != TKV__PNONE && !taken[nd->parent]) continue; /* useless alone */
        tkv__phdr h = node_header(&h0, nd, s->n_plan);
        tkv__pindex_run(ix, c.v[k].id, cells, NULL);
        tkv__cachefile_count_extras(ctx->kv, &h, cells); /* checkpoints and known tokens on the node's run */
        const uint64_t size = tkv__cachefile_file_size(&h);
        if (s->max_bytes && total + size > s->max_bytes) continue;
        tkv__pindex_path(ix, (tkv__ppos){c.v[k].id, nd->n}, NULL, ctx->seq_tokens);
        /* the name says what the file holds: a hash of its tokens, namespace and where its K/V start */
        const uint64_t hash = XXH3_64bits_withSeed(ctx->seq_tokens, (size_t)h.n_tokens * sizeof(tkv_token),
                                                   h.ns ^ ((uint64_t)h.kv_from * 0x9e3779b97f4a7c15ull));
        const kent *e = known_find(s, hash);
        const bool verified = e && e->verified;
        uint64_t off = NO_IMAGE;
        if (!e || e->size != size) {
            if (s->max_copy && copy + size > s->max_copy) {
                s->info.nodes_deferred++;
                continue;
            }
            off = copy;
            copy += size;
        }
        taken[c.v[k].id] = 1;
        s->plan[s->n_plan++] = (pent){hash, size, off, c.v[k].id, off == NO_IMAGE && verified, false, false};
        total += size;
    }
    if (copy > s->buf_cap) {
        uint8_t *b = tkv__malloc(copy);
        if (!b) goto nomem;
        tkv__free(s->buf);
        s->buf = b, s->buf_cap = copy;
    }
    for (uint32_t k = 0; k < s->n_plan; k++) {
        const pent *p = &s->plan[k];
        if (p->off == NO_IMAGE) continue;
        const tkv__pnode *nd = tkv__pindex_node(ix, p->node);
        tkv__phdr h = node_header(&h0, nd, k);
        tkv__pindex_path(ix, (tkv__ppos){p->node, nd->n}, NULL, ctx->seq_tokens);
        tkv__pindex_run(ix, p->node, cells, NULL);
        tkv__cachefile_count_extras(ctx->kv, &h, cells); /* as the plan counted them: nothing changed since */
        tkv__cachefile_encode(ctx->kv, &h, ctx->seq_tokens, cells, s->buf + p->off);
    }
    s->info.files = s->n_plan;
    s->info.bytes_copied = copy;
    s->snapped = true;
    tkv__free(c.v);
    tkv__free(c.idx);
    tkv__free(cells);
    return TKV_OK;
nomem:
    s->n_plan = 0;
    tkv__free(c.v);
    tkv__free(c.idx);
    tkv__free(cells);
    return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_NOMEM, "out of memory saving the cache"));
}

/* Remove what the plan does not keep (files of earlier saves, a dead writer's temporary files) and mark the
   plan's files that are on disk. The known set maps hashes to plan entries. */
static tkv_status remove_stale(tkv_cache_saver *s) {
    DIR *d = opendir(s->dir);
    if (!d) return tkv__fail(TKV_ERR_IO, "cache directory '%s': cannot open: %s", s->dir, strerror(errno));
    tkv_status st = TKV_OK;
    for (struct dirent *de; !st && (de = readdir(d));) {
        uint64_t hash;
        if (is_orphan_tmp(de->d_name)) {
            unlinkat(dirfd(d), de->d_name, 0); /* best effort: a crashed writer's half file */
            continue;
        }
        const bool ours = tkv__persist_parse_name(de->d_name, &hash);
        if (!ours && !is_old_name(de->d_name)) continue;
        const kent *e = ours ? known_find(s, hash) : NULL;
        if (e) {
            pent *p = &s->plan[e->idx - 1];
            struct stat sb;
            /* what the snapshot took for on disk must still be: the same size, a file of ours (a link
               planted since is removed, and the plan's entry dropped) */
            const bool found = fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
            const bool is_dir = found && S_ISDIR(sb.st_mode); /* planted: a rename cannot replace it */
            if (p->off != NO_IMAGE && !is_dir) continue;      /* written again below, over it */
            if (found && S_ISREG(sb.st_mode) &&
                (uint64_t)sb.st_size == p->size && !(sb.st_mode & (S_IWGRP | S_IWOTH)) && sb.st_uid == geteuid()) {
                p->present = true;
                continue;
            }
        }
        if (unlinkat(dirfd(d), de->d_name, 0) == 0 || errno == ENOENT) {
            s->info.files_removed++;
        } else if (errno == EISDIR || errno == EPERM) {
            /* a directory planted in place of a file: removed when empty; otherwise left as it is (its
               content is not ours to delete) and its file not written, so that this save and the later
               ones still write every other file */
            if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) == 0) s->info.files_removed++;
            else if (e) s->plan[e->idx - 1].blocked = true;
        } else {
            st = tkv__fail(TKV_ERR_IO, "cache directory '%s': cannot remove %s: %s", s->dir, de->d_name, strerror(errno));
        }
    }
    closedir(d);
    return st;
}

/*
 * Read back the files the plan keeps that this saver found in the directory but never read: a file damaged
 * since it was written (a bit flipped, a torn write) keeps its name and size, and would otherwise be kept
 * for ever. A bad one is removed and left out of the manifest (its children load only after a save that
 * writes it again: info.files_damaged). Once per file and process, on the writing thread.
 */
static tkv_status verify_kept(tkv_cache_saver *s) {
    for (uint32_t k = 0; k < s->n_plan; k++) {
        pent *p = &s->plan[k];
        if (!p->present || p->verified) continue;
        char *path = file_path(s->dir, p->hash);
        if (!path) return tkv__fail(TKV_ERR_NOMEM, "out of memory saving the cache");
        uint8_t *data = NULL;
        size_t size = 0;
        tkv__prec rec;
        tkv_status st = tkv__cachefile_read_file(path, &data, &size);
        if (st == TKV_ERR_NOMEM) {
            tkv__free(path);
            return st;
        }
        bool ok = !st && size == p->size && tkv__cachefile_parse(path, data, size, &s->expect, &rec) == TKV_OK;
        if (ok) { /* and it holds what its name says */
            const uint64_t seed = rec.h.ns ^ ((uint64_t)rec.h.kv_from * 0x9e3779b97f4a7c15ull);
            ok = XXH3_64bits_withSeed(rec.tokens, (size_t)rec.h.n_tokens * sizeof(tkv_token), seed) == p->hash;
        }
        tkv__free(data);
        if (ok) {
            p->verified = true;
        } else {
            unlink(path);
            p->present = false;
            s->info.files_damaged++;
        }
        tkv__free(path);
    }
    return TKV_OK;
}

tkv_status tkv_cache_saver_write(tkv_cache_saver *s, tkv_cache_save_info *info) {
    if (!s) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_saver_write: saver is NULL");
    if (!s->snapped) {
        if (info) memset(info, 0, sizeof *info);
        return TKV_OK;
    }
    s->snapped = false;
    tkv_status st = tkv__persist_open_dir(s->dir, true);
    if (!st && !known_reset(s, s->n_plan)) st = tkv__fail(TKV_ERR_NOMEM, "out of memory saving the cache");
    if (st) {
        s->known_cap = s->n_known = 0; /* what is on disk is unknown now: the next save writes everything */
        tkv__free(s->known);
        s->known = NULL;
        goto out;
    }
    for (uint32_t k = 0; k < s->n_plan; k++) known_add(s, s->plan[k].hash, s->plan[k].size, k + 1, false);
    st = remove_stale(s);
    if (!st) st = verify_kept(s);
    for (uint32_t k = 0; k < s->n_plan && !st; k++) {
        pent *p = &s->plan[k];
        if (p->off == NO_IMAGE || p->blocked) continue;
        char *path = file_path(s->dir, p->hash);
        if (!path) st = tkv__fail(TKV_ERR_NOMEM, "out of memory saving the cache");
        else st = tkv__cachefile_write_bytes(path, s->buf + p->off, (size_t)p->size);
        tkv__free(path);
        if (!st) p->present = p->verified = true, s->info.files_written++;
    }
    if (!st) st = write_manifest(s->dir, s->plan, s->n_plan);
    if (!st) st = tkv__cachefile_sync_dir(s->dir);
    /* from now on: the files on disk, whether or not the write completed */
    known_reset(s, s->n_plan); /* cannot fail: it has room for them already */
    for (uint32_t k = 0; k < s->n_plan; k++)
        if (s->plan[k].present) {
            known_add(s, s->plan[k].hash, s->plan[k].size, 1, s->plan[k].verified);
            if (s->plan[k].off == NO_IMAGE) s->info.files_kept++;
        }
    s->info.files = (uint32_t)s->n_known;
out:
    if (info) *info = s->info;
    return st;
}

tkv_status tkv_cache_saver_snapshot(tkv_cache_saver *s, tkv_context *ctx) {
    TKV__GUARDED(ctx, "tkv_cache_saver_snapshot", saver_snapshot(s, ctx));
}

static tkv_status cache_save(tkv_context *ctx, const char *dir, uint64_t max_bytes) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_save: ctx is NULL");
    tkv_status st;
    if (!dir) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_save: dir is NULL"));
    tkv_cache_saver *s;
    if ((st = tkv_cache_saver_new(dir, max_bytes, 0, &s))) return tkv__ctx_fail(ctx, st);
    tkv_cache_save_info info = {.files_damaged = 1};
    /* a damaged file found on the way is written again by a second round */
    for (int round = 0; round < 2 && info.files_damaged && !st; round++)
        if (!(st = saver_snapshot(s, ctx))) st = tkv_cache_saver_write(s, &info);
    tkv_cache_saver_free(s);
    return st ? tkv__ctx_fail(ctx, st) : TKV_OK;
}

tkv_status tkv_cache_save(tkv_context *ctx, const char *dir, uint64_t max_bytes) {
    TKV__GUARDED(ctx, "tkv_cache_save", cache_save(ctx, dir, max_bytes));
}
