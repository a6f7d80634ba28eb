/*
 * cachefile.c — the cache file format: writing a prefix (token ids and
 * their K/V) crash-safely, and parsing and validating a file image.
 *
 * Format, version 2. One file holds one prefix of one namespace: the token
 * ids of positions 0..n_tokens-1 and the K/V of positions kv_from..n_tokens-1
 * (kv_from is 0 for a sequence; for a prefix-index node it is the node's
 * depth, and the tokens before it must already be cached when it loads).
 * Every integer is little-endian; K/V rows are stored as the cache holds
 * them (F16, F32 or 32-element blocks such as Q8_0, little-endian hosts; K
 * and V may differ in type). Files are a sequence
 * of blocks, each followed by its XXH3-64 checksum, seeded with the block's
 * number so that blocks cannot be swapped or repeated unnoticed:
 *
 *   block 0, header (96 bytes, checksum at 88 over bytes 0..87, seed 0)
 *     0  magic        "TKVCACHE"
 *     8  u32 version  1
 *    12  u32 header   96 (bytes of this block, checksum included)
 *    16  u64 fp[2]    model fingerprint (tkv_model_fingerprint: XXH3-128 of
 *                     the hyperparameters, tensor table and tokenizer)
 *    32  u32 kv_type  tkv_type of the K rows (F16, F32, Q8_0, Q4_0, ...)
 *    36  u32 n_layer
 *    40  u32 n_embd_kv  elements of one K (or V) row
 *    44  u32 n_vocab
 *    48  u64 row_size   bytes of one K row
 *    56  u64 ns         namespace of the prefix
 *    64  u32 n_tokens
 *    68  u32 kv_from
 *    72  u64 rank       order in a tkv_cache_save, 0 = most recently used
 *    80  u32 v_type     tkv_type of the V rows
 *    84  u32 row_size_v bytes of one V row
 *    88  u64 checksum
 *   block 1, tokens: n_tokens int32 ids, then n_tokens int32 positions
 *     (0..n_tokens-1), then the checksum (seed 1);
 *   blocks 2 .. 2 + 2 n_layer - 1: for each layer, its K rows then its V
 *     rows of positions kv_from..n_tokens-1 (row_size and row_size_v bytes
 *     each), each block followed by its checksum (seed = block number).
 * A version 2 file ends there: its size is exactly
 *   96 + 8 n_tokens + 8 + n_layer ((n_tokens - kv_from) (row_size + row_size_v) + 16).
 * Version 3 (a hybrid model's prefix with recurrent-state checkpoints,
 * kv/kvstate.h) adds two blocks after them:
 *   block 2 + 2 n_layer: u32 n_states, u32 state_floats, checksum;
 *   block 3 + 2 n_layer: n_states records, each u32 position (increasing,
 *     in kv_from..n_tokens-1: the state after that position's token) and
 *     state_floats f32, then the checksum;
 * so its size is the version 2 size + 24 + n_states (4 + 4 state_floats),
 * from which the header check derives n_states (state_floats is the
 * model's). A file without checkpoints is written as version 2, byte for
 * byte what earlier builds wrote.
 * Version 4 (a prefix with known tokens: the token a sampler chose from the
 * logits computed for a position's token and the key of its state,
 * kv/kvknown.c, recorded by an arithmetic whose identity the file carries,
 * runtime/arith_id.c) says its counts instead:
 *   block 2 + 2 n_layer: u32 n_states, u32 state_floats, u32 n_known,
 *     u32 0, u64 arith (the identity), checksum;
 *   block 3 + 2 n_layer: n_states checkpoint records as version 3's (none
 *     is allowed), checksum;
 *   block 4 + 2 n_layer: n_known records, each u32 position (increasing, in
 *     kv_from..n_tokens-1), i32 token (< n_vocab) and u64 key (not 0),
 *     checksum;
 * so its size is the version 2 size + 48 + n_states (4 + 4 state_floats) +
 * 16 n_known. The header check alone cannot derive the counts; the whole
 * image's parse checks them and the exact size. Only a file with known
 * tokens is written as version 4.
 * Version 1 files (bytes 80..87 zero, V of K's type and size) are read too.
 *
 * Reading checks all of it before anything is used: size, magic, version,
 * the header checksum, every field against the context (fingerprint, KV
 * type, geometry, n_tokens <= n_cells, kv_from <= n_tokens), the exact size,
 * every block checksum, token ids < n_vocab and positions 0..n-1.
 *
 * Writing goes to NAME.tmp.PID.RANDOM in the same directory (created
 * exclusively, never through a link, mode 0600), is fsynced, then
 * renamed over NAME: a reader sees the old file or the new one, never half
 * of one (the caller fsyncs the directory to make the rename durable).
 */
#include "cachefile.h"

#include "base/alloc.h"
#include "base/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

static const uint8_t magic[8] = {'T', 'K', 'V', 'C', 'A', 'C', 'H', 'E'};

static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

/* Byte offsets of the layout (see the top of the file). */
enum { H_CHECKSUM = 88, H_BYTES = TKV__CACHEFILE_HEADER_BYTES };

/* Bytes of one layer's K block and V block (checksums not included). */
static uint64_t k_block_bytes(const tkv__phdr *h) { return (uint64_t)(h->n_tokens - h->kv_from) * h->row_size; }
static uint64_t v_block_bytes(const tkv__phdr *h) { return (uint64_t)(h->n_tokens - h->kv_from) * h->row_size_v; }

/* Bytes of one checkpoint record, of one known token's, and of the version 2 part of a file. */
static uint64_t state_record_bytes(const tkv__phdr *h) { return 4 + 4ull * h->state_floats; }
enum { KNOWN_RECORD = 16, V4_COUNTS = 24, V4_EXTRA = V4_COUNTS + 8 + 8 + 8 /* the counts and three checksums */ };
static uint64_t base_size(const tkv__phdr *h) {
    return H_BYTES + 8ull * h->n_tokens + 8 + (uint64_t)h->n_layer * (k_block_bytes(h) + v_block_bytes(h) + 16);
}

/* The version a file with h's contents is written as. */
static uint32_t version_of(const tkv__phdr *h) { return h->n_known ? 4u : h->n_states ? 3u : 2u; }

uint64_t tkv__cachefile_file_size(const tkv__phdr *h) {
    const uint64_t states = h->n_states * state_record_bytes(h);
    switch (version_of(h)) {
    case 4: return base_size(h) + V4_EXTRA + states + (uint64_t)h->n_known * KNOWN_RECORD;
    case 3: return base_size(h) + 24 + states;
    default: return base_size(h);
    }
}

void tkv__cachefile_count_extras(const tkv__kvcache *kv, tkv__phdr *h, const uint32_t *cells) {
    h->n_states = 0, h->n_known = 0;
    h->state_floats = kv->st ? (uint32_t)kv->st->floats : 0;
    for (uint32_t i = 0; i < h->n_tokens - h->kv_from; i++) {
        if (kv->st) h->n_states += tkv__kv_state_of(kv, cells[i]) != NULL;
        if (h->arith) h->n_known += kv->chosen[cells[i]] != TKV_TOKEN_NULL;
    }
}

void tkv__cachefile_known(const tkv__prec *r, uint32_t i, uint32_t *pos, tkv_token *tok, uint64_t *key) {
    *pos = get32(r->known + (uint64_t)i * KNOWN_RECORD);
    *tok = (tkv_token)get32(r->known + (uint64_t)i * KNOWN_RECORD + 4);
    *key = get64(r->known + (uint64_t)i * KNOWN_RECORD + 8);
}

void tkv__cachefile_state(const tkv__prec *r, uint32_t i, uint32_t *pos, float *out) {
    const uint8_t *p = r->states + (uint64_t)i * state_record_bytes(&r->h);
    *pos = get32(p);
    for (uint32_t k = 0; k < r->h.state_floats; k++) {
        const uint32_t b = get32(p + 4 + 4ull * k);
        memcpy(out + k, &b, 4);
    }
}

static void encode_header(const tkv__phdr *h, uint8_t p[H_BYTES]) {
    memset(p, 0, H_BYTES);
    memcpy(p, magic, sizeof magic);
    put32(p + 8, version_of(h));
    put32(p + 12, H_BYTES);
    put64(p + 16, h->fp[0]);
    put64(p + 24, h->fp[1]);
    put32(p + 32, h->kv_type);
    put32(p + 36, h->n_layer);
    put32(p + 40, h->n_embd_kv);
    put32(p + 44, h->n_vocab);
    put64(p + 48, h->row_size);
    put64(p + 56, h->ns);
    put32(p + 64, h->n_tokens);
    put32(p + 68, h->kv_from);
    put64(p + 72, h->rank);
    put32(p + 80, h->v_type);
    put32(p + 84, (uint32_t)h->row_size_v);
    put64(p + H_CHECKSUM, XXH3_64bits_withSeed(p, H_CHECKSUM, 0));
}

static void decode_header(const uint8_t *p, tkv__phdr *h) {
    h->fp[0] = get64(p + 16);
    h->fp[1] = get64(p + 24);
    h->kv_type = get32(p + 32);
    h->n_layer = get32(p + 36);
    h->n_embd_kv = get32(p + 40);
    h->n_vocab = get32(p + 44);
    h->row_size = get64(p + 48);
    h->ns = get64(p + 56);
    h->n_tokens = get32(p + 64);
    h->kv_from = get32(p + 68);
    h->rank = get64(p + 72);
    if (get32(p + 8) == 1) { /* version 1: V as K */
        h->v_type = h->kv_type;
        h->row_size_v = h->row_size;
    } else {
        h->v_type = get32(p + 80);
        h->row_size_v = get32(p + 84);
    }
}

static const char *type_name(uint32_t t) {
    const char *s = t < TKV_TYPE_COUNT ? tkv_type_name((tkv_type)t) : NULL;
    return s ? s : "unknown";
}

tkv_status tkv__cachefile_check_header(const char *name, const uint8_t *p, uint64_t file_size, const tkv__pexpect *e,
                                     tkv__phdr *h) {
    if (file_size < H_BYTES)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': truncated (%llu bytes, shorter than the %u-byte header)", name,
                         (unsigned long long)file_size, H_BYTES);
    if (memcmp(p, magic, sizeof magic) != 0)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': not a tokenkv cache file (bad magic)", name);
    const uint32_t version = get32(p + 8);
    if (version < 1 || version > TKV__CACHEFILE_VERSION)
        return tkv__fail(TKV_ERR_UNSUPPORTED,
                         "cache file '%s': format version %u is not supported (this build reads versions 1 to %u)", name,
                         version, TKV__CACHEFILE_VERSION);
    if (get64(p + H_CHECKSUM) != XXH3_64bits_withSeed(p, H_CHECKSUM, 0))
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': block 0 (header) checksum mismatch (the file is corrupt)", name);
    if (get32(p + 12) != H_BYTES || (version == 1 && get64(p + 80) != 0))
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': header size %u or reserved field %llu is wrong", name,
                         get32(p + 12), (unsigned long long)get64(p + 80));
    decode_header(p, h);
    if (h->fp[0] != e->fp[0] || h->fp[1] != e->fp[1])
        return tkv__fail(TKV_ERR_INVALID,
                         "cache file '%s': model fingerprint differs (file from another model: %016llx%016llx, this "
                         "model %016llx%016llx)",
                         name, (unsigned long long)h->fp[1], (unsigned long long)h->fp[0], (unsigned long long)e->fp[1],
                         (unsigned long long)e->fp[0]);
    if (h->kv_type != e->kv_type || h->v_type != e->v_type)
        return tkv__fail(TKV_ERR_INVALID, "cache file '%s': KV types K %s, V %s differ from the context's K %s, V %s", name,
                         type_name(h->kv_type), type_name(h->v_type), type_name(e->kv_type), type_name(e->v_type));
    if (h->n_layer != e->n_layer || h->n_embd_kv != e->n_embd_kv || h->row_size != e->row_size ||
        h->row_size_v != e->row_size_v || h->n_vocab != e->n_vocab)
        return tkv__fail(TKV_ERR_INVALID,
                         "cache file '%s': geometry differs (n_layer %u, K/V row of %u elements in %llu bytes, vocabulary "
                         "of %u; the context has %u, %u, %llu, %u)",
                         name, h->n_layer, h->n_embd_kv, (unsigned long long)h->row_size, h->n_vocab, e->n_layer,
                         e->n_embd_kv, (unsigned long long)e->row_size, e->n_vocab);
    if (h->n_tokens > e->n_cells)
        return tkv__fail(TKV_ERR_FULL, "cache file '%s': holds %u tokens, more than the context's %u cells", name,
                         h->n_tokens, e->n_cells);
    if (h->kv_from > h->n_tokens)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': K/V from position %u of a %u-token prefix", name, h->kv_from,
                         h->n_tokens);
    /* the fields are bounded by the context's own sizes now: no overflow */
    h->n_states = 0, h->n_known = 0, h->arith = 0;
    h->state_floats = e->state_floats;
    if (version == 4) { /* the counts are in the image: tkv__cachefile_parse checks them and the exact size */
        if (file_size < base_size(h) + V4_EXTRA)
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': truncated (%llu bytes, its K/V and counts need %llu)",
                             name, (unsigned long long)file_size, (unsigned long long)(base_size(h) + V4_EXTRA));
        return TKV_OK;
    }
    if (version == 3) { /* the checkpoints: as many as the size holds after the version 2 part */
        if (!e->state_floats)
            return tkv__fail(TKV_ERR_INVALID, "cache file '%s': holds recurrent states, and this model has none", name);
        const uint64_t base = base_size(h) + 24, rec = state_record_bytes(h);
        if (file_size < base + rec || (file_size - base) % rec)
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': %llu bytes are not the %llu of its K/V and whole checkpoints "
                             "of %llu bytes", name, (unsigned long long)file_size, (unsigned long long)base,
                             (unsigned long long)rec);
        const uint64_t n = (file_size - base) / rec;
        if (n > h->n_tokens - h->kv_from)
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': %llu checkpoints for %u positions", name,
                             (unsigned long long)n, h->n_tokens - h->kv_from);
        h->n_states = (uint32_t)n;
    }
    const uint64_t want = tkv__cachefile_file_size(h);
    if (file_size < want)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': truncated (%llu bytes, the header says %llu)", name,
                         (unsigned long long)file_size, (unsigned long long)want);
    if (file_size > want)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': %llu bytes after the end the header gives (%llu bytes)", name,
                         (unsigned long long)(file_size - want), (unsigned long long)want);
    return TKV_OK;
}

tkv_token tkv__cachefile_token(const tkv__prec *rec, uint32_t i) { return (tkv_token)get32(rec->tokens + 4ull * i); }

/* A version 4 image's counts block at ext (block b) into h, checked against the context e and the image's size. */
static tkv_status v4_counts(const char *name, const uint8_t *ext, uint32_t b, size_t size, const tkv__pexpect *e,
                            tkv__phdr *h) {
    if (get64(ext + V4_COUNTS) != XXH3_64bits_withSeed(ext, V4_COUNTS, b))
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': block %u (counts) checksum mismatch (the file is corrupt)",
                         name, b);
    const uint32_t n_states = get32(ext), floats = get32(ext + 4), n_known = get32(ext + 8), m = h->n_tokens - h->kv_from;
    if (get32(ext + 12) != 0)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': reserved count %u is not 0", name, get32(ext + 12));
    if (n_states && !e->state_floats)
        return tkv__fail(TKV_ERR_INVALID, "cache file '%s': holds recurrent states, and this model has none", name);
    if (n_states && floats != e->state_floats)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': checkpoints of %u floats, the model's state has %u", name,
                         floats, e->state_floats);
    if (n_states > m || n_known > m)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': %u checkpoints and %u known tokens for %u positions", name,
                         n_states, n_known, m);
    h->arith = get64(ext + 16);
    if (!n_known || !h->arith)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': version 4 with %u known tokens of arithmetic %016llx (it "
                         "holds some, of one)", name, n_known, (unsigned long long)h->arith);
    h->n_states = n_states, h->n_known = n_known;
    const uint64_t want = tkv__cachefile_file_size(h);
    if (size != want)
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': %llu bytes, but its counts say %llu", name,
                         (unsigned long long)size, (unsigned long long)want);
    return TKV_OK;
}

tkv_status tkv__cachefile_parse(const char *name, const uint8_t *data, size_t size, const tkv__pexpect *e,
                              tkv__prec *rec) {
    tkv__phdr h;
    tkv_status st = tkv__cachefile_check_header(name, data, size, e, &h);
    if (st) return st;
    const uint8_t *tok = data + H_BYTES;
    const size_t tok_bytes = 8 * (size_t)h.n_tokens;
    if (get64(tok + tok_bytes) != XXH3_64bits_withSeed(tok, tok_bytes, 1))
        return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': block 1 (tokens) checksum mismatch (the file is corrupt)", name);
    for (uint32_t i = 0; i < h.n_tokens; i++) {
        const int32_t t = (int32_t)get32(tok + 4ull * i), pos = (int32_t)get32(tok + 4ull * h.n_tokens + 4ull * i);
        if (t < 0 || (uint32_t)t >= e->n_vocab)
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': token %u: id %d is out of range (vocabulary of %u)", name, i,
                             (int)t, e->n_vocab);
        if (pos != (int32_t)i)
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': token %u is at position %d, expected %u", name, i, (int)pos,
                             i);
    }
    const uint64_t bk = k_block_bytes(&h), bv = v_block_bytes(&h);
    const uint8_t *kv = tok + tok_bytes + 8;
    for (uint32_t b = 0; b < 2 * h.n_layer; b++) {
        const uint8_t *p = kv + (b / 2) * (bk + bv + 16) + (b % 2) * (bk + 8);
        const uint64_t blk = b % 2 ? bv : bk;
        if (get64(p + blk) != XXH3_64bits_withSeed(p, (size_t)blk, 2 + b))
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': block %u (layer %u %c) checksum mismatch (the file is corrupt)",
                             name, 2 + b, b / 2, b % 2 ? 'V' : 'K');
    }
    rec->states = NULL, rec->known = NULL;
    const uint32_t b = 2 + 2 * h.n_layer; /* the first block after the K/V */
    const uint8_t *ext = kv + h.n_layer * (bk + bv + 16), *recs = NULL;
    if (get32(data + 8) == 4) { /* blocks b (the counts), b + 1 (the checkpoints), b + 2 (the known tokens) */
        if ((st = v4_counts(name, ext, b, size, e, &h))) return st;
        recs = ext + V4_COUNTS + 8;
        const uint64_t all = h.n_states * state_record_bytes(&h), kall = (uint64_t)h.n_known * KNOWN_RECORD;
        const uint8_t *kn = recs + all + 8;
        if (get64(recs + all) != XXH3_64bits_withSeed(recs, all, b + 1) ||
            get64(kn + kall) != XXH3_64bits_withSeed(kn, kall, b + 2))
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': block %u or %u (checkpoints, known tokens) checksum "
                             "mismatch (the file is corrupt)", name, b + 1, b + 2);
        for (uint32_t i = 0; i < h.n_known; i++) {
            const uint32_t pos = get32(kn + i * KNOWN_RECORD), prev = i ? get32(kn + (i - 1) * KNOWN_RECORD) : 0;
            const int32_t t = (int32_t)get32(kn + i * KNOWN_RECORD + 4);
            if (pos < h.kv_from || pos >= h.n_tokens || (i && pos <= prev))
                return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': known token %u at position %u (positions %u..%u, "
                                 "increasing)", name, i, pos, h.kv_from, h.n_tokens - 1);
            if (t < 0 || (uint32_t)t >= e->n_vocab)
                return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': known token %u: id %d is out of range (vocabulary "
                                 "of %u)", name, i, (int)t, e->n_vocab);
            if (get64(kn + i * KNOWN_RECORD + 8) == 0)
                return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': known token %u has no key", name, i);
        }
        rec->known = kn;
    } else if (h.n_states) { /* version 3: blocks b (the counts) and b + 1 (the records) */
        const uint8_t *cnt = ext;
        recs = cnt + 16;
        const uint64_t all = h.n_states * state_record_bytes(&h);
        if (get64(cnt + 8) != XXH3_64bits_withSeed(cnt, 8, b) || get64(recs + all) != XXH3_64bits_withSeed(recs, all, b + 1))
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': block %u or %u (checkpoints) checksum mismatch (the file is "
                             "corrupt)", name, b, b + 1);
        if (get32(cnt) != h.n_states || get32(cnt + 4) != h.state_floats)
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': %u checkpoints of %u floats, but its size says %u of %u",
                             name, get32(cnt), get32(cnt + 4), h.n_states, h.state_floats);
    }
    const uint64_t rb = state_record_bytes(&h);
    for (uint32_t i = 0; i < h.n_states; i++) {
        const uint32_t pos = get32(recs + i * rb), prev = i ? get32(recs + (i - 1) * rb) : 0;
        if (pos < h.kv_from || pos >= h.n_tokens || (i && pos <= prev))
            return tkv__fail(TKV_ERR_FORMAT, "cache file '%s': checkpoint %u at position %u (positions %u..%u, "
                             "increasing)", name, i, pos, h.kv_from, h.n_tokens - 1);
    }
    if (h.n_states) rec->states = recs;
    rec->h = h;
    rec->tokens = tok;
    rec->kv = kv;
    return TKV_OK;
}

void tkv__cachefile_reseal(uint8_t *data, size_t size) {
    if (size < H_BYTES) return;
    put64(data + H_CHECKSUM, XXH3_64bits_withSeed(data, H_CHECKSUM, 0));
    tkv__phdr h;
    decode_header(data, &h);
    if (h.kv_from > h.n_tokens) return;
    /* the layout, without overflow, must fit the image exactly */
    uint64_t bk, bv, layer, kv_all, total;
    if (__builtin_mul_overflow((uint64_t)(h.n_tokens - h.kv_from), h.row_size, &bk) ||
        __builtin_mul_overflow((uint64_t)(h.n_tokens - h.kv_from), h.row_size_v, &bv) ||
        __builtin_add_overflow(bk, bv, &layer) || __builtin_add_overflow(layer, 16, &layer) ||
        __builtin_mul_overflow(layer, (uint64_t)h.n_layer, &kv_all) ||
        __builtin_add_overflow(kv_all, H_BYTES + 8ull * h.n_tokens + 8, &total) || total > size)
        return;
    /* versions 3 and 4: the counts block after the K/V says how many checkpoints of how many floats follow (and
       version 4's, how many known tokens after them) */
    const uint32_t version = get32(data + 8);
    uint64_t n_st = 0, rec = 0, n_kn = 0, states = 0, need = 0;
    if (total != size && version == 4) {
        if (size - total < V4_EXTRA) return;
        n_st = get32(data + total), rec = 4 + 4ull * get32(data + total + 4), n_kn = get32(data + total + 8);
        if (__builtin_mul_overflow(n_st, rec, &states) || __builtin_add_overflow(states, V4_EXTRA + KNOWN_RECORD * n_kn, &need) ||
            need != size - total)
            return;
    } else if (total != size) {
        if (size - total < 24 || version != 3) return;
        n_st = get32(data + total), rec = 4 + 4ull * get32(data + total + 4);
        if (n_st == 0 || (size - total - 24) / rec != n_st || (size - total - 24) % rec) return;
    }
    uint8_t *tok = data + H_BYTES;
    const size_t tok_bytes = 8 * (size_t)h.n_tokens;
    put64(tok + tok_bytes, XXH3_64bits_withSeed(tok, tok_bytes, 1));
    uint8_t *kv = tok + tok_bytes + 8;
    for (uint32_t b = 0; b < 2 * h.n_layer; b++) {
        uint8_t *p = kv + (b / 2) * layer + (b % 2) * (bk + 8);
        const uint64_t blk = b % 2 ? bv : bk;
        put64(p + blk, XXH3_64bits_withSeed(p, (size_t)blk, 2 + b));
    }
    if (total != size && version == 4) {
        uint8_t *cnt = data + total, *recs = cnt + V4_COUNTS + 8, *kn = recs + states + 8;
        put64(cnt + V4_COUNTS, XXH3_64bits_withSeed(cnt, V4_COUNTS, 2 + 2 * h.n_layer));
        put64(recs + states, XXH3_64bits_withSeed(recs, (size_t)states, 3 + 2 * h.n_layer));
        put64(kn + KNOWN_RECORD * n_kn, XXH3_64bits_withSeed(kn, (size_t)(KNOWN_RECORD * n_kn), 4 + 2 * h.n_layer));
    } else if (n_st) {
        uint8_t *cnt = data + total, *recs = cnt + 16;
        put64(cnt + 8, XXH3_64bits_withSeed(cnt, 8, 2 + 2 * h.n_layer));
        put64(recs + n_st * rec, XXH3_64bits_withSeed(recs, (size_t)(n_st * rec), 3 + 2 * h.n_layer));
    }
}

/* ---- writing -------------------------------------------------------------- */

/* Buffered writes to a file descriptor, hashing each block as it goes. */
typedef struct writer {
    XXH3_state_t hash;
    int fd;
    int err;        /* errno of the first failed write; 0: none */
    uint8_t *buf;   /* (cap) */
    size_t n, cap;
    uint64_t block; /* number of the block being written */
} writer;

static void w_flush(writer *w) {
    for (size_t off = 0; off < w->n && !w->err;) {
        ssize_t r = write(w->fd, w->buf + off, w->n - off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) w->err = r < 0 ? errno : EIO;
        else off += (size_t)r;
    }
    w->n = 0;
}

static void w_raw(writer *w, const void *p, size_t n) {
    const uint8_t *s = p;
    while (n && !w->err) {
        if (w->n == w->cap) w_flush(w);
        size_t k = w->cap - w->n < n ? w->cap - w->n : n;
        memcpy(w->buf + w->n, s, k);
        w->n += k, s += k, n -= k;
    }
}

static void w_put(writer *w, const void *p, size_t n) {
    XXH3_64bits_update(&w->hash, p, n);
    w_raw(w, p, n);
}

/* End the current block: write its checksum and start the next one. */
static void w_end_block(writer *w) {
    uint8_t b[8];
    put64(b, XXH3_64bits_digest(&w->hash));
    w_raw(w, b, sizeof b);
    XXH3_64bits_reset_withSeed(&w->hash, ++w->block);
}

/* The body: blocks 1.. (tokens, then K and V of each layer). */
static void write_body(writer *w, const tkv__kvcache *kv, const tkv__phdr *h, const tkv_token *tokens,
                       const uint32_t *cells) {
    XXH3_64bits_reset_withSeed(&w->hash, w->block = 1);
    uint8_t b[4];
    for (uint32_t i = 0; i < h->n_tokens; i++) put32(b, (uint32_t)tokens[i]), w_put(w, b, 4);
    for (uint32_t i = 0; i < h->n_tokens; i++) put32(b, i), w_put(w, b, 4);
    w_end_block(w);
    const uint32_t m = h->n_tokens - h->kv_from;
    for (uint32_t l = 0; l < kv->rows.n_layer; l++) {
        for (uint32_t i = 0; i < m; i++) w_put(w, tkv__kv_k(kv, l, cells[i]), kv->rows.row_size_k);
        w_end_block(w);
        for (uint32_t i = 0; i < m; i++) w_put(w, tkv__kv_v(kv, l, cells[i]), kv->rows.row_size_v);
        w_end_block(w);
    }
    const uint32_t version = version_of(h);
    if (version == 2) return;
    /* the counts (h came from tkv__cachefile_count_extras), then each checkpoint after its position, then (version
       4) each known token after its position */
    put32(b, h->n_states), w_put(w, b, 4);
    put32(b, h->state_floats), w_put(w, b, 4);
    if (version == 4) {
        uint8_t b8[8];
        put32(b, h->n_known), w_put(w, b, 4);
        put32(b, 0), w_put(w, b, 4);
        put64(b8, h->arith), w_put(w, b8, 8);
    }
    w_end_block(w);
    for (uint32_t i = 0; i < m && h->n_states; i++) {
        const float *st = tkv__kv_state_of(kv, cells[i]);
        if (!st) continue;
        put32(b, h->kv_from + i), w_put(w, b, 4);
        for (uint32_t k = 0; k < h->state_floats; k++) {
            uint32_t v;
            memcpy(&v, st + k, 4);
            put32(b, v), w_put(w, b, 4);
        }
    }
    w_end_block(w);
    if (version != 4) return;
    for (uint32_t i = 0; i < m; i++) {
        const tkv_token t = kv->chosen[cells[i]];
        if (t == TKV_TOKEN_NULL) continue;
        uint8_t b8[8];
        put32(b, h->kv_from + i), w_put(w, b, 4);
        put32(b, (uint32_t)t), w_put(w, b, 4);
        put64(b8, kv->chosen_key[cells[i]]), w_put(w, b8, 8);
    }
    w_end_block(w);
}

void tkv__cachefile_encode(const tkv__kvcache *kv, const tkv__phdr *h, const tkv_token *tokens, const uint32_t *cells,
                           uint8_t *buf) {
    /* a writer whose buffer is the whole image never flushes: no descriptor needed */
    writer w = {.fd = -1, .buf = buf, .cap = (size_t)tkv__cachefile_file_size(h)};
    encode_header(h, buf);
    w.n = H_BYTES;
    write_body(&w, kv, h, tokens, cells);
}

tkv_status tkv__cachefile_trusted(const char *path, const struct stat *sb) {
    if (sb->st_uid != geteuid())
        return tkv__fail(TKV_ERR_IO, "'%s' is owned by uid %u, not by this user (uid %u): refused", path,
                         (unsigned)sb->st_uid, (unsigned)geteuid());
    if (sb->st_mode & (S_IWGRP | S_IWOTH))
        return tkv__fail(TKV_ERR_IO, "'%s' is writable by other users (mode %04o): refused (chmod go-w)", path,
                         (unsigned)(sb->st_mode & 07777));
    return TKV_OK;
}

/* 64 bits no other process can guess: the temporary file's name is not a target to plant a link at. */
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

/* Create PATH.tmp.PID.RANDOM for w (mode 0600, exclusively, never through a planted link: it holds prompts);
   *tmp receives its tkv__malloc'd name. */
static tkv_status open_tmp(const char *path, writer *w, char **tmp) {
    const size_t plen = strlen(path);
    *tmp = tkv__malloc(plen + 48);
    w->fd = -1;
    w->buf = tkv__malloc(w->cap);
    if (!*tmp || !w->buf) {
        tkv__free(*tmp);
        tkv__free(w->buf);
        *tmp = NULL, w->buf = NULL;
        return tkv__fail(TKV_ERR_NOMEM, "out of memory writing cache file '%s'", path);
    }
    snprintf(*tmp, plen + 48, "%s.tmp.%ld.%016llx", path, (long)getpid(), unguessable());
    w->fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (w->fd < 0) {
        tkv_status st = tkv__fail(TKV_ERR_IO, "cache file '%s': cannot create: %s", *tmp, strerror(errno));
        tkv__free(*tmp);
        tkv__free(w->buf);
        *tmp = NULL, w->buf = NULL;
        return st;
    }
    return TKV_OK;
}

/* Flush, fsync and close w's temporary file, then rename it over path; nothing is left behind on failure. */
static tkv_status commit_tmp(const char *path, writer *w, char *tmp) {
    tkv_status st = TKV_OK;
    w_flush(w);
    if (!w->err && fsync(w->fd) != 0) w->err = errno;
    if (close(w->fd) != 0 && !w->err) w->err = errno;
    w->fd = -1;
    if (w->err) {
        st = tkv__fail(TKV_ERR_IO, "cache file '%s': cannot write: %s", tmp, strerror(w->err));
    } else if (rename(tmp, path) != 0) {
        st = tkv__fail(TKV_ERR_IO, "cache file '%s': cannot rename %s over it: %s", path, tmp, strerror(errno));
    }
    if (st) unlink(tmp);
    tkv__free(tmp);
    tkv__free(w->buf);
    return st;
}

tkv_status tkv__cachefile_write(const tkv__kvcache *kv, const char *path, const tkv__phdr *h, const tkv_token *tokens,
                              const uint32_t *cells) {
    writer w = {.cap = 1 << 18};
    char *tmp;
    tkv_status st = open_tmp(path, &w, &tmp);
    if (st) return st;
    uint8_t hdr[H_BYTES];
    encode_header(h, hdr);
    w_raw(&w, hdr, sizeof hdr);
    write_body(&w, kv, h, tokens, cells);
    return commit_tmp(path, &w, tmp);
}

tkv_status tkv__cachefile_write_bytes(const char *path, const void *data, size_t size) {
    writer w = {.cap = 64}; /* unused: the data is written from where it is */
    char *tmp;
    tkv_status st = open_tmp(path, &w, &tmp);
    if (st) return st;
    /* straight from data: the buffer only holds what w_raw copies */
    for (const uint8_t *p = data; size && !w.err;) {
        const size_t k = size < (size_t)1 << 30 ? size : (size_t)1 << 30;
        w_flush(&w);
        ssize_t r = write(w.fd, p, k);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) w.err = r < 0 ? errno : EIO;
        else p += r, size -= (size_t)r;
    }
    return commit_tmp(path, &w, tmp);
}

tkv_status tkv__cachefile_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tkv__fail(TKV_ERR_IO, "cache directory '%s': cannot open: %s", dir, strerror(errno));
    int rc = fsync(fd), e = errno;
    close(fd);
    /* some file systems cannot fsync a directory (EINVAL): the rename is then as durable as they make it */
    if (rc != 0 && e != EINVAL)
        return tkv__fail(TKV_ERR_IO, "cache directory '%s': cannot fsync: %s", dir, strerror(e));
    return TKV_OK;
}

/* ---- reading -------------------------------------------------------------- */

/* Read exactly n bytes from fd (a regular file that should have them). */
static int read_all(int fd, uint8_t *p, size_t n) {
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) return EIO; /* shorter than fstat said: the file changed */
        p += r, n -= (size_t)r;
    }
    return 0;
}

tkv_status tkv__cachefile_read(const char *path, uint8_t *buf, size_t cap, size_t *size) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC); /* a FIFO must not block us; no links */
    if (fd < 0) return tkv__fail(TKV_ERR_IO, "cache file '%s': cannot open: %s", path, strerror(errno));
    struct stat sb;
    tkv_status st = TKV_OK;
    int e;
    if (fstat(fd, &sb) != 0) {
        st = tkv__fail(TKV_ERR_IO, "cache file '%s': cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = tkv__fail(TKV_ERR_IO, "cache file '%s': not a regular file", path);
    } else if ((st = tkv__cachefile_trusted(path, &sb)) == TKV_OK) {
        *size = (size_t)sb.st_size;
        size_t n = *size < cap ? *size : cap;
        if ((e = read_all(fd, buf, n)) != 0)
            st = tkv__fail(TKV_ERR_IO, "cache file '%s': cannot read: %s", path, strerror(e));
    }
    close(fd);
    return st;
}

tkv_status tkv__cachefile_read_file(const char *path, uint8_t **data, size_t *size) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC); /* a FIFO must not block us; no links */
    if (fd < 0) return tkv__fail(TKV_ERR_IO, "cache file '%s': cannot open: %s", path, strerror(errno));
    struct stat sb;
    tkv_status st = TKV_OK;
    uint8_t *buf = NULL;
    int e;
    if (fstat(fd, &sb) != 0) {
        st = tkv__fail(TKV_ERR_IO, "cache file '%s': cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = tkv__fail(TKV_ERR_IO, "cache file '%s': not a regular file", path);
    } else if ((st = tkv__cachefile_trusted(path, &sb)) != TKV_OK) {
        /* refused: st says why */
    } else if (!(buf = tkv__malloc((size_t)sb.st_size))) {
        st = tkv__fail(TKV_ERR_NOMEM, "out of memory reading cache file '%s' (%lld bytes)", path, (long long)sb.st_size);
    } else if ((e = read_all(fd, buf, (size_t)sb.st_size)) != 0) {
        st = tkv__fail(TKV_ERR_IO, "cache file '%s': cannot read: %s", path, strerror(e));
    }
    close(fd);
    if (st) {
        tkv__free(buf);
        return st;
    }
    *data = buf;
    *size = (size_t)sb.st_size;
    return TKV_OK;
}
