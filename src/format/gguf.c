/*
 * gguf.c — a strict reader of the GGUF container (versions 2 and 3).
 *
 * Layout of a GGUF file (all integers little-endian):
 *
 *   header        magic "GGUF", u32 version, u64 n_tensors, u64 n_kv
 *   metadata      n_kv x { string key, u32 type, value }
 *                 string = u64 length + bytes; array = u32 elem type,
 *                 u64 length, elements
 *   tensor infos  n_tensors x { string name, u32 n_dims, u64 ne[n_dims],
 *                 u32 type, u64 offset (relative to the data section) }
 *   padding       to general.alignment (default 32)
 *   data          tensor bytes
 *
 * The file is walked twice. The first walk validates everything and counts
 * the strings; nothing is allocated, so a hostile count cannot make us
 * allocate. The second walk, over a file now known to be well formed, copies
 * strings into one allocation sized exactly by the first walk.
 */
/* madvise(MADV_DONTNEED) is outside POSIX (posix_madvise's DONTNEED does nothing on Linux) */
#define _DEFAULT_SOURCE
#include "gguf.h"

#include "base/alloc.h"
#include "base/error.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_NAME 64 /* tensor names, as ggml limits them */
#define GGUF_HEADER_BYTES 24u

typedef unsigned long long ull;

/* Walk state. In the counting walk the sinks are NULL. */
typedef struct walker {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    /* counts gathered by the first walk */
    uint64_t n_strings;    /* every string that gets a copy */
    uint64_t string_bytes; /* their total length */
    uint64_t n_str_elems;  /* string array elements (need a tkv__str slot) */
    /* sinks of the second walk */
    char *chars;
    tkv__str *str_slots;
} walker;

size_t tkv__gguf_meta_size(tkv_meta_type t) {
    switch (t) {
    case TKV_META_U8:
    case TKV_META_I8:
    case TKV_META_BOOL: return 1;
    case TKV_META_U16:
    case TKV_META_I16: return 2;
    case TKV_META_U32:
    case TKV_META_I32:
    case TKV_META_F32: return 4;
    case TKV_META_U64:
    case TKV_META_I64:
    case TKV_META_F64: return 8;
    default: return 0;
    }
}

/* ---- primitive reads ---------------------------------------------------- */

static tkv_status need(walker *w, uint64_t n, const char *what) {
    if (n > w->size - w->pos)
        return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: needs %llu bytes but the file ends at %llu", what,
                         (ull)w->pos, (ull)n, (ull)w->size);
    return TKV_OK;
}

static uint64_t le(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static tkv_status read_u32(walker *w, uint32_t *out, const char *what) {
    tkv_status st = need(w, 4, what);
    if (st) return st;
    *out = (uint32_t)le(w->p + w->pos, 4);
    w->pos += 4;
    return TKV_OK;
}

static tkv_status read_u64(walker *w, uint64_t *out, const char *what) {
    tkv_status st = need(w, 8, what);
    if (st) return st;
    *out = le(w->p + w->pos, 8);
    w->pos += 8;
    return TKV_OK;
}

/*
 * Read a string. In the second walk, copy it (NUL-terminated) into the
 * character sink and describe it in *out.
 */
static tkv_status read_str(walker *w, tkv__str *out, const char *what) {
    uint64_t start = w->pos, n;
    tkv_status st = read_u64(w, &n, what);
    if (st) return st;
    if (n > w->size - w->pos)
        return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: string length %llu runs past the end of the file (%llu bytes)",
                         what, (ull)start, (ull)n, (ull)w->size);
    if (w->chars) {
        memcpy(w->chars, w->p + w->pos, n);
        w->chars[n] = '\0';
        if (out) *out = (tkv__str){w->chars, (size_t)n};
        w->chars += n + 1;
    }
    w->n_strings++;
    w->string_bytes += n;
    w->pos += n;
    return TKV_OK;
}

/* printf-able, bounded view of a raw name (for messages during the walk) */
#define RAW_NAME_FMT "%.*s"
#define RAW_NAME_ARG(w, off, n) (int)((n) > 80 ? 80 : (n)), (const char *)((w)->p + (off))

/* ---- metadata ----------------------------------------------------------- */

static tkv_status read_scalar(walker *w, tkv_meta_type t, tkv__gguf_kv *kv, const char *what) {
    size_t sz = tkv__gguf_meta_size(t);
    tkv_status st = need(w, sz, what);
    if (st) return st;
    uint64_t raw = le(w->p + w->pos, (unsigned)sz);
    if (t == TKV_META_BOOL && raw > 1)
        return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: bool value %llu is neither 0 nor 1", what, (ull)w->pos,
                         (ull)raw);
    w->pos += sz;
    if (!kv) return TKV_OK;
    switch (t) {
    case TKV_META_I8: kv->v.i = (int8_t)raw; break;
    case TKV_META_I16: kv->v.i = (int16_t)raw; break;
    case TKV_META_I32: kv->v.i = (int32_t)raw; break;
    case TKV_META_I64: kv->v.i = (int64_t)raw; break;
    case TKV_META_F32: {
        float f;
        uint32_t r32 = (uint32_t)raw;
        memcpy(&f, &r32, 4);
        kv->v.f = f;
        break;
    }
    case TKV_META_F64: memcpy(&kv->v.f, &raw, 8); break;
    default: kv->v.u = raw; break;
    }
    return TKV_OK;
}

/*
 * One key/value pair. `kv` is NULL in the counting walk. Sets *alignment when
 * the key is general.alignment.
 */
static tkv_status read_kv(walker *w, uint64_t index, tkv__gguf_kv *kv, uint32_t *alignment) {
    char what[160];
    uint64_t key_off = w->pos;
    snprintf(what, sizeof what, "metadata pair %llu key", (ull)index);
    tkv_status st = read_str(w, kv ? &kv->key : NULL, what);
    if (st) return st;
    uint64_t key_len = w->pos - key_off - 8;
    const uint64_t key_at = key_off + 8;
    if (key_len == 0) return tkv__fail(TKV_ERR_FORMAT, "metadata pair %llu at offset %llu: empty key", (ull)index, (ull)key_off);
    if (memchr(w->p + key_at, 0, key_len))
        return tkv__fail(TKV_ERR_FORMAT, "metadata pair %llu at offset %llu: key contains a NUL byte", (ull)index,
                         (ull)key_off);
    snprintf(what, sizeof what, "metadata key '" RAW_NAME_FMT "'", RAW_NAME_ARG(w, key_at, key_len));

    uint32_t type;
    uint64_t type_off = w->pos;
    if ((st = read_u32(w, &type, what))) return st;
    if (type >= TKV_META_TYPE_COUNT)
        return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: unknown value type %u", what, (ull)type_off, type);
    if (kv) kv->type = (tkv_meta_type)type;

    if (type == TKV_META_STRING) {
        if ((st = read_str(w, kv ? &kv->str : NULL, what))) return st;
    } else if (type != TKV_META_ARRAY) {
        if ((st = read_scalar(w, (tkv_meta_type)type, kv, what))) return st;
    } else {
        uint32_t et;
        uint64_t n, arr_off = w->pos;
        if ((st = read_u32(w, &et, what))) return st;
        if ((st = read_u64(w, &n, what))) return st;
        if (et >= TKV_META_TYPE_COUNT)
            return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: array of unknown element type %u", what, (ull)arr_off,
                             et);
        if (et == TKV_META_ARRAY)
            return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: nested arrays are not supported", what, (ull)arr_off);
        /* Every element takes at least 1 byte (8 for a string's length), so
           a length the rest of the file cannot hold is rejected up front. */
        uint64_t min_elem = et == TKV_META_STRING ? 8 : tkv__gguf_meta_size((tkv_meta_type)et);
        if (n > (w->size - w->pos) / min_elem)
            return tkv__fail(TKV_ERR_FORMAT,
                             "%s at offset %llu: array length %llu (%s) runs past the end of the file (%llu bytes)", what,
                             (ull)arr_off, (ull)n, tkv_meta_type_name((tkv_meta_type)et), (ull)w->size);
        if (kv) {
            kv->elem_type = (tkv_meta_type)et;
            kv->n = n;
        }
        if (et == TKV_META_STRING) {
            tkv__str *slots = w->str_slots;
            if (kv) {
                kv->strs = slots;
                w->str_slots += n;
            }
            for (uint64_t i = 0; i < n; i++)
                if ((st = read_str(w, kv ? &slots[i] : NULL, what))) return st;
            w->n_str_elems += n;
        } else {
            if (kv) kv->arr = w->p + w->pos;
            if (et == TKV_META_BOOL) {
                for (uint64_t i = 0; i < n; i++)
                    if (w->p[w->pos + i] > 1)
                        return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: bool element %llu is %u, neither 0 nor 1",
                                         what, (ull)(w->pos + i), (ull)i, w->p[w->pos + i]);
            }
            w->pos += n * min_elem;
        }
    }

    static const char align_key[] = "general.alignment";
    if (key_len == sizeof align_key - 1 && !memcmp(w->p + key_at, align_key, key_len)) {
        if (type != TKV_META_U32)
            return tkv__fail(TKV_ERR_FORMAT, "metadata key 'general.alignment' at offset %llu: type %s, expected uint32",
                             (ull)key_off, tkv_meta_type_name((tkv_meta_type)type));
        uint32_t a = (uint32_t)le(w->p + w->pos - 4, 4);
        if (a == 0 || (a & (a - 1)))
            return tkv__fail(TKV_ERR_FORMAT, "metadata key 'general.alignment' at offset %llu: %u is not a power of two",
                             (ull)key_off, a);
        *alignment = a;
    }
    return TKV_OK;
}

/* ---- tensor infos ------------------------------------------------------- */

static tkv_status read_tensor_info(walker *w, uint64_t index, tkv__gguf_tensor *t) {
    char what[160];
    uint64_t name_off = w->pos;
    snprintf(what, sizeof what, "tensor info %llu name", (ull)index);
    tkv__str name = {0};
    tkv_status st = read_str(w, &name, what);
    if (st) return st;
    uint64_t name_len = w->pos - name_off - 8;
    if (name_len == 0 || name_len > GGUF_MAX_NAME)
        return tkv__fail(TKV_ERR_FORMAT, "tensor info %llu at offset %llu: name length %llu is not in 1..%d", (ull)index,
                         (ull)name_off, (ull)name_len, GGUF_MAX_NAME);
    if (memchr(w->p + name_off + 8, 0, name_len))
        return tkv__fail(TKV_ERR_FORMAT, "tensor info %llu at offset %llu: name contains a NUL byte", (ull)index,
                         (ull)name_off);
    snprintf(what, sizeof what, "tensor '" RAW_NAME_FMT "'", RAW_NAME_ARG(w, name_off + 8, name_len));

    uint32_t n_dims;
    uint64_t dims_off = w->pos;
    if ((st = read_u32(w, &n_dims, what))) return st;
    if (n_dims < 1 || n_dims > 4)
        return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: n_dims %u is not in 1..4", what, (ull)dims_off, n_dims);
    uint64_t ne[4] = {1, 1, 1, 1}, n_elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t off = w->pos;
        if ((st = read_u64(w, &ne[d], what))) return st;
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX)
            return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: dimension %u is %llu", what, (ull)off, d, (ull)ne[d]);
        if (n_elems > (uint64_t)INT64_MAX / ne[d])
            return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: element count overflows at dimension %u", what,
                             (ull)off, d);
        n_elems *= ne[d];
    }
    uint32_t type, be, bb;
    uint64_t type_off = w->pos;
    if ((st = read_u32(w, &type, what))) return st;
    if (tkv_type_block((tkv_type)type, &be, &bb) != TKV_OK)
        return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: unknown tensor type %u", what, (ull)type_off, type);
    if (ne[0] % be)
        return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: ne[0] = %llu is not a multiple of the %s block size %u",
                         what, (ull)dims_off, (ull)ne[0], tkv_type_name((tkv_type)type), be);
    uint64_t n_blocks = n_elems / be;
    if (n_blocks > (uint64_t)INT64_MAX / bb)
        return tkv__fail(TKV_ERR_FORMAT, "%s at offset %llu: byte size overflows", what, (ull)dims_off);
    uint64_t offset;
    if ((st = read_u64(w, &offset, what))) return st;
    if (t) {
        t->name = name;
        t->type = (tkv_type)type;
        t->n_dims = n_dims;
        memcpy(t->ne, ne, sizeof ne);
        t->n_elems = n_elems;
        t->n_bytes = n_blocks * bb;
        t->offset = offset; /* relative until the data section is known */
    }
    return TKV_OK;
}

/* ---- the two walks ------------------------------------------------------ */

typedef struct header {
    uint32_t version;
    uint64_t n_tensors, n_kv;
} header;

static tkv_status read_header(walker *w, header *h) {
    if (w->size < GGUF_HEADER_BYTES)
        return tkv__fail(TKV_ERR_FORMAT, "file is %llu bytes, too small for a GGUF header (%u bytes)", (ull)w->size,
                         GGUF_HEADER_BYTES);
    uint32_t magic = 0;
    read_u32(w, &magic, "magic");
    if (magic != GGUF_MAGIC)
        return tkv__fail(TKV_ERR_FORMAT, "header at offset 0: bad magic 0x%08x (not a GGUF file)", magic);
    read_u32(w, &h->version, "version");
    if (h->version == 1)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "header at offset 4: GGUF version 1 is not supported (only 2 and 3)");
    if (h->version > 0xffff && (h->version & 0xffff) == 0)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "header at offset 4: big-endian GGUF files are not supported");
    if (h->version != 2 && h->version != 3)
        return tkv__fail(TKV_ERR_FORMAT, "header at offset 4: unknown GGUF version %u", h->version);
    read_u64(w, &h->n_tensors, "tensor count");
    read_u64(w, &h->n_kv, "metadata count");
    /* A tensor info takes at least 32 bytes, a key/value pair 13. */
    uint64_t rest = w->size - w->pos;
    if (h->n_tensors > rest / 32)
        return tkv__fail(TKV_ERR_FORMAT, "header at offset 8: tensor count %llu cannot fit in a file of %llu bytes",
                         (ull)h->n_tensors, (ull)w->size);
    if (h->n_kv > rest / 13)
        return tkv__fail(TKV_ERR_FORMAT, "header at offset 16: metadata count %llu cannot fit in a file of %llu bytes",
                         (ull)h->n_kv, (ull)w->size);
    return TKV_OK;
}

/* Walk metadata and tensor infos; g's arrays are filled when non-NULL. */
static tkv_status walk(walker *w, const header *h, tkv__gguf *g, uint32_t *alignment, uint64_t *infos_end) {
    tkv_status st;
    *alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < h->n_kv; i++)
        if ((st = read_kv(w, i, g ? &g->kv[i] : NULL, alignment))) return st;
    for (uint64_t i = 0; i < h->n_tensors; i++)
        if ((st = read_tensor_info(w, i, g ? &g->tensors[i] : NULL))) return st;
    *infos_end = w->pos;
    return TKV_OK;
}

/* ---- hash tables -------------------------------------------------------- */

static size_t hash_cap(size_t n) {
    size_t cap = 8;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/*
 * Insert entry `idx` named `s` into `table`; returns the index of an earlier
 * entry with the same name, or -1.
 */
static long hash_insert(uint32_t *table, size_t cap, const tkv__str *names, size_t stride, size_t idx) {
    const tkv__str *s = (const tkv__str *)((const char *)names + idx * stride);
    size_t h = (size_t)XXH3_64bits(s->s, s->n) & (cap - 1);
    for (;; h = (h + 1) & (cap - 1)) {
        if (!table[h]) {
            table[h] = (uint32_t)idx + 1;
            return -1;
        }
        const tkv__str *o = (const tkv__str *)((const char *)names + (table[h] - 1) * stride);
        if (o->n == s->n && !memcmp(o->s, s->s, s->n)) return (long)table[h] - 1;
    }
}

static long hash_find(const uint32_t *table, size_t cap, const tkv__str *names, size_t stride, const char *s) {
    if (!table) return -1;
    size_t n = strlen(s);
    size_t h = (size_t)XXH3_64bits(s, n) & (cap - 1);
    for (;; h = (h + 1) & (cap - 1)) {
        if (!table[h]) return -1;
        const tkv__str *o = (const tkv__str *)((const char *)names + (table[h] - 1) * stride);
        if (o->n == n && !memcmp(o->s, s, n)) return (long)table[h] - 1;
    }
}

const tkv__gguf_kv *tkv__gguf_find(const tkv__gguf *g, const char *key) {
    long i = hash_find(g->kv_hash, g->kv_hash_cap, &g->kv[0].key, sizeof g->kv[0], key);
    return i < 0 ? NULL : &g->kv[i];
}

const tkv__gguf_tensor *tkv__gguf_tensor_find(const tkv__gguf *g, const char *name) {
    long i = hash_find(g->tensor_hash, g->tensor_hash_cap, &g->tensors[0].name, sizeof g->tensors[0], name);
    return i < 0 ? NULL : &g->tensors[i];
}

/* ---- placement of the tensor data --------------------------------------- */

static int by_offset(const void *a, const void *b) {
    const tkv__gguf_tensor *x = *(const tkv__gguf_tensor *const *)a, *y = *(const tkv__gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Make offsets absolute and check alignment, bounds and overlap. */
static tkv_status place_tensors(tkv__gguf *g) {
    for (size_t i = 0; i < g->n_tensors; i++) {
        tkv__gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return tkv__fail(TKV_ERR_FORMAT, "tensor '%s': data offset %llu is not a multiple of the alignment %u",
                             t->name.s, (ull)t->offset, g->alignment);
        uint64_t room = g->size - g->data_offset; /* data_offset <= size was checked */
        if (t->offset > room || t->n_bytes > room - t->offset)
            return tkv__fail(TKV_ERR_FORMAT, "tensor '%s': data [%llu, %llu) runs past end of file (%llu bytes)",
                             t->name.s, (ull)(g->data_offset + t->offset),
                             (ull)(g->data_offset + t->offset + t->n_bytes), (ull)g->size);
        t->offset += g->data_offset;
    }
    if (g->n_tensors < 2) return TKV_OK;
    tkv__gguf_tensor **order = tkv__malloc(g->n_tensors * sizeof *order);
    if (!order) return tkv__fail(TKV_ERR_NOMEM, "out of memory sorting %zu tensors", g->n_tensors);
    for (size_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, by_offset);
    tkv_status st = TKV_OK;
    for (size_t i = 1; i < g->n_tensors && !st; i++) {
        const tkv__gguf_tensor *a = order[i - 1], *b = order[i];
        if (a->offset + a->n_bytes > b->offset)
            st = tkv__fail(TKV_ERR_FORMAT, "tensor '%s': data [%llu, %llu) overlaps tensor '%s' at %llu", a->name.s,
                           (ull)a->offset, (ull)(a->offset + a->n_bytes), b->name.s, (ull)b->offset);
    }
    tkv__free(order);
    return st;
}

/* ---- entry points ------------------------------------------------------- */

static size_t align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

tkv_status tkv__gguf_parse(const void *data, size_t size, tkv__gguf **out) {
    if (!data && size) return tkv__fail(TKV_ERR_INVALID, "GGUF image is NULL");
    walker w = {.p = data, .size = size};
    header h = {0};
    uint32_t alignment;
    uint64_t infos_end;
    tkv_status st = read_header(&w, &h);
    if (st) return st;
    if ((st = walk(&w, &h, NULL, &alignment, &infos_end))) return st;

    uint64_t data_offset = (infos_end + alignment - 1) / alignment * alignment;
    if (h.n_tensors && data_offset > size)
        return tkv__fail(TKV_ERR_FORMAT, "data section at offset %llu starts past the end of the file (%llu bytes)",
                         (ull)data_offset, (ull)size);

    /* One allocation for everything the second walk fills. All counts are
       bounded by the file size, which the first walk checked. */
    size_t kv_cap = hash_cap(h.n_kv), t_cap = hash_cap(h.n_tensors);
    size_t off_kv = align_up(sizeof(tkv__gguf), 16);
    size_t off_t = align_up(off_kv + h.n_kv * sizeof(tkv__gguf_kv), 16);
    size_t off_s = align_up(off_t + h.n_tensors * sizeof(tkv__gguf_tensor), 16);
    size_t off_kh = align_up(off_s + w.n_str_elems * sizeof(tkv__str), 16);
    size_t off_th = off_kh + kv_cap * sizeof(uint32_t);
    size_t off_c = off_th + t_cap * sizeof(uint32_t);
    size_t total = off_c + w.string_bytes + w.n_strings;
    char *mem = tkv__calloc(1, total);
    if (!mem) return tkv__fail(TKV_ERR_NOMEM, "out of memory for GGUF metadata (%zu bytes)", total);

    tkv__gguf *g = (tkv__gguf *)mem;
    g->storage = mem;
    g->data = data;
    g->size = size;
    g->version = h.version;
    g->alignment = alignment;
    g->data_offset = data_offset;
    g->n_kv = h.n_kv;
    g->kv = (tkv__gguf_kv *)(mem + off_kv);
    g->n_tensors = h.n_tensors;
    g->tensors = (tkv__gguf_tensor *)(mem + off_t);
    g->kv_hash = (uint32_t *)(mem + off_kh);
    g->kv_hash_cap = kv_cap;
    g->tensor_hash = (uint32_t *)(mem + off_th);
    g->tensor_hash_cap = t_cap;

    walker w2 = {.p = data, .size = size, .chars = mem + off_c, .str_slots = (tkv__str *)(mem + off_s)};
    read_header(&w2, &h);
    st = walk(&w2, &h, g, &alignment, &infos_end);

    for (size_t i = 0; i < g->n_kv && !st; i++) {
        long dup = hash_insert(g->kv_hash, kv_cap, &g->kv[0].key, sizeof g->kv[0], i);
        if (dup >= 0) st = tkv__fail(TKV_ERR_FORMAT, "metadata key '%s' appears twice (pairs %ld and %zu)", g->kv[i].key.s, dup, i);
    }
    for (size_t i = 0; i < g->n_tensors && !st; i++) {
        long dup = hash_insert(g->tensor_hash, t_cap, &g->tensors[0].name, sizeof g->tensors[0], i);
        if (dup >= 0) st = tkv__fail(TKV_ERR_FORMAT, "tensor '%s' appears twice (infos %ld and %zu)", g->tensors[i].name.s, dup, i);
    }
    if (!st) st = place_tensors(g);
    if (st) {
        tkv__free(mem);
        return st;
    }
    *out = g;
    return TKV_OK;
}

tkv_status tkv__gguf_open(const char *path, tkv__gguf **out) {
    if (!path) return tkv__fail(TKV_ERR_INVALID, "path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tkv__fail(TKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return tkv__fail(TKV_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return tkv__fail(TKV_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < GGUF_HEADER_BYTES) {
        close(fd);
        return tkv__fail(TKV_ERR_FORMAT, "%s: file is %zu bytes, too small for a GGUF header (%u bytes)", path, size,
                         GGUF_HEADER_BYTES);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return tkv__fail(TKV_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
    tkv__gguf *g = NULL;
    tkv_status st = tkv__gguf_parse(map, size, &g);
    if (st) {
        munmap(map, size);
        char msg[400];
        snprintf(msg, sizeof msg, "%s", tkv_last_error(NULL));
        return tkv__fail(st, "%s: %s", path, msg);
    }
    g->map = map;
    *out = g;
    return TKV_OK;
}

void tkv__gguf_release(const tkv__gguf *g, const void *p, size_t n) {
    const uintptr_t lo = (uintptr_t)p, hi = lo + n, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (!g->map || lo < (uintptr_t)g->data || hi > (uintptr_t)g->data + g->size || page == 0) return;
    const uintptr_t a = (lo + page - 1) / page * page, b = hi / page * page;
    /* a private read-only mapping: dropped pages come back from the file */
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

void tkv__gguf_free(tkv__gguf *g) {
    if (!g) return;
    if (g->map) munmap(g->map, (size_t)g->size);
    tkv__free(g->storage);
}
