/*
 * test_persist_dir.c — the cache directory as an attack surface, and saves
 * that fail part way: a save's files are the user's alone (0600 in a 0700
 * directory), a file or directory others may write is refused by name, a
 * link planted where a file goes is replaced and never followed, a directory
 * planted there costs only its own file, and a save over RLIMIT_FSIZE (as
 * a full disk) leaves no partial file and no more than max_bytes. Saving and
 * loading themselves are test_persist.c's.
 */
#include "testutil.h"
#include "persist_util.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

/* ---- the cache directory as an attack surface ------------------------------------ */

static mode_t mode_of(const char *path) {
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    return sb.st_mode & 07777;
}

/* Files of a save are the user's alone (0600, in a 0700 directory the save creates); a directory or file
   others may write is refused; a link planted where a file goes is replaced, never followed. */
static void test_directory_trust(void **state) {
    (void)state;
    char parent[64], dir[96], names[64][64], p[512];
    snprintf(parent, sizeof parent, "%s", temp_dir());
    snprintf(dir, sizeof dir, "%s/cache", parent);
    tkv_context *a = filled_ctx(512);
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    assert_int_equal(mode_of(dir), 0700);
    int n = list_dir(dir, names, 64, NULL);
    assert_true(n >= 2);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%.63s", dir, names[i]);
        assert_int_equal(mode_of(p), 0600);
    }
    /* a victim, and a link to it in place of each file the next save writes */
    char victim[128];
    snprintf(victim, sizeof victim, "%s/victim", parent);
    write_bytes(victim, (const uint8_t *)"precious", 8);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%.63s", dir, names[i]);
        assert_int_equal(unlink(p), 0);
        assert_int_equal(symlink(victim, p), 0);
    }
    tkv_context *b = new_ctx(512);
    tkv_cache_load_info info;
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK); /* links are not followed: each one skipped */
    assert_int_equal(info.files_loaded, 0);
    assert_int_equal(info.files_skipped, n);
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    size_t vn;
    uint8_t *v = tu_read_file(victim, &vn);
    assert_int_equal(vn, 8);
    assert_memory_equal(v, "precious", 8);
    free(v);
    assert_int_equal(list_dir(dir, names, 64, NULL), n);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%.63s", dir, names[i]);
        assert_int_equal(mode_of(p), 0600); /* regular files again */
    }
    /* a file others may write is skipped (with the files that continue its prefix) */
    snprintf(p, sizeof p, "%s/%.63s", dir, names[n - 1]);
    assert_int_equal(chmod(p, 0666), 0);
    tkv_cache_clear(b);
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    assert_true(info.files_skipped >= 1 && info.files_loaded == n - info.files_skipped);
    assert_non_null(strstr(info.first_skip_reason, "writable by other users"));
    /* a directory others may write: refused by save and load, with what to do */
    assert_int_equal(chmod(dir, 0777), 0);
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_ERR_IO);
    assert_error_has(a, "chmod go-w");
    assert_int_equal(tkv_cache_load(b, dir), TKV_ERR_IO);
    assert_error_has(b, "writable by other users");
    assert_int_equal(chmod(dir, 0700), 0);
    tkv_context_free(a);
    tkv_context_free(b);
    remove_dir(dir);
    unlink(victim);
    rmdir(parent);
}

/* Issue 38, finding 10: a directory planted where a cache file goes made every later save fail ("cannot
   remove"). An empty one is removed and the file written; one with content is left as it is (its content is not
   the cache's to delete), its file is not written, and every other file is: saves and loads go on. */
static void test_planted_directory(void **state) {
    (void)state;
    char dir[64], names[64][64], p[512], q[600];
    snprintf(dir, sizeof dir, "%s", temp_dir());
    tkv_context *a = filled_ctx(512);
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    const int n = list_dir(dir, names, 64, NULL);
    int f[2], nf = 0; /* two cache files (not the manifest or the secret) */
    for (int i = 0; i < n && nf < 2; i++) {
        uint64_t h;
        if (tkv__persist_parse_name(names[i], &h)) f[nf++] = i;
    }
    assert_int_equal(nf, 2);
    snprintf(p, sizeof p, "%s/%.63s", dir, names[f[0]]);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(q, sizeof q, "%s/keep", p);
    write_bytes(q, (const uint8_t *)"mine", 4);
    snprintf(p, sizeof p, "%s/%.63s", dir, names[f[1]]);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(mkdir(p, 0700), 0);
    for (int round = 0; round < 2; round++) assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0); /* the empty one: a file again */
    assert_true(S_ISREG(sb.st_mode));
    size_t kn;
    uint8_t *k = tu_read_file(q, &kn); /* the other one: untouched */
    assert_int_equal(kn, 4);
    assert_memory_equal(k, "mine", 4);
    free(k);
    tkv_context *b = new_ctx(512);
    tkv_cache_load_info info;
    assert_int_equal(tkv_cache_load_ex(b, dir, &info), TKV_OK);
    assert_true(info.files_loaded >= 1);
    tkv_context_free(a);
    tkv_context_free(b);
    remove_dir(dir);
}

/* A save that fails part way (here: files over RLIMIT_FSIZE, as a full disk would refuse them) leaves no
   partial file and never more than max_bytes on disk; the next save, with room again, completes. */
static void test_failed_save(void **state) {
    (void)state;
    const char *d = temp_dir();
    char dir[64], names[64][64];
    snprintf(dir, sizeof dir, "%s", d);
    tkv_context *a = filled_ctx(512);
    assert_int_equal(tkv_cache_save(a, dir, 0), TKV_OK);
    uint64_t full;
    const int n_full = list_dir(dir, names, 64, &full);
    /* a different cache to save over it: every file of the first save is stale. Its most recent prefix
       (written first) is short, the others long: a file size limit between the two lets the first file
       through and fails the next, as a disk that fills up part way would */
    tkv_context *b = new_ctx(512);
    tkv_token t[3][LEN];
    const size_t len[3] = {LEN, LEN, 6};
    for (int i = 0; i < 3; i++) {
        list(t[i], LEN, 7 + i, 20 + i);
        sync(b, (tkv_seq)i, 0, t[i], len[i]);
    }
    const uint64_t max = full; /* room for one generation, not two */
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead */
    struct rlimit small = old;
    small.rlim_cur = node_file_size(0, 6) + 1;
    assert_true(small.rlim_cur < node_file_size(0, LEN));
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    const tkv_status st = tkv_cache_save(b, dir, max);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, TKV_ERR_IO);
    uint64_t bytes;
    int n = list_dir(dir, names, 64, &bytes);
    for (int i = 0; i < n; i++) assert_null(strstr(names[i], ".tmp")); /* no partial file */
    assert_true(n >= 1 && n < n_full); /* the short prefix's file; the first save's, gone first */
    assert_true(bytes <= max);
    /* with room again the save completes, within the limit, and loads whole */
    assert_int_equal(tkv_cache_save(b, dir, max), TKV_OK);
    n = list_dir(dir, names, 64, &bytes);
    assert_true(n >= 1 && bytes <= max);
    tkv_context *c = new_ctx(512);
    tkv_cache_load_info info;
    assert_int_equal(tkv_cache_load_ex(c, dir, &info), TKV_OK);
    assert_int_equal(info.files_skipped, 0);
    assert_int_equal(info.files_loaded, n);
    for (int i = 0; i < 3; i++) assert_int_equal(match(c, 0, t[i], len[i]), len[i]);
    check(c);
    tkv_context_free(a);
    tkv_context_free(b);
    tkv_context_free(c);
    remove_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_directory_trust),
        cmocka_unit_test(test_planted_directory),
        cmocka_unit_test(test_failed_save),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
