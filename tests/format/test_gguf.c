/*
 * test_gguf.c — the GGUF reader: real files parse with the facts the models'
 * README states; a corpus of corrupt files made here fails cleanly with
 * TKV_ERR_FORMAT and a message, and never crashes (the same tests run under
 * ASan+UBSan in CI).
 */
#include "testutil.h"

#include "base/alloc.h"
#include "base/error.h"
#include "format/gguf.h"
#include "tools/gguf_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parse an image; on failure the message must be non-empty. */
static tkv_status parse(const uint8_t *p, size_t n) {
    tkv__clear_error();
    tkv__gguf *g = NULL;
    tkv_status st = tkv__gguf_parse(p, n, &g);
    if (st == TKV_OK) {
        assert_non_null(g);
        tkv__gguf_free(g);
    } else {
        assert_null(g);
        assert_true(strlen(tkv_last_error(NULL)) > 0);
    }
    return st;
}

static void expect_format(const uint8_t *p, size_t n, const char *needle) {
    tkv_status st = parse(p, n);
    if (st != TKV_ERR_FORMAT) fail_msg("expected TKV_ERR_FORMAT, got %s (%s)", tkv_status_str(st), tkv_last_error(NULL));
    if (needle && !strstr(tkv_last_error(NULL), needle))
        fail_msg("message '%s' does not mention '%s'", tkv_last_error(NULL), needle);
}

/* ---- real files --------------------------------------------------------- */

static void test_real_files_facts(void **state) {
    (void)state;
    static const struct {
        const char *rel;
        uint32_t version;
        size_t n_tensors, n_kv;
        uint64_t data_offset;
    } files[] = {
        {"models/stories260K.gguf", 3, 48, 19, 14176},
        {"models/llama-2-tiny-random.gguf", 3, 12, 18, 724416},
        {"models/vocab/ggml-vocab-gpt-2.gguf", 0, 0, 0, 0},
        {"models/vocab/ggml-vocab-deepseek-coder.gguf", 0, 0, 0, 0},
        {"models/vocab/ggml-vocab-llama-spm.gguf", 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        tkv__gguf *g = NULL;
        tkv_status st = tkv__gguf_open(tu_shared(files[i].rel), &g);
        if (st) fail_msg("%s: %s", files[i].rel, tkv_last_error(NULL));
        if (files[i].version) {
            assert_int_equal(g->version, files[i].version);
            assert_int_equal(g->n_tensors, files[i].n_tensors);
            assert_int_equal(g->n_kv, files[i].n_kv);
            assert_int_equal(g->alignment, 32);
            assert_int_equal(g->data_offset, files[i].data_offset);
            /* "the tensor data ... ends exactly at the end of the file" */
            uint64_t end = 0;
            for (size_t t = 0; t < g->n_tensors; t++)
                if (g->tensors[t].offset + g->tensors[t].n_bytes > end) end = g->tensors[t].offset + g->tensors[t].n_bytes;
            assert_int_equal(end, g->size);
        } else {
            assert_int_equal(g->n_tensors, 0);
        }
        tkv__gguf_free(g);
    }
}

/* Every tensor the reader reports matches the independent walk. */
static void test_matches_independent_walk(void **state) {
    (void)state;
    static const char *const rels[] = {
        "models/stories260K.gguf",          "models/llama-2-tiny-random.gguf", "models/parity/parity-Q4_K_M.gguf",
        "models/parity/parity-Q5_1.gguf",   "models/parity/parity-BF16.gguf",  "models/parity/parity-Q6_K.gguf",
    };
    static tu_layout l;
    for (size_t f = 0; f < sizeof rels / sizeof rels[0]; f++) {
        size_t n;
        uint8_t *p = tu_read_file(tu_shared(rels[f]), &n);
        assert_non_null(p);
        tu_layout_read(p, n, &l);
        tkv__gguf *g = NULL;
        assert_int_equal(tkv__gguf_parse(p, n, &g), TKV_OK);
        assert_int_equal(g->n_tensors, l.n_tensors);
        assert_int_equal(g->data_offset, l.data_start);
        for (size_t i = 0; i < l.n_tensors; i++) {
            const tkv__gguf_tensor *t = tkv__gguf_tensor_find(g, l.name[i]);
            assert_non_null(t);
            assert_ptr_equal(t, &g->tensors[i]);
            assert_int_equal(t->type, l.type[i]);
            assert_int_equal(t->offset, l.data_start + l.rel_offset[i]);
            for (int d = 0; d < 4; d++) assert_int_equal(t->ne[d], l.ne[i][d]);
        }
        tkv__gguf_free(g);
        free(p);
    }
}

/* ---- truncation --------------------------------------------------------- */

static void truncations(const char *rel) {
    size_t n;
    uint8_t *p = tu_read_file(tu_shared(rel), &n);
    assert_non_null(p);
    static tu_layout l;
    tu_layout_read(p, n, &l);

    /* every section boundary, and one byte either side */
    uint64_t cuts[4096];
    size_t nc = 0;
    cuts[nc++] = 0;
    cuts[nc++] = 4;
    cuts[nc++] = 8;
    cuts[nc++] = 16;
    cuts[nc++] = 24;
    for (uint64_t i = 0; i <= l.n_kv; i++) cuts[nc++] = l.kv_start[i], cuts[nc++] = l.kv_type_at[i];
    for (uint64_t i = 0; i <= l.n_tensors; i++) cuts[nc++] = l.ti_start[i];
    cuts[nc++] = l.data_start;
    for (uint64_t i = 0; i < l.n_tensors; i++) cuts[nc++] = l.data_start + l.rel_offset[i];
    size_t base = nc;
    for (size_t i = 0; i < base; i++) {
        if (cuts[i] > 0) cuts[nc++] = cuts[i] - 1;
        cuts[nc++] = cuts[i] + 1;
    }
    /* and random points */
    srand(1234);
    for (int i = 0; i < 200; i++) cuts[nc++] = (uint64_t)rand() % n;

    for (size_t i = 0; i < nc; i++) {
        if (cuts[i] >= n) continue;
        /* a separate allocation of exactly the cut size, so ASan sees overreads */
        uint8_t *q = malloc(cuts[i] ? cuts[i] : 1);
        memcpy(q, p, cuts[i]);
        tkv_status st = parse(q, cuts[i]);
        if (st != TKV_ERR_FORMAT)
            fail_msg("%s cut at %llu: %s (%s)", rel, (unsigned long long)cuts[i], tkv_status_str(st), tkv_last_error(NULL));
        free(q);
    }
    free(p);
}

static void test_truncated_stories(void **state) {
    (void)state;
    truncations("models/stories260K.gguf");
}

static void test_truncated_vocab(void **state) {
    (void)state;
    truncations("models/vocab/ggml-vocab-gpt-2.gguf");
}

static void test_truncated_quantized(void **state) {
    (void)state;
    truncations("models/parity/parity-Q4_K_M.gguf");
}

/* ---- targeted corruption of counts, lengths, types, offsets ------------- */

typedef struct fixture {
    uint8_t *p;
    size_t n;
    tu_layout l;
} fixture;

static fixture *load_stories(void) {
    fixture *f = calloc(1, sizeof *f);
    f->p = tu_read_file(tu_shared("models/stories260K.gguf"), &f->n);
    assert_non_null(f->p);
    tu_layout_read(f->p, f->n, &f->l);
    return f;
}

static void free_fixture(fixture *f) {
    free(f->p);
    free(f);
}

/* Patch a copy of the fixture, expect TKV_ERR_FORMAT naming `needle`. */
static void corrupt(const fixture *f, uint64_t at, uint64_t value, unsigned bytes, const char *needle) {
    uint8_t *q = malloc(f->n);
    memcpy(q, f->p, f->n);
    tu_put(q, at, value, bytes);
    expect_format(q, f->n, needle);
    free(q);
}

static void test_corrupt_counts_and_lengths(void **state) {
    (void)state;
    fixture *f = load_stories();
    const tu_layout *l = &f->l;
    corrupt(f, 8, UINT64_MAX, 8, "tensor count");
    corrupt(f, 8, 1ull << 40, 8, "tensor count");
    corrupt(f, 16, UINT64_MAX, 8, "metadata count");
    corrupt(f, 16, 100000, 8, "metadata count");
    corrupt(f, 16, l->n_kv + 1, 8, NULL); /* one pair too many: the infos are read as a pair */
    /* string lengths: the first key, and every key */
    for (uint64_t i = 0; i < l->n_kv; i++) {
        corrupt(f, l->kv_start[i], UINT64_MAX, 8, "runs past the end");
        corrupt(f, l->kv_start[i], 1ull << 62, 8, "runs past the end");
        corrupt(f, l->kv_start[i], 0, 8, "empty key");
    }
    /* tensor name lengths */
    for (uint64_t i = 0; i < l->n_tensors; i++) {
        corrupt(f, l->ti_start[i], UINT64_MAX, 8, NULL);
        corrupt(f, l->ti_start[i], 65, 8, "name length");
        corrupt(f, l->ti_start[i], 0, 8, "name length");
    }
    free_fixture(f);
}

static void test_corrupt_types(void **state) {
    (void)state;
    fixture *f = load_stories();
    const tu_layout *l = &f->l;
    for (uint64_t i = 0; i < l->n_kv; i++) {
        corrupt(f, l->kv_type_at[i], 13, 4, "unknown value type");
        corrupt(f, l->kv_type_at[i], 0xffffffff, 4, "unknown value type");
    }
    for (uint64_t i = 0; i < l->n_tensors; i++) {
        corrupt(f, l->ti_type_at[i], 99, 4, "unknown tensor type");
        corrupt(f, l->ti_type_at[i], 4, 4, "unknown tensor type"); /* removed Q4_2 */
        corrupt(f, l->ti_type_at[i], 0xffffffff, 4, "unknown tensor type");
        /* F32 -> F64 doubles the size: the data no longer fits or overlaps */
        corrupt(f, l->ti_type_at[i], TKV_TYPE_F64, 4, NULL);
        /* Q4_K blocks are 256 wide: no stories260K row (64, 172) is a multiple */
        if (l->ne[i][0] % 256) corrupt(f, l->ti_type_at[i], TKV_TYPE_Q4_K, 4, "block size");
    }
    free_fixture(f);
}

static void test_corrupt_dims_and_offsets(void **state) {
    (void)state;
    fixture *f = load_stories();
    const tu_layout *l = &f->l;
    for (uint64_t i = 0; i < l->n_tensors; i++) {
        corrupt(f, l->ti_ndims_at[i], 0, 4, "n_dims");
        corrupt(f, l->ti_ndims_at[i], 5, 4, "n_dims");
        corrupt(f, l->ti_ndims_at[i] + 4, 0, 8, "dimension 0");
        corrupt(f, l->ti_ndims_at[i] + 4, 1ull << 63, 8, "dimension 0");
        corrupt(f, l->ti_offset_at[i], l->rel_offset[i] + 1, 8, "not a multiple of the alignment");
        corrupt(f, l->ti_offset_at[i], UINT64_MAX - 31, 8, "runs past end of file");
        corrupt(f, l->ti_offset_at[i], f->n, 8, "runs past end of file");
        if (i > 0) corrupt(f, l->ti_offset_at[i], l->rel_offset[i - 1], 8, "overlaps");
    }
    free_fixture(f);
}

/* Dims whose product overflows int64: an info appended by hand to a writer
   image (the writer would compute a wrapped size). */
static void test_dims_overflow(void **state) {
    (void)state;
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    assert_int_equal(tkv__gguf_write_u32(w, "x", 1), TKV_OK);
    uint8_t *p;
    size_t n;
    assert_int_equal(tkv__gguf_write_finish(w, &p, &n), TKV_OK);
    tkv__gguf_writer_free(w);
    static const uint64_t dims[][4] = {{1ull << 32, 1ull << 32, 1, 1}, {1ull << 16, 1ull << 16, 1ull << 16, 1ull << 16}};
    for (int k = 0; k < 2; k++) {
        uint8_t *q = calloc(1, n + 64 + 4096);
        memcpy(q, p, n);
        tu_put(q, 8, 1, 8); /* one tensor */
        uint64_t at = n;
        tu_put(q, at, 1, 8), q[at + 8] = 't', at += 9;
        tu_put(q, at, 4, 4), at += 4;
        for (int d = 0; d < 4; d++) tu_put(q, at, dims[k][d], 8), at += 8;
        tu_put(q, at, TKV_TYPE_F32, 4), at += 4;
        tu_put(q, at, 0, 8), at += 8;
        expect_format(q, at + 4096, "overflows");
        free(q);
    }
    free(p);
}

/* Random bit flips anywhere in the header/metadata/infos of a small model:
   any outcome but a crash or a status other than OK/FORMAT/UNSUPPORTED. */
static void test_random_bit_flips(void **state) {
    (void)state;
    uint8_t *p;
    size_t n;
    tu_tiny_model(NULL, &p, &n);
    static tu_layout l;
    tu_layout_read(p, n, &l);
    srand(42);
    uint8_t *q = malloc(n);
    int failed = 0;
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(q, p, n);
        int flips = 1 + rand() % 4;
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)rand() % l.data_start;
            q[at] ^= (uint8_t)(1u << (rand() % 8));
        }
        tkv_status st = parse(q, n);
        assert_true(st == TKV_OK || st == TKV_ERR_FORMAT || st == TKV_ERR_UNSUPPORTED);
        failed += st != TKV_OK;
    }
    /* most flips in structure must be caught (a flip inside a string is not an error) */
    assert_true(failed > 1000);
    free(q);
    free(p);
}

static void test_header(void **state) {
    (void)state;
    fixture *f = load_stories();
    corrupt(f, 0, 0x46554748, 4, "bad magic");
    corrupt(f, 4, 7, 4, "unknown GGUF version");
    corrupt(f, 4, 0, 4, "unknown GGUF version");
    uint8_t *q = malloc(f->n);
    memcpy(q, f->p, f->n);
    tu_put(q, 4, 1, 4);
    assert_int_equal(parse(q, f->n), TKV_ERR_UNSUPPORTED);
    tu_put(q, 4, 0x03000000, 4);
    assert_int_equal(parse(q, f->n), TKV_ERR_UNSUPPORTED);
    tu_put(q, 4, 2, 4); /* version 2 has the same layout */
    assert_int_equal(parse(q, f->n), TKV_OK);
    free(q);
    expect_format(f->p, 0, "too small");
    expect_format(f->p, 23, "too small");
    free_fixture(f);
}

/* ---- metadata built with the writer ------------------------------------- */

static uint8_t *build(void (*fill)(tkv__gguf_writer *), size_t *n) {
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    fill(w);
    uint8_t *p;
    assert_int_equal(tkv__gguf_write_finish(w, &p, n), TKV_OK);
    tkv__gguf_writer_free(w);
    return p;
}

static void fill_dup_key(tkv__gguf_writer *w) {
    tkv__gguf_write_u32(w, "a.b", 1);
    tkv__gguf_write_u32(w, "a.b", 2);
}
static void fill_bad_alignment(tkv__gguf_writer *w) { tkv__gguf_write_u32(w, "general.alignment", 48); }
static void fill_alignment_type(tkv__gguf_writer *w) { tkv__gguf_write_f32(w, "general.alignment", 32); }
static void fill_nested(tkv__gguf_writer *w) {
    uint8_t raw[12] = {0};
    tkv__gguf_write_array(w, "nested", TKV_META_ARRAY, raw, 0);
}
static void fill_bad_bool(tkv__gguf_writer *w) {
    uint8_t b = 2;
    tkv__gguf_write_scalar(w, "flag", TKV_META_BOOL, &b);
}
static void fill_huge_array(tkv__gguf_writer *w) { tkv__gguf_write_array(w, "arr", TKV_META_U32, NULL, 0); }
static void fill_dup_tensor(tkv__gguf_writer *w) {
    uint64_t ne[1] = {32};
    tkv__gguf_write_tensor(w, "t", TKV_TYPE_F32, 1, ne, NULL);
    tkv__gguf_write_tensor(w, "t", TKV_TYPE_F32, 1, ne, NULL);
}
static void fill_all_types(tkv__gguf_writer *w) {
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    int32_t i32 = -2000000000;
    uint64_t u64 = 1ull << 63;
    int64_t i64 = -(1ll << 62);
    double f64 = 0.125;
    uint8_t b = 1;
    tkv__gguf_write_scalar(w, "u8", TKV_META_U8, &u8);
    tkv__gguf_write_scalar(w, "i8", TKV_META_I8, &i8);
    tkv__gguf_write_scalar(w, "u16", TKV_META_U16, &u16);
    tkv__gguf_write_scalar(w, "i16", TKV_META_I16, &i16);
    tkv__gguf_write_u32(w, "u32", 4000000000u);
    tkv__gguf_write_scalar(w, "i32", TKV_META_I32, &i32);
    tkv__gguf_write_f32(w, "f32", 1.5f);
    tkv__gguf_write_scalar(w, "bool", TKV_META_BOOL, &b);
    tkv__gguf_write_str(w, "str", "hello");
    tkv__gguf_write_scalar(w, "u64", TKV_META_U64, &u64);
    tkv__gguf_write_scalar(w, "i64", TKV_META_I64, &i64);
    tkv__gguf_write_scalar(w, "f64", TKV_META_F64, &f64);
    const char *strs[3] = {"a", "", "ccc"};
    tkv__gguf_write_strings(w, "strs", strs, 3);
    int32_t ints[4] = {-1, 0, 7, 2147483647};
    tkv__gguf_write_array(w, "ints", TKV_META_I32, ints, 4);
    float floats[2] = {0.5f, -2.0f};
    tkv__gguf_write_array(w, "floats", TKV_META_F32, floats, 2);
    tkv__gguf_write_strings(w, "empty", strs, 0);
}

static void test_writer_made_errors(void **state) {
    (void)state;
    size_t n;
    uint8_t *p;
    p = build(fill_dup_key, &n), expect_format(p, n, "appears twice"), free(p);
    p = build(fill_bad_alignment, &n), expect_format(p, n, "power of two"), free(p);
    p = build(fill_alignment_type, &n), expect_format(p, n, "expected uint32"), free(p);
    p = build(fill_nested, &n), expect_format(p, n, "nested"), free(p);
    p = build(fill_bad_bool, &n), expect_format(p, n, "bool"), free(p);
    p = build(fill_dup_tensor, &n), expect_format(p, n, "appears twice"), free(p);
    /* an array claiming 2^61 uint32 elements */
    p = build(fill_huge_array, &n);
    tu_put(p, n - 8, 1ull << 61, 8);
    expect_format(p, n, "array length");
    free(p);
}

static void test_all_value_types(void **state) {
    (void)state;
    size_t n;
    uint8_t *p = build(fill_all_types, &n);
    tkv_model_params mp = tkv_model_default_params();
    mp.vocab_only = true;
    tkv_model *m = NULL;
    assert_int_equal(tkv_model_load_from_memory(p, n, &mp, &m), TKV_OK);
    int64_t v;
    double f;
    const char *s;
    size_t len;
    bool b;
    tkv_meta_type et;
    assert_int_equal(tkv_model_meta_int(m, "u8", &v), TKV_OK), assert_int_equal(v, 200);
    assert_int_equal(tkv_model_meta_int(m, "i8", &v), TKV_OK), assert_int_equal(v, -100);
    assert_int_equal(tkv_model_meta_int(m, "u16", &v), TKV_OK), assert_int_equal(v, 60000);
    assert_int_equal(tkv_model_meta_int(m, "i16", &v), TKV_OK), assert_int_equal(v, -30000);
    assert_int_equal(tkv_model_meta_int(m, "u32", &v), TKV_OK), assert_int_equal(v, 4000000000ll);
    assert_int_equal(tkv_model_meta_int(m, "i32", &v), TKV_OK), assert_int_equal(v, -2000000000ll);
    assert_int_equal(tkv_model_meta_int(m, "i64", &v), TKV_OK), assert_true(v == -(1ll << 62));
    assert_int_equal(tkv_model_meta_int(m, "u64", &v), TKV_ERR_FORMAT); /* 2^63 does not fit */
    assert_int_equal(tkv_model_meta_float(m, "u64", &f), TKV_OK), assert_true(f == 9223372036854775808.0);
    assert_int_equal(tkv_model_meta_float(m, "f32", &f), TKV_OK), assert_true(f == 1.5);
    assert_int_equal(tkv_model_meta_float(m, "f64", &f), TKV_OK), assert_true(f == 0.125);
    assert_int_equal(tkv_model_meta_bool(m, "bool", &b), TKV_OK), assert_true(b);
    assert_int_equal(tkv_model_meta_str(m, "str", &s, &len), TKV_OK);
    assert_string_equal(s, "hello"), assert_int_equal(len, 5);
    /* wrong type: FORMAT naming both; missing: INVALID naming the key; out unchanged */
    v = 77;
    assert_int_equal(tkv_model_meta_int(m, "str", &v), TKV_ERR_FORMAT);
    assert_int_equal(v, 77);
    assert_non_null(strstr(tkv_last_error(m), "'str'"));
    assert_non_null(strstr(tkv_last_error(m), "string"));
    assert_int_equal(tkv_model_meta_str(m, "u8", &s, NULL), TKV_ERR_FORMAT);
    assert_int_equal(tkv_model_meta_bool(m, "u8", &b), TKV_ERR_FORMAT);
    assert_int_equal(tkv_model_meta_float(m, "str", &f), TKV_ERR_FORMAT);
    assert_int_equal(tkv_model_meta_str(m, "nope", &s, NULL), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(m), "'nope'"));
    assert_int_equal(tkv_model_meta_find(m, "nope", NULL), TKV_ERR_INVALID);
    assert_int_equal(tkv_model_meta_find(m, "strs", &et), TKV_OK), assert_int_equal(et, TKV_META_ARRAY);
    /* arrays */
    assert_int_equal(tkv_model_meta_array(m, "strs", &et, &len), TKV_OK);
    assert_int_equal(et, TKV_META_STRING), assert_int_equal(len, 3);
    assert_int_equal(tkv_model_meta_arr_str(m, "strs", 2, &s, &len), TKV_OK);
    assert_string_equal(s, "ccc");
    assert_int_equal(tkv_model_meta_arr_str(m, "strs", 1, &s, &len), TKV_OK);
    assert_int_equal(len, 0);
    assert_int_equal(tkv_model_meta_arr_str(m, "strs", 3, &s, &len), TKV_ERR_INVALID);
    assert_int_equal(tkv_model_meta_arr_int(m, "strs", 0, &v), TKV_ERR_FORMAT);
    assert_int_equal(tkv_model_meta_arr_int(m, "ints", 0, &v), TKV_OK), assert_int_equal(v, -1);
    assert_int_equal(tkv_model_meta_arr_int(m, "ints", 3, &v), TKV_OK), assert_int_equal(v, 2147483647);
    assert_int_equal(tkv_model_meta_arr_float(m, "floats", 1, &f), TKV_OK), assert_true(f == -2.0);
    assert_int_equal(tkv_model_meta_arr_float(m, "ints", 0, &f), TKV_OK), assert_true(f == -1.0);
    assert_int_equal(tkv_model_meta_array(m, "str", &et, &len), TKV_ERR_FORMAT);
    assert_int_equal(tkv_model_meta_array(m, "empty", &et, &len), TKV_OK), assert_int_equal(len, 0);
    /* iteration in file order */
    assert_int_equal(tkv_model_meta_count(m), 16);
    const char *key;
    tkv_meta_type t;
    assert_int_equal(tkv_model_meta_at(m, 12, &key, &t), TKV_OK);
    assert_string_equal(key, "strs"), assert_int_equal(t, TKV_META_ARRAY);
    assert_int_equal(tkv_model_meta_at(m, 16, &key, &t), TKV_ERR_INVALID);
    tkv_model_free(m);
    free(p);
}

/* Every allocation of a parse can fail: NOMEM, nothing leaked (ASan checks). */
static void test_allocation_failures(void **state) {
    (void)state;
    size_t n;
    uint8_t *p = tu_read_file(tu_shared("models/stories260K.gguf"), &n);
    tkv__alloc_fail_after(-1);
    tkv_model *m = NULL;
    assert_int_equal(tkv_model_load_from_memory(p, n, NULL, &m), TKV_OK);
    tkv_model_free(m);
    long n_allocs = tkv__alloc_fail_after(-1);
    assert_true(n_allocs >= 2);
    for (long k = 0; k < n_allocs; k++) {
        tkv__alloc_fail_after(k);
        m = NULL;
        assert_int_equal(tkv_model_load_from_memory(p, n, NULL, &m), TKV_ERR_NOMEM);
        assert_null(m);
    }
    tkv__alloc_fail_after(-1);
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_files_facts),    cmocka_unit_test(test_matches_independent_walk),
        cmocka_unit_test(test_truncated_stories),   cmocka_unit_test(test_truncated_vocab),
        cmocka_unit_test(test_truncated_quantized), cmocka_unit_test(test_corrupt_counts_and_lengths),
        cmocka_unit_test(test_corrupt_types),       cmocka_unit_test(test_corrupt_dims_and_offsets),
        cmocka_unit_test(test_dims_overflow),       cmocka_unit_test(test_random_bit_flips),
        cmocka_unit_test(test_header),              cmocka_unit_test(test_writer_made_errors),
        cmocka_unit_test(test_all_value_types),     cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
