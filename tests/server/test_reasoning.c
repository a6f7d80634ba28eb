/*
 * test_reasoning.c — server/openai/reasoning: a reasoning model's text split into
 * its reasoning and its answer. Hand-written cases with the expected parts
 * spelled out; then, for random texts built from markers, partial markers,
 * whitespace and words, the split of every prefix (as a stream sees the
 * text grow) only ever extends the parts sent before, and ends as the split
 * of the whole text.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai/reasoning.h"

static void expect_split(const char *text, bool open, const char *reasoning, const char *answer) {
    const size_t n = strlen(text);
    const srv_think_split s = srv_think_split_text(text, n, open, true);
    char r[256], a[256];
    snprintf(r, sizeof r, "%.*s", (int)(s.r1 - s.r0), text + s.r0);
    snprintf(a, sizeof a, "%.*s", (int)(s.c1 - s.c0), text + s.c0);
    if (strcmp(r, reasoning) || strcmp(a, answer))
        fail_msg("split(\"%s\", open %d): reasoning \"%s\" answer \"%s\"; expected \"%s\" / \"%s\"", text, open, r, a,
                 reasoning, answer);
}

static void test_cases(void **state) {
    (void)state;
    expect_split("<think>\nplan it\n</think>\n\nThe answer.", false, "plan it", "The answer.");
    expect_split("  <think>a</think>b", false, "a", "b");
    expect_split("No thinking here.", false, "", "No thinking here.");
    expect_split(" <thin", false, "", " <thin");               /* not a marker after all */
    expect_split("<think>still thinking", false, "still thinking", ""); /* never closed: all reasoning */
    expect_split("plan\n</think>\n\nDone", true, "plan", "Done");  /* the prompt opened the block */
    expect_split("\n</think>\n\nDone", true, "", "Done");          /* an empty block */
    expect_split("Answer only", true, "Answer only", "");           /* opened, never closed */
    expect_split("a</think>b</think>c", true, "a", "b</think>c");   /* only the first close counts */
    expect_split("", false, "", "");
    expect_split("", true, "", "");
    assert_true(srv_think_open("<|im_start|>assistant\n<think>\n", 30));
    assert_false(srv_think_open("<|im_start|>assistant\n<think>\n\n</think>\n\n", 41));
    assert_false(srv_think_open("<|im_start|>assistant\n", 22));
    assert_true(srv_think_open("<think></think> and again <think>", 33));
    assert_true(srv_think_markers("{% if x %}</think>{% endif %}", 29));
    assert_false(srv_think_markers("{{ messages }}", 14));
}

static void test_stream_prefixes(void **state) {
    (void)state;
    static const char *const pieces[] = {"<think>", "</think>", "<thi", "</th", "<", " ", "\n", "a", "word", "\n\n"};
    char text[256];
    for (int iter = 0; iter < 4000; iter++) {
        size_t n = 0;
        const int k = 1 + (int)tu_rand(12);
        for (int i = 0; i < k; i++) {
            const char *p = pieces[tu_rand(sizeof pieces / sizeof *pieces)];
            memcpy(text + n, p, strlen(p));
            n += strlen(p);
        }
        const bool open = tu_rand(2);
        const srv_think_split whole = srv_think_split_text(text, n, open, true);
        size_t sent_r = 0, sent_c = 0;
        for (size_t m = 0; m <= n; m++) { /* the stream after m bytes, then the end */
            const srv_think_split s = srv_think_split_text(text, m, open, m == n);
            const size_t lr = s.r1 - s.r0, lc = s.c1 - s.c0;
            /* what is settled is a prefix of the final part, and never shrinks */
            if (lr < sent_r || lc < sent_c || lr > whole.r1 - whole.r0 || lc > whole.c1 - whole.c0 ||
                (lr && (s.r0 != whole.r0 || memcmp(text + s.r0, text + whole.r0, lr))) ||
                (lc && (s.c0 != whole.c0 || memcmp(text + s.c0, text + whole.c0, lc))))
                fail_msg("text \"%.*s\" (open %d), prefix %zu: reasoning [%zu, %zu) answer [%zu, %zu); whole "
                         "[%zu, %zu) / [%zu, %zu); sent %zu / %zu", (int)n, text, open, m, s.r0, s.r1, s.c0, s.c1,
                         whole.r0, whole.r1, whole.c0, whole.c1, sent_r, sent_c);
            sent_r = lr, sent_c = lc;
        }
        assert_int_equal(sent_r, whole.r1 - whole.r0);
        assert_int_equal(sent_c, whole.c1 - whole.c0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_stream_prefixes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
