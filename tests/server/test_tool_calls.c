/*
 * test_tool_calls.c — server/openai/tool_calls: tool calls read back from fixed answers in
 * each syntax (the calls and the content spelled out by hand), the syntax
 * detected from the real templates of ../shared/templates, every prefix of
 * an answer (as a stream sees it grow) only extending what earlier prefixes
 * gave and ending as the final parse, and the forcing grammar of each
 * syntax accepting a call that the parser then reads back.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai/tool_calls.h"

#define CB "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define CE "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define B1 "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>"
#define E1 "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>"
#define SEP "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>"

typedef struct tcase {
    srv_tool_format f;
    const char *text;
    const char *content;  /* the content, before and after the calls */
    const char *calls[4]; /* "name args", args as compact JSON */
} tcase;

static const tcase CASES[] = {
    {SRV_TOOLS_HERMES,
     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "Let me check.",
     {"get_weather {\"city\":\"Paris\"}"}},
    {SRV_TOOLS_HERMES,
     "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": "
     "\"{\\\"x\\\": [1, 2]}\"}\n</tool_call>",
     "",
     {"a {}", "b {\"x\":[1,2]}"}},
    {SRV_TOOLS_HERMES, "<tool_call>\n{not json}\n</tool_call>", "<tool_call>\n{not json}\n</tool_call>", {NULL}},
    {SRV_TOOLS_HERMES, "<tool_call>{\"name\": \"a\", \"arguments\": {\"k\": 1}}</tool_call> then words", "then words",
     {"a {\"k\":1}"}},
    {SRV_TOOLS_HERMES, "No call here, only <tool text.", "No call here, only <tool text.", {NULL}},
    {SRV_TOOLS_HERMES, "<tool_call>\n{\"name\": \"cut\", \"arguments\": {\"k\": ", "<tool_call>\n{\"name\": \"cut\", "
     "\"arguments\": {\"k\": ", {NULL}},
    {SRV_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
     {"get_weather {\"city\":\"Paris\"}"}},
    {SRV_TOOLS_LLAMA3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", {"f {}"}},
    {SRV_TOOLS_LLAMA3, "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}", "",
     {"a {}", "b {\"x\":1}"}},
    {SRV_TOOLS_LLAMA3, "{\"answer\": 42}", "{\"answer\": 42}", {NULL}},
    {SRV_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"arguments\": {}}]",
     "", {"f {\"a\":1}", "g {}"}},
    {SRV_TOOLS_MISTRAL, "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}]", "",
     {"f {\"a\":1}"}},
    {SRV_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "", {"get_weather {\"city\":\"Paris\"}"}},
    {SRV_TOOLS_MISTRAL_ARGS, "Sure.[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{\"x\":2}", "Sure.", {"a {}", "b {\"x\":2}"}},
    {SRV_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]a[CALL_ID]123456789[ARGS]{\"q\": true}", "", {"a {\"q\":true}"}},
    {SRV_TOOLS_DEEPSEEK,
     "I will look.\n\n" CB B1 "function" SEP "get_weather\n```json\n{\"city\": \"Paris\"}\n```" E1 "\n" B1 "function" SEP
     "b\n```json\n{}\n```" E1 CE,
     "I will look.",
     {"get_weather {\"city\":\"Paris\"}", "b {}"}},
    {SRV_TOOLS_DEEPSEEK, CB B1 "get_weather" SEP "{\"city\":\"Paris\"}" E1 CE, "", {"get_weather {\"city\":\"Paris\"}"}},
    {SRV_TOOLS_HARMONY,
     "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
     "<|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
     "<|channel|>analysis<|message|>Need weather.<|end|>",
     {"get_weather {\"city\":\"Paris\"}"}},
    {SRV_TOOLS_HARMONY, "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}", "", {"f {}"}},
    {SRV_TOOLS_HARMONY, "<|channel|>final<|message|>Hello <b>there</b>", "<|channel|>final<|message|>Hello <b>there</b>",
     {NULL}},
    {SRV_TOOLS_GENERIC, "{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}", "", {"f {\"a\":[1,2]}"}},
    {SRV_TOOLS_GENERIC, "  [{\"name\": \"f\", \"arguments\": {}}, {\"function\": {\"name\": \"g\", \"arguments\": "
     "\"{}\"}}]\n", "", {"f {}", "g {}"}},
    {SRV_TOOLS_GENERIC, "{\"name\": \"f\", \"arguments\": 3}", "{\"name\": \"f\", \"arguments\": 3}", {NULL}},
    {SRV_TOOLS_GENERIC, "Plain text { with braces }", "Plain text { with braces }", {NULL}},
    {SRV_TOOLS_HERMES, "{\"name\": \"f\", \"arguments\": {}}", "", {"f {}"}}, /* every syntax reads the generic one */
    /* xml: values are text; without a schema, the JSON they spell (Python's True/False/None too) */
    {SRV_TOOLS_XML,
     "I will look it up.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
     "</parameter>\n</function>\n</tool_call>",
     "I will look it up.",
     {"get_weather {\"city\":\"Paris\",\"days\":3}"}},
    {SRV_TOOLS_XML,
     "<tool_call>\n<function=a>\n</function>\n</tool_call>\n<tool_call>\n<function=b>\n<parameter=x>\n[1, 2]\n</parameter>\n"
     "<parameter=ok>\nTrue\n</parameter>\n<parameter=none>\nNone\n</parameter>\n<parameter=text>\ntwo\nlines <b>\n"
     "</parameter>\n</function>\n</tool_call>",
     "",
     {"a {}", "b {\"x\":[1,2],\"ok\":true,\"none\":null,\"text\":\"two\\nlines <b>\"}"}},
    {SRV_TOOLS_XML, "<tool_call>\n{\"name\": \"j\", \"arguments\": {\"k\": 1}}\n</tool_call>", "", {"j {\"k\":1}"}},
    {SRV_TOOLS_XML, "<tool_call>\n<function=cut>\n<parameter=city>\nPar", "<tool_call>\n<function=cut>\n<parameter=city>\nPar",
     {NULL}},
    {SRV_TOOLS_XML, "<tool_call>\n<oops>\n</tool_call>", "<tool_call>\n<oops>\n</tool_call>", {NULL}},
    {SRV_TOOLS_SEED_XML,
     "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Oslo</parameter>\n<parameter=n>2</parameter>\n</function>\n"
     "</seed:tool_call>",
     "",
     {"get_weather {\"city\":\"Oslo\",\"n\":2}"}},
};

static char *content_of(const char *t, size_t n, const srv_tool_parse *p) {
    char *s = malloc(n + 1);
    size_t k = p->content_end;
    memcpy(s, t, k);
    memcpy(s + k, t + p->rest, n - p->rest);
    s[k + n - p->rest] = 0;
    return s;
}

static void check_case(const tcase *c) {
    const size_t n = strlen(c->text);
    srv_tool_parse p;
    assert_true(srv_tools_parse(c->f, NULL, c->text, n, true, &p));
    char *content = content_of(c->text, n, &p);
    if (strcmp(content, c->content))
        fail_msg("%s: \"%s\": content \"%s\", expected \"%s\"", srv_tools_format_name(c->f), c->text, content,
                 c->content);
    free(content);
    size_t want = 0;
    while (want < 4 && c->calls[want]) want++;
    if (p.n_calls != want)
        fail_msg("%s: \"%s\": %zu calls, expected %zu", srv_tools_format_name(c->f), c->text, p.n_calls, want);
    for (size_t i = 0; i < want; i++) {
        char got[512];
        snprintf(got, sizeof got, "%s %s", p.calls[i].name, p.calls[i].arguments);
        if (strcmp(got, c->calls[i])) fail_msg("%s: call %zu: \"%s\", expected \"%s\"", c->text, i, got, c->calls[i]);
    }
    srv_tool_parse_free(&p);
}

static void test_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(&CASES[i]);
}

/* Every prefix, parsed as a stream would: content and calls only grow, within the final ones. */
static void check_prefixes(srv_tool_format f, const char *t, size_t n) {
    srv_tool_parse fin;
    assert_true(srv_tools_parse(f, NULL, t, n, true, &fin));
    size_t last_content = 0, last_calls = 0;
    for (size_t k = 0; k <= n; k++) {
        srv_tool_parse p;
        assert_true(srv_tools_parse(f, NULL, t, k, false, &p));
        if (p.content_end < last_content || p.n_calls < last_calls || p.content_end > fin.content_end ||
            p.n_calls > fin.n_calls)
            fail_msg("%s: \"%.*s\" (prefix %zu of \"%s\"): content %zu calls %zu after %zu / %zu; final %zu / %zu",
                     srv_tools_format_name(f), (int)k, t, k, t, p.content_end, p.n_calls, last_content, last_calls,
                     fin.content_end, fin.n_calls);
        for (size_t i = 0; i < p.n_calls; i++)
            if (strcmp(p.calls[i].name, fin.calls[i].name) || strcmp(p.calls[i].arguments, fin.calls[i].arguments))
                fail_msg("%s: prefix %zu: call %zu differs from the final one", t, k, i);
        last_content = p.content_end, last_calls = p.n_calls;
        srv_tool_parse_free(&p);
    }
    srv_tool_parse_free(&fin);
}

static void test_stream_prefixes(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        check_prefixes(CASES[i].f, CASES[i].text, strlen(CASES[i].text));
    /* random answers built from the syntaxes' pieces */
    static const char *const pieces[] = {"<tool_call>", "</tool_call>", "<tool_", "{\"name\": \"f\", \"arguments\": {}}",
                                         "{\"name\": \"g\", \"parameters\": {\"a\": 1}}", "[TOOL_CALLS]", "[ARGS]", "h",
                                         "{}", "[", "]", " ", "\n", "word", ";", "<|python_tag|>", CB, B1, "function",
                                         SEP, E1, "```json\n", "to=functions.k", "<|message|>", "<|call|>",
                                         "<|channel|>", "<|start|>assistant", "<", "{", "}", "<function=f>",
                                         "</function>", "<parameter=p>", "</parameter>", "<seed:tool_call>",
                                         "</seed:tool_call>", "<param", "1"};
    char text[512];
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 0;
        const int count = 1 + (int)tu_rand(10);
        for (int k = 0; k < count; k++) {
            const char *p = pieces[tu_rand(sizeof pieces / sizeof pieces[0])];
            memcpy(text + n, p, strlen(p));
            n += strlen(p);
        }
        text[n] = 0;
        check_prefixes((srv_tool_format)tu_rand(SRV_TOOLS_SEED_XML + 1), text, n);
    }
}

static void test_detect(void **state) {
    (void)state;
    static const struct {
        const char *file;
        srv_tool_format f;
    } T[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", SRV_TOOLS_HERMES},
        {"Qwen-Qwen3-0.6B.jinja", SRV_TOOLS_HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", SRV_TOOLS_HERMES},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", SRV_TOOLS_LLAMA3},
        {"meta-llama-Llama-3.2-3B-Instruct.jinja", SRV_TOOLS_LLAMA3},
        {"meta-llama-Llama-3.3-70B-Instruct.jinja", SRV_TOOLS_LLAMA3},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", SRV_TOOLS_MISTRAL},
        {"Mistral-Small-3.2-24B-Instruct-2506.jinja", SRV_TOOLS_MISTRAL_ARGS},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", SRV_TOOLS_DEEPSEEK},
        {"deepseek-ai-DeepSeek-V3.1.jinja", SRV_TOOLS_DEEPSEEK},
        {"openai-gpt-oss-120b.jinja", SRV_TOOLS_HARMONY},
        {"Qwen3.5-4B.jinja", SRV_TOOLS_XML},
        {"Qwen3-Coder.jinja", SRV_TOOLS_XML},
        {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", SRV_TOOLS_XML},
        {"StepFun3.5-Flash.jinja", SRV_TOOLS_XML},
        {"ByteDance-Seed-OSS.jinja", SRV_TOOLS_SEED_XML},
        {"google-gemma-2-2b-it.jinja", SRV_TOOLS_GENERIC},
        {"microsoft-Phi-3.5-mini-instruct.jinja", SRV_TOOLS_GENERIC},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "templates/%s", T[i].file);
        size_t n = 0;
        uint8_t *src = tu_read_file(tu_shared(rel), &n);
        assert_non_null(src);
        const srv_tool_format f = srv_tools_detect((const char *)src, n);
        if (f != T[i].f) fail_msg("%s: detected %s, expected %s", T[i].file, srv_tools_format_name(f),
                                  srv_tools_format_name(T[i].f));
        free(src);
    }
    assert_int_equal(srv_tools_detect(NULL, 0), SRV_TOOLS_GENERIC);
}

/* The grammar of each syntax accepts the call as that syntax writes it (fed token by token through a sampler
   whose logits favour only the next token of the call), and the parser reads that call back. */
static void test_grammar(void **state) {
    (void)state;
    const tkv_model *m = tu_model;
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                               "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
                               "[\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"noop\"}}]", 0, NULL);
    assert_non_null(tools);
    static const struct {
        srv_tool_format f;
        const char *call;
        bool think; /* the prompt ends inside a think block: reasoning, "</think>", then the call */
    } T[] = {
        {SRV_TOOLS_GENERIC, "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", false},
        {SRV_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", false},
        {SRV_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", false},
        {SRV_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", false},
        {SRV_TOOLS_MISTRAL_ARGS, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", false},
        {SRV_TOOLS_DEEPSEEK, CB B1 "function" SEP "get_weather\n```json\n{\"city\": \"Paris\"}\n```" E1 CE, false},
        {SRV_TOOLS_HARMONY, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
                            "\"Paris\"}", false},
        {SRV_TOOLS_XML, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                        "</tool_call>", false},
        {SRV_TOOLS_SEED_XML, "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n"
                             "</seed:tool_call>", false},
        {SRV_TOOLS_XML, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                        "</tool_call>", true},
        {SRV_TOOLS_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         true},
    };
    static const char REASONING[] = "The user wants Paris; 3 < 4.</think>\n\n";
    const size_t n_vocab = tkv_vocab_size(m);
    tkv_token byte_token[256];
    for (int b = 0; b < 256; b++) byte_token[b] = -1;
    for (size_t t = 0; t < n_vocab; t++) {
        char piece[64];
        size_t len = 0;
        if (tkv_token_to_piece(m, (tkv_token)t, 0, piece, sizeof piece, &len) == TKV_OK && len == 1 &&
            byte_token[(unsigned char)piece[0]] < 0)
            byte_token[(unsigned char)piece[0]] = (tkv_token)t;
    }
    float *logits = calloc(n_vocab, sizeof *logits);
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        char err[256];
        char *g = srv_tools_grammar(T[i].f, tools, NULL, true, T[i].think, err, sizeof err);
        if (!g) fail_msg("%s: %s", srv_tools_format_name(T[i].f), err);
        tkv_grammar *gr = NULL;
        if (tkv_grammar_create(m, g, strlen(g), NULL, &gr)) fail_msg("%s: %s\n%s", srv_tools_format_name(T[i].f),
                                                                      tkv_last_error(NULL), g);
        /* the named function only: the other one is out */
        char *only = srv_tools_grammar(T[i].f, tools, "noop", false, false, err, sizeof err);
        assert_non_null(only);
        assert_null(strstr(only, "get_weather"));
        free(only);
        free(g);
        /* one token a byte: the tokenizer would join the text to a leading space */
        tkv_token toks[512];
        size_t nt = 0;
        char text[512];
        snprintf(text, sizeof text, "%s%s", T[i].think ? REASONING : "", T[i].call);
        for (const char *c = text; *c; c++) {
            assert_true(byte_token[(unsigned char)*c] >= 0);
            toks[nt++] = byte_token[(unsigned char)*c];
        }
        tkv_sampler_params sp = tkv_sampler_default_params();
        sp.temperature = 0;
        tkv_sampler *s = NULL;
        assert_int_equal(tkv_sampler_create(&sp, n_vocab, &s), TKV_OK);
        assert_int_equal(tkv_sampler_set_grammar(s, gr), TKV_OK);
        { /* a call never starts with "Z": the grammar refuses it (a draw that is refused does not advance it);
             reasoning may start with anything, the first token is simply taken */
            const tkv_token z = byte_token[T[i].think ? (unsigned char)text[0] : 'Z'];
            logits[z] = 100;
            logits[toks[0]] = 50;
            const tkv_token got = tkv_sampler_sample(s, logits);
            logits[z] = 0, logits[toks[0]] = 0;
            assert_int_equal(got, toks[0]);
        }
        for (size_t k = 1; k < nt; k++) {
            logits[toks[k]] = 100;
            const tkv_token got = tkv_sampler_sample(s, logits);
            logits[toks[k]] = 0;
            if (got != toks[k]) fail_msg("%s: token %zu of \"%s\" refused", srv_tools_format_name(T[i].f), k, text);
        }
        tkv_sampler_free(s);
        tkv_grammar_free(gr);
        srv_tool_parse p;
        assert_true(srv_tools_parse(T[i].f, tools, T[i].call, strlen(T[i].call), true, &p));
        assert_int_equal(p.n_calls, 1);
        assert_string_equal(p.calls[0].name, "get_weather");
        assert_string_equal(p.calls[0].arguments, "{\"city\":\"Paris\"}");
        srv_tool_parse_free(&p);
    }
    /* a schema the converter refuses is an error, not a silent grammar */
    json_t *bad = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                             "\"nonsense\"}}}]", 0, NULL);
    char err[256] = "";
    char *g = srv_tools_grammar(SRV_TOOLS_HERMES, bad, NULL, false, false, err, sizeof err);
    assert_null(g);
    assert_true(strlen(err) > 0);
    json_decref(bad);
    free(logits);
    json_decref(tools);
}

static void test_messages(void **state) {
    (void)state;
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": null, "
                           "\"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
                           "\"arguments\": \"{\\\"a\\\": 1}\"}}, {\"id\": \"call_2\", \"type\": \"function\", "
                           "\"function\": {\"name\": \"g\", \"arguments\": \"not json\"}}]}]", 0, NULL);
    assert_non_null(m);
    json_t *c = srv_tools_messages(m);
    assert_non_null(c);
    const json_t *calls = json_object_get(json_array_get(c, 1), "tool_calls");
    const json_t *a0 = json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments");
    const json_t *a1 = json_object_get(json_object_get(json_array_get(calls, 1), "function"), "arguments");
    assert_true(json_is_object(a0));
    assert_int_equal(json_integer_value(json_object_get(a0, "a")), 1);
    assert_string_equal(json_string_value(a1), "not json"); /* left as the client sent it */
    /* the client's messages are untouched */
    assert_true(json_is_string(json_object_get(json_object_get(json_array_get(json_object_get(json_array_get(m, 1),
                                                                                              "tool_calls"), 0),
                                                               "function"), "arguments")));
    json_decref(c);
    json_t *plain = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    assert_null(srv_tools_messages(plain));
    json_decref(plain);
    json_decref(m);
    char id[32], id2[32];
    srv_tools_call_id("chatcmpl-1", 0, id);
    srv_tools_call_id("chatcmpl-1", 1, id2);
    assert_int_equal(strlen(id), 29);
    assert_memory_equal(id, "call_", 5);
    assert_string_not_equal(id, id2);
}

/* With the request's tools, an XML value is typed by its parameter's schema: a string stays text even when it
   spells a number; a boolean, an integer, an object are the JSON they spell. */
static void test_xml_types(void **state) {
    (void)state;
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                               "\"object\", \"properties\": {\"zip\": {\"type\": \"string\"}, \"n\": {\"type\": "
                               "\"integer\"}, \"on\": {\"type\": \"boolean\"}, \"o\": {\"type\": [\"object\", \"null\"]}, "
                               "\"s\": {\"type\": [\"string\", \"null\"]}}}}}]", 0, NULL);
    assert_non_null(tools);
    const char *t = "<tool_call>\n<function=f>\n<parameter=zip>\n01234\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
                    "<parameter=on>\nFalse\n</parameter>\n<parameter=o>\n{\"a\": [1]}\n</parameter>\n<parameter=s>\n42\n"
                    "</parameter>\n</function>\n</tool_call>";
    srv_tool_parse p;
    assert_true(srv_tools_parse(SRV_TOOLS_XML, tools, t, strlen(t), true, &p));
    assert_int_equal(p.n_calls, 1);
    assert_string_equal(p.calls[0].arguments, "{\"zip\":\"01234\",\"n\":7,\"on\":false,\"o\":{\"a\":[1]},\"s\":\"42\"}");
    srv_tool_parse_free(&p);
    /* without them, what the text spells: 01234 is no JSON number, 42 is one */
    assert_true(srv_tools_parse(SRV_TOOLS_XML, NULL, t, strlen(t), true, &p));
    assert_string_equal(p.calls[0].arguments, "{\"zip\":\"01234\",\"n\":7,\"on\":false,\"o\":{\"a\":[1]},\"s\":42}");
    srv_tool_parse_free(&p);
    json_decref(tools);
}

/* The calls as the models' own templates print them (../shared/reference/templates.jsonl: the reference's
   renders of conversations with tool calls, for every template of an XML syntax) read back into the calls the
   conversation held: names, and arguments equal as JSON (typed by the request's tools). The renders' example
   call in the system prompt (example_function_name) is left out. */
static void test_reference_renders(void **state) {
    (void)state;
    size_t n = 0;
    char *all = (char *)tu_read_file(tu_shared("reference/templates.jsonl"), &n);
    assert_non_null(all);
    int checked = 0;
    for (char *line = all, *next; line < all + n; line = next) {
        next = memchr(line, '\n', (size_t)(all + n - line));
        next = next ? next + 1 : all + n;
        json_t *d = json_loadb(line, (size_t)(next - line), 0, NULL);
        const char *expected = json_string_value(json_object_get(d, "expected"));
        const char *name = json_string_value(json_object_get(d, "template"));
        char rel[256];
        snprintf(rel, sizeof rel, "templates/%s", name ? name : "");
        size_t tn = 0;
        uint8_t *src = expected && name ? tu_read_file(tu_shared(rel), &tn) : NULL;
        const srv_tool_format f = src ? srv_tools_detect((const char *)src, tn) : SRV_TOOLS_GENERIC;
        free(src);
        const json_t *in = json_object_get(d, "input"), *tools = json_object_get(in, "tools");
        json_t *want = json_array(); /* every call of the conversation, in order */
        const json_t *msgs = json_object_get(in, "messages");
        for (size_t i = 0; i < json_array_size(msgs); i++) {
            const json_t *calls = json_object_get(json_array_get(msgs, i), "tool_calls");
            for (size_t k = 0; k < json_array_size(calls); k++) json_array_append(want, json_array_get(calls, k));
        }
        if ((f != SRV_TOOLS_XML && f != SRV_TOOLS_SEED_XML) || !json_array_size(want)) {
            json_decref(want), json_decref(d);
            continue;
        }
        const char *open = f == SRV_TOOLS_XML ? "<tool_call>" : "<seed:tool_call>";
        size_t got = 0;
        for (const char *at = strstr(expected, open); at; at = strstr(at + 1, open)) {
            srv_tool_parse tp;
            assert_true(srv_tools_parse(f, tools, at, strlen(at), true, &tp));
            if (tp.n_calls && strcmp(tp.calls[0].name, "example_function_name")) {
                const json_t *w = json_object_get(json_array_get(want, got), "function");
                if (!w) fail_msg("%s: more calls in the render than in the conversation", name);
                const json_t *wa = json_object_get(w, "arguments");
                json_t *wargs = json_is_string(wa) ? json_loads(json_string_value(wa), 0, NULL) : json_incref((json_t *)wa);
                json_t *gargs = json_loads(tp.calls[0].arguments, 0, NULL);
                if (strcmp(tp.calls[0].name, json_string_value(json_object_get(w, "name"))) || !json_equal(wargs, gargs))
                    fail_msg("%s: call %zu read back as %s %s", name, got, tp.calls[0].name, tp.calls[0].arguments);
                json_decref(wargs), json_decref(gargs);
                got++;
            }
            srv_tool_parse_free(&tp);
        }
        if (got != json_array_size(want)) fail_msg("%s: %zu of %zu calls read back", name, got, json_array_size(want));
        checked++;
        json_decref(want), json_decref(d);
    }
    free(all);
    printf("test_reference_renders: %d renders with calls\n", checked);
    assert_true(checked >= 8); /* Qwen3.5, Qwen3-Coder, Nemotron 3, Step 3.5, Seed-OSS: two conversations each */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_stream_prefixes),
        cmocka_unit_test(test_detect),
        cmocka_unit_test_setup_teardown(test_grammar, tu_stories_setup, tu_stories_teardown),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_reference_renders),
        cmocka_unit_test(test_xml_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
