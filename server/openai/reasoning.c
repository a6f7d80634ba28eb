/*
 * reasoning.c — splitting a reasoning model's text (see reasoning.h).
 */
#include "reasoning.h"

#include <string.h>

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

static bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* The first occurrence of m (len k) in t[from, n), or n. */
static size_t find(const char *t, size_t from, size_t n, const char *m, size_t k) {
    for (size_t i = from; i + k <= n; i++)
        if (!memcmp(t + i, m, k)) return i;
    return n;
}

/* The length of the longest proper prefix of m (len k) that ends t[from, n). */
static size_t partial(const char *t, size_t from, size_t n, const char *m, size_t k) {
    for (size_t l = k - 1; l > 0; l--)
        if (n - from >= l && !memcmp(t + n - l, m, l)) return l;
    return 0;
}

srv_think_split srv_think_split_text(const char *t, size_t n, bool open, bool final) {
    srv_think_split s = {0, 0, 0, 0};
    size_t i = 0;
    if (!open) {
        while (i < n && space(t[i])) i++;
        const size_t k = n - i < sizeof OPEN - 1 ? n - i : sizeof OPEN - 1;
        if (!final && !memcmp(t + i, OPEN, k) && k < sizeof OPEN - 1) return s; /* may yet become "<think>" */
        if (n - i < sizeof OPEN - 1 || memcmp(t + i, OPEN, sizeof OPEN - 1)) {
            s.c0 = 0, s.c1 = n; /* no reasoning */
            return s;
        }
        i += sizeof OPEN - 1;
    }
    while (i < n && space(t[i])) i++;
    s.r0 = i;
    const size_t close = find(t, i, n, CLOSE, sizeof CLOSE - 1);
    size_t end = close;
    if (close == n && !final) end = n - partial(t, i, n, CLOSE, sizeof CLOSE - 1);
    while (end > i && space(t[end - 1])) end--; /* trailing whitespace: only once something follows */
    s.r1 = end;
    if (close == n) {
        s.c0 = s.c1 = n;
        return s;
    }
    size_t c = close + sizeof CLOSE - 1;
    while (c < n && space(t[c])) c++;
    s.c0 = c, s.c1 = n;
    return s;
}

bool srv_think_open(const char *p, size_t n) {
    size_t last_open = n, at = 0;
    while ((at = find(p, at, n, OPEN, sizeof OPEN - 1)) < n) last_open = at++;
    return last_open < n && find(p, last_open, n, CLOSE, sizeof CLOSE - 1) == n;
}

bool srv_think_markers(const char *src, size_t n) { return find(src, 0, n, CLOSE, sizeof CLOSE - 1) < n; }
