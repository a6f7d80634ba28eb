/*
 * testutil.c — see testutil.h.
 */
#include "testutil.h"

#include "base/alloc.h"
#include "tools/gguf_write.h"
#include "tools/model_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int tu_skipped;

const char *tu_shared(const char *rel) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", TKV_SHARED_DIR, rel);
    return path;
}

uint8_t *tu_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

const char *tu_write_temp(const uint8_t *data, size_t size) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/tkv-test-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, size), (ssize_t)size);
    close(fd);
    return path;
}

static char *slurp_file(const char *path) {
    size_t n;
    char *s = (char *)tu_read_file(path, &n);
    assert_non_null(s);
    s = realloc(s, n + 1);
    s[n] = '\0';
    return s;
}

tu_run_result tu_run_input(const char *args, const void *input, size_t input_len) {
#ifndef TKV_BIN
    (void)args, (void)input, (void)input_len;
    fail_msg("tu_run: this test was built without TKV_BIN");
    return (tu_run_result){0};
#else
    char in[] = "/tmp/tkv-in-XXXXXX", out[] = "/tmp/tkv-out-XXXXXX", err[] = "/tmp/tkv-err-XXXXXX";
    int fds[3] = {mkstemp(in), mkstemp(out), mkstemp(err)};
    for (int i = 0; i < 3; i++) assert_true(fds[i] >= 0), close(fds[i]);
    if (input_len) {
        FILE *f = fopen(in, "wb");
        assert_int_equal(fwrite(input, 1, input_len, f), input_len);
        fclose(f);
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s <'%s' >'%s' 2>'%s'", TKV_BIN, args, input ? in : "/dev/null", out, err);
    int st = system(cmd);
    tu_run_result r;
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = slurp_file(out);
    r.err = slurp_file(err);
    remove(in), remove(out), remove(err);
    return r;
#endif
}

tu_run_result tu_run(const char *args) { return tu_run_input(args, NULL, 0); }

void tu_run_free(tu_run_result *r) {
    free(r->out);
    free(r->err);
}

uint64_t tu_get(const uint8_t *p, uint64_t at, unsigned bytes) {
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++) v |= (uint64_t)p[at + i] << (8 * i);
    return v;
}

void tu_put(uint8_t *p, uint64_t at, uint64_t v, unsigned bytes) {
    for (unsigned i = 0; i < bytes; i++) p[at + i] = (uint8_t)(v >> (8 * i));
}

/* Sizes of the numeric metadata types, by GGUF number (0 for string/array). */
static const unsigned meta_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static uint64_t skip_value(const uint8_t *p, uint64_t pos, uint32_t type) {
    if (type == 8) return pos + 8 + tu_get(p, pos, 8);
    if (type != 9) return pos + meta_size[type];
    uint32_t et = (uint32_t)tu_get(p, pos, 4);
    uint64_t n = tu_get(p, pos + 4, 8);
    pos += 12;
    for (uint64_t i = 0; i < n; i++) pos = skip_value(p, pos, et);
    return pos;
}

void tu_layout_read(const uint8_t *p, size_t n, tu_layout *l) {
    memset(l, 0, sizeof *l);
    assert_true(n >= 24);
    assert_int_equal(tu_get(p, 0, 4), 0x46554747u);
    l->n_tensors = tu_get(p, 8, 8);
    l->n_kv = tu_get(p, 16, 8);
    assert_true(l->n_kv < 512 && l->n_tensors < 1024);
    l->alignment = 32;
    uint64_t pos = 24;
    for (uint64_t i = 0; i < l->n_kv; i++) {
        l->kv_start[i] = pos;
        uint64_t klen = tu_get(p, pos, 8);
        const char *key = (const char *)p + pos + 8;
        pos += 8 + klen;
        l->kv_type_at[i] = pos;
        uint32_t type = (uint32_t)tu_get(p, pos, 4);
        if (klen == 17 && !memcmp(key, "general.alignment", 17)) l->alignment = (uint32_t)tu_get(p, pos + 4, 4);
        pos = skip_value(p, pos + 4, type);
        assert_true(pos <= n);
    }
    l->kv_start[l->n_kv] = pos;
    for (uint64_t i = 0; i < l->n_tensors; i++) {
        l->ti_start[i] = pos;
        uint64_t nlen = tu_get(p, pos, 8);
        assert_true(nlen < sizeof l->name[0]);
        memcpy(l->name[i], p + pos + 8, nlen);
        pos += 8 + nlen;
        l->ti_ndims_at[i] = pos;
        uint32_t nd = (uint32_t)tu_get(p, pos, 4);
        pos += 4;
        for (uint32_t d = 0; d < 4; d++) l->ne[i][d] = d < nd ? tu_get(p, pos + 8 * d, 8) : 1;
        pos += 8 * nd;
        l->ti_type_at[i] = pos;
        l->type[i] = (uint32_t)tu_get(p, pos, 4);
        l->ti_offset_at[i] = pos + 4;
        l->rel_offset[i] = tu_get(p, pos + 4, 8);
        pos += 12;
        assert_true(pos <= n);
    }
    l->ti_start[l->n_tensors] = pos;
    l->data_start = (pos + l->alignment - 1) / l->alignment * l->alignment;
}

/* ---- tiny models -------------------------------------------------------- */

static void tensor(tkv__gguf_writer *w, const tu_tiny_opts *o, const char *name, uint64_t ne0, uint64_t ne1) {
    if (o->skip_tensor && !strcmp(o->skip_tensor, name)) return;
    if (o->reshape && !strcmp(o->reshape, name)) ne0 += 1;
    uint64_t ne[2] = {ne0, ne1};
    const bool f64 = o->f64_tensor && !strcmp(o->f64_tensor, name);
    float *data = calloc((size_t)(ne0 * ne1), 2 * sizeof(float)); /* room for F64 */
    for (uint64_t i = 0; i < ne0 * ne1; i++) data[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    assert_int_equal(tkv__gguf_write_tensor(w, name, f64 ? TKV_TYPE_F64 : TKV_TYPE_F32, ne1 == 1 ? 1 : 2, ne, data),
                     TKV_OK);
    free(data);
}

static void key_u32(tkv__gguf_writer *w, const tu_tiny_opts *o, const char *arch, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (o->skip_key && !strcmp(o->skip_key, key)) return;
    assert_int_equal(tkv__gguf_write_u32(w, key, v), TKV_OK);
}

void tu_tiny_model(const tu_tiny_opts *o, uint8_t **out, size_t *size) {
    static const tu_tiny_opts none;
    if (!o) o = &none;
    const char *arch = o->arch ? o->arch : "llama";
    const uint32_t n_embd = 8, n_layer = 2, n_head = 2, n_head_kv = 1, n_ff = 16;
    const uint32_t n_vocab = o->n_vocab ? (uint32_t)o->n_vocab : 16, hd = n_embd / n_head;
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    assert_non_null(w);
    if (!o->skip_key || strcmp(o->skip_key, "general.architecture"))
        assert_int_equal(tkv__gguf_write_str(w, "general.architecture", arch), TKV_OK);
    assert_int_equal(tkv__gguf_write_str(w, "general.name", "tiny"), TKV_OK);
    key_u32(w, o, arch, "context_length", 128);
    key_u32(w, o, arch, "embedding_length", n_embd);
    key_u32(w, o, arch, "block_count", n_layer);
    key_u32(w, o, arch, "feed_forward_length", n_ff);
    key_u32(w, o, arch, "attention.head_count", n_head);
    key_u32(w, o, arch, "attention.head_count_kv", n_head_kv);
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if (!o->skip_key || strcmp(o->skip_key, key)) assert_int_equal(tkv__gguf_write_f32(w, key, 1e-6f), TKV_OK);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    assert_int_equal(tkv__gguf_write_f32(w, key, 500000.0f), TKV_OK);

    tensor(w, o, "token_embd.weight", n_embd, n_vocab);
    if (o->rope_freqs) {
        float ff[2] = {4.0f, 0.01f}; /* n_rot / 2 = head_dim / 2 = 2; both change the angles a lot */
        uint64_t ne[1] = {2};
        assert_int_equal(tkv__gguf_write_tensor(w, "rope_freqs.weight", TKV_TYPE_F32, 1, ne, ff), TKV_OK);
    }
    tensor(w, o, "output_norm.weight", n_embd, 1);
    if (!o->no_output) tensor(w, o, "output.weight", n_embd, n_vocab);
    for (uint32_t l = 0; l < n_layer; l++) {
        char name[64];
#define T(suffix, a, b) (snprintf(name, sizeof name, "blk.%u." suffix, l), tensor(w, o, name, a, b))
        T("attn_norm.weight", n_embd, 1);
        T("attn_q.weight", n_embd, n_head * hd);
        T("attn_k.weight", n_embd, n_head_kv * hd);
        T("attn_v.weight", n_embd, n_head_kv * hd);
        T("attn_output.weight", n_head * hd, n_embd);
        T("ffn_norm.weight", n_embd, 1);
        T("ffn_gate.weight", n_embd, n_ff);
        T("ffn_up.weight", n_embd, n_ff);
        T("ffn_down.weight", n_ff, n_embd);
        if (!strcmp(arch, "qwen2")) {
            T("attn_q.bias", n_head * hd, 1);
            T("attn_k.bias", n_head_kv * hd, 1);
            T("attn_v.bias", n_head_kv * hd, 1);
        }
#undef T
    }
    assert_int_equal(tkv__gguf_write_finish(w, out, size), TKV_OK);
    tkv__gguf_writer_free(w);
}

tkv_model *tu_model;
size_t tu_n_vocab;

int tu_stories_setup(void **state) {
    (void)state;
    if (tkv_model_load(tu_shared("models/stories260K.gguf"), NULL, &tu_model) != TKV_OK) return -1;
    tu_n_vocab = tkv_vocab_size(tu_model);
    return 0;
}

int tu_stories_teardown(void **state) {
    (void)state;
    tkv_model_free(tu_model);
    tu_model = NULL;
    return 0;
}

void tu_greedy(tkv_context *ctx, tkv_seq s, tkv_token *t, size_t n, int steps, size_t n_vocab, size_t *reused) {
    assert_int_equal(tkv_seq_sync(ctx, s, 0, t, n, reused), TKV_OK);
    for (int i = 0; i < steps; i++) {
        const float *l = tkv_get_logits_last(ctx);
        assert_non_null(l);
        size_t best = 0;
        for (size_t v = 1; v < n_vocab; v++) best = l[v] > l[best] ? v : best;
        t[n + (size_t)i] = (tkv_token)best;
        tkv_pos pos = (tkv_pos)(n + (size_t)i);
        tkv_batch b = {1, &t[n + (size_t)i], &pos, &s, NULL};
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
    }
}

int tu_mkdtemp(char *dir, const char *tag) {
    snprintf(dir, 64, "/tmp/tkv-%s-XXXXXX", tag);
    return mkdtemp(dir) ? 0 : -1;
}

int tu_rmtree(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

unsigned tu_rand(unsigned n) {
    static uint64_t rng = 0x9e3779b97f4a7c15ull;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng % n);
}

tkv_context *tu_context(const tkv_model *m, uint32_t n_cells, uint32_t n_seq, tkv_type kv_type) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = n_cells;
    p.n_seq_max = n_seq;
    p.n_threads = 2;
    p.n_batch = 16;
    p.kv_type = kv_type;
    tkv_context *ctx = NULL;
    if (tkv_context_create(m, &p, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

void tu_write_spec_model(const tkv__model_spec *s, const char *path) {
    char why[256];
    if (tkv__model_spec_check(s, why, sizeof why) != TKV_OK) fail_msg("%s: %s", s->arch, why);
    tkv__gguf_writer *w = tkv__gguf_writer_new(32);
    assert_non_null(w);
    assert_int_equal(tkv__gguf_write_str(w, "general.architecture", s->arch), TKV_OK);
    uint64_t n_params;
    assert_int_equal(tkv__model_write(w, s, &n_params), TKV_OK);
    uint8_t *img;
    size_t size;
    assert_int_equal(tkv__gguf_write_finish(w, &img, &size), TKV_OK);
    tkv__gguf_writer_free(w);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
    tkv__gguf_image_free(img);
}

/* One token at a time, as tokenkv run does: up to n_gen tokens into gen, stopping before an end of generation. */
size_t tu_generate(tkv_context *ctx, tkv_seq s, const tkv_token *p, size_t n_p, tkv_sampler *smp,
                   tkv_token *gen, size_t n_gen) {
    const tkv_model *m = tkv_context_model(ctx);
    assert_int_equal(tkv_seq_sync(ctx, s, 0, p, n_p, NULL), TKV_OK);
    const float *l = tkv_get_logits_last(ctx);
    size_t n = 0;
    while (n < n_gen) {
        const tkv_token t = tkv_sampler_sample(smp, l);
        if (tkv_token_is_eog(m, t)) break;
        gen[n++] = t;
        if (n == n_gen) break;
        tkv_pos pos = (tkv_pos)(n_p + n - 1);
        tkv_batch b = {1, &t, &pos, &s, NULL};
        assert_int_equal(tkv_decode(ctx, &b), TKV_OK);
        l = tkv_get_logits(ctx, 0);
    }
    return n;
}
