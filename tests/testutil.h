/*
 * testutil.h — helpers shared by the tests: files, an independent reading of
 * a GGUF file's layout, and tiny synthetic models.
 */
#ifndef TKV_TESTUTIL_H
#define TKV_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four includes above first */
#include <cmocka.h>

#include "tokenkv.h"

/*
 * Skipping honestly: a test that cannot run on this machine (a kernel level
 * the CPU lacks, one CPU) calls TU_SKIP() instead of cmocka's skip(), and
 * main returns TU_RESULT(cmocka_run_group_tests(...)): the failures, or 77
 * when something was skipped and nothing failed, which CTest reports as
 * "Skipped" (SKIP_RETURN_CODE 77), not "Passed".
 */
extern int tu_skipped;
#define TU_SKIP()                                                                                                  \
    do {                                                                                                           \
        tu_skipped++;                                                                                              \
        skip();                                                                                                    \
    } while (0)
#define TU_RESULT(failed) ((failed) ? (failed) : tu_skipped ? 77 : 0)

/* "<shared>/<rel>" in a static buffer (one at a time). */
const char *tu_shared(const char *rel);

/* stories260K and its vocabulary size, for tests that share one model:
   loaded by tu_stories_setup and freed by tu_stories_teardown (cmocka group
   setup and teardown; 0 on success, -1 when the model does not load). */
extern tkv_model *tu_model;
extern size_t tu_n_vocab;
int tu_stories_setup(void **state);
int tu_stories_teardown(void **state);

/* Whole file in a malloc'd buffer (NULL if unreadable). */
uint8_t *tu_read_file(const char *path, size_t *size);

/* Write bytes to a fresh temporary file; returns its path (static buffer). */
const char *tu_write_temp(const uint8_t *data, size_t size);

/*
 * Where things are in a well-formed GGUF file, found by a walk written
 * independently of src/format/gguf.c (so the reader is checked against it).
 */
typedef struct tu_layout {
    uint64_t n_kv, n_tensors;
    uint64_t kv_start[512];    /* n_kv + 1 entries: the last is the end */
    uint64_t kv_type_at[512];  /* offset of each pair's type field */
    uint64_t ti_start[1024];   /* n_tensors + 1 entries */
    uint64_t ti_ndims_at[1024];
    uint64_t ti_type_at[1024];
    uint64_t ti_offset_at[1024];
    uint32_t type[1024];
    uint64_t ne[1024][4];
    uint64_t rel_offset[1024];
    char name[1024][72];
    uint64_t data_start;
    uint32_t alignment;
} tu_layout;

/* Fill *l from a well-formed image; fails the test otherwise. */
void tu_layout_read(const uint8_t *p, size_t n, tu_layout *l);

/* The result of running the tokenkv command. */
typedef struct tu_run_result {
    int status;      /* exit status, or 128 + signal */
    char *out, *err; /* everything written to stdout / stderr (malloc'd) */
} tu_run_result;

/*
 * Run `tokenkv ARGS` (ARGS is shell syntax) with `input` (may be NULL: no
 * input) on stdin. The binary is TKV_BIN, defined by the test's build.
 */
tu_run_result tu_run_input(const char *args, const void *input, size_t input_len);
tu_run_result tu_run(const char *args);
void tu_run_free(tu_run_result *r);

/* A deterministic pseudo-random number in 0..n-1 (xorshift; the same sequence every run). */
unsigned tu_rand(unsigned n);

/* A context over model m: n_cells cells, n_seq sequences, 2 threads, batches of 16, K/V of kv_type; fails
   the test when it cannot be made. */
tkv_context *tu_context(const tkv_model *m, uint32_t n_cells, uint32_t n_seq, tkv_type kv_type);

/* A fresh directory /tmp/tkv-TAG-XXXXXX into dir (room for 64 bytes); 0, or -1 when it cannot be made
   (cmocka setup's convention). tu_rmtree removes it and all it holds (0, or -1). */
int tu_mkdtemp(char *dir, const char *tag);
int tu_rmtree(const char *dir);

/* Greedy ids of `steps` tokens after prompt t[0..n) in sequence s of ctx (tkv_seq_sync, which reports the
   tokens it reused in *reused (may be NULL), then one token at a time); t has room for n + steps, which the
   continuation fills. Fails the test on any error. */
void tu_greedy(tkv_context *ctx, tkv_seq s, tkv_token *t, size_t n, int steps, size_t n_vocab, size_t *reused);

/* Little-endian field access for patching images. */
uint64_t tu_get(const uint8_t *p, uint64_t at, unsigned bytes);
void tu_put(uint8_t *p, uint64_t at, uint64_t v, unsigned bytes);

/* Options for a tiny synthetic llama/qwen2 model (all zero: a valid llama). */
typedef struct tu_tiny_opts {
    const char *arch;         /* NULL: "llama" */
    const char *skip_tensor;  /* leave this tensor out */
    const char *reshape;      /* give this tensor a wrong ne[0] */
    const char *f64_tensor;   /* store this tensor as F64 (a type without kernels) */
    const char *skip_key;     /* leave this metadata key out (full name) */
    int no_output;            /* omit output.weight (tied embeddings) */
    int n_vocab;              /* 0: 16 */
    int rope_freqs;           /* add rope_freqs.weight (factors 1, 2, ...) */
} tu_tiny_opts;

/* A tiny model: n_embd 8, 2 layers, 2 heads, 1 KV head, n_ff 16, F32. */
void tu_tiny_model(const tu_tiny_opts *o, uint8_t **out, size_t *size);

/* One token at a time, as tokenkv run does: sync tokens p[0..n_p) into sequence s, then sample with smp and
   decode each token, up to n_gen tokens into gen, stopping before an end of generation. Returns how many. */
size_t tu_generate(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, tkv_sampler *smp, tkv_token *gen,
                   size_t n_gen);

/* Write the random model of a spec (tools/model_write.h, as `tokenkv mkmodel` writes it) to path; fails the
   test on a spec the writer refuses (its reason in the message) or on an I/O error. */
struct tkv__model_spec;
void tu_write_spec_model(const struct tkv__model_spec *s, const char *path);

#endif
