/*
 * persist.c — saving and loading the cache: tkv_seq_save / tkv_seq_load
 * (one sequence, one file) and tkv_cache_save / tkv_cache_load (every
 * prefix-index node, one file each, in a directory). The file format and its
 * checks are in kv/cachefile.c.
 *
 * Loading a file never changes the cache until the whole file has been read
 * and validated, and until room for its tokens is certain; what follows
 * cannot fail. Its tokens join the prefix index like decoded ones: where the
 * index already holds some of them, its cells are kept.
 *
 * A directory saved by tkv_cache_save (persist_save.c) holds one file per
 * node, named after a hash of what it holds, and a manifest that orders
 * them. A node's file holds the tokens of its whole path but only the K/V
 * of its own run, so shared prefixes are stored once; it loads only after
 * the file of its parent (or with the parent already cached). The order
 * puts every parent before its children, most recently used first:
 * tkv_cache_load loads in that order, so with too little room the most
 * recently used prefixes are the ones loaded.
 */
#include "persist.h"

#include "base/alloc.h"
#include "base/error.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>



/* ---- putting a record into the cache -------------------------------------- */

/* Copy the K/V rows of positions from..from+n-1 of record r into the cache's staged cells[0..n). */
static void fill_cells(tkv__kvcache *kv, const tkv__prec *r, uint32_t from, uint32_t n) {
    const size_t rk = kv->rows.row_size_k, rv = kv->rows.row_size_v;
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t p = from + i - r->h.kv_from;
        const uint32_t c = kv->cells[i];
        for (uint32_t l = 0; l < kv->rows.n_layer; l++) {
            memcpy(tkv__kv_k(kv, l, c), tkv__cachefile_k(r, l) + p * rk, rk);
            memcpy(tkv__kv_v(kv, l, c), tkv__cachefile_v(r, l) + p * rv, rv);
        }
    }
}

/*
 * A hybrid model's file: its checkpoints (at positions below n) become the
 * cache's, at the cells the commit just published (cells: position i's is
 * cells[i]), so what was reusable when it was saved is reusable again. Best
 * effort: a checkpoint with no room is left out (that prefix is then
 * reusable only up to an earlier one).
 */
static void put_states(tkv_context *ctx, const tkv__prec *r, uint32_t n, const uint32_t *cells) {
    tkv__kvcache *kv = ctx->kv;
    float *buf = tkv__malloc(r->h.state_floats * sizeof *buf);
    for (uint32_t i = 0; buf && i < r->h.n_states; i++) {
        uint32_t pos;
        tkv__cachefile_state(r, i, &pos, buf);
        if (pos < n) tkv__kv_state_put(kv, cells[pos], buf);
    }
    tkv__free(buf);
}

/*
 * A file's known tokens (at positions below n) become the records of their
 * cells, where the file's arithmetic is ctx's own (runtime/arith_id.c):
 * another build, kernel level or a context that is not batch_invariant
 * might choose other tokens, and takes none. A cell that already records
 * one keeps it (a cell holds one record; runtime/draft.c says which).
 */
static void put_known(tkv_context *ctx, const tkv__prec *r, uint32_t n, const uint32_t *cells) {
    if (r->h.arith != tkv__arith_id(ctx)) return;
    for (uint32_t i = 0; i < r->h.n_known; i++) {
        uint32_t pos;
        tkv_token tok;
        uint64_t key;
        tkv__cachefile_known(r, i, &pos, &tok, &key);
        if (pos < n && ctx->kv->chosen[cells[pos]] == TKV_TOKEN_NULL) tkv__kv_known_note(ctx->kv, cells[pos], key, tok);
    }
}

/*
 * Put a validated record into the cache, namespace rec->h.ns, as one KV
 * cache transaction: the cached part of its tokens is reused, the rest
 * filled from the file. seq >= 0: the sequence then holds the prefix;
 * seq < 0: it stays cached, held by nobody. Its tokens are left in
 * ctx->seq_tokens. Only its first n tokens (<= n_tokens) are put in.
 * *n_new receives how many cells were filled from the file. Nothing
 * changes on failure.
 */
static tkv_status apply_n(tkv_context *ctx, const char *name, const tkv__prec *r, uint32_t n, tkv_seq seq,
                          uint32_t *n_new) {
    tkv__kvcache *kv = ctx->kv;
    tkv_token *tokens = ctx->seq_tokens; /* (n_cells); the header check bounded n by it */
    for (uint32_t i = 0; i < n; i++) tokens[i] = tkv__cachefile_token(r, i);
    char what[160];
    snprintf(what, sizeof what, "cache file '%s'", name);
    uint32_t cached;
    const tkv__kvpath path = {.name = what, .seq = seq, .ns = r->h.ns, .tokens = tokens, .n = n, .reuse_max = n,
                              .need_cached = r->h.kv_from, .fill = true};
    tkv_status st = tkv__kv_stage_path(kv, &path, &cached);
    if (st) return st;
    fill_cells(kv, r, cached, n - cached);
    tkv__kv_commit(kv);
    *n_new = n - cached;
    if (!r->h.n_states && !r->h.n_known) return TKV_OK;
    /* the cells of positions 0..n-1: the sequence's, or the path's the commit published */
    const uint32_t *cells = seq >= 0 ? kv->seq[seq].cells : ctx->path_cells;
    if (seq < 0 && tkv__kv_match_cells(kv, r->h.ns, tokens, n, ctx->path_cells) < n) return TKV_OK;
    if (r->h.n_states) put_states(ctx, r, n, cells);
    if (r->h.n_known) put_known(ctx, r, n, cells);
    return TKV_OK;
}

static tkv_status apply(tkv_context *ctx, const char *name, const tkv__prec *r, tkv_seq seq, uint32_t *n_new) {
    return apply_n(ctx, name, r, r->h.n_tokens, seq, n_new);
}

tkv_status tkv__persist_expect(const tkv_context *ctx, tkv__pexpect *e) {
    if (ctx->kv->win) /* every save, load, image and transfer starts here */
        return tkv__fail(TKV_ERR_UNSUPPORTED, "cache files, images and transfers are not supported with swa_rows > 0 "
                         "(a window layer keeps rows only for the positions that need them; a file format that "
                         "would carry them is not built)");
    if (ctx->fp_known) memcpy(e->fp, ctx->fp, sizeof e->fp);
    else {
        tkv_status st = tkv_model_fingerprint(ctx->model, e->fp);
        if (st) return st;
    }
    const tkv__kvcache *kv = ctx->kv;
    e->kv_type = (uint32_t)kv->rows.type_k;
    e->v_type = (uint32_t)kv->rows.type_v;
    e->n_layer = kv->rows.n_layer;
    e->n_embd_kv = kv->rows.n_embd_kv;
    e->n_vocab = ctx->model->hp.n_vocab;
    e->n_cells = kv->rows.n_cells;
    e->row_size = kv->rows.row_size_k;
    e->row_size_v = kv->rows.row_size_v;
    e->state_floats = kv->st ? (uint32_t)kv->st->floats : 0;
    return TKV_OK;
}

tkv_status tkv__persist_load_image(tkv_context *ctx, const char *name, const uint8_t *data, size_t size, tkv_seq seq) {
    if (seq >= 0 && (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__fail(TKV_ERR_INVALID, "cache file '%s': sequence %d is out of range (n_seq_max %u)", name, (int)seq,
                         ctx->kv->n_seq);
    tkv__pexpect e;
    tkv__prec rec;
    uint32_t n_new;
    tkv_status st = tkv__persist_expect(ctx, &e);
    if (!st) st = tkv__cachefile_parse(name, data, size, &e, &rec);
    if (!st) st = apply(ctx, name, &rec, seq, &n_new);
    return st;
}

/* ---- images of evictions ------------------------------------------------- */

tkv_status tkv_cache_event_image(const tkv_context *ctx, void *buf, size_t cap, size_t *size) {
    if (!ctx || !size || (cap && !buf)) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_event_image: NULL argument");
    /* not entered: it runs inside the call whose event it reads, on that call's thread, and only there */
    if (!tkv__ctx_held_here(ctx))
        return tkv__fail(TKV_ERR_INVALID, "tkv_cache_event_image: not inside a REMOVED event (of a call on this thread)");
    const tkv__kvevent *ev = ctx->event;
    if (!ev || ev->kind != TKV__KVEV_REMOVED)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_event_image: not inside a REMOVED event"));
    tkv__phdr h;
    tkv_status st = tkv__persist_header(ctx, &h); /* the fingerprint is known: a context with events computed it */
    if (st) return tkv__ctx_fail(ctx, st);
    h.ns = ev->ns;
    h.n_tokens = ev->end;
    h.kv_from = ev->from;
    tkv__cachefile_count_extras(ctx->kv, &h, ev->cells); /* checkpoints and known tokens go with their cells */
    *size = (size_t)tkv__cachefile_file_size(&h);
    if (cap < *size)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_FULL, "tkv_cache_event_image: %zu bytes needed, room for %zu", *size, cap));
    tkv__cachefile_encode(ctx->kv, &h, ev->tokens, ev->cells, buf);
    return TKV_OK;
}

static tkv_status cache_load_image(tkv_context *ctx, const void *data, size_t size, uint64_t ns,
                                   const tkv_token *tokens, size_t n, uint32_t flags, size_t *loaded) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_load_image: ctx is NULL");
    tkv_status st;
    if (!data || (n && !tokens))
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_load_image: NULL argument"));
    if (flags & ~(uint32_t)TKV_IMAGE_CONTINUATION)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_load_image_ex: flags 0x%x are not tkv_image_flags",
                                            flags & ~(uint32_t)TKV_IMAGE_CONTINUATION));
    tkv__pexpect e;
    tkv__prec rec;
    if ((st = tkv__persist_expect(ctx, &e)) || (st = tkv__cachefile_parse("image", data, size, &e, &rec)))
        return tkv__ctx_fail(ctx, st);
    /* what it holds must be what was asked for: a hash collision or a misfiled image is refused here. The K/V
       of a position depends only on the tokens up to it, so the part on which the two agree is theirs. */
    if (rec.h.ns != ns)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_load_image: the image holds another namespace"));
    uint32_t agree = 0;
    while (agree < rec.h.n_tokens && agree < n && tkv__cachefile_token(&rec, agree) == tokens[agree]) agree++;
    /* an image that goes on from all of these tokens: its whole prefix, its own tokens' K/V, which the load puts
       only under its own tokens (the part before its K/V must be cached: apply_n), also an image whose K/V all
       lies past them (the next piece of an answer evicted in pieces) */
    if ((flags & TKV_IMAGE_CONTINUATION) && agree == n) agree = rec.h.n_tokens;
    if (agree <= rec.h.kv_from)
        return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_load_image: the image holds other tokens "
                                                             "(its first %u tokens of K/V differ from those asked for)",
                                            rec.h.n_tokens - rec.h.kv_from));
    uint32_t n_new;
    if ((st = apply_n(ctx, "image", &rec, agree, -1, &n_new))) return tkv__ctx_fail(ctx, st);
    if (loaded) *loaded = agree;
    return TKV_OK;
}

tkv_status tkv_cache_load_image(tkv_context *ctx, const void *data, size_t size, uint64_t ns, const tkv_token *tokens,
                                size_t n, size_t *loaded) {
    TKV__GUARDED(ctx, "tkv_cache_load_image", cache_load_image(ctx, data, size, ns, tokens, n, 0, loaded));
}

tkv_status tkv_cache_load_image_ex(tkv_context *ctx, const void *data, size_t size, uint64_t ns,
                                   const tkv_token *tokens, size_t n, uint32_t flags, size_t *loaded) {
    TKV__GUARDED(ctx, "tkv_cache_load_image_ex", cache_load_image(ctx, data, size, ns, tokens, n, flags, loaded));
}

/* ---- one sequence --------------------------------------------------------- */

static tkv_status check_seq(tkv_context *ctx, tkv_seq seq, const char *fn) {
    if (seq < 0 || (uint32_t)seq >= ctx->kv->n_seq)
        return tkv__fail(TKV_ERR_INVALID, "%s: sequence %d is out of range (n_seq_max %u)", fn, (int)seq, ctx->kv->n_seq);
    return TKV_OK;
}

/* The directory a path is in, in a tkv__malloc'd string (NULL: no memory). */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    char *d = tkv__malloc(n + 2);
    if (!d) return NULL;
    if (!slash) strcpy(d, ".");
    else if (n == 0) strcpy(d, "/");
    else memcpy(d, path, n), d[n] = '\0';
    return d;
}

/* The header of a file written from ctx (fingerprint, geometry). */
tkv_status tkv__persist_header(const tkv_context *ctx, tkv__phdr *h) {
    tkv__pexpect e;
    tkv_status st = tkv__persist_expect(ctx, &e);
    if (st) return st;
    *h = (tkv__phdr){.fp = {e.fp[0], e.fp[1]}, .kv_type = e.kv_type, .n_layer = e.n_layer, .n_embd_kv = e.n_embd_kv,
                     .n_vocab = e.n_vocab, .row_size = e.row_size, .v_type = e.v_type, .row_size_v = e.row_size_v,
                     .arith = tkv__arith_id(ctx)}; /* known tokens go with their cells: tkv__cachefile_count_extras */
    return TKV_OK;
}

static tkv_status seq_save(tkv_context *ctx, tkv_seq seq, const char *path) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_save: ctx is NULL");
    if (!path) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_save: path is NULL"));
    tkv_status st = check_seq(ctx, seq, "tkv_seq_save");
    if (st) return tkv__ctx_fail(ctx, st);
    const tkv__kvseq *s = &ctx->kv->seq[seq];
    tkv__phdr h;
    if ((st = tkv__persist_header(ctx, &h))) return tkv__ctx_fail(ctx, st);
    h.ns = s->ns;
    h.n_tokens = s->n;
    tkv__cachefile_count_extras(ctx->kv, &h, s->cells);
    tkv__kv_seq_tokens(ctx->kv, seq, ctx->seq_tokens);
    char *dir = dir_of(path);
    if (!dir) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_NOMEM, "out of memory saving sequence %d", (int)seq));
    st = tkv__cachefile_write(ctx->kv, path, &h, ctx->seq_tokens, s->cells);
    if (!st) st = tkv__cachefile_sync_dir(dir);
    tkv__free(dir);
    return st ? tkv__ctx_fail(ctx, st) : TKV_OK;
}

tkv_status tkv_seq_save(tkv_context *ctx, tkv_seq seq, const char *path) {
    TKV__GUARDED(ctx, "tkv_seq_save", seq_save(ctx, seq, path));
}

static tkv_status seq_load(tkv_context *ctx, tkv_seq seq, const char *path) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_seq_load: ctx is NULL");
    if (!path) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_seq_load: path is NULL"));
    tkv_status st = check_seq(ctx, seq, "tkv_seq_load");
    if (st) return tkv__ctx_fail(ctx, st);
    uint8_t *data;
    size_t size;
    if ((st = tkv__cachefile_read_file(path, &data, &size))) return tkv__ctx_fail(ctx, st);
    st = tkv__persist_load_image(ctx, path, data, size, seq);
    tkv__free(data);
    return st ? tkv__ctx_fail(ctx, st) : TKV_OK;
}

tkv_status tkv_seq_load(tkv_context *ctx, tkv_seq seq, const char *path) {
    TKV__GUARDED(ctx, "tkv_seq_load", seq_load(ctx, seq, path));
}

/* ---- the whole cache: loading --------------------------------------------- */

typedef struct cand {
    char *path;
    bool unlisted; /* not in the manifest: after those that are, by the rank in its header */
    uint64_t rank, ns;
    uint32_t kv_from, n_tokens;
    size_t size;
    size_t tok_off; /* where its tokens are kept once loaded */
    bool loaded;
} cand;

static int by_rank(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->unlisted != y->unlisted) return x->unlisted ? 1 : -1;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->kv_from != y->kv_from) return x->kv_from < y->kv_from ? -1 : 1;
    return strcmp(x->path, y->path);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void skipped(tkv_cache_load_info *info) {
    if (info->files_skipped++ == 0)
        snprintf(info->first_skip_reason, sizeof info->first_skip_reason, "%s", tkv_last_error(NULL));
}

/* Pass 1: the files of dir whose header fits the context; the others are skipped. */
static tkv_status list_files(const char *dir, const tkv__pexpect *e, cand **out, uint32_t *n_out,
                             tkv_cache_load_info *info) {
    DIR *d = opendir(dir);
    if (!d) return tkv__fail(TKV_ERR_IO, "cache directory '%s': cannot open: %s", dir, strerror(errno));
    cand *v = NULL;
    uint32_t n = 0, cap = 0;
    tkv_status st = TKV_OK;
    for (struct dirent *de; !st && (de = readdir(d));) {
        if (!ends_with(de->d_name, TKV__CACHEFILE_EXT) || strstr(de->d_name, ".tmp")) continue; /* temporary: being written */
        if (n == cap) {
            uint32_t ncap = cap ? 2 * cap : 16;
            cand *nv = tkv__realloc(v, ncap * sizeof *nv);
            if (!nv) {
                st = tkv__fail(TKV_ERR_NOMEM, "out of memory listing cache directory '%s'", dir);
                break;
            }
            v = nv, cap = ncap;
        }
        char *path = tkv__persist_join(dir, de->d_name);
        if (!path) {
            st = tkv__fail(TKV_ERR_NOMEM, "out of memory listing cache directory '%s'", dir);
            break;
        }
        uint8_t hdr[TKV__CACHEFILE_HEADER_BYTES];
        size_t size;
        tkv__phdr h;
        if (tkv__cachefile_read(path, hdr, sizeof hdr, &size) ||
            tkv__cachefile_check_header(path, hdr, size, e, &h)) {
            skipped(info);
            tkv__free(path);
            continue;
        }
        v[n++] = (cand){path, true, h.rank, h.ns, h.kv_from, h.n_tokens, size, 0, false};
    }
    closedir(d);
    if (st) {
        for (uint32_t i = 0; i < n; i++) tkv__free(v[i].path);
        tkv__free(v);
        return st;
    }
    *out = v;
    *n_out = n;
    return TKV_OK;
}

typedef struct mpos {
    uint64_t hash;
    uint32_t pos;
} mpos;

static int by_hash(const void *a, const void *b) {
    const mpos *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int by_hash_only(const void *a, const void *b) {
    const mpos *x = a, *y = b;
    return x->hash != y->hash ? (x->hash < y->hash ? -1 : 1) : 0;
}

/* The files the manifest lists take their rank from it. TKV_ERR_NOMEM only. */
static tkv_status order_by_manifest(const char *dir, cand *v, uint32_t n) {
    uint64_t *hashes;
    uint32_t m;
    tkv_status st = tkv__persist_read_manifest(dir, &hashes, &m);
    if (st || !m) return st;
    mpos *idx = tkv__malloc(m * sizeof *idx);
    if (!idx) {
        tkv__free(hashes);
        return tkv__fail(TKV_ERR_NOMEM, "out of memory loading cache directory '%s'", dir);
    }
    for (uint32_t k = 0; k < m; k++) idx[k] = (mpos){hashes[k], k};
    qsort(idx, m, sizeof *idx, by_hash);
    for (uint32_t i = 0; i < n; i++) {
        const char *slash = strrchr(v[i].path, '/');
        uint64_t hash;
        if (!tkv__persist_parse_name(slash ? slash + 1 : v[i].path, &hash)) continue;
        const mpos key = {hash, 0};
        const mpos *f = bsearch(&key, idx, m, sizeof *idx, by_hash_only);
        if (f) v[i].unlisted = false, v[i].rank = f->pos;
    }
    tkv__free(idx);
    tkv__free(hashes);
    return TKV_OK;
}

static tkv_status cache_load(tkv_context *ctx, const char *dir, tkv_cache_load_info *info) {
    if (!ctx) return tkv__fail(TKV_ERR_INVALID, "tkv_cache_load: ctx is NULL");
    if (!dir) return tkv__ctx_fail(ctx, tkv__fail(TKV_ERR_INVALID, "tkv_cache_load: dir is NULL"));
    tkv_cache_load_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    tkv__pexpect e;
    tkv_status st = tkv__persist_expect(ctx, &e);
    if (st) return tkv__ctx_fail(ctx, st);
    cand *v = NULL;
    uint32_t n = 0;
    if ((st = tkv__persist_open_dir(dir, false)) || (st = list_files(dir, &e, &v, &n, info)))
        return tkv__ctx_fail(ctx, st);
    if ((st = order_by_manifest(dir, v, n))) {
        for (uint32_t i = 0; i < n; i++) tkv__free(v[i].path);
        tkv__free(v);
        return tkv__ctx_fail(ctx, st);
    }
    if (n) qsort(v, n, sizeof *v, by_rank);
    /* everything the loads need, allocated before the cache changes */
    size_t max_size = 1, n_tok = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (v[i].size > max_size) max_size = v[i].size;
        v[i].tok_off = n_tok;
        n_tok += v[i].n_tokens;
    }
    uint8_t *buf = tkv__malloc(max_size);
    tkv_token *toks = tkv__malloc((n_tok ? n_tok : 1) * sizeof *toks);
    if (!buf || !toks) st = tkv__fail(TKV_ERR_NOMEM, "out of memory loading cache directory '%s'", dir);
    else st = tkv__kv_hold_reserve(ctx->kv, n + 2); /* one per file, and one for the prefix being extended */
    /* pass 2: load in rank order; each loaded prefix stays pinned until the
       end, so later files evict only what was cached before this call */
    for (uint32_t i = 0; i < n && !st; i++) {
        size_t size;
        tkv__prec rec;
        uint32_t n_new;
        if (tkv__cachefile_read(v[i].path, buf, max_size, &size)) {
            skipped(info);
            continue;
        }
        if (size != v[i].size) {
            tkv__fail(TKV_ERR_IO, "cache file '%s': changed while loading", v[i].path);
            skipped(info);
            continue;
        }
        if (tkv__cachefile_parse(v[i].path, buf, size, &e, &rec)) {
            skipped(info);
            continue;
        }
        if (rec.h.n_tokens != v[i].n_tokens || rec.h.kv_from != v[i].kv_from) { /* replaced since pass 1 */
            tkv__fail(TKV_ERR_IO, "cache file '%s': changed while loading", v[i].path);
            skipped(info);
            continue;
        }
        if (apply(ctx, v[i].path, &rec, -1, &n_new)) {
            skipped(info);
            continue;
        }
        tkv__kv_hold(ctx->kv, rec.h.ns, ctx->seq_tokens, v[i].n_tokens, +1); /* reserved: cannot fail */
        memcpy(toks + v[i].tok_off, ctx->seq_tokens, v[i].n_tokens * sizeof *toks);
        v[i].ns = rec.h.ns;
        v[i].loaded = true;
        info->files_loaded++;
        info->tokens_loaded += n_new;
    }
    /* unpin, and mark the loaded prefixes used, least recently used first, so
       eviction takes them in the order the saved cache would have */
    for (uint32_t i = n; i-- > 0;) {
        if (!v[i].loaded) continue;
        tkv__kv_hold(ctx->kv, v[i].ns, toks + v[i].tok_off, v[i].n_tokens, -1);
        tkv__kv_touch(ctx->kv, v[i].ns, toks + v[i].tok_off, v[i].n_tokens);
    }
    tkv__free(buf);
    tkv__free(toks);
    for (uint32_t i = 0; i < n; i++) tkv__free(v[i].path);
    tkv__free(v);
    return st ? tkv__ctx_fail(ctx, st) : TKV_OK;
}

tkv_status tkv_cache_load_ex(tkv_context *ctx, const char *dir, tkv_cache_load_info *info) {
    TKV__GUARDED(ctx, "tkv_cache_load", cache_load(ctx, dir, info));
}

tkv_status tkv_cache_load(tkv_context *ctx, const char *dir) { return tkv_cache_load_ex(ctx, dir, NULL); }
