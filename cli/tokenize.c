/*
 * tokenize.c — `tokenkv tokenize`: text in, token ids out.
 */
#include "cli.h"
#include "tokenkv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const tokenize_help =
    "usage: tokenkv tokenize -m MODEL [-p TEXT | -f FILE] [--no-bos] [--parse-special] [--ids]\n"
    "\n"
    "Tokenize TEXT, the contents of FILE, or standard input (bytes used exactly:\n"
    "no escapes, no newline stripping) and print one token per line: its id and\n"
    "its piece (quoted, with escapes for control bytes).\n"
    "\n"
    "  -m, --model MODEL   a GGUF file (vocabulary-only files work)\n"
    "  -p, --prompt TEXT   the text to tokenize\n"
    "  -f, --file FILE     read the text from FILE\n"
    "  --no-bos            add no special tokens at all (no BOS, no EOS)\n"
    "  --parse-special     text like <s> or <|im_start|> becomes that special token\n"
    "  --ids               print one JSON array of ids instead\n"
    "  -h, --help          show this help\n";

/* Read a whole stream; NULL (errno set) on failure. */
static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    size_t k;
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                return NULL;
            }
            buf = b;
        }
    }
    if (ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void print_quoted(const char *s, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\' || c == '\'') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *file = NULL;
    unsigned flags = TKV_TOKENIZE_ADD_SPECIAL;
    bool ids_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tokenize_help, stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_value) {
            model_path = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_value) {
            prompt = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_value) {
            file = argv[++i];
        } else if (!strcmp(a, "--no-bos")) {
            flags &= ~TKV_TOKENIZE_ADD_SPECIAL;
        } else if (!strcmp(a, "--parse-special")) {
            flags |= TKV_TOKENIZE_PARSE_SPECIAL;
        } else if (!strcmp(a, "--ids")) {
            ids_only = true;
        } else {
            fprintf(stderr, "tokenkv tokenize: unknown option or missing value: '%s'\n%s", a, tokenize_help);
            return 2;
        }
    }
    if (!model_path) {
        fprintf(stderr, "tokenkv tokenize: no model given (-m MODEL)\n%s", tokenize_help);
        return 2;
    }
    if (prompt && file) {
        fprintf(stderr, "tokenkv tokenize: give -p or -f, not both\n");
        return 2;
    }

    size_t len = 0;
    char *owned = NULL;
    const char *text = prompt;
    if (prompt) {
        len = strlen(prompt);
    } else {
        FILE *f = file ? fopen(file, "rb") : stdin;
        if (!f) return cli_fail("tokenize", "%s: %s", file, strerror(errno));
        owned = read_all(f, &len);
        int e = errno;
        if (file) fclose(f);
        if (!owned) return cli_fail("tokenize", "%s: cannot read: %s", file ? file : "stdin", strerror(e));
        text = owned;
    }

    tkv_model_params p = tkv_model_default_params();
    p.vocab_only = true;
    tkv_model *m = NULL;
    int rc = 0;
    tkv_token *toks = NULL;
    size_t n = 0;
    if (tkv_model_load(model_path, &p, &m) != TKV_OK) {
        rc = cli_fail("tokenize", "%s", tkv_last_error(NULL));
        goto done;
    }
    tkv_status st = tkv_tokenize(m, text, len, flags, NULL, 0, &n);
    if (st == TKV_ERR_FULL) {
        toks = malloc((n ? n : 1) * sizeof *toks);
        st = toks ? tkv_tokenize(m, text, len, flags, toks, n, &n) : TKV_ERR_NOMEM;
    }
    if (st != TKV_OK) {
        rc = cli_fail("tokenize", "%s", st == TKV_ERR_NOMEM && !toks ? "out of memory" : tkv_last_error(m));
        goto done;
    }
    if (ids_only) {
        putchar('[');
        for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", (int)toks[i]);
        puts("]");
    } else {
        char piece[1024];
        for (size_t i = 0; i < n; i++) {
            size_t pn;
            printf("%6d ", (int)toks[i]);
            if (tkv_token_to_piece(m, toks[i], TKV_DETOKENIZE_SPECIAL, piece, sizeof piece, &pn) == TKV_OK)
                print_quoted(piece, pn);
            else
                print_quoted(tkv_token_text(m, toks[i]), strlen(tkv_token_text(m, toks[i])));
            putchar('\n');
        }
    }
done:
    free(toks);
    free(owned);
    tkv_model_free(m);
    return rc;
}
