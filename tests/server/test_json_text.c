/*
 * test_json_text.c — server/openai/fields: srv_json_text, the JSON string
 * of generated text, whose bytes need not be UTF-8 (a random-weight model's
 * byte tokens: "\xFF\x89\x81" made a completion answer with no choice).
 * The oracle is a decoder written here from RFC 3629's table of well-formed
 * sequences: every string must come back (never NULL), every well-formed
 * character unchanged, and every byte that starts no well-formed sequence
 * as one U+FFFD. Hand-written cases, then random byte strings.
 */
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai/fields.h"

/* RFC 3629, section 4: the well-formed sequences, by lead byte: the range of the second byte; the rest
   are 80..BF. */
static const struct {
    unsigned char lo, hi, len, lo2, hi2;
} WELL_FORMED[] = {
    {0x00, 0x7F, 1, 0, 0},       {0xC2, 0xDF, 2, 0x80, 0xBF}, {0xE0, 0xE0, 3, 0xA0, 0xBF},
    {0xE1, 0xEC, 3, 0x80, 0xBF}, {0xED, 0xED, 3, 0x80, 0x9F}, {0xEE, 0xEF, 3, 0x80, 0xBF},
    {0xF0, 0xF0, 4, 0x90, 0xBF}, {0xF1, 0xF3, 4, 0x80, 0xBF}, {0xF4, 0xF4, 4, 0x80, 0x8F},
};

/* The length of the well-formed sequence at s (n bytes left), or 0. */
static size_t oracle_char(const unsigned char *s, size_t n) {
    for (size_t r = 0; r < sizeof WELL_FORMED / sizeof *WELL_FORMED; r++) {
        if (s[0] < WELL_FORMED[r].lo || s[0] > WELL_FORMED[r].hi) continue;
        const size_t len = WELL_FORMED[r].len;
        if (len > n) return 0;
        if (len > 1 && (s[1] < WELL_FORMED[r].lo2 || s[1] > WELL_FORMED[r].hi2)) return 0;
        for (size_t i = 2; i < len; i++)
            if (s[i] < 0x80 || s[i] > 0xBF) return 0;
        return len;
    }
    return 0;
}

/* What srv_json_text must give for s: well-formed characters kept, any other byte replaced by U+FFFD. */
static size_t expected(const unsigned char *s, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        const size_t c = oracle_char(s + i, n - i);
        if (c) memcpy(out + k, s + i, c), k += c, i += c;
        else memcpy(out + k, "\xEF\xBF\xBD", 3), k += 3, i++;
    }
    return k;
}

static void check(const unsigned char *s, size_t n) {
    char want[3 * 64 + 1];
    assert_true(n <= 64);
    const size_t wn = expected(s, n, want);
    json_t *j = srv_json_text((const char *)s, n);
    if (!j) {
        char hex[3 * 64 + 1] = "";
        for (size_t i = 0; i < n; i++) snprintf(hex + 3 * i, 4, "%02X ", s[i]);
        fail_msg("srv_json_text(%s): NULL", hex);
    }
    assert_int_equal(json_string_length(j), wn);
    assert_memory_equal(json_string_value(j), want, wn);
    json_decref(j);
}

static void test_cases(void **state) {
    (void)state;
    static const struct {
        const char *s;
        size_t n;
    } cases[] = {
        {"plain text", 10},
        {"\xFF\x89\x81", 3},             /* the completion that lost its choice: F5..FF never lead */
        {"\xF5\x80\x80\x80", 4},         /* above U+10FFFF */
        {"\xF8\x88\x80\x80\x80", 5},     /* a five-byte form */
        {"\xC0\xAF", 2},                 /* overlong */
        {"\xE0\x80\xAF", 3},             /* overlong */
        {"\xED\xA0\x80", 3},             /* a surrogate */
        {"\xF4\x90\x80\x80", 4},         /* above U+10FFFF */
        {"a\x00" "b", 3},                /* NUL is a character */
        {"\xE2\x82", 2},                 /* cut short */
        {"\xE2\x82\xAC \xF0\x9F\x98\x80", 8}, /* the euro sign, a space, an emoji */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check((const unsigned char *)cases[i].s, cases[i].n);
}

/* Random strings, biased towards the bytes where the rules change. */
static void test_random(void **state) {
    (void)state;
    static const unsigned char edges[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2,
                                          0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5,
                                          0xF7, 0xF8, 0xFB, 0xFC, 0xFE, 0xFF};
    unsigned seed = 34;
    unsigned char s[64];
    for (int r = 0; r < 20000; r++) {
        const size_t n = (size_t)rand_r(&seed) % sizeof s;
        for (size_t i = 0; i < n; i++)
            s[i] = rand_r(&seed) % 2 ? edges[(size_t)rand_r(&seed) % sizeof edges] : (unsigned char)rand_r(&seed);
        check(s, n);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_cases), cmocka_unit_test(test_random)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
