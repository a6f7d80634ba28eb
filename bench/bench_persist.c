/*
 * bench_persist.c — how fast the cache is saved and loaded.
 *
 *   bench_persist [MODEL] [-n TOKENS] [-d DIR] [-t THREADS] [-k KV_TYPE]
 *
 * Fills a context with TOKENS tokens (default 4096) in 8 sequences that
 * share a 64-token prefix, then measures, best of 3:
 *   seq save   tkv_seq_save of every sequence (one file each, fsynced);
 *   seq load   tkv_seq_load of those files into a fresh context;
 *   cache save tkv_cache_save of the whole cache (one file per node);
 *   cache load tkv_cache_load of that directory into a fresh context.
 * MB/s is file bytes over wall time (1 MB = 1e6 bytes). Files go to DIR
 * (default: a fresh directory under /tmp), removed at the end. MODEL
 * defaults to stories260K; give a bigger one (`tokenkv mkmodel`) for
 * realistic K/V rows.
 */
#include "bench_clock.h"
#include "tokenkv.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { N_SEQ = 8, SHARED = 64, REPS = 3 };

static void die(const char *what, const void *obj) {
    fprintf(stderr, "bench_persist: %s: %s\n", what, tkv_last_error(obj));
    exit(1);
}

static uint64_t dir_bytes(const char *dir, int *n_files) {
    DIR *d = opendir(dir);
    if (!d) die(dir, NULL);
    uint64_t total = 0;
    *n_files = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char p[1024];
        struct stat sb;
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= (int)sizeof p) continue;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) total += (uint64_t)sb.st_size, ++*n_files;
    }
    closedir(d);
    return total;
}

static void clean_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char p[1024];
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < (int)sizeof p) unlink(p);
    }
    closedir(d);
}

int main(int argc, char **argv) {
    const char *model_path = TKV_SHARED_DIR "/models/stories260K.gguf", *dir_arg = NULL;
    size_t n_tokens = 4096;
    tkv_context_params cp = tkv_context_default_params();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) n_tokens = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "-d") && i + 1 < argc) dir_arg = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) cp.n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) {
            const char *k = argv[++i];
            cp.kv_type = !strcmp(k, "f32") ? TKV_TYPE_F32 : !strcmp(k, "q8_0") ? TKV_TYPE_Q8_0 : TKV_TYPE_F16;
        } else if (argv[i][0] != '-') model_path = argv[i];
        else {
            fprintf(stderr, "usage: bench_persist [MODEL] [-n TOKENS] [-d DIR] [-t THREADS] [-k f16|f32|q8_0]\n");
            return 2;
        }
    }
    if (n_tokens < N_SEQ * (SHARED + 1)) n_tokens = N_SEQ * (SHARED + 1);
    tkv_model *model;
    if (tkv_model_load(model_path, NULL, &model)) die(model_path, NULL);
    const size_t n_vocab = tkv_vocab_size(model);
    cp.n_cells = (uint32_t)n_tokens;
    cp.n_seq_max = N_SEQ;
    tkv_context *ctx;
    if (tkv_context_create(model, &cp, &ctx)) die("context", NULL);

    /* 8 sequences, a shared prefix, then their own tokens */
    const size_t per = n_tokens / N_SEQ;
    tkv_token *t = malloc(per * sizeof *t);
    unsigned seed = 7;
    double t0 = now();
    for (int s = 0; s < N_SEQ; s++) {
        for (size_t i = 0; i < per; i++) t[i] = (tkv_token)(i < SHARED ? 1 + i % (n_vocab - 1) : 1 + (size_t)rand_r(&seed) % (n_vocab - 1));
        size_t reused;
        if (tkv_seq_sync(ctx, s, 0, t, per, &reused)) die("sync", ctx);
    }
    const double t_fill = now() - t0;
    tkv_stats st;
    tkv_cache_stats_ex(ctx, &st, sizeof st);

    char tmpl[] = "/tmp/tkv-bench-persist-XXXXXX", seqdir[1100], cachedir[1100];
    const char *dir = dir_arg;
    if (!dir) {
        if (!mkdtemp(tmpl)) die("mkdtemp", NULL);
        dir = tmpl;
    }
    snprintf(seqdir, sizeof seqdir, "%s/seq", dir);
    snprintf(cachedir, sizeof cachedir, "%s/cache", dir);
    mkdir(dir, 0777);
    mkdir(seqdir, 0777);

    double best[4] = {1e30, 1e30, 1e30, 1e30};
    uint64_t bytes[4] = {0};
    int files[4] = {0};
    for (int rep = 0; rep < REPS; rep++) {
        char path[1200];
        /* seq save */
        clean_dir(seqdir);
        t0 = now();
        for (int s = 0; s < N_SEQ; s++) {
            snprintf(path, sizeof path, "%s/seq%d.tkvc", seqdir, s);
            if (tkv_seq_save(ctx, s, path)) die("seq save", ctx);
        }
        double dt = now() - t0;
        if (dt < best[0]) best[0] = dt;
        bytes[0] = bytes[1] = dir_bytes(seqdir, &files[0]);
        files[1] = files[0];
        /* seq load */
        tkv_context *c2;
        if (tkv_context_create(model, &cp, &c2)) die("context", NULL);
        t0 = now();
        for (int s = 0; s < N_SEQ; s++) {
            snprintf(path, sizeof path, "%s/seq%d.tkvc", seqdir, s);
            if (tkv_seq_load(c2, s, path)) die("seq load", c2);
        }
        dt = now() - t0;
        if (dt < best[1]) best[1] = dt;
        tkv_context_free(c2);
        /* cache save */
        t0 = now();
        if (tkv_cache_save(ctx, cachedir, 0)) die("cache save", ctx);
        dt = now() - t0;
        if (dt < best[2]) best[2] = dt;
        bytes[2] = bytes[3] = dir_bytes(cachedir, &files[2]);
        files[3] = files[2];
        /* cache load */
        if (tkv_context_create(model, &cp, &c2)) die("context", NULL);
        tkv_cache_load_info info;
        t0 = now();
        if (tkv_cache_load_ex(c2, cachedir, &info)) die("cache load", c2);
        dt = now() - t0;
        if (dt < best[3]) best[3] = dt;
        if (info.files_skipped || info.tokens_loaded != st.cells_used) {
            fprintf(stderr, "bench_persist: cache load: %u skipped, %llu of %llu tokens (%s)\n", info.files_skipped,
                    (unsigned long long)info.tokens_loaded, (unsigned long long)st.cells_used, info.first_skip_reason);
            return 1;
        }
        if (tkv_cache_check(c2)) die("check", NULL);
        tkv_context_free(c2);
    }
    uint64_t fp[2];
    tkv_model_fingerprint(model, fp);
    t0 = now();
    for (int i = 0; i < 10; i++) tkv_model_fingerprint(model, fp);
    const double t_fp = (now() - t0) / 10;

    printf("model %s, KV %s, %llu tokens in %d sequences (%d shared), %llu prefix nodes; filled in %.2f s\n",
           model_path, tkv_type_name(cp.kv_type), (unsigned long long)st.cells_used, N_SEQ, SHARED,
           (unsigned long long)st.nodes, t_fill);
    printf("model fingerprint: %.2f ms\n", 1e3 * t_fp);
    const char *names[4] = {"seq save", "seq load", "cache save", "cache load"};
    for (int k = 0; k < 4; k++)
        printf("%-10s %3d files %9.2f MB in %8.2f ms: %8.1f MB/s\n", names[k], files[k], (double)bytes[k] / 1e6,
               1e3 * best[k], (double)bytes[k] / 1e6 / best[k]);
    clean_dir(seqdir);
    clean_dir(cachedir);
    rmdir(seqdir);
    rmdir(cachedir);
    if (!dir_arg) rmdir(dir);
    free(t);
    tkv_context_free(ctx);
    tkv_model_free(model);
    return 0;
}
