/*
 * cachefile.h — the cache file format: one prefix (token ids with their K/V
 * rows) per file, checked against the model fingerprint and block checksums
 * (the format is described at the top of cachefile.c). Writing a prefix out
 * of the cache crash-safely, and reading and validating a file image.
 *
 * runtime/persist.c puts validated images into the cache (tkv_seq_load,
 * tkv_cache_load) and chooses what to write (tkv_seq_save, tkv_cache_save).
 */
#ifndef TKV_CACHEFILE_H
#define TKV_CACHEFILE_H

#include "kvcache.h"

#include <stdint.h>

#define TKV__CACHEFILE_VERSION 4u /* 3: with recurrent-state checkpoints; 4: with known tokens; 2: neither */
#define TKV__CACHEFILE_HEADER_BYTES 96u
#define TKV__CACHEFILE_EXT ".tkvc"

/* The fields of a file header (all validated by tkv__cachefile_check_header). */
typedef struct tkv__phdr {
    uint64_t fp[2];     /* model fingerprint */
    uint32_t kv_type, n_layer, n_embd_kv, n_vocab; /* kv_type: K's */
    uint64_t row_size;  /* bytes of one K row */
    uint32_t v_type;    /* V's type (version 1: K's) */
    uint64_t row_size_v;/* bytes of one V row */
    uint64_t ns;        /* namespace */
    uint32_t n_tokens;  /* the prefix: positions 0..n_tokens-1 */
    uint32_t kv_from;   /* K/V stored for positions kv_from..n_tokens-1 */
    uint64_t rank;      /* order of the save: 0 = most recently used */
    /* not in the header bytes: a version 3 file's states block says them (the size implies n_states), a version 4
       file's counts block all four (tkv__cachefile_check_header leaves n_states and n_known 0 there) */
    uint32_t n_states;     /* checkpoints held (kv/kvstate.h), at positions kv_from..n_tokens-1 */
    uint32_t state_floats; /* floats of one (the model's state) */
    uint32_t n_known;      /* known tokens held (kv/kvknown.c): the argmax recorded at positions kv_from..n_tokens-1 */
    uint64_t arith;        /* the arithmetic that chose them (runtime/arith_id.c); 0: none, and no records written */
} tkv__phdr;

/* A parsed, fully validated file image (pointers into the image). */
typedef struct tkv__prec {
    tkv__phdr h;
    const uint8_t *tokens; /* (n_tokens) int32 little-endian */
    const uint8_t *kv;     /* the first K block (tkv__cachefile_k and _v find each layer's) */
    const uint8_t *states; /* h.n_states records: u32 position, then state_floats f32 (tkv__cachefile_state) */
    const uint8_t *known;  /* h.n_known records: u32 position, i32 token, u64 key (tkv__cachefile_known) */
} tkv__prec;

/* Checkpoint i of a parsed record: its position (the state after that position's token) and floats,
   copied into out (state_floats; any alignment in the file). */
void tkv__cachefile_state(const tkv__prec *r, uint32_t i, uint32_t *pos, float *out);

/* Known token i of a parsed record: its position, the token a sampler chose from its logits (< n_vocab) and the key
   of that sampler's state (not 0). */
void tkv__cachefile_known(const tkv__prec *r, uint32_t i, uint32_t *pos, tkv_token *tok, uint64_t *key);

/* Set h->n_states, h->state_floats and h->n_known: the checkpoints and, when h->arith is not 0, the known tokens the
   cache holds at the cells of positions kv_from..n_tokens-1 (cells[0..n_tokens - kv_from)), which a file written
   now carries. */
void tkv__cachefile_count_extras(const tkv__kvcache *kv, tkv__phdr *h, const uint32_t *cells);

/* Layer l's K (V) rows of a parsed record: (n_tokens - kv_from) rows of row_size (row_size_v) bytes. */
static inline const uint8_t *tkv__cachefile_k(const tkv__prec *r, uint32_t l) {
    const uint64_t m = r->h.n_tokens - r->h.kv_from;
    return r->kv + (uint64_t)l * (m * (r->h.row_size + r->h.row_size_v) + 16);
}
static inline const uint8_t *tkv__cachefile_v(const tkv__prec *r, uint32_t l) {
    return tkv__cachefile_k(r, l) + (uint64_t)(r->h.n_tokens - r->h.kv_from) * r->h.row_size + 8;
}

/* What a context requires of a file: its model's fingerprint and the cache geometry. */
typedef struct tkv__pexpect {
    uint64_t fp[2];
    uint32_t kv_type, v_type, n_layer, n_embd_kv, n_vocab, n_cells;
    uint64_t row_size, row_size_v;
    uint32_t state_floats; /* the model's recurrent state (0: none; a file with states is refused) */
} tkv__pexpect;

/* Exact file size for a header's fields. */
uint64_t tkv__cachefile_file_size(const tkv__phdr *h);

/*
 * Check the first TKV__CACHEFILE_HEADER_BYTES bytes of a file of `file_size`
 * bytes: magic, version, header checksum, every field against *e, and the
 * file size the fields imply. TKV_ERR_FORMAT (or TKV_ERR_UNSUPPORTED for
 * another version, TKV_ERR_INVALID for another model or geometry) with the
 * thread's error naming `name` and the problem.
 */
tkv_status tkv__cachefile_check_header(const char *name, const uint8_t *p, uint64_t file_size, const tkv__pexpect *e,
                                     tkv__phdr *h);

/* Validate a whole image (header, every block checksum, tokens, positions). */
tkv_status tkv__cachefile_parse(const char *name, const uint8_t *data, size_t size, const tkv__pexpect *e,
                              tkv__prec *rec);

/* Token i of a parsed record. */
tkv_token tkv__cachefile_token(const tkv__prec *rec, uint32_t i);

/*
 * Write one prefix to `path`, crash-safely (a temporary file PATH.tmp.PID in
 * the same directory, fsync, rename). h gives the header; the tokens of
 * positions 0..n_tokens-1 are tokens[]; the K/V of position kv_from + i is
 * in cell cells[i]. The directory is not fsynced (the caller does it once:
 * tkv__cachefile_sync_dir). TKV_ERR_IO / TKV_ERR_NOMEM; nothing is left
 * behind on failure.
 */
tkv_status tkv__cachefile_write(const tkv__kvcache *kv, const char *path, const tkv__phdr *h, const tkv_token *tokens,
                              const uint32_t *cells);

/* Write size bytes (an image, a manifest) to path as tkv__cachefile_write writes a file: temporary, fsync,
   rename. TKV_ERR_IO / TKV_ERR_NOMEM; nothing is left behind on failure. */
tkv_status tkv__cachefile_write_bytes(const char *path, const void *data, size_t size);

/*
 * The same image as tkv__cachefile_write, into out[0 .. tkv__cachefile_file_size(h))
 * (a shared store's value: the bytes a file would hold). Cannot fail.
 */
void tkv__cachefile_encode(const tkv__kvcache *kv, const tkv__phdr *h, const tkv_token *tokens, const uint32_t *cells,
                          uint8_t *out);

/* fsync a directory (the renames in it are then durable). TKV_ERR_IO. */
tkv_status tkv__cachefile_sync_dir(const char *dir);

/* Read a whole file into a tkv__malloc'd buffer; TKV_ERR_IO / TKV_ERR_NOMEM. */
tkv_status tkv__cachefile_read_file(const char *path, uint8_t **data, size_t *size);

/* Read the first min(size, cap) bytes of a file into buf; *size receives its
   size. Allocates nothing. TKV_ERR_IO. */
tkv_status tkv__cachefile_read(const char *path, uint8_t *buf, size_t cap, size_t *size);

/*
 * Whether a cache file or directory (its stat) may be trusted: owned by
 * this process's user and writable by nobody else. Returns TKV_OK, or
 * TKV_ERR_IO with a message naming the path and what is wrong. Reading
 * checks every file so; tkv_cache_save and tkv_cache_load check the
 * directory.
 */
struct stat;
tkv_status tkv__cachefile_trusted(const char *path, const struct stat *sb);

/*
 * Recompute every checksum of an image whose header gives a consistent
 * layout for its size (tests and fuzzing: corrupt a field, reseal, and see
 * the field itself rejected). Images it cannot lay out are left as they are.
 */
void tkv__cachefile_reseal(uint8_t *data, size_t size);

#endif
