/*
 * test_chat_template.c — server/openai/chat_template: each family is detected from
 * a template string shaped like the one its models ship, and renders a
 * conversation to the text that template produces (expectations spelled out
 * by hand from the published formats, not computed); unknown templates fall
 * back to plain; bad conversations and failed allocations are errors, not
 * crashes.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "openai/chat_template.h"

/* ---- allocation failure injection (chat_template.c is built with
 * SRV_CHAT_TEST_HOOKS, so all its allocations come here) ---------------- */

void *srv_chat_test_realloc(void *p, size_t size);
static long alloc_calls, alloc_fail_after = -1;

void *srv_chat_test_realloc(void *p, size_t size) {
    alloc_calls++;
    if (alloc_fail_after >= 0 && alloc_calls > alloc_fail_after) return NULL;
    return realloc(p, size);
}

/* ---- templates, shaped like the tokenizer.chat_template of real models -- */

static const char *const T_CHATML = /* Qwen / OpenHermes style */
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static const char *const T_LLAMA2 = /* Llama-2-7b-chat */
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

static const char *const T_LLAMA3 = /* Meta-Llama-3-8B-Instruct */
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

static const char *const T_MISTRAL = /* Mistral-7B-Instruct-v0.2 / Mixtral-8x7B-Instruct */
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

static const char *const T_ZEPHYR = /* zephyr-7b-beta */
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n"
    "{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

static const char *const T_PHI3 = /* Phi-3-mini-4k-instruct, with a system branch */
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";

static const char *const T_PHI3_COMPACT = /* builds the role tag, so no literal <|user|> */
    "{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + "
    "message['content'] + '<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";

static void test_detect(void **state) {
    (void)state;
    struct {
        const char *tmpl;
        srv_chat_kind kind;
    } cases[] = {
        {T_CHATML, SRV_CHAT_CHATML}, {T_LLAMA2, SRV_CHAT_LLAMA2}, {T_LLAMA3, SRV_CHAT_LLAMA3},
        {T_MISTRAL, SRV_CHAT_MISTRAL}, {T_ZEPHYR, SRV_CHAT_ZEPHYR}, {T_PHI3, SRV_CHAT_PHI3},
        {T_PHI3_COMPACT, SRV_CHAT_PHI3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool rec = false;
        assert_int_equal(srv_chat_detect(cases[i].tmpl, &rec), cases[i].kind);
        assert_true(rec);
        assert_int_equal(srv_chat_detect(cases[i].tmpl, NULL), cases[i].kind);
    }
    /* absent template: plain is what is expected, so it is "recognised" */
    bool rec = false;
    assert_int_equal(srv_chat_detect(NULL, &rec), SRV_CHAT_PLAIN);
    assert_true(rec);
    rec = false;
    assert_int_equal(srv_chat_detect("", &rec), SRV_CHAT_PLAIN);
    assert_true(rec);
}

static void test_detect_unknown(void **state) {
    (void)state;
    const char *unknown[] = {
        /* Gemma */
        "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
        "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
        "{{'<start_of_turn>model\\n'}}{% endif %}",
        /* Phi-4: ChatML's tokens, but <|im_sep|> instead of a newline */
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '<|im_sep|>' + message['content'] + "
        "'<|im_end|>'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}",
        /* ChatGLM3: Zephyr-like role tags */
        "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\\n "
        "{{ message['content'] }}{% else %}<|{{ message['role'] }}|>\\n {{ message['content'] }}{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}<|user|>",
        /* Mistral tekken (v7): [SYSTEM_PROMPT] and unspaced [INST] */
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{ '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'user' %}"
        "{{ '[INST]' + message['content'] + '[/INST]' }}{% endif %}{% endfor %}",
        "{{ messages }}",
        "hello",
    };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        bool rec = true;
        assert_int_equal(srv_chat_detect(unknown[i], &rec), SRV_CHAT_PLAIN);
        assert_false(rec);
    }
}

static void test_names(void **state) {
    (void)state;
    const char *names[] = {"plain", "chatml", "llama2", "llama3", "mistral", "zephyr", "phi3"};
    for (int k = 0; k < 7; k++) {
        srv_chat_kind got = (srv_chat_kind)99;
        assert_true(srv_chat_from_name(names[k], &got));
        assert_int_equal(got, (srv_chat_kind)k);
        assert_string_equal(srv_chat_name((srv_chat_kind)k), names[k]);
    }
    srv_chat_kind got = SRV_CHAT_ZEPHYR;
    assert_false(srv_chat_from_name("llama-2", &got));
    assert_false(srv_chat_from_name("ChatML", &got));
    assert_false(srv_chat_from_name("", &got));
    assert_false(srv_chat_from_name(NULL, &got));
    assert_int_equal(got, SRV_CHAT_ZEPHYR);
    assert_string_equal(srv_chat_name((srv_chat_kind)7), "unknown");
    assert_string_equal(srv_chat_name((srv_chat_kind)-1), "unknown");
}

/* ---- rendering ----------------------------------------------------------- */

static const srv_chat_msg CONVO[] = {
    {"system", "You are terse.", 0},
    {"user", "Hi", 0},
    {"assistant", "Hello!", 0},
    {"user", "How are you?", 0},
};

/* Render and compare; BOS "<s>", EOS "</s>" (Llama/Mistral SentencePiece). */
static void expect(srv_chat_kind k, const srv_chat_msg *m, size_t n, const char *want) {
    char *out = NULL, err[256] = "x";
    bool ok = srv_chat_render(k, m, n, "<s>", "</s>", &out, NULL, err, sizeof err);
    if (!ok) fail_msg("%s: %s", srv_chat_name(k), err);
    assert_string_equal(err, "");
    assert_non_null(out);
    assert_string_equal(out, want);
    free(out);
}

static void test_render_families(void **state) {
    (void)state;
    expect(SRV_CHAT_PLAIN, CONVO, 4, "System: You are terse.\nUser: Hi\nAssistant: Hello!\nUser: How are you?\nAssistant:");
    expect(SRV_CHAT_CHATML, CONVO, 4,
           "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
           "<|im_start|>assistant\n");
    expect(SRV_CHAT_LLAMA2, CONVO, 4,
           "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] How are you? [/INST]");
    expect(SRV_CHAT_LLAMA3, CONVO, 4,
           "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(SRV_CHAT_MISTRAL, CONVO, 4, "[INST] You are terse.\n\nHi [/INST]Hello!</s>[INST] How are you? [/INST]");
    expect(SRV_CHAT_ZEPHYR, CONVO, 4,
           "<|system|>\nYou are terse.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n"
           "<|user|>\nHow are you?</s>\n<|assistant|>\n");
    expect(SRV_CHAT_PHI3, CONVO, 4,
           "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
           "<|user|>\nHow are you?<|end|>\n<|assistant|>\n");
}

static void test_render_without_system(void **state) {
    (void)state;
    const srv_chat_msg *m = CONVO + 1;
    expect(SRV_CHAT_LLAMA2, m, 3, "[INST] Hi [/INST] Hello! </s><s>[INST] How are you? [/INST]");
    expect(SRV_CHAT_MISTRAL, m, 3, "[INST] Hi [/INST]Hello!</s>[INST] How are you? [/INST]");
    expect(SRV_CHAT_LLAMA2, m, 1, "[INST] Hi [/INST]");
    expect(SRV_CHAT_MISTRAL, m, 1, "[INST] Hi [/INST]");
    expect(SRV_CHAT_CHATML, m, 1, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect(SRV_CHAT_PLAIN, m, 1, "User: Hi\nAssistant:");
    /* "developer" is a system message and prints as one; NULL content is "" */
    const srv_chat_msg dev[] = {{"developer", "Be brief.", 0}, {"user", NULL, 0}};
    expect(SRV_CHAT_CHATML, dev, 2,
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n");
    expect(SRV_CHAT_LLAMA2, dev, 2, "[INST] <<SYS>>\nBe brief.\n<</SYS>> [/INST]");
    /* families that render system anywhere keep a late one in place */
    const srv_chat_msg late[] = {{"user", "a", 0}, {"system", "b", 0}};
    expect(SRV_CHAT_PHI3, late, 2, "<|user|>\na<|end|>\n<|system|>\nb<|end|>\n<|assistant|>\n");
    /* BOS/EOS may be absent */
    char *out = NULL;
    assert_true(srv_chat_render(SRV_CHAT_LLAMA2, m, 3, NULL, NULL, &out, NULL, NULL, 0));
    assert_string_equal(out, "[INST] Hi [/INST] Hello! [INST] How are you? [/INST]");
    free(out);
}

/* Llama-2 strips and Llama-3 trims content with Python's str.strip(), which
 * also removes Unicode spaces; other families keep content as given. */
static void test_render_strip(void **state) {
    (void)state;
    const srv_chat_msg m[] = {
        {"system", "  sys  ", 0},
        {"user", " \t\xc2\xa0Hi there\n\r", 0},  /* U+00A0 no-break space */
        {"assistant", "\xe3\x80\x80ok\x1f ", 0}, /* U+3000, then unit separator */
        {"user", "caf\xc3\xa9\xe2\x80\x8b \x80 ", 0}, /* U+200B is not a space; a stray 0x80 stays */
    };
    expect(SRV_CHAT_LLAMA2, m, 4,
           "[INST] <<SYS>>\n  sys  \n<</SYS>>\n\n \t\xc2\xa0Hi there [/INST] ok </s>"
           "<s>[INST] caf\xc3\xa9\xe2\x80\x8b \x80 [/INST]");
    expect(SRV_CHAT_LLAMA3, m, 4,
           "<|start_header_id|>system<|end_header_id|>\n\nsys<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nok<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\ncaf\xc3\xa9\xe2\x80\x8b \x80<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(SRV_CHAT_CHATML, m + 1, 1, "<|im_start|>user\n \t\xc2\xa0Hi there\n\r<|im_end|>\n<|im_start|>assistant\n");
    /* an all-blank user turn lets Llama-2's strip reach the <</SYS>> block */
    const srv_chat_msg blank[] = {{"system", "S", 0}, {"user", " \n ", 0}};
    expect(SRV_CHAT_LLAMA2, blank, 2, "[INST] <<SYS>>\nS\n<</SYS>> [/INST]");
    const srv_chat_msg spaces[] = {{"user", "   ", 0}};
    expect(SRV_CHAT_LLAMA3, spaces, 1,
           "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Render must fail with a message containing `want`, and leave *out NULL. */
static void expect_error(srv_chat_kind k, const srv_chat_msg *m, size_t n, const char *want) {
    char *out = (char *)"sentinel", err[256] = "";
    assert_false(srv_chat_render(k, m, n, "<s>", "</s>", &out, NULL, err, sizeof err));
    assert_null(out);
    if (!strstr(err, want)) fail_msg("%s: error \"%s\" lacks \"%s\"", srv_chat_name(k), err, want);
}

static void test_render_errors(void **state) {
    (void)state;
    for (int k = 0; k < 7; k++) {
        expect_error((srv_chat_kind)k, CONVO, 0, "at least one message");
        expect_error((srv_chat_kind)k, NULL, 3, "at least one message");
        const srv_chat_msg bad[] = {{"user", "x", 0}, {"tool", "y", 0}};
        expect_error((srv_chat_kind)k, bad, 2, "messages[1]: unknown role \"tool\"");
        const srv_chat_msg upper[] = {{"User", "x", 0}};
        expect_error((srv_chat_kind)k, upper, 1, "messages[0]: unknown role \"User\"");
        const srv_chat_msg none[] = {{NULL, "x", 0}};
        expect_error((srv_chat_kind)k, none, 1, "messages[0]: missing role");
    }
    expect_error((srv_chat_kind)42, CONVO, 4, "unknown chat template kind");

    /* Llama-2 and Mistral require user/assistant alternation */
    const srv_chat_msg two_users[] = {{"system", "s", 0}, {"user", "a", 0}, {"user", "b", 0}};
    const srv_chat_msg starts_assistant[] = {{"assistant", "a", 0}, {"user", "b", 0}};
    const srv_chat_msg late_system[] = {{"user", "a", 0}, {"assistant", "b", 0}, {"system", "c", 0}, {"user", "d", 0}};
    const srv_chat_msg ends_assistant[] = {{"user", "a", 0}, {"assistant", "b", 0}};
    const srv_chat_msg only_system[] = {{"system", "s", 0}};
    const srv_chat_msg two_systems[] = {{"system", "s", 0}, {"system", "t", 0}, {"user", "u", 0}};
    srv_chat_kind strict[] = {SRV_CHAT_LLAMA2, SRV_CHAT_MISTRAL};
    for (int i = 0; i < 2; i++) {
        expect_error(strict[i], two_users, 3, "messages[2]: roles must alternate user/assistant");
        expect_error(strict[i], starts_assistant, 2, "messages[0]: roles must alternate user/assistant");
        expect_error(strict[i], late_system, 4, "messages[2]: roles must alternate user/assistant");
        expect_error(strict[i], two_systems, 3, "messages[1]: roles must alternate user/assistant");
        expect_error(strict[i], ends_assistant, 2, "messages[1]: the ");
        expect_error(strict[i], only_system, 1, "must be followed by a user message");
    }
    /* the other families take any order, a trailing assistant turn included */
    expect(SRV_CHAT_CHATML, ends_assistant, 2,
           "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>assistant\n");

    /* err may be absent or tiny; out must be given */
    char *out = NULL, tiny[8];
    assert_false(srv_chat_render(SRV_CHAT_CHATML, CONVO, 0, NULL, NULL, &out, NULL, NULL, 0));
    assert_false(srv_chat_render(SRV_CHAT_CHATML, CONVO, 0, NULL, NULL, &out, NULL, tiny, sizeof tiny));
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
    assert_false(srv_chat_render(SRV_CHAT_CHATML, CONVO, 4, NULL, NULL, NULL, NULL, tiny, sizeof tiny));
    /* a huge role string is cut short in the message */
    char role[1000];
    memset(role, 'r', sizeof role - 1);
    role[sizeof role - 1] = '\0';
    const srv_chat_msg huge[] = {{role, "x", 0}};
    char err[256];
    assert_false(srv_chat_render(SRV_CHAT_CHATML, huge, 1, NULL, NULL, &out, NULL, err, sizeof err));
    assert_true(strlen(err) < 120);
}

/* Every allocation of a render can fail: the result is an error (no crash,
 * no leak, *out NULL); then the same render succeeds again. */
static void test_alloc_failure(void **state) {
    (void)state;
    static char longtext[20000];
    memset(longtext, 'w', sizeof longtext - 1);
    const srv_chat_msg m[] = {{"system", longtext, 0}, {"user", longtext, 0}, {"assistant", "ok", 0}, {"user", longtext, 0}};
    for (int k = 0; k < 7; k++) {
        char *out = NULL, err[128];
        alloc_calls = 0;
        assert_true(srv_chat_render((srv_chat_kind)k, m, 4, "<s>", "</s>", &out, NULL, err, sizeof err));
        char *good = out;
        long total = alloc_calls;
        assert_true(total >= 3); /* the buffer grows past its first size */
        for (long f = 0; f < total; f++) {
            alloc_calls = 0, alloc_fail_after = f;
            out = (char *)"sentinel";
            assert_false(srv_chat_render((srv_chat_kind)k, m, 4, "<s>", "</s>", &out, NULL, err, sizeof err));
            alloc_fail_after = -1;
            assert_null(out);
            assert_string_equal(err, "out of memory");
        }
        assert_true(srv_chat_render((srv_chat_kind)k, m, 4, "<s>", "</s>", &out, NULL, err, sizeof err));
        assert_string_equal(out, good);
        free(out), free(good);
    }
}

/* A content holding NULs (U+0000, an earlier answer sent back) renders by its length: every family gives the
   text it gives with another non-space byte (0x01) in their place, with NULs there. */
static void test_render_nul(void **state) {
    (void)state;
    const char sys[] = "\0sys\0", user[] = " \0a\0b ", asst[] = "ok\0", last[] = "\0";
    const char marked[4][8] = {"\1sys\1", " \1a\1b ", "ok\1", "\1"};
    const srv_chat_msg with_nul[] = {{"system", sys, sizeof sys - 1}, {"user", user, sizeof user - 1},
                                     {"assistant", asst, sizeof asst - 1}, {"user", last, sizeof last - 1}};
    srv_chat_msg with_mark[4];
    for (int i = 0; i < 4; i++) with_mark[i] = (srv_chat_msg){with_nul[i].role, marked[i], 0};
    for (int k = 0; k < 7; k++) {
        char *a = NULL, *b = NULL, err[128];
        size_t na = 0, nb = 0;
        assert_true(srv_chat_render((srv_chat_kind)k, with_nul, 4, "<s>", "</s>", &a, &na, err, sizeof err));
        assert_true(srv_chat_render((srv_chat_kind)k, with_mark, 4, "<s>", "</s>", &b, &nb, err, sizeof err));
        assert_int_equal(nb, strlen(b));
        assert_int_equal(na, nb);
        assert_int_equal(a[na], 0);
        size_t nuls = 0;
        for (size_t i = 0; i < nb; i++) {
            nuls += b[i] == 1;
            if (b[i] == 1) b[i] = 0;
        }
        assert_true(nuls >= 3); /* the stripped families drop none: a NUL is not whitespace */
        assert_memory_equal(a, b, na);
        free(a), free(b);
    }
    /* one by hand */
    const srv_chat_msg one[] = {{"user", "a\0b", 3}};
    char *out = NULL;
    size_t n = 0;
    assert_true(srv_chat_render(SRV_CHAT_CHATML, one, 1, NULL, NULL, &out, &n, NULL, 0));
    static const char want[] = "<|im_start|>user\na\0b<|im_end|>\n<|im_start|>assistant\n";
    assert_int_equal(n, sizeof want - 1);
    assert_memory_equal(out, want, n);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),          cmocka_unit_test(test_detect_unknown),
        cmocka_unit_test(test_names),           cmocka_unit_test(test_render_families),
        cmocka_unit_test(test_render_without_system), cmocka_unit_test(test_render_strip),
        cmocka_unit_test(test_render_errors),   cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_render_nul),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
