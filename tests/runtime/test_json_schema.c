/*
 * test_json_schema.c — tkv_json_schema_to_gbnf: for a corpus of schemas,
 * text sampled under the grammar (random logits over stories260K's
 * vocabulary, so nothing but the grammar shapes it) always parses as JSON
 * and validates against the schema, checked by a small validator written
 * here from the JSON Schema rules (an independent reading); integer ranges
 * hold exactly and cover their ends; keywords that are not enforced are
 * refused by name.
 */
#include "testutil.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- an independent validator for the keywords the converter enforces ------------ */

static json_t *g_root; /* the schema being checked, for $ref */

static json_t *resolve(const char *ref) {
    if (!strcmp(ref, "#")) return g_root;
    if (!strncmp(ref, "#/$defs/", 8)) return json_object_get(json_object_get(g_root, "$defs"), ref + 8);
    if (!strncmp(ref, "#/definitions/", 14)) return json_object_get(json_object_get(g_root, "definitions"), ref + 14);
    return NULL;
}

static size_t code_points(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool all_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

static bool is_date(const char *s) {
    if (strlen(s) != 10 || s[4] != '-' || s[7] != '-' || !all_digits(s, 4) || !all_digits(s + 5, 2) ||
        !all_digits(s + 8, 2))
        return false;
    const int y = atoi(s), m = atoi(s + 5), d = atoi(s + 8);
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const bool leap = (y % 4 == 0 && y % 100) || y % 400 == 0;
    return m >= 1 && m <= 12 && d >= 1 && d <= days[m - 1] + (m == 2 && leap);
}

static bool is_time(const char *s) {
    if (strlen(s) < 9 || s[2] != ':' || s[5] != ':' || !all_digits(s, 2) || !all_digits(s + 3, 2) ||
        !all_digits(s + 6, 2) || atoi(s) > 23 || atoi(s + 3) > 59 || atoi(s + 6) > 59)
        return false;
    const char *p = s + 8;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9') return false;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (!strcmp(p, "Z")) return true;
    return (p[0] == '+' || p[0] == '-') && strlen(p) == 6 && p[3] == ':' && all_digits(p + 1, 2) &&
           all_digits(p + 4, 2) && atoi(p + 1) <= 23 && atoi(p + 4) <= 59;
}

static bool is_uuid(const char *s) {
    if (strlen(s) != 36) return false;
    for (int i = 0; i < 36; i++) {
        const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    }
    return true;
}

static bool valid(const json_t *v, json_t *s);

static bool type_ok(const json_t *v, const char *t) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

static bool valid(const json_t *v, json_t *s) {
    if (!s || json_is_true(s)) return true;
    json_t *x;
    if ((x = json_object_get(s, "$ref")) && !valid(v, resolve(json_string_value(x)))) return false;
    if ((x = json_object_get(s, "const")) && !json_equal(v, x)) return false;
    if ((x = json_object_get(s, "enum"))) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(x); i++) any |= json_equal(v, json_array_get(x, i));
        if (!any) return false;
    }
    if ((x = json_object_get(s, "anyOf"))) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(x); i++) any |= valid(v, json_array_get(x, i));
        if (!any) return false;
    }
    if ((x = json_object_get(s, "oneOf"))) {
        int n = 0;
        for (size_t i = 0; i < json_array_size(x); i++) n += valid(v, json_array_get(x, i));
        if (n != 1) return false;
    }
    if ((x = json_object_get(s, "allOf")))
        for (size_t i = 0; i < json_array_size(x); i++)
            if (!valid(v, json_array_get(x, i))) return false;
    if ((x = json_object_get(s, "type"))) {
        bool ok = false;
        if (json_is_string(x)) ok = type_ok(v, json_string_value(x));
        for (size_t i = 0; i < json_array_size(x); i++) ok |= type_ok(v, json_string_value(json_array_get(x, i)));
        if (!ok) return false;
    }
    if (json_is_number(v)) {
        const double d = json_number_value(v);
        if ((x = json_object_get(s, "minimum")) && d < json_number_value(x)) return false;
        if ((x = json_object_get(s, "maximum")) && d > json_number_value(x)) return false;
        if ((x = json_object_get(s, "exclusiveMinimum")) && d <= json_number_value(x)) return false;
        if ((x = json_object_get(s, "exclusiveMaximum")) && d >= json_number_value(x)) return false;
    }
    if (json_is_string(v)) {
        const char *str = json_string_value(v);
        if (strlen(str) != json_string_length(v)) return false; /* a NUL inside */
        if ((x = json_object_get(s, "minLength")) && code_points(str) < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "maxLength")) && code_points(str) > (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "format"))) {
            const char *f = json_string_value(x);
            char date[16];
            if (!strcmp(f, "date") && !is_date(str)) return false;
            if (!strcmp(f, "time") && !is_time(str)) return false;
            if (!strcmp(f, "uuid") && !is_uuid(str)) return false;
            if (!strcmp(f, "date-time")) {
                const char *t = strchr(str, 'T');
                if (!t || t - str != 10) return false;
                memcpy(date, str, 10), date[10] = '\0';
                if (!is_date(date) || !is_time(t + 1)) return false;
            }
        }
    }
    if (json_is_array(v)) {
        const size_t n = json_array_size(v);
        if ((x = json_object_get(s, "minItems")) && n < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(s, "maxItems")) && n > (size_t)json_integer_value(x)) return false;
        json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
        if (json_is_array(items)) prefix = items, items = json_object_get(s, "additionalItems"); /* the tuple form */
        for (size_t i = 0; i < n; i++) {
            json_t *sub = i < json_array_size(prefix) ? json_array_get(prefix, i) : items;
            if (json_is_false(sub) || (sub && !valid(json_array_get(v, i), sub))) return false;
        }
    }
    if (json_is_object(v)) {
        json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
               *extra = json_object_get(s, "additionalProperties");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return false;
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)v, k, val) {
            json_t *sub = json_object_get(props, k);
            if (sub ? !valid(val, sub) : (json_is_false(extra) || (json_is_object(extra) && !valid(val, extra))))
                return false;
        }
    }
    return true;
}

/* ---- sampling under a grammar -------------------------------------------------------- */

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Random logits, the tokens that close things a little favoured so that texts end; the grammar alone
   decides what is possible. Returns the text (malloc'd) or NULL when it did not end within the budget. */
static char *sample(const tkv_grammar *g, uint64_t seed) {
    tkv_sampler_params p = tkv_sampler_default_params();
    p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = seed;
    tkv_sampler *smp;
    assert_int_equal(tkv_sampler_create(&p, tu_n_vocab, &smp), TKV_OK);
    assert_int_equal(tkv_sampler_set_grammar(smp, g), TKV_OK);
    float *logits = malloc(tu_n_vocab * sizeof *logits);
    char *out = calloc(1, 8192), piece[64];
    size_t n = 0;
    bool ended = false;
    for (int step = 0; step < 1500 && !ended; step++) {
        for (size_t i = 0; i < tu_n_vocab; i++) {
            size_t len = 0;
            logits[i] = (float)(2.0 * urand());
            if (!tkv_token_to_piece(tu_model, (tkv_token)i, 0, piece, sizeof piece, &len) && len == 1 &&
                strchr("\"]},0123456789", piece[0]))
                logits[i] += 2.5f;
        }
        logits[tkv_token_eos(tu_model)] += 4.0f;
        const tkv_token t = tkv_sampler_sample(smp, logits);
        if (tkv_token_is_eog(tu_model, t)) {
            ended = true;
            break;
        }
        size_t len = 0;
        assert_int_equal(tkv_token_to_piece(tu_model, t, 0, piece, sizeof piece, &len), TKV_OK);
        if (n + len >= 8191) break;
        memcpy(out + n, piece, len);
        n += len;
    }
    free(logits);
    tkv_sampler_free(smp);
    if (!ended) {
        free(out);
        return NULL;
    }
    return out;
}

/* The grammar of a schema (fails the test when it does not convert or compile). */
static tkv_grammar *grammar_of(const char *schema) {
    char *gbnf = NULL;
    if (tkv_json_schema_to_gbnf(schema, strlen(schema), &gbnf) != TKV_OK)
        fail_msg("schema %s: %s", schema, tkv_last_error(NULL));
    tkv_grammar *g = NULL;
    if (tkv_grammar_create(tu_model, gbnf, strlen(gbnf), NULL, &g) != TKV_OK)
        fail_msg("schema %s: the grammar does not compile: %s\n%s", schema, tkv_last_error(NULL), gbnf);
    tkv_free(gbnf);
    return g;
}

/* Every sampled text parses and validates; returns how many ended within the budget. */
static int check_schema(const char *schema, int samples) {
    json_error_t je;
    g_root = json_loads(schema, 0, &je);
    if (!g_root) fail_msg("test schema: %s", je.text);
    tkv_grammar *g = grammar_of(schema);
    int ended = 0;
    for (int k = 0; k < samples; k++) {
        char *text = sample(g, 1000u + (unsigned)k);
        if (!text) continue;
        ended++;
        json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
        if (!v) fail_msg("schema %s\nsample %d does not parse (%s): %s", schema, k, je.text, text);
        if (!valid(v, g_root)) fail_msg("schema %s\nsample %d does not validate: %s", schema, k, text);
        json_decref(v);
        free(text);
    }
    tkv_grammar_free(g);
    json_decref(g_root);
    return ended;
}

static const char *const corpus[] = {
    "{\"type\": \"integer\"}",
    "{\"type\": \"integer\", \"minimum\": -123, \"maximum\": 4567}",
    "{\"type\": \"integer\", \"exclusiveMinimum\": 10, \"exclusiveMaximum\": 100}",
    "{\"type\": \"integer\", \"minimum\": -50, \"maximum\": -3}",
    "{\"type\": \"integer\", \"minimum\": 7, \"maximum\": 7}",
    "{\"type\": \"integer\", \"minimum\": 2.5, \"maximum\": 7.5}",
    "{\"type\": \"number\"}",
    "{\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}",
    "{\"type\": \"number\", \"minimum\": -10, \"maximum\": 10}",
    "{\"type\": \"number\", \"minimum\": -1, \"maximum\": 0}",
    "{\"type\": \"boolean\"}",
    "{\"type\": \"null\"}",
    "{\"type\": [\"string\", \"null\"], \"maxLength\": 8}",
    "{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 5}",
    "{\"type\": \"string\", \"format\": \"date\"}",
    "{\"type\": \"string\", \"format\": \"time\"}",
    "{\"type\": \"string\", \"format\": \"date-time\"}",
    "{\"type\": \"string\", \"format\": \"uuid\"}",
    "{\"enum\": [\"red\", \"green\", 3, null, {\"a\": [1, 2]}]}",
    "{\"const\": {\"x\": \"y\\\"z\"}}",
    "{\"type\": \"array\", \"items\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 9}, \"minItems\": 2, "
    "\"maxItems\": 4}",
    "{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\", \"maxLength\": 3}, {\"type\": \"boolean\"}], "
    "\"items\": false}",
    "{\"type\": \"array\", \"items\": {\"type\": \"null\"}, \"maxItems\": 0}",
    "{\"items\": [{\"type\": \"integer\", \"minimum\": -9, \"maximum\": 9}, {\"type\": \"boolean\"}]}",
    "{\"type\": \"array\", \"items\": [{\"const\": \"a\"}], \"additionalItems\": {\"type\": \"null\"}, "
    "\"maxItems\": 3}",
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 6}, \"age\": "
    "{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 150}, \"email\": {\"type\": \"string\", \"maxLength\": 5}}, "
    "\"required\": [\"name\", \"age\"], \"additionalProperties\": false}",
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"boolean\"}, \"b\": {\"type\": \"null\"}}}",
    "{\"anyOf\": [{\"type\": \"integer\", \"maximum\": -1}, {\"type\": \"string\", \"maxLength\": 2}]}",
    "{\"oneOf\": [{\"type\": \"boolean\"}, {\"type\": \"null\"}]}",
    "{\"allOf\": [{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]}, "
    "{\"properties\": {\"b\": {\"const\": 1}}, \"required\": [\"b\"]}]}",
    "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\", \"minimum\": 0, "
    "\"maximum\": 99}, \"next\": {\"anyOf\": [{\"$ref\": \"#/$defs/node\"}, {\"type\": \"null\"}]}}, "
    "\"required\": [\"v\", \"next\"]}}, \"$ref\": \"#/$defs/node\", \"title\": \"a list\", \"default\": null}",
    "{\"type\": \"object\", \"properties\": {\"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"x\", \"y\"]}, "
    "\"maxItems\": 3}, \"when\": {\"type\": \"string\", \"format\": \"date\"}}, \"required\": [\"tags\"], "
    "\"description\": \"annotations are ignored\", \"$schema\": \"https://json-schema.org/draft/2020-12/schema\"}",
    "{}",
    "{\"type\": \"object\"}",
    "{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 5}}",
    "{\"type\": \"object\", \"additionalProperties\": false}",
};

static void test_corpus(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
        const int ended = check_schema(corpus[i], 12);
        if (ended < 6) fail_msg("schema %s: only %d of 12 samples ended", corpus[i], ended);
    }
}

/* The token whose piece is the single byte c (stories260K has one for every ASCII character it needs). */
static tkv_token char_token(char c) {
    char piece[64];
    for (size_t i = 0; i < tu_n_vocab; i++) {
        size_t len = 0;
        if (!tkv_token_to_piece(tu_model, (tkv_token)i, 0, piece, sizeof piece, &len) && len == 1 && piece[0] == c)
            return (tkv_token)i;
    }
    fail_msg("no token for '%c'", c);
    return -1;
}

/* Whether the grammar takes `text` as a whole sentence: greedy sampling with each next character's token far
   ahead of the rest, then the end token; a grammar that refuses a step (or the end) makes the sampler choose
   something else. */
static bool accepts(const tkv_grammar *g, const char *text) {
    tkv_sampler_params p = tkv_sampler_default_params();
    p.temperature = 0;
    tkv_sampler *smp;
    assert_int_equal(tkv_sampler_create(&p, tu_n_vocab, &smp), TKV_OK);
    assert_int_equal(tkv_sampler_set_grammar(smp, g), TKV_OK);
    float *logits = calloc(tu_n_vocab, sizeof *logits);
    bool ok = true;
    const tkv_token eos = tkv_token_eos(tu_model);
    for (size_t i = 0; ok && i <= strlen(text); i++) {
        const tkv_token want = text[i] ? char_token(text[i]) : eos;
        for (size_t k = 0; k < tu_n_vocab; k++) logits[k] = (float)(k % 7) * 0.01f;
        logits[want] = 50.0f;
        ok = tkv_sampler_sample(smp, logits) == want;
    }
    free(logits);
    tkv_sampler_free(smp);
    return ok;
}

/* Integer bounds hold exactly: every integer near the bounds is taken if and only if it lies inside. */
static void test_integer_bounds_exact(void **state) {
    (void)state;
    static const struct {
        const char *bounds;
        long long lo, hi; /* what they mean */
    } ranges[] = {
        {"\"minimum\": -12, \"maximum\": 31", -12, 31},
        {"\"minimum\": 95, \"maximum\": 105", 95, 105},
        {"\"minimum\": -7, \"maximum\": -2", -7, -2},
        {"\"minimum\": 0, \"maximum\": 0", 0, 0},
        {"\"exclusiveMinimum\": 998, \"exclusiveMaximum\": 1003", 999, 1002},
        {"\"minimum\": -1.5, \"maximum\": 20.5", -1, 20},
        {"\"minimum\": 9990", 9990, LLONG_MAX}, /* one bound: the probes near the other say "inside" */
        {"\"maximum\": -9990", LLONG_MIN, -9990},
    };
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        char schema[160];
        snprintf(schema, sizeof schema, "{\"type\": \"integer\", %s}", ranges[r].bounds);
        tkv_grammar *g = grammar_of(schema);
        const long long lo = ranges[r].lo, hi = ranges[r].hi;
        const long long l = lo == LLONG_MIN ? hi - 1000 : lo, h = hi == LLONG_MAX ? lo + 1000 : hi;
        const long long probes[] = {l - 11, l - 10, l - 2, l - 1, l, l + 1, l + 9, l + 10,
                                    h - 10, h - 1, h, h + 1, h + 2, h + 10, h + 100, h * 10, h * 1000};
        for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
            char text[32];
            snprintf(text, sizeof text, "%lld", probes[k]);
            const bool in = probes[k] >= lo && probes[k] <= hi && probes[k] > -1000000000000ll &&
                            probes[k] < 1000000000000ll; /* 18 digits at most: far beyond these */
            if (accepts(g, text) != in) fail_msg("%s: %s is %s, but the grammar %s it", schema, text,
                                                 in ? "inside" : "outside", in ? "refuses" : "takes");
        }
        assert_false(accepts(g, "007"));  /* no leading zeros */
        assert_false(accepts(g, "-0"));
        tkv_grammar_free(g);
    }
}

/* What is not enforced is refused by name; invalid schemas say what is wrong. */
static void test_refusals(void **state) {
    (void)state;
    static const struct { const char *schema, *says; tkv_status st; } cases[] = {
        {"{\"type\": \"string\", \"pattern\": \"^a+$\"}", "pattern", TKV_ERR_UNSUPPORTED},
        {"{\"type\": \"array\", \"uniqueItems\": true}", "uniqueItems", TKV_ERR_UNSUPPORTED},
        {"{\"items\": [{}], \"prefixItems\": [{}]}", "not both", TKV_ERR_INVALID},
        {"{\"type\": \"array\", \"additionalItems\": false}", "additionalItems", TKV_ERR_INVALID},
        {"{\"type\": \"number\", \"minimum\": 0.5}", "minimum", TKV_ERR_UNSUPPORTED},
        {"{\"type\": \"string\", \"format\": \"email\"}", "email", TKV_ERR_UNSUPPORTED},
        {"{\"type\": \"object\", \"patternProperties\": {}}", "patternProperties", TKV_ERR_UNSUPPORTED},
        {"{\"$ref\": \"#/$defs/missing\"}", "missing", TKV_ERR_INVALID},
        {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "no value", TKV_ERR_INVALID},
        {"{\"type\": \"wizard\"}", "wizard", TKV_ERR_INVALID},
        {"{\"type\": \"object\"", "invalid JSON", TKV_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *gbnf = (char *)1;
        const tkv_status st = tkv_json_schema_to_gbnf(cases[i].schema, strlen(cases[i].schema), &gbnf);
        if (st != cases[i].st) fail_msg("%s: %s, expected %s", cases[i].schema, tkv_status_str(st), tkv_status_str(cases[i].st));
        assert_null(gbnf);
        if (!strstr(tkv_last_error(NULL), cases[i].says))
            fail_msg("%s: the message \"%s\" does not name %s", cases[i].schema, tkv_last_error(NULL), cases[i].says);
    }
    assert_int_equal(tkv_json_schema_to_gbnf("{}", 2, NULL), TKV_ERR_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_integer_bounds_exact),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, tu_stories_setup, tu_stories_teardown);
}
