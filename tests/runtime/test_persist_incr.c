/*
 * test_persist_incr.c — incremental saves (runtime/persist_save.c): a save
 * writes only the files of new or changed prefix-index nodes and leaves the
 * others untouched (same inode, no rewrite), also when the LRU order
 * changes; the copy bound defers nodes to later saves; a damaged file is
 * found and written again; a saving process killed with SIGKILL at random
 * moments always leaves a directory that loads, with every file whole.
 */
#include "testutil.h"

#include "base/alloc.h"
#include "runtime/persist.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { LEN = 48 };

static tkv_context *new_ctx(uint32_t n_cells) {
    tkv_context_params p = tkv_context_default_params();
    p.n_cells = n_cells;
    p.n_seq_max = 4;
    p.n_threads = 1;
    p.n_batch = 16;
    tkv_context *ctx = NULL;
    if (tkv_context_create(tu_model, &p, &ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return ctx;
}

static void check(const tkv_context *ctx) {
    if (tkv_cache_check(ctx) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
}

/* Decode tokens into seq 0 and let go of them: they stay cached, held by nobody. */
static void cache(tkv_context *ctx, const tkv_token *t, size_t n) {
    size_t reused;
    if (tkv_seq_sync(ctx, 0, 0, t, n, &reused) != TKV_OK) fail_msg("%s", tkv_last_error(ctx));
    tkv_seq_clear(ctx, 0);
}

/* Prompt k: its own first token, so each is a tree of its own. */
static void prompt(tkv_token *t, int k) {
    for (int i = 0; i < LEN; i++) t[i] = (tkv_token)(3 + (k * 101 + i * 13) % 500);
    t[0] = (tkv_token)(100 + k);
}

static size_t match(const tkv_context *ctx, const tkv_token *t, size_t n) {
    size_t len;
    assert_int_equal(tkv_cache_match(ctx, 0, t, n, &len), TKV_OK);
    return len;
}

static const char *temp_dir(void) {
    static char d[64];
    assert_int_equal(tu_mkdtemp(d, "incr"), 0);
    return d;
}

static void remove_dir(const char *dir) { assert_int_equal(tu_rmtree(dir), 0); }

/* The .tkvc files of dir (temporary ones left out): names and inodes. */
typedef struct files {
    int n;
    char name[64][64];
    ino_t ino[64];
} files;

static void list_files(const char *dir, files *f) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    f->n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        const size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 5, ".tkvc") != 0) continue;
        assert_true(f->n < 64 && len < 64);
        struct stat sb;
        assert_int_equal(fstatat(dirfd(d), de->d_name, &sb, 0), 0);
        memcpy(f->name[f->n], de->d_name, len + 1);
        f->ino[f->n++] = sb.st_ino;
    }
    closedir(d);
}

/* How many of a's files are in b under the same name and inode (not rewritten). */
static int same_files(const files *a, const files *b) {
    int same = 0;
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++) same += !strcmp(a->name[i], b->name[j]) && a->ino[i] == b->ino[j];
    return same;
}

static tkv_cache_save_info save(tkv_cache_saver *s, tkv_context *ctx) {
    tkv_cache_save_info info;
    assert_int_equal(tkv_cache_saver_snapshot(s, ctx), TKV_OK);
    if (tkv_cache_saver_write(s, &info) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
    return info;
}

static void test_second_save_writes_only_new_nodes(void **state) {
    (void)state;
    const char *dir = temp_dir();
    tkv_context *a = new_ctx(1024);
    tkv_token t[8][LEN];
    for (int k = 0; k < 8; k++) prompt(t[k], k);
    for (int k = 0; k < 3; k++) cache(a, t[k], LEN);
    tkv_cache_saver *s;
    assert_int_equal(tkv_cache_saver_new(dir, 0, 0, &s), TKV_OK);
    tkv_cache_save_info info = save(s, a);
    assert_int_equal(info.files, 3);
    assert_int_equal(info.files_written, 3);
    assert_int_equal(info.files_kept, 0);
    files f0, f1;
    list_files(dir, &f0);
    assert_int_equal(f0.n, 3);

    /* nothing new, and a change of LRU order (prompt 0 used again): nothing written */
    cache(a, t[0], LEN);
    info = save(s, a);
    assert_int_equal(info.files_written, 0);
    assert_int_equal(info.files_kept, 3);
    assert_int_equal(info.bytes_copied, 0);
    list_files(dir, &f1);
    assert_int_equal(same_files(&f0, &f1), 3);

    /* two new prompts, and two continuations of prompt 1 (its node is split where they part: the part
       before is prompt 1's node as it was, same file): four files, the others untouched */
    cache(a, t[3], LEN);
    cache(a, t[4], LEN);
    tkv_token longer[LEN + 8], other[LEN + 8];
    memcpy(longer, t[1], sizeof t[1]);
    memcpy(other, t[1], sizeof t[1]);
    for (int i = 0; i < 8; i++) longer[LEN + i] = (tkv_token)(7 + i), other[LEN + i] = (tkv_token)(70 + i);
    cache(a, longer, LEN + 8);
    cache(a, other, LEN + 8);
    info = save(s, a);
    assert_int_equal(info.files_written, 4);
    assert_int_equal(info.files_kept, 3);
    assert_int_equal(info.files_removed, 0);
    assert_int_equal(info.files, 7);
    list_files(dir, &f1);
    assert_int_equal(f1.n, 7);
    assert_int_equal(same_files(&f0, &f1), 3);

    /* a new saver on the same directory (a restart) writes nothing either, and the sync tkv_cache_save
       neither: what is there is read back, found whole, and kept */
    tkv_cache_saver_free(s);
    assert_int_equal(tkv_cache_saver_new(dir, 0, 0, &s), TKV_OK);
    info = save(s, a);
    assert_int_equal(info.files_written, 0);
    assert_int_equal(info.files_kept, 7);
    assert_int_equal(info.files_damaged, 0);
    files f2;
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    list_files(dir, &f2);
    assert_int_equal(same_files(&f1, &f2), 7);

    /* everything loads, in the manifest's order */
    tkv_context *b = new_ctx(1024);
    tkv_cache_load_info li;
    assert_int_equal(tkv_cache_load_ex(b, dir, &li), TKV_OK);
    assert_int_equal(li.files_loaded, 7);
    assert_int_equal(li.files_skipped, 0);
    for (int k = 0; k < 5; k++) assert_int_equal(match(b, t[k], LEN), LEN);
    assert_int_equal(match(b, longer, LEN + 8), LEN + 8);
    assert_int_equal(match(b, other, LEN + 8), LEN + 8);
    check(b);
    tkv_context_free(b);

    /* a file damaged on disk (same name, same size) is found by a new saver, removed, and written again by
       the next save */
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, f2.name[0]);
    size_t size;
    uint8_t *img = tu_read_file(p, &size);
    img[size - 20] ^= 1;
    FILE *fp = fopen(p, "wb");
    assert_int_equal(fwrite(img, 1, size, fp), size);
    fclose(fp);
    free(img);
    tkv_cache_saver_free(s);
    assert_int_equal(tkv_cache_saver_new(dir, 0, 0, &s), TKV_OK);
    info = save(s, a);
    assert_int_equal(info.files_damaged, 1);
    info = save(s, a);
    assert_int_equal(info.files_written, 1);
    assert_int_equal(info.files_damaged, 0);
    b = new_ctx(1024);
    assert_int_equal(tkv_cache_load_ex(b, dir, &li), TKV_OK);
    assert_int_equal(li.files_loaded, 7);
    assert_int_equal(li.files_skipped, 0);
    tkv_context_free(b);

    tkv_cache_saver_free(s);
    tkv_context_free(a);
    remove_dir(dir);
}

/* The copy bound: a snapshot copies at most max_copy bytes; the rest follows in later saves. */
static void test_copy_bound(void **state) {
    (void)state;
    const char *dir = temp_dir();
    tkv_context *a = new_ctx(1024);
    tkv_token t[6][LEN];
    for (int k = 0; k < 6; k++) prompt(t[k], k), cache(a, t[k], LEN);
    tkv__phdr h;
    assert_int_equal(tkv__persist_header(a, &h), TKV_OK);
    h.n_tokens = LEN;
    const uint64_t one = tkv__cachefile_file_size(&h);
    tkv_cache_saver *s;
    assert_int_equal(tkv_cache_saver_new(dir, 0, 2 * one, &s), TKV_OK);
    int written = 0;
    for (int round = 0; round < 3; round++) {
        tkv_cache_save_info info = save(s, a);
        assert_int_equal(info.files_written, 2);
        assert_true(info.bytes_copied <= 2 * one);
        assert_int_equal(info.nodes_deferred, (uint32_t)(4 - 2 * round));
        written += (int)info.files_written;
    }
    assert_int_equal(written, 6);
    tkv_cache_save_info info = save(s, a);
    assert_int_equal(info.files_written, 0);
    assert_int_equal(info.files, 6);
    tkv_context *b = new_ctx(1024);
    tkv_cache_load_info li;
    assert_int_equal(tkv_cache_load_ex(b, dir, &li), TKV_OK);
    assert_int_equal(li.files_loaded, 6);
    for (int k = 0; k < 6; k++) assert_int_equal(match(b, t[k], LEN), LEN);
    tkv_context_free(b);
    tkv_cache_saver_free(s);
    tkv_context_free(a);
    remove_dir(dir);
}

/* The child: saves over and over, the cache changing between saves (new prompts, prompts evicted, nodes
   split), until it is killed. */
static void saver_child(const char *dir, unsigned seed) {
    tkv_context *ctx = new_ctx(400);
    tkv_cache_saver *s;
    if (tkv_cache_saver_new(dir, 0, 0, &s) != TKV_OK) _exit(2);
    tkv_token t[LEN + 16];
    for (unsigned i = 0;; i++) {
        prompt(t, (int)((seed + i) % 23));
        const size_t n = 20 + (seed * 7 + i * 13) % (LEN - 4); /* <= LEN + 16 */
        for (int j = LEN; j < LEN + 16; j++) t[j] = (tkv_token)(5 + (i * 3 + (unsigned)j) % 400);
        size_t reused;
        if (tkv_seq_sync(ctx, 0, 0, t, n, &reused) != TKV_OK) _exit(3);
        tkv_seq_clear(ctx, 0);
        if (tkv_cache_saver_snapshot(s, ctx) != TKV_OK || tkv_cache_saver_write(s, NULL) != TKV_OK) _exit(4);
    }
}

static void test_kill_mid_save(void **state) {
    (void)state;
    const char *dir = temp_dir();
    tkv__pexpect e;
    tkv_context *b = new_ctx(400);
    assert_int_equal(tkv__persist_expect(b, &e), TKV_OK);
    int with_tmp = 0;
    for (unsigned round = 0; round < 12; round++) {
        const pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) saver_child(dir, round);
        /* long enough for a few saves, and a random point inside one */
        const struct timespec ts = {0, (long)(30 + (round * 7919) % 150) * 1000000L};
        nanosleep(&ts, NULL);
        assert_int_equal(kill(pid, SIGKILL), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
            fail_msg("the saver ended before the kill (status %#x)", (unsigned)status);
        /* every file is whole (the K/V of each checks), whatever the kill interrupted */
        DIR *d = opendir(dir);
        assert_non_null(d);
        for (struct dirent *de; (de = readdir(d));) {
            uint64_t hash;
            if (strstr(de->d_name, ".tmp.")) with_tmp++;
            if (!tkv__persist_parse_name(de->d_name, &hash)) continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            uint8_t *data;
            size_t size;
            tkv__prec rec;
            if (tkv__cachefile_read_file(p, &data, &size) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
            if (tkv__cachefile_parse(p, data, size, &e, &rec) != TKV_OK) fail_msg("%s", tkv_last_error(NULL));
            tkv__free(data);
        }
        closedir(d);
        /* and the directory loads: nothing refused as damaged (a file may wait for a parent the next
           save writes), the cache consistent */
        tkv_cache_clear(b);
        tkv_cache_load_info li;
        assert_int_equal(tkv_cache_load_ex(b, dir, &li), TKV_OK);
        if (li.files_skipped) assert_non_null(strstr(li.first_skip_reason, "not cached"));
        check(b);
    }
    /* a save that completes leaves a directory where everything loads */
    assert_int_equal(tkv_cache_save(b, dir, 0), TKV_OK);
    tkv_context *c = new_ctx(400);
    tkv_cache_load_info li;
    assert_int_equal(tkv_cache_load_ex(c, dir, &li), TKV_OK);
    assert_int_equal(li.files_skipped, 0);
    tkv_stats sb, sc;
    tkv_cache_stats_ex(b, &sb, sizeof sb);
    tkv_cache_stats_ex(c, &sc, sizeof sc);
    assert_int_equal(sc.cells_used, sb.cells_used);
    print_message("    %d temporary files seen after kills (kills inside a write)\n", with_tmp);
    tkv_context_free(c);
    tkv_context_free(b);
    remove_dir(dir);
}

/* A directory of the earlier scheme (RRRRRRRR-HASH.tkvc, the order in the names and headers, no manifest)
   loads; the next save replaces its files with its own. */
static void test_old_directory(void **state) {
    (void)state;
    const char *dir = temp_dir();
    tkv_context *a = new_ctx(1024);
    tkv_token t[3][LEN], longer[LEN + 8];
    for (int k = 0; k < 3; k++) prompt(t[k], k), cache(a, t[k], LEN);
    memcpy(longer, t[2], sizeof t[2]);
    for (int i = 0; i < 8; i++) longer[LEN + i] = (tkv_token)(9 + i);
    cache(a, t[1], LEN / 2); /* a split: a parent and two children */
    cache(a, longer, LEN + 8);
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    char p[512], q[512], ranked[64][64];
    snprintf(p, sizeof p, "%s/manifest", dir);
    size_t size;
    char *text = (char *)tu_read_file(p, &size);
    int n = 0;
    for (const char *line = strchr(text, '\n') + 1; strncmp(line, "checksum ", 9) != 0; line += 17)
        snprintf(ranked[n++], 64, "%.16s.tkvc", line);
    free(text);
    assert_int_equal(unlink(p), 0);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, ranked[i]);
        snprintf(q, sizeof q, "%s/%08x-%s", dir, (unsigned)i, ranked[i]);
        assert_int_equal(rename(p, q), 0);
    }
    tkv_context *b = new_ctx(1024);
    tkv_cache_load_info li;
    assert_int_equal(tkv_cache_load_ex(b, dir, &li), TKV_OK);
    assert_int_equal(li.files_loaded, (uint32_t)n);
    assert_int_equal(li.files_skipped, 0);
    assert_int_equal(match(b, longer, LEN + 8), LEN + 8);
    assert_int_equal(match(b, t[1], LEN), LEN);
    tkv_cache_saver *s;
    assert_int_equal(tkv_cache_saver_new(dir, 0, 0, &s), TKV_OK);
    tkv_cache_save_info info = save(s, b);
    assert_int_equal(info.files_written, (uint32_t)n);
    assert_int_equal(info.files_removed, (uint32_t)n);
    files f;
    list_files(dir, &f);
    assert_int_equal(f.n, n);
    for (int i = 0; i < n; i++) assert_null(strchr(f.name[i], '-'));
    tkv_cache_saver_free(s);
    tkv_context_free(b);
    tkv_context_free(a);
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_save_writes_only_new_nodes),
        cmocka_unit_test(test_copy_bound),
        cmocka_unit_test(test_kill_mid_save),
        cmocka_unit_test(test_old_directory),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
