/*
 * chat_template.c — detect a chat template's family by its markers and
 * render messages the way that family's published template does.
 * The formats are listed in chat_template.h.
 */
#include "chat_template.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * All allocation goes through chat_realloc so that the test can make any
 * allocation fail (the server itself uses plain realloc: the result is
 * handed to the caller, who frees it with free()).
 */
#ifdef SRV_CHAT_TEST_HOOKS
void *srv_chat_test_realloc(void *p, size_t size);
#define chat_realloc srv_chat_test_realloc
#else
#define chat_realloc realloc
#endif

static bool has(const char *s, const char *marker) { return strstr(s, marker) != NULL; }

srv_chat_kind srv_chat_detect(const char *tmpl, bool *recognised) {
    bool dummy;
    if (!recognised) recognised = &dummy;
    *recognised = true;
    if (!tmpl || !*tmpl) return SRV_CHAT_PLAIN;
    /*
     * Order matters where families share markers. Each test names the
     * markers of one family and excludes look-alikes we do not render:
     * Phi-4 wraps roles in <|im_start|>role<|im_sep|> (not ChatML's newline);
     * Mistral's newer tekken templates use [SYSTEM_PROMPT] and no spaces
     * around [INST]; ChatGLM3 shares <|user|>/<|assistant|> with Zephyr.
     */
    if (has(tmpl, "<|im_start|>")) {
        if (has(tmpl, "<|im_sep|>")) goto unknown;
        return SRV_CHAT_CHATML;
    }
    if (has(tmpl, "<|start_header_id|>") && has(tmpl, "<|end_header_id|>")) return SRV_CHAT_LLAMA3;
    if (has(tmpl, "[INST]")) {
        /* Llama-2-chat is the one [INST] family with a <<SYS>> block. */
        if (has(tmpl, "<<SYS>>")) return SRV_CHAT_LLAMA2;
        if (has(tmpl, "[SYSTEM_PROMPT]")) goto unknown;
        return SRV_CHAT_MISTRAL;
    }
    /*
     * Phi-3 and Zephyr both name turns <|user|>/<|assistant|>; Phi-3 ends a
     * turn with <|end|>, Zephyr with eos_token. Phi-3's compact template
     * builds '<|' + role + '|>' and so may spell only <|assistant|> (its
     * generation prompt) literally.
     */
    if (has(tmpl, "<|end|>") && has(tmpl, "<|assistant|>")) return SRV_CHAT_PHI3;
    if (has(tmpl, "<|user|>") && has(tmpl, "<|assistant|>") && !has(tmpl, "[gMASK]")) return SRV_CHAT_ZEPHYR;
unknown:
    *recognised = false;
    return SRV_CHAT_PLAIN;
}

static const char *const kind_names[] = {
    [SRV_CHAT_PLAIN] = "plain",     [SRV_CHAT_CHATML] = "chatml", [SRV_CHAT_LLAMA2] = "llama2",
    [SRV_CHAT_LLAMA3] = "llama3",   [SRV_CHAT_MISTRAL] = "mistral", [SRV_CHAT_ZEPHYR] = "zephyr",
    [SRV_CHAT_PHI3] = "phi3",
};
enum { N_KINDS = sizeof kind_names / sizeof kind_names[0] };

bool srv_chat_from_name(const char *name, srv_chat_kind *out) {
    if (!name || !out) return false;
    for (size_t i = 0; i < N_KINDS; i++) {
        if (strcmp(name, kind_names[i]) == 0) {
            *out = (srv_chat_kind)i;
            return true;
        }
    }
    return false;
}

const char *srv_chat_name(srv_chat_kind k) {
    /* compare as unsigned: an out-of-range enum value may be negative */
    return (unsigned)k < N_KINDS ? kind_names[k] : "unknown";
}

/* ---- output buffer ------------------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
    bool oom; /* sticky: once an append fails, the rest are no-ops */
} buf;

static void put_n(buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (n >= SIZE_MAX - b->len) {
        b->oom = true;
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap = cap > SIZE_MAX / 2 ? b->len + n + 1 : cap * 2;
        char *p = chat_realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void put(buf *b, const char *s) { put_n(b, s, strlen(s)); }

/* ---- Python's str.strip(), which Jinja's trim and .strip() use ------------ */

/* Code point of the UTF-8 sequence at p (at most n bytes), its length in *len;
 * -1 for anything malformed or beyond U+FFFF (no whitespace lives there). */
static long utf8_at(const unsigned char *p, size_t n, size_t *len) {
    if (n >= 1 && p[0] < 0x80) return *len = 1, p[0];
    if (n >= 2 && p[0] >= 0xC2 && p[0] <= 0xDF && (p[1] & 0xC0) == 0x80)
        return *len = 2, ((long)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    if (n >= 3 && (p[0] & 0xF0) == 0xE0 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
        long cp = ((long)(p[0] & 0x0F) << 12) | ((long)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
        if (cp >= 0x800) return *len = 3, cp;
    }
    return -1;
}

/* Python's str.isspace() for one code point (Unicode White_Space plus the
 * ASCII separators 0x1C-0x1F that Python also counts). */
static bool py_space(long c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* Narrow [*s, *s + *n) to its text without surrounding whitespace. */
static void strip(const char **s, size_t *n) {
    const unsigned char *p = (const unsigned char *)*s;
    size_t a = 0, e = *n, len;
    while (a < e) {
        long c = utf8_at(p + a, e - a, &len);
        if (!py_space(c)) break;
        a += len;
    }
    while (e > a) {
        size_t st = e - 1; /* back up to the first byte of the last character */
        while (st > a && e - st < 3 && (p[st] & 0xC0) == 0x80) st--;
        long c = utf8_at(p + st, e - st, &len);
        if (len != e - st || !py_space(c)) break;
        e = st;
    }
    *s += a, *n = e - a;
}

/* A message's text: n bytes at s, which may hold NULs (U+0000 a client sent back). */
typedef struct {
    const char *s;
    size_t n;
} text;

static void put_text(buf *b, text t) { put_n(b, t.s, t.n); }

static void put_stripped(buf *b, text t) {
    strip(&t.s, &t.n);
    put_n(b, t.s, t.n);
}

/* ---- renderers ---------------------------------------------------------- */

typedef enum { R_SYSTEM, R_USER, R_ASSISTANT } role;

typedef struct {
    const srv_chat_msg *msgs;
    const role *roles;
    size_t n;
    const char *bos, *eos;
    char *err;
    size_t errcap;
} job;

static void fail(const job *j, const char *fmt, ...) {
    if (!j->err || !j->errcap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, j->errcap, fmt, ap);
    va_end(ap);
}

static text content(const job *j, size_t i) {
    const srv_chat_msg *m = &j->msgs[i];
    if (!m->content) return (text){"", 0};
    return (text){m->content, m->content_len ? m->content_len : strlen(m->content)};
}

static const char *const role_lower[] = {"system", "user", "assistant"};
static const char *const role_title[] = {"System", "User", "Assistant"};

static void render_plain(const job *j, buf *b) {
    for (size_t i = 0; i < j->n; i++) {
        put(b, role_title[j->roles[i]]), put(b, ": "), put_text(b, content(j, i)), put(b, "\n");
    }
    put(b, "Assistant:");
}

static void render_chatml(const job *j, buf *b) {
    for (size_t i = 0; i < j->n; i++) {
        put(b, "<|im_start|>"), put(b, role_lower[j->roles[i]]), put(b, "\n");
        put_text(b, content(j, i)), put(b, "<|im_end|>\n");
    }
    put(b, "<|im_start|>assistant\n");
}

static void render_llama3(const job *j, buf *b) {
    for (size_t i = 0; i < j->n; i++) {
        put(b, "<|start_header_id|>"), put(b, role_lower[j->roles[i]]), put(b, "<|end_header_id|>\n\n");
        put_stripped(b, content(j, i)), put(b, "<|eot_id|>");
    }
    put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Zephyr and Phi-3 differ only in how a turn ends. */
static void render_tagged(const job *j, buf *b, const char *end) {
    for (size_t i = 0; i < j->n; i++) {
        put(b, "<|"), put(b, role_lower[j->roles[i]]), put(b, "|>\n");
        put_text(b, content(j, i)), put(b, end), put(b, "\n");
    }
    put(b, "<|assistant|>\n");
}

/*
 * Llama-2 and Mistral: an optional first system message, then strictly
 * user, assistant, user, ..., ending with a user turn. Their templates raise
 * an exception on broken alternation; we also refuse a trailing assistant
 * turn because the template has no generation prompt to put after it.
 * Returns the index of the first turn message.
 */
static bool check_turns(const job *j, const char *family, size_t *first) {
    size_t f = j->roles[0] == R_SYSTEM ? 1 : 0;
    if (f == j->n) {
        fail(j, "%s: a system message must be followed by a user message", family);
        return false;
    }
    for (size_t i = f; i < j->n; i++) {
        role want = (i - f) % 2 == 0 ? R_USER : R_ASSISTANT;
        if (j->roles[i] != want) {
            fail(j, "messages[%zu]: roles must alternate user/assistant (after an optional first system message), "
                    "as the %s template requires; got %s where %s was expected",
                 i, family, role_lower[j->roles[i]], role_lower[want]);
            return false;
        }
    }
    if (j->roles[j->n - 1] != R_USER) {
        fail(j, "messages[%zu]: the %s template must end with a user message", j->n - 1, family);
        return false;
    }
    *first = f;
    return true;
}

static bool render_llama2(const job *j, buf *b) {
    size_t f;
    if (!check_turns(j, "llama2", &f)) return false;
    for (size_t i = f; i < j->n; i++) {
        if (j->roles[i] == R_ASSISTANT) {
            put(b, " "), put_stripped(b, content(j, i)), put(b, " "), put(b, j->eos);
            continue;
        }
        /* the template prints BOS before every [INST]; the first one is the
         * tokenizer's to add */
        if (i > f) put(b, j->bos);
        put(b, "[INST] ");
        if (i == f && f == 1) {
            /* the template strips "<<SYS>>\n" + S + "\n<</SYS>>\n\n" + U as a
             * whole: only its end can lose whitespace, and an all-blank U
             * lets the strip reach into the "\n\n" after <</SYS>> */
            buf t = {0};
            put(&t, "<<SYS>>\n"), put_text(&t, content(j, 0)), put(&t, "\n<</SYS>>\n\n"), put_text(&t, content(j, i));
            if (t.oom) b->oom = true;
            else put_stripped(b, (text){t.p, t.len});
            free(t.p);
        } else {
            put_stripped(b, content(j, i));
        }
        put(b, " [/INST]");
    }
    return true;
}

static bool render_mistral(const job *j, buf *b) {
    size_t f;
    if (!check_turns(j, "mistral", &f)) return false;
    for (size_t i = f; i < j->n; i++) {
        if (j->roles[i] == R_ASSISTANT) {
            put_text(b, content(j, i)), put(b, j->eos);
            continue;
        }
        put(b, "[INST] ");
        if (i == f && f == 1) put_text(b, content(j, 0)), put(b, "\n\n");
        put_text(b, content(j, i)), put(b, " [/INST]");
    }
    return true;
}

bool srv_chat_render(srv_chat_kind k, const srv_chat_msg *msgs, size_t n, const char *bos, const char *eos,
                     char **out, size_t *out_len, char *err, size_t errcap) {
    job j = {msgs, NULL, n, bos ? bos : "", eos ? eos : "", err, errcap};
    if (err && errcap) err[0] = '\0';
    if (!out) {
        fail(&j, "no output pointer");
        return false;
    }
    *out = NULL;
    if ((unsigned)k >= N_KINDS) {
        fail(&j, "unknown chat template kind %d", (int)k);
        return false;
    }
    if (n == 0 || !msgs) {
        fail(&j, "messages: at least one message is required");
        return false;
    }
    if (n > SIZE_MAX / sizeof(role)) {
        fail(&j, "messages: too many");
        return false;
    }
    role *roles = chat_realloc(NULL, n * sizeof *roles);
    if (!roles) {
        fail(&j, "out of memory");
        return false;
    }
    j.roles = roles;
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (r && (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0)) roles[i] = R_SYSTEM;
        else if (r && strcmp(r, "user") == 0) roles[i] = R_USER;
        else if (r && strcmp(r, "assistant") == 0) roles[i] = R_ASSISTANT;
        else {
            /* %.40s: a hostile role string must not flood the message */
            if (r) fail(&j, "messages[%zu]: unknown role \"%.40s\" (expected system, developer, user or assistant)", i, r);
            else fail(&j, "messages[%zu]: missing role", i);
            free(roles);
            return false;
        }
    }

    buf b = {0};
    bool ok = true;
    switch (k) {
    case SRV_CHAT_PLAIN: render_plain(&j, &b); break;
    case SRV_CHAT_CHATML: render_chatml(&j, &b); break;
    case SRV_CHAT_LLAMA2: ok = render_llama2(&j, &b); break;
    case SRV_CHAT_LLAMA3: render_llama3(&j, &b); break;
    case SRV_CHAT_MISTRAL: ok = render_mistral(&j, &b); break;
    case SRV_CHAT_ZEPHYR: render_tagged(&j, &b, j.eos); break;
    case SRV_CHAT_PHI3: render_tagged(&j, &b, "<|end|>"); break;
    }
    free(roles);
    /* every renderer puts a non-empty generation prompt, so b.p is set
     * unless an allocation failed */
    if (ok && (b.oom || !b.p)) {
        fail(&j, "out of memory");
        ok = false;
    }
    if (!ok) {
        free(b.p);
        return false;
    }
    *out = b.p;
    if (out_len) *out_len = b.len;
    return true;
}
