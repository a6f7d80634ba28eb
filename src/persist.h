/*
 * persist.h — cache files: one prefix (token ids with their K/V) per file,
 * checked against the model fingerprint and block checksums (the format is
 * described at the top of persist_format.c).
 *
 * persist_format.c writes and parses files; persist.c puts parsed files
 * into the cache (tkv_seq_load, tkv_cache_load) and writes sequences and
 * prefix-index nodes out (tkv_seq_save, tkv_cache_save).
 */
#ifndef TKV_PERSIST_H
#define TKV_PERSIST_H

#include "context.h"

#include <stdint.h>

#define TKV__PERSIST_VERSION 1u
#define TKV__PERSIST_HEADER_BYTES 96u
#define TKV__PERSIST_EXT ".tkvc"

/* The fields of a file header (all validated by tkv__persist_check_header). */
typedef struct tkv__phdr {
    uint64_t fp[2];     /* model fingerprint */
    uint32_t kv_type, n_layer, n_embd_kv, n_vocab;
    uint64_t row_size;  /* bytes of one K (or V) row */
    uint64_t ns;        /* namespace */
    uint32_t n_tokens;  /* the prefix: positions 0..n_tokens-1 */
    uint32_t kv_from;   /* K/V stored for positions kv_from..n_tokens-1 */
    uint64_t rank;      /* order of the save: 0 = most recently used */
} tkv__phdr;

/* A parsed, fully validated file image (pointers into the image). */
typedef struct tkv__prec {
    tkv__phdr h;
    const uint8_t *tokens; /* (n_tokens) int32 little-endian */
    const uint8_t *kv;     /* first K block; block b (K of layer b/2 or V) at kv + b * (kv_block + 8) */
    uint64_t kv_block;     /* bytes of one K or V block: (n_tokens - kv_from) * row_size */
} tkv__prec;

/* What a context requires of a file: its model's fingerprint and the cache geometry. */
typedef struct tkv__pexpect {
    uint64_t fp[2];
    uint32_t kv_type, n_layer, n_embd_kv, n_vocab, n_cells;
    uint64_t row_size;
} tkv__pexpect;

/* Fill *e from ctx (computes the model fingerprint). */
tkv_status tkv__persist_expect(const tkv_context *ctx, tkv__pexpect *e);

/* Exact file size for a header's fields. */
uint64_t tkv__persist_file_size(const tkv__phdr *h);

/*
 * Check the first TKV__PERSIST_HEADER_BYTES bytes of a file of `file_size`
 * bytes: magic, version, header checksum, every field against *e, and the
 * file size the fields imply. TKV_ERR_FORMAT (or TKV_ERR_UNSUPPORTED for
 * another version, TKV_ERR_INVALID for another model or geometry) with the
 * thread's error naming `name` and the problem.
 */
tkv_status tkv__persist_check_header(const char *name, const uint8_t *p, uint64_t file_size, const tkv__pexpect *e,
                                     tkv__phdr *h);

/* Validate a whole image (header, every block checksum, tokens, positions). */
tkv_status tkv__persist_parse(const char *name, const uint8_t *data, size_t size, const tkv__pexpect *e,
                              tkv__prec *rec);

/* Token i of a parsed record. */
tkv_token tkv__persist_token(const tkv__prec *rec, uint32_t i);

/*
 * Write one prefix to `path`, crash-safely (a temporary file PATH.tmp.PID in
 * the same directory, fsync, rename). h gives the header; the tokens of
 * positions 0..n_tokens-1 are tokens[]; the K/V of position kv_from + i is
 * in cell cells[i]. The directory is not fsynced (the caller does it once:
 * tkv__persist_sync_dir). TKV_ERR_IO / TKV_ERR_NOMEM; nothing is left
 * behind on failure.
 */
tkv_status tkv__persist_write(const tkv__kvcache *kv, const char *path, const tkv__phdr *h, const tkv_token *tokens,
                              const uint32_t *cells);

/* fsync a directory (the renames in it are then durable). TKV_ERR_IO. */
tkv_status tkv__persist_sync_dir(const char *dir);

/* Read a whole file into a tkv__malloc'd buffer; TKV_ERR_IO / TKV_ERR_NOMEM. */
tkv_status tkv__persist_read_file(const char *path, uint8_t **data, size_t *size);

/* Read the first min(size, cap) bytes of a file into buf; *size receives its
   size. Allocates nothing. TKV_ERR_IO. */
tkv_status tkv__persist_read(const char *path, uint8_t *buf, size_t cap, size_t *size);

/*
 * Load one file image into the cache: into sequence `seq`, or, with seq < 0,
 * as an unreferenced cached prefix (as tkv_cache_load does). Everything is
 * validated before the cache changes. Used by the fuzzer and the tests.
 */
tkv_status tkv__persist_load_image(tkv_context *ctx, const char *name, const uint8_t *data, size_t size, tkv_seq seq);

/*
 * Recompute every checksum of an image whose header gives a consistent
 * layout for its size (tests and fuzzing: corrupt a field, reseal, and see
 * the field itself rejected). Images it cannot lay out are left as they are.
 */
void tkv__persist_reseal(uint8_t *data, size_t size);

#endif
