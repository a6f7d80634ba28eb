/*
 * fuzz_cachefile.c — libFuzzer target for the cache file loader
 * (src/kv/cachefile.c, src/runtime/persist.c) against a context over stories260K.
 *
 * Any input must end in TKV_OK or a clean error with a message, and leave a
 * cache that passes tkv_cache_check. The first input byte chooses:
 *   bits 0-1  0: the rest of the input is the file;
 *             1: the same, with its checksums recomputed (so that the field
 *                checks behind them are reached);
 *             2: a valid file made at start-up (a sequence, or a prefix-index
 *                node that extends a cached prefix), patched by the rest of
 *                the input (3 bytes a patch: offset, xor): any change must
 *                be refused, no change must load;
 *             3: the same, resealed;
 *   bit 2     which valid file (modes 2 and 3);
 *   bit 3     cut the patched file at the last patch's offset;
 *   bits 4-5  0: load as a cached prefix (tkv_cache_load's way), else into
 *             that sequence;
 *   bit 6     instead, tkv_cache_import it as the prefix template (bit 2)
 *             holds (a shared store's way: the key promises the tokens),
 *             or with bits 4-5 both set, tkv_cache_load_image_ex it with
 *             TKV_IMAGE_CONTINUATION for those tokens but the last (a disk
 *             tier's way: the prompt, and the answer past it);
 *   bit 7     all of it against a context over the delta-net hybrid qwen35
 *             instead, whose valid files carry recurrent-state checkpoints:
 *             bit 2 clear, a prompt's (format version 3); set, the prompt
 *             and 4 greedy tokens, whose choices the file records as known
 *             tokens too (format version 4).
 */
#include "base/error.h"
#include "runtime/persist.h"
#include "tokenkv.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"

static tkv_model *model;
static const tkv_token toks[12] = {1, 403, 407, 261, 378, 29, 356, 395, 434, 8, 300, 301};
static const size_t tmpl_n[2] = {8, 12}, tmpl_from[2] = {0, 8};
static tkv_context *ctx, *hctx; /* stories260K; qwen35 (checkpoints) */
static tkv_model *hmodel;
static uint8_t *tmpl[4]; /* the two files of ctx; hctx's sequence, without and with known tokens */
static size_t tmpl_size[4];
static tkv_token htoks[16]; /* the tokens of hctx's second file */

static void die(const char *what) {
    fprintf(stderr, "fuzz_cachefile: %s: %s\n", what, tkv_last_error(ctx));
    abort();
}

static uint8_t *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) die(path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) die(path);
    fclose(f);
    *size = (size_t)n;
    return p;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    model = fuzz_load_model("fuzz_cachefile", "stories260K.gguf", false);
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = 64;
    p.n_seq_max = 4;
    p.n_threads = 1;
    p.n_batch = 16;
    if (tkv_context_create(model, &p, &ctx)) die("context");
    size_t reused;
    if (tkv_seq_sync(ctx, 0, 5, toks, 12, &reused) || tkv_seq_truncate(ctx, 0, 8)) die("sync");
    /* the templates: seq 0 (8 tokens), and the node of tokens 8..11 */
    char dir[] = "/tmp/tkv-fuzz-XXXXXX", path[512];
    if (!mkdtemp(dir)) die("mkdtemp");
    snprintf(path, sizeof path, "%s/seq.bin", dir);
    if (tkv_seq_save(ctx, 0, path)) die("save");
    tmpl[0] = slurp(path, &tmpl_size[0]);
    unlink(path);
    snprintf(path, sizeof path, "%s/cache", dir);
    if (tkv_cache_save(ctx, path, 0)) die("cache save");
    DIR *d = opendir(path);
    if (!d) die("opendir");
    for (struct dirent *de; (de = readdir(d));) {
        char f[1024];
        if (de->d_name[0] == '.') continue;
        snprintf(f, sizeof f, "%s/%s", path, de->d_name);
        const size_t len = strlen(de->d_name);
        if (!tmpl[1] && len > 5 && !strcmp(de->d_name + len - 5, ".tkvc")) { /* the child: K/V from past 0 */
            size_t size;
            uint8_t *img = slurp(f, &size);
            uint32_t kv_from = 0;
            if (size >= 72) memcpy(&kv_from, img + 68, 4); /* header offset 68, little-endian hosts */
            if (kv_from) tmpl[1] = img, tmpl_size[1] = size;
            else free(img);
        }
        unlink(f);
    }
    closedir(d);
    rmdir(path);
    rmdir(dir);
    if (!tmpl[1]) die("no child node file");
    tkv_cache_clear(ctx); /* seq 0 keeps its 8 tokens: the child's prefix */
    /* the hybrid: a sequence of 12 tokens, its file with the checkpoints at its end and before it */
    hmodel = fuzz_load_model("fuzz_cachefile", "arch/qwen35.gguf", false);
    if (tkv_context_create(hmodel, &p, &hctx)) die("hybrid context");
    if (tkv_seq_sync(hctx, 0, 5, toks, 12, &reused)) die("hybrid sync");
    if (!mkdtemp(strcpy(dir, "/tmp/tkv-fuzz-XXXXXX"))) die("mkdtemp");
    snprintf(path, sizeof path, "%s/hseq.bin", dir);
    if (tkv_seq_save(hctx, 0, path)) die("hybrid save");
    tmpl[2] = slurp(path, &tmpl_size[2]);
    unlink(path);
    if (tmpl_size[2] < 12 || tmpl[2][8] != 3) die("the hybrid's file is not version 3");
    /* 4 greedy steps on: each step records the choice its row made */
    tkv_sampler_params sp = tkv_sampler_default_params();
    sp.temperature = 0;
    tkv_sampler *smp = NULL;
    if (tkv_sampler_create(&sp, tkv_vocab_size(hmodel), &smp)) die("sampler");
    tkv_token t = tkv_sampler_sample(smp, tkv_get_logits_last(hctx)), out[1];
    for (int i = 0; i < 4; i++) {
        size_t n_out = 0;
        if (tkv_seq_decode_draft(hctx, 0, t, NULL, 0, smp, 1, out, &n_out) || n_out != 1) die("hybrid step");
        t = out[0];
    }
    tkv_sampler_free(smp);
    size_t n_h = 0;
    if (tkv_seq_tokens(hctx, 0, htoks, 16, &n_h) || n_h != 16) die("hybrid tokens");
    if (tkv_seq_save(hctx, 0, path)) die("hybrid save");
    tmpl[3] = slurp(path, &tmpl_size[3]);
    unlink(path);
    if (tmpl_size[3] < 12 || tmpl[3][8] != 4) die("the hybrid's second file is not version 4");
    rmdir(dir);
    tkv_seq_clear(hctx, 0);
    tkv_cache_clear(hctx);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const unsigned ctl = data[0];
    const unsigned mode = ctl & 3;
    const uint8_t *in = data + 1;
    size_t n_in = size - 1, n;
    uint8_t *buf;
    bool changed = false;
    if (mode < 2) {
        n = n_in;
        buf = malloc(n ? n : 1);
        if (n) memcpy(buf, in, n);
    } else {
        const unsigned k = (ctl & 128 ? 2 : 0) + ((ctl >> 2) & 1);
        n = tmpl_size[k];
        buf = malloc(n);
        memcpy(buf, tmpl[k], n);
        size_t last = n;
        for (size_t i = 0; i + 3 <= n_in; i += 3) {
            last = ((size_t)in[i] | (size_t)in[i + 1] << 8) % n;
            buf[last] ^= in[i + 2];
        }
        if (ctl & 8) n = last;
        changed = n != tmpl_size[k] || memcmp(buf, tmpl[k], n) != 0;
    }
    if (mode & 1) tkv__cachefile_reseal(buf, n);
    const unsigned s = (ctl >> 4) & 3;
    const tkv_seq seq = s ? (tkv_seq)s : -1;
    tkv__clear_error();
    const bool hybrid = ctl & 128;
    tkv_context *c = hybrid ? hctx : ctx;
    const unsigned k = (ctl >> 2) & 1;
    /* the hybrid's files are sequences (K/V from 0): 12 tokens, or htoks' 16 */
    const tkv_token *it = hybrid && k ? htoks : toks;
    const size_t it_n = hybrid ? (k ? 16 : 12) : tmpl_n[k], it_from = hybrid ? 0 : tmpl_from[k];
    const bool continued = (ctl & 64) && s == 3;
    size_t loaded = 0;
    tkv_status st = continued ? tkv_cache_load_image_ex(c, buf, n, 5, it, it_n - 1, TKV_IMAGE_CONTINUATION, &loaded)
                    : ctl & 64 ? tkv_cache_import(c, 5, it, it_n, it_from, buf, n)
                               : tkv__persist_load_image(c, "fuzz", buf, n, seq);
    if (st != TKV_OK && tkv_last_error(NULL)[0] == '\0') die("a failure without a message");
    if (mode == 2 && changed && st == TKV_OK) die("a changed file loaded");
    if (mode == 2 && !changed && st != TKV_OK) die("the valid file did not load");
    if (continued && mode >= 2 && !changed && st == TKV_OK && loaded != it_n) die("the continuation did not load whole");
    if (tkv_cache_check(c) != TKV_OK) die("cache check");
    if (seq >= 0) tkv_seq_clear(c, seq);
    tkv_cache_clear(c);
    if (tkv_seq_len(ctx, 0) != 8) die("seq 0 changed");
    if (hybrid && tkv_cache_stats(hctx, &(tkv_stats){0}) != TKV_OK) die("hybrid stats");
    free(buf);
    return 0;
}
