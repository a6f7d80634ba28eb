/*
 * test_jinja.c — the chat-template renderer: the language piece by piece
 * (expectations written out by hand, as Python's Jinja2 3.1 renders them with
 * transformers' settings), its errors and limits, and every line of
 * ../shared/reference/templates.jsonl byte for byte (or failing where
 * transformers raised).
 */
#include "testutil.h"

#include "base/alloc.h"
#include "base/error.h"
#include "text/jinja/jinja.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tkv__jinja_options NOW = {.now = "2026-01-15"};

/* Render tmpl with the context ctx (JSON); the status, and the text in *out (malloc'd, or NULL). */
static tkv_status render(const char *tmpl, const char *ctx, char **out) {
    char *text;
    size_t len;
    tkv_status st = tkv__jinja_render(tmpl, strlen(tmpl), ctx, &NOW, &text, &len);
    *out = NULL;
    if (st == TKV_OK) {
        assert_int_equal(strlen(text), len);
        *out = strdup(text);
        tkv__free(text);
    } else {
        assert_null(text);
        assert_int_equal(len, 0);
    }
    return st;
}

#define CTX "{\"s\": \"Hello World\", \"n\": 5, \"f\": 2.5, \"xs\": [3, 1, 2], \"none\": null, \"t\": true, " \
            "\"d\": {\"b\": 1, \"a\": [1, 2], \"c\": null, \"items\": 7}, " \
            "\"msgs\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}"

static void expect_at(const char *file, int line, const char *tmpl, const char *expected) {
    char *out;
    tkv_status st = render(tmpl, CTX, &out);
    if (st != TKV_OK) fail_msg("%s:%d: %s\n  failed: %s", file, line, tmpl, tkv_last_error(NULL));
    if (strcmp(out, expected))
        fail_msg("%s:%d: %s\n  gave     '%s'\n  expected '%s'", file, line, tmpl, out, expected);
    free(out);
}
#define expect(t, e) expect_at(__FILE__, __LINE__, t, e)

/* The render fails with st, and the message holds `part`. */
static void expect_fail_at(const char *file, int line, const char *tmpl, tkv_status st, const char *part) {
    char *out;
    tkv_status got = render(tmpl, CTX, &out);
    if (got == TKV_OK) fail_msg("%s:%d: %s\n  rendered '%s', expected a failure", file, line, tmpl, out);
    if (got != st)
        fail_msg("%s:%d: %s\n  status %d, expected %d (%s)", file, line, tmpl, got, st, tkv_last_error(NULL));
    if (!strstr(tkv_last_error(NULL), part))
        fail_msg("%s:%d: %s\n  message '%s' lacks '%s'", file, line, tmpl, tkv_last_error(NULL), part);
}
#define expect_fail(t, st, part) expect_fail_at(__FILE__, __LINE__, t, st, part)

static void test_whitespace(void **state) {
    (void)state;
    /* trim_blocks drops the newline after a block tag, lstrip_blocks the indent before it */
    expect("  {% if t %}\n    x\n  {% endif %}\n  y", "    x\n  y");
    expect("{% if t -%}\n   a   \n{%- endif %}\nb {{- 's' -}}  c", "ab" "s" "c");
    /* not after a print tag */
    expect("{{ 1 }}\n{{ 2 }}", "1\n2");
    /* {%+ keeps the indent; lstrip applies to comments too */
    expect("{%+ if t %}x{% endif %}\n  {%+ if t %}y{% endif %}", "x  y");
    expect("a {# c #}\n  {# c2 #}\nb", "a b");
    expect("   {#- c -#}   d", "d");
    /* text before a tag on the same line is not indent */
    expect("a  {% if t %}b{% endif %}", "a  b");
    /* one trailing newline of the template goes, a second stays; \r\n reads as \n */
    expect("x\n", "x");
    expect("x\n\n", "x\n");
    expect("a\r\nb\r\n", "a\nb");
    expect("{% raw %}{{ not }}{% endraw %}", "{{ not }}");
    expect("{{ {'a': {'b': 1}}['a'] }}", "{'b': 1}");
}

static void test_printing(void **state) {
    (void)state;
    expect("{{ s }}|{{ n }}|{{ f }}|{{ none }}|{{ t }}|{{ undefined_name }}|", "Hello World|5|2.5|None|True||");
    expect("{{ xs }} {{ d }}", "[3, 1, 2] {'b': 1, 'a': [1, 2], 'c': None, 'items': 7}");
    expect("{{ [\"it's\", 'a\"b', 'x\\ny', (1,), (1, 2), ()] }}", "[\"it's\", 'a\"b', 'x\\ny', (1,), (1, 2), ()]");
    expect("{{ [1.0, 1e20, 1e-5, 0.1, 123456789.125, -0.0, 1e16, 1e15, 100.0] }}",
           "[1.0, 1e+20, 1e-05, 0.1, 123456789.125, -0.0, 1e+16, 1000000000000000.0, 100.0]");
    expect("{{ 7 / 2 }} {{ 10 / 5 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
           "3.5 2.0 3 -4 2 1024 0.5");
    expect("{{ 'a' ~ 1 ~ none ~ true ~ nothing ~ 2.0 }}", "a1NoneTrue2.0");
    expect("{{ '\\u00e9\\x41' }} {{ \"it\\'s\" }}", "\xc3\xa9" "A it's");
    expect("{{ [nothing] }} {{ {1: 'a', none: true} }}", "[Undefined] {1: 'a', None: True}");
    expect("{{ \"%s-%03d|%.2f\" % ('a', 7, 2.5) }} {{ '%s'|format('x') }}", "a-007|2.50 x");
}

static void test_expressions(void **state) {
    (void)state;
    expect("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' in 'abc' }} {{ 2 in xs }} {{ 'b' in d }} {{ 'z' not in d }}",
           "True False True True True True");
    expect("{{ 1 == 1.0 }} {{ true == 1 }} {{ none or 'x' }} {{ 0 and 'y' }} {{ 'a' and 'b' }} {{ not none }}",
           "True True x 0 b True");
    expect("{{ 'x' if t else 'y' }}{{ 'x' if not t }}|{{ 'a' 'b' }}|{{ 3 * 'ab' }}", "x|ab|ababab");
    /* filters and tests bind tighter than operators */
    expect("{{ -3|abs }} {{ xs|length > 2 }} {{ 1 + 2 is odd }}", "3 True 1");
    expect("{{ xs[0] }}{{ xs[-1] }} {{ xs[1:] }} {{ xs[::-1] }} {{ s[::2] }} {{ s[-5:] }} {{ xs[5] }}|",
           "32 [1, 2] [2, 1, 3] HloWrd World |");
    expect("{{ '\xc3\xa9t\xc3\xa9'[1:] }} {{ '\xc3\xa9t\xc3\xa9'|length }}", "t\xc3\xa9 3");
    /* x.y reads the method before the key; x['y'] the key first */
    expect("{{ d['items'] }} {{ d.b }} {{ d.zz }}|{{ msgs[1].role }} {{ msgs[0]['content'] }}", "7 1 |assistant hi");
    expect("{{ none.x }}|{{ xs.x }}|", "||");
}

static void test_loops(void **state) {
    (void)state;
    expect("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
           "{{ loop.revindex }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
           "10TrueFalse331;21FalseFalse3232;32FalseTrue311;");
    expect("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", "b=1,a=[1, 2],c=None,items=7,");
    expect("{% for x in xs if x > 1 %}{{ loop.index }}:{{ x }} {% else %}none{% endfor %}", "1:3 2:2 ");
    expect("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", "empty");
    expect("{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}"
           "{% endfor %}",
           "3");
    expect("{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{% endfor %}{{ loop.index }};"
           "{% endfor %}",
           "10201;11212;");
    expect("{% for x in xs %}{{ loop.cycle('a', 'b') }}{% endfor %}", "aba");
    expect("{% for c in 'h\xc3\xa9' %}{{ c }}.{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
           "h.\xc3\xa9.bacitems");
    expect("{% for n in [{'name': 'a', 'kids': [{'name': 'b', 'kids': [{'name': 'c'}]}]}, {'name': 'd'}] recursive %}"
           "<{{ n.name }}{{ loop.depth }}{% if n.kids %}[{{ loop(n.kids) }}]{% endif %}>{% endfor %}",
           "<a1[<b2[<c3>]>]><d1>");
    expect_fail("{% for x in xs %}{{ loop(xs) }}{% endfor %}", TKV_ERR_INVALID, "recursive");
    /* a set inside a loop lives for one iteration */
    expect("{% set x = 0 %}{% for i in range(3) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", "1110");
    expect("{% set x = 1 %}{% if t %}{% set x = 2 %}{% endif %}{{ x }}", "2");
}

static void test_set_namespace_macros(void **state) {
    (void)state;
    expect("{% set ns = namespace(a=1) %}{% for x in xs %}{% set ns.a = ns.a + x %}{% endfor %}{{ ns.a }}", "7");
    expect("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set x %}block {{ a }}{% endset %}[{{ x }}]"
           "{% set y | upper %}up{% endset %}{{ y }}",
           "12[block 1]UP");
    expect("{% macro m(a, b=2, c='x') %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}"
           "{{ m(1, c='z') }}{{ m() }}",
           "[1|2|x][1|3|x][1|2|z][|2|x]");
    expect("{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}", "(2, 3){'k': 4}");
    /* extra arguments only for a macro that reads varargs / kwargs / caller */
    expect_fail("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", TKV_ERR_INVALID, "takes not more than 1");
    expect_fail("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, b=2) }}", TKV_ERR_INVALID, "no keyword argument 'b'");
    expect_fail("{% macro m() %}x{% endmacro %}{% call m() %}y{% endcall %}", TKV_ERR_INVALID, "caller");
    expect("{{ 'a,b,c'.rpartition(',') }} {{ 'ab'.center(7, '*') }} {{ '-5'.zfill(4) }} {{ 'a'.ljust(3) }}|",
           "('a,b', ',', 'c') ***ab** -005 a  |");
    /* a macro reads the variables of its scope when called */
    expect("{% macro m() %}{{ z }}{% endmacro %}{% set z = 1 %}{{ m() }}{% set z = 2 %}{{ m() }}", "12");
    expect("{% macro outer() %}<{{ caller() }}>{% endmacro %}{% call outer() %}in {{ n }}{% endcall %}", "<in 5>");
    expect("{% macro m(x) %}({{ caller(x * 2) }}){% endmacro %}{% call(v) m(3) %}v={{ v }}{% endcall %}", "(v=6)");
    expect("{% filter upper %}hello {{ s }}{% endfilter %}", "HELLO HELLO WORLD");
    expect("{% generation %}gen {{ n }}{% endgeneration %}", "gen 5");
    expect("{% with a = 1, b = xs %}{{ a }}{{ b }}{% set c = 3 %}{{ c }}{% endwith %}{{ a }}{{ c }}", "1[3, 1, 2]3");
    expect("{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }} {% endfor %}", "True False True False True ");
    expect("{% do xs.index(1) %}ok", "ok");
}

static void test_filters(void **state) {
    (void)state;
    expect("{{ s|upper }} {{ s|lower }} {{ 'hello wORLD-foo(bar'|title }} {{ s|capitalize }}",
           "HELLO WORLD hello world Hello World-Foo(Bar Hello world");
    expect("{{ xs|join(',') }} {{ msgs|map(attribute='role')|join(',') }} {{ msgs|selectattr('role', 'equalto', "
           "'user')|list }} {{ xs|select('odd')|list }} {{ xs|reject('even')|list }}",
           "3,1,2 user,assistant [{'role': 'user', 'content': 'hi'}] [3, 1] [3, 1]");
    expect("{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ ['b', 'A', 'a', 'C']|sort }} {{ ['b', 'A', 'a']|unique|list }}"
           " {{ xs|min }} {{ xs|max }} {{ xs|sum }}",
           "[1, 2, 3] [3, 2, 1] ['A', 'a', 'b', 'C'] ['b', 'A'] 1 3 6");
    /* sorting by a missing attribute keeps the order (the keys are all equal) */
    expect("{{ xs|sort(attribute='x') }} {{ msgs|sort(attribute='role')|map(attribute='content')|join }}",
           "[3, 1, 2] yohi");
    expect("{{ d|dictsort }} {{ xs|first }} {{ xs|last }} {{ xs|reverse|list }} {{ s|reverse }} {{ 'ab'|list }}",
           "[('a', [1, 2]), ('b', 1), ('c', None), ('items', 7)] 3 2 [2, 1, 3] dlroW olleH ['a', 'b']");
    expect("{{ nothing|default('d') }} {{ none|default('d') }} {{ none|default('d', true) }} {{ nothing|length }}",
           "d None d 0");
    expect("{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 42|string }}{{ '42'|int + 1 }}{{ '4.5'|float }}"
           "{{ 'abc'|int }}{{ 4.7|int }}{{ 2.5|round }}{{ 3.5|round }}{{ 2.567|round(2) }}{{ 7|round }}",
           "hi|hi|42434.5042.04.02.577");
    /* Python's int() and float() of strings; round() of the exact binary value */
    expect("{{ '0x10'|int }} {{ '0x10'|int(base=16) }} {{ ' 1_000 '|int }} {{ '1e3'|int }} {{ 'x'|int(-1) }} "
           "{{ '1e3'|float }} {{ 2.675|round(2) }} {{ 1234.5|round(-2) }} {{ [[1], [2]]|sum(start=[]) }}",
           "0 16 1000 1000 -1 1000.0 2.67 1200.0 [1, 2]");
    expect_fail("{{ nothing|int }}", TKV_ERR_INVALID, "undefined");
    expect("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb\\n\\nc'|indent(2, true) }}|{{ 'a\\nb'|indent(2, blank=true) }}",
           "a\n    b\n\n    c|  a\n  b\n\n  c|a\n  b");
    expect("{{ 'one two  three'|wordcount }} {{ 'ab'|center(7) }}| {{ '<a>&\\''|e }} {{ 'abc'|replace('b', 'B') }}",
           "3    ab  | &lt;a&gt;&amp;&#39; aBc");
    expect("{{ xs|batch(2)|list }} {{ 'hello world foo'|truncate(9) }} {{ none|selectattr('a')|list }}",
           "[[3, 1], [2]] hello... []");
    expect("{% for g in msgs|groupby('role') %}{{ g.grouper }}:{{ g.list|length }};{% endfor %}"
           "{% for k, items in [{'a': 'X'}, {'a': 'x'}, {'a': 'y'}]|groupby('a') %}{{ k }}={{ items|length }} "
           "{% endfor %}",
           "assistant:1;user:1;X=2 y=1 ");
    /* Python's Unicode case mappings: several code points (ß), title case (ǅ), the final sigma */
    expect("{{ 'straße ǆ ﬁx'|upper }} {{ 'ǆemal'|capitalize }} {{ 'ΟΔΥΣΣΕΥΣ Α\\'Σ ΣΑ'|lower }} {{ 'ΑΒΣ'|title }} "
           "{{ 'ǆa ﬁx'.title() }} {{ 'ͺ'.islower() }} {{ 'ǅ' is upper }}",
           "STRASSE Ǆ FIX ǅemal οδυσσευς α'ς σα Αβς ǅa Fix True False");
    /* Markup + str escapes the str */
    expect("{{ '<'|safe + '<' }}", "<&lt;");
}

static void test_tojson(void **state) {
    (void)state;
    expect("{{ xs|tojson }} {{ d|tojson }}", "[3, 1, 2] {\"b\": 1, \"a\": [1, 2], \"c\": null, \"items\": 7}");
    expect("{{ d|tojson(indent=2) }}", "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2\n  ],\n  \"c\": null,\n"
                                       "  \"items\": 7\n}");
    expect("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1, {}]|tojson(separators=(',', ':')) }}",
           "{\"a\": 2, \"b\": 1} [1,{}]");
    expect("{{ \"a\\\"b\\\\c\\n\\t\\x01/<>&\"|tojson }} {{ [[], {}]|tojson(indent=4) }}",
           "\"a\\\"b\\\\c\\n\\t\\u0001/<>&\" [\n    [],\n    {}\n]");
    expect("{{ '\xc3\xa9\xf0\x9f\x98\x80'|tojson }} {{ '\xc3\xa9\xf0\x9f\x98\x80'|tojson(ensure_ascii=true) }}",
           "\"\xc3\xa9\xf0\x9f\x98\x80\" \"\\u00e9\\ud83d\\ude00\"");
    expect("{{ [1.0, 2.50, 3e-10, 1e22, true, none]|tojson }}", "[1.0, 2.5, 3e-10, 1e+22, true, null]");
    expect_fail("{{ nothing|tojson }}", TKV_ERR_INVALID, "undefined");
    expect_fail("{{ xs|map('string')|tojson }}", TKV_ERR_INVALID, "generator");
}

static void test_strings(void **state) {
    (void)state;
    expect("{{ s.split() }} {{ s.split('o') }} {{ 'a,b,,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} "
           "{{ '  x y  '.split(None, 1) }}",
           "['Hello', 'World'] ['Hell', ' W', 'rld'] ['a', 'b,,c'] ['a,b', 'c'] ['x', 'y  ']");
    expect("{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  x '.lstrip() }}|{{ ' x  '.rstrip() }}|",
           "x|hi|x | x|");
    expect("{{ s.startswith('He') }}{{ s.endswith(('x', 'ld')) }} {{ s.replace('l', 'L') }} "
           "{{ s.replace('l', 'L', 2) }} {{ s.find('o') }}{{ s.rfind('o') }}{{ s.count('l') }}",
           "TrueTrue HeLLo WorLd HeLLo World 473");
    expect("{{ ', '.join(['a', 'b']) }} {{ '{} and {}'.format(1, 'x') }} {{ '{0}{1}{0}'.format('a', 'b') }} "
           "{{ 'a b'.title() }} {{ 'ABC'.isupper() }} {{ '12'.isdigit() }}",
           "a, b 1 and x aba A B True True");
    expect("{{ '{:>5}|{:<3}|{:^5}|{:.2f}|{:05d}|{:,}|{!r}'.format('x', 'y', 'z', 3.14159, 7, 1234567, 'q') }}",
           "    x|y  |  z  |3.14|00007|1,234,567|'q'");
    expect("{{ \"%s-%03d|%.2f|%5s|%-3s|%x\" % ('a', 7, 2.5, 'b', 'c', 255) }}", "a-007|2.50|    b|c  |ff");
    expect("{{ strftime_now('%Y-%m-%d|%d %b %Y|%B %d, %Y|%A %a|%H:%M:%S') }}",
           "2026-01-15|15 Jan 2026|January 15, 2026|Thursday Thu|00:00:00");
}

static void test_tests(void **state) {
    (void)state;
    expect("{{ n is even }}{{ n is odd }}{{ n is divisibleby 5 }}{{ s is string }}{{ n is number }}{{ f is float }}"
           "{{ n is integer }}{{ d is mapping }}{{ xs is iterable }}{{ xs is sequence }}{{ none is none }}",
           "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
    expect("{{ t is boolean }}{{ t is true }}{{ x is defined }}{{ x is undefined }}{{ 'ab' is lower }}"
           "{{ n is eq 5 }}{{ t is number }}{{ x is iterable }}{{ s is not string }}",
           "TrueTrueFalseTrueTrueTrueTrueTrueFalse");
}

static void test_undefined_and_errors(void **state) {
    (void)state;
    expect("{{ nothing }}|{{ nothing ~ 'x' }}|{% for x in nothing %}{{ x }}{% endfor %}|{{ nothing|length }}",
           "|x||0");
    expect_fail("{{ nothing + 1 }}", TKV_ERR_INVALID, "'nothing' is undefined");
    expect_fail("{{ nothing.attr }}", TKV_ERR_INVALID, "undefined");
    expect_fail("{{ d.zz.y }}", TKV_ERR_INVALID, "'dict object' has no attribute 'zz'");
    expect_fail("{{ none.x ~ none.x.y }}", TKV_ERR_INVALID, "'None' has no attribute 'x'");
    expect_fail("{{ nothing() }}", TKV_ERR_INVALID, "undefined");
    expect_fail("{{ 'a' + 1 }}", TKV_ERR_INVALID, "unsupported operand");
    expect_fail("{{ 'a' + xs }}", TKV_ERR_INVALID, "unsupported operand");
    expect_fail("{{ s.items() }}", TKV_ERR_INVALID, "");
    expect_fail("{% for x in none %}{% endfor %}", TKV_ERR_INVALID, "not iterable");
    expect_fail("{{ 1 / 0 }}", TKV_ERR_INVALID, "division by zero");
    expect_fail("{{ xs|map('string')|length }}", TKV_ERR_INVALID, "len()");
    expect_fail("{{ xs|no_such_filter }}", TKV_ERR_INVALID, "no filter named 'no_such_filter'");
    /* the sandbox refuses methods that change a list or dict */
    expect_fail("{% set l = [] %}{% do l.append(1) %}", TKV_ERR_INVALID, "unsafe");
    expect_fail("{{ d.pop('b') }}", TKV_ERR_INVALID, "unsafe");
    /* raise_exception's message, with the line it was raised on */
    expect_fail("a\nb\n{{ raise_exception('Only user and assistant roles') }}", TKV_ERR_INVALID,
                "template line 3: Only user and assistant roles");
    expect_fail("line one\n{% for x in xs %}\n{{ x.y.z }}\n{% endfor %}", TKV_ERR_INVALID, "template line 3:");
    /* syntax errors: TKV_ERR_FORMAT, at their line */
    expect_fail("ok\n{% if t %}\nno end", TKV_ERR_FORMAT, "template line 3:");
    expect_fail("{% break %}", TKV_ERR_FORMAT, "outside of a loop");
    expect_fail("{{ 1 + }}", TKV_ERR_FORMAT, "template line 1:");
    expect_fail("{% include 'x' %}", TKV_ERR_FORMAT, "include");
    expect_fail("{{ 'abc }}", TKV_ERR_FORMAT, "unterminated");
    expect_fail("{# never closed", TKV_ERR_FORMAT, "comment");
    /* an unknown filter in a branch not taken is no error (Jinja2 3 defers it) */
    expect("{% if false %}{{ x|from_json }}{% endif %}ok", "ok");
}

static void test_limits(void **state) {
    (void)state;
    /* 10^10 iterations: stops at the step limit */
    expect_fail("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", TKV_ERR_INVALID,
                "steps");
    /* 100 MB of output */
    expect_fail("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", TKV_ERR_INVALID, "MiB");
    /* a string doubled 60 times */
    expect_fail("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                TKV_ERR_INVALID, "MiB");
    expect_fail("{{ 'x' * 100000000000 }}", TKV_ERR_INVALID, "too long");
    expect_fail("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", TKV_ERR_INVALID, "recursed");
    /* work hidden in one step: a search built to be quadratic, a long string measured again and again */
    expect_fail("{% set a = 'a' * 4000000 %}{% set n = a ~ 'b' %}{% set h = a ~ a %}{{ n in h }}", TKV_ERR_INVALID,
                "steps");
    expect_fail("{% set s = 'x' * 8000000 %}{% for i in range(100000) %}{{ s|length }}{% endfor %}", TKV_ERR_INVALID,
                "steps");
    expect_fail("{{ range(1000000)|length }}", TKV_ERR_INVALID, "Range too big");
    /* nesting too deep to parse */
    char deep[4096];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    snprintf(deep + k, sizeof deep - k, " }}");
    expect_fail(deep, TKV_ERR_FORMAT, "nested too deeply");
    /* long chains are loops, not recursion: 20000 elifs, 20000 filters of a filter block */
    size_t cap = 20000 * 40 + 100;
    char *chain = malloc(cap), *out;
    k = (size_t)snprintf(chain, cap, "{%% if n == -1 %%}");
    for (int i = 0; i < 20000; i++) k += (size_t)snprintf(chain + k, cap - k, "{%% elif n == %d %%}%d", i, i);
    snprintf(chain + k, cap - k, "{%% endif %%}");
    assert_int_equal(render(chain, "{\"n\": 19999}", &out), TKV_OK);
    assert_string_equal(out, "19999");
    free(out);
    k = (size_t)snprintf(chain, cap, "{%% filter upper");
    for (int i = 0; i < 20000; i++) k += (size_t)snprintf(chain + k, cap - k, "|lower");
    snprintf(chain + k, cap - k, " %%}aBc{%% endfilter %%}");
    assert_int_equal(render(chain, NULL, &out), TKV_OK);
    assert_string_equal(out, "abc");
    free(out);
    free(chain);
    /* a namespace holding itself prints without looping forever */
    expect_fail("{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}", TKV_ERR_INVALID, "nested too deeply");
}

/* Accumulating in a loop costs linear memory: 20000 pieces of 1 KiB, 20 MB in all, in a 16 MiB-limited string */
static void test_accumulation(void **state) {
    (void)state;
    expect("{% set ns = namespace(s='', l=[]) %}{% for i in range(5000) %}{% set ns.s = ns.s ~ ('x' * 1000) %}"
           "{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.s|length }} {{ ns.l|length }} {{ ns.l[-1] }}",
           "5000000 5000 4999");
    expect_fail("{% set ns = namespace(s='') %}{% for i in range(20000) %}{% set ns.s = ns.s + ('x' * 1000) %}"
                "{% endfor %}",
                TKV_ERR_INVALID, "MiB");
    /* a value kept from before an append keeps its own text */
    expect("{% set ns = namespace(a='x') %}{% set b = ns.a ~ 'y' %}{% set ns.a = b %}{% set c = b ~ 'z' %}"
           "{% set d = b ~ 'w' %}{{ b }} {{ c }} {{ d }} {{ ns.a }}",
           "xy xyz xyw xy");
    /* range loops make no list: a loop over the earlier items of each of 3000 items */
    expect("{% set ns = namespace(n=0) %}{% for i in range(3000) %}{% for j in range(i - 1, -1, -1) %}"
           "{% endfor %}{% set ns.n = ns.n + loop.index0 %}{% endfor %}{{ ns.n }}",
           "4498500");
    expect("{% for i in range(3) %}{{ loop.previtem }}{{ i }}{{ loop.nextitem }};{% endfor %}", "01;012;12;");
}

static void test_compiled_and_context(void **state) {
    (void)state;
    const char *src = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                      "{% if add_generation_prompt %}<assistant>{% endif %}";
    tkv__jinja_template *t;
    assert_int_equal(tkv__jinja_parse(src, strlen(src), &t), TKV_OK);
    char *out;
    size_t len;
    assert_int_equal(tkv__jinja_render_with(t, "{\"bos_token\": \"<s>\", \"messages\": [{\"role\": \"user\", "
                                               "\"content\": \"hi\"}], \"add_generation_prompt\": true}",
                                            NULL, &out, &len),
                     TKV_OK);
    assert_string_equal(out, "<s><user>hi<assistant>");
    tkv__free(out);
    assert_int_equal(tkv__jinja_render_with(t, "{\"messages\": []}", NULL, &out, &len), TKV_OK);
    assert_string_equal(out, "");
    assert_int_equal(len, 0);
    tkv__free(out);
    assert_int_equal(tkv__jinja_render_with(t, NULL, NULL, &out, &len), TKV_OK);
    tkv__free(out);
    assert_int_equal(tkv__jinja_render_with(t, "[1]", NULL, &out, &len), TKV_ERR_INVALID);
    assert_null(out);
    assert_int_equal(tkv__jinja_render_with(t, "{\"messages\": ", NULL, &out, &len), TKV_ERR_INVALID);
    assert_non_null(strstr(tkv_last_error(NULL), "JSON"));
    tkv__jinja_free(t);
    tkv__jinja_free(NULL);
    /* strftime_now without a date is 1970-01-01; a malformed date is refused */
    const char *day = "{{ strftime_now('%Y-%m-%d %A') }}";
    assert_int_equal(tkv__jinja_render(day, strlen(day), NULL, NULL, &out, &len), TKV_OK);
    assert_string_equal(out, "1970-01-01 Thursday");
    tkv__free(out);
    tkv__jinja_options bad = {.now = "15/01/2026"};
    assert_int_equal(tkv__jinja_render(day, strlen(day), NULL, &bad, &out, &len), TKV_ERR_INVALID);
    /* NULs in the text survive */
    const char *nul = "a{{ '\\x00' }}b";
    assert_int_equal(tkv__jinja_render(nul, strlen(nul), NULL, NULL, &out, &len), TKV_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "a\0b", 3);
    tkv__free(out);
}

/* One parsed template, rendered by several threads at once: each gets the single-threaded text. */
typedef struct render_job {
    const tkv__jinja_template *t;
    const char *ctx, *expected;
    int mismatches;
} render_job;

static void *render_many(void *arg) {
    render_job *j = arg;
    for (int i = 0; i < 30; i++) {
        char *out;
        size_t len;
        tkv_status st = tkv__jinja_render_with(j->t, j->ctx, &NOW, &out, &len);
        if (st != TKV_OK || strcmp(out, j->expected)) j->mismatches++;
        tkv__free(out);
    }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    size_t n;
    char *src = (char *)tu_read_file(tu_shared("templates/Qwen-Qwen3-0.6B.jinja"), &n);
    assert_non_null(src);
    tkv__jinja_template *t;
    assert_int_equal(tkv__jinja_parse(src, n, &t), TKV_OK);
    const char *ctx = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                      "\"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"<think>x</think>Hello\"}, "
                      "{\"role\": \"user\", \"content\": \"Bye\"}], \"add_generation_prompt\": true, \"tools\": null}";
    char *expected;
    size_t len;
    assert_int_equal(tkv__jinja_render_with(t, ctx, &NOW, &expected, &len), TKV_OK);
    assert_non_null(strstr(expected, "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"));
    render_job jobs[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (render_job){.t = t, .ctx = ctx, .expected = expected};
        assert_int_equal(pthread_create(&threads[i], NULL, render_many, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(jobs[i].mismatches, 0);
    }
    tkv__free(expected);
    tkv__jinja_free(t);
    free(src);
}

/* Every allocation of a parse and render fails in turn: NOMEM, nothing leaked (ASan checks the leaks). */
static void test_allocation_failures(void **state) {
    (void)state;
    const char *src = "{% set ns = namespace(x=[]) %}{% for m in messages %}{{ m.role|upper }}: {{ m.content }}\n"
                      "{% endfor %}{{ messages|tojson(indent=2) }}";
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    char *out;
    size_t len;
    tkv__alloc_fail_after(-1);
    tkv__alloc_fail_after(1000000);
    assert_int_equal(tkv__jinja_render(src, strlen(src), ctx, NULL, &out, &len), TKV_OK);
    tkv__free(out);
    long n = tkv__alloc_fail_after(-1);
    assert_true(n > 0);
    for (long i = 0; i < n; i++) {
        tkv__alloc_fail_after(i);
        tkv_status st = tkv__jinja_render(src, strlen(src), ctx, NULL, &out, &len);
        tkv__alloc_fail_after(-1);
        if (st == TKV_OK) {
            tkv__free(out);
            continue;
        }
        assert_int_equal(st, TKV_ERR_NOMEM);
        assert_null(out);
    }
}

/*
 * Random templates: pieces of the language strung together, and real templates with bytes cut, doubled or
 * inserted. Each must render or fail with a syntax or render error: never crash, hang or leak (ASan builds).
 */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static void test_random_templates(void **state) {
    (void)state;
    static const char *const pieces[] = {
        "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", " if ", " for ", " in ", " endfor ",
        " endif ", " else ", " elif ", " set ", " = ", " x ", " xs ", " d ", " s ", " ns.a ", " namespace(a=1) ", "|",
        " upper ", " tojson ", " length ", "(", ")", "[", "]", "{", "}", ",", ":", ".", " 1 ", " 2.5 ", " 'a' ",
        " \"b\" ", " + ", " - ", " * ", " / ", " // ", " % ", " ** ", " ~ ", " and ", " or ", " not ", " is ",
        " defined ", " none ", " macro ", " endmacro ", " m ", " call ", " endcall ", " caller ", " loop ",
        " loop.index ", " break ", " continue ", " raw ", " endraw ", "\n", "  ", "text", " filter ",
        " endfilter ", " items() ", " split ", " strip() ", " range(3) ", " raise_exception('x') ", " == ", " < ",
        "'\\u00e9'", " join ", " map(attribute='a') ", " selectattr('a') ", " do ", " endset ", " recursive ",
        "[::-1]", "[1:]", " with ", " endwith ", " generation ", " endgeneration ", "\xc3", "\xa9", "\0"};
    static const char *const names[] = {"Qwen-Qwen3-0.6B.jinja", "openai-gpt-oss-120b.jinja",
                                        "google-gemma-4-31B-it.jinja", "deepseek-ai-DeepSeek-V3.1.jinja",
                                        "Kimi-K2-Thinking.jinja", "mistralai-Ministral-3-14B-Reasoning-2512.jinja"};
    const char *ctx = "{\"xs\": [1, 2, 3], \"d\": {\"a\": 1}, \"s\": \"hi there\", \"tools\": null, "
                      "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                      "\"content\": \"<think>a</think>b\", \"tool_calls\": [{\"type\": \"function\", "
                      "\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}}]}], "
                      "\"add_generation_prompt\": true}";
    size_t n_pieces = sizeof pieces / sizeof *pieces, n_names = sizeof names / sizeof *names;
    char *real[6];
    size_t real_len[6];
    for (size_t i = 0; i < n_names; i++) {
        char path[256];
        snprintf(path, sizeof path, "templates/%s", names[i]);
        real[i] = (char *)tu_read_file(tu_shared(path), &real_len[i]);
        assert_non_null(real[i]);
    }
    int ok = 0, failed = 0;
    for (int it = 0; it < 1500; it++) {
        char *t;
        size_t len;
        if (it % 2 == 0) {
            t = malloc(4096);
            len = 0;
            for (uint32_t k = 1 + rnd(40); k > 0; k--) {
                const char *p = pieces[rnd((uint32_t)n_pieces)];
                size_t pl = strlen(p);
                memcpy(t + len, p, pl);
                len += pl;
            }
        } else {
            size_t r = rnd((uint32_t)n_names);
            t = malloc(real_len[r] * 2 + 256);
            memcpy(t, real[r], real_len[r]);
            len = real_len[r];
            for (uint32_t k = 1 + rnd(4); k > 0 && len > 0; k--) {
                size_t at = rnd((uint32_t)len), span = 1 + rnd(30);
                if (span > len - at) span = len - at;
                uint32_t op = rnd(3);
                if (op == 0) {
                    memmove(t + at, t + at + span, len - at - span);
                    len -= span;
                } else if (op == 1 && len + span < real_len[r] * 2) {
                    memmove(t + at + span, t + at, len - at);
                    len += span;
                } else {
                    const char *p = pieces[rnd((uint32_t)n_pieces)];
                    size_t pl = strlen(p);
                    memmove(t + at + pl, t + at, len - at);
                    memcpy(t + at, p, pl);
                    len += pl;
                }
            }
        }
        char *out;
        size_t out_len;
        tkv_status st = tkv__jinja_render(t, len, ctx, &NOW, &out, &out_len);
        if (st == TKV_OK) {
            ok++;
            tkv__free(out);
        } else {
            failed++;
            if (st != TKV_ERR_FORMAT && st != TKV_ERR_INVALID) fail_msg("status %d: %s", st, tkv_last_error(NULL));
            assert_non_null(strstr(tkv_last_error(NULL), "template line"));
        }
        free(t);
    }
    print_message("random templates: %d rendered, %d failed cleanly\n", ok, failed);
    for (size_t i = 0; i < n_names; i++) free(real[i]);
}

/* ---- the reference: templates.jsonl ---- */

/*
 * Lines of templates.jsonl (0-based) that do not match yet, each with why.
 * The test fails when any other line fails, and when a listed line passes
 * (then remove it): the list only shrinks.
 */
static const struct {
    int line;
    const char *template_name;
    const char *why;
} KNOWN_FAILING[] = {
    {-1, NULL, NULL}, /* none: every line matches */
};

static bool known_failing(int line, const char *name) {
    for (size_t i = 0; i < sizeof KNOWN_FAILING / sizeof *KNOWN_FAILING; i++)
        if (KNOWN_FAILING[i].line == line && !strcmp(KNOWN_FAILING[i].template_name, name)) return true;
    return false;
}

/* The template variables of one input, as transformers passes them. */
static char *context_of(json_t *in) {
    json_t *ctx = json_object();
    json_object_set(ctx, "messages", json_object_get(in, "messages"));
    json_t *tools = json_object_get(in, "tools");
    json_object_set(ctx, "tools", tools ? tools : json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set(ctx, "add_generation_prompt", json_object_get(in, "add_generation_prompt"));
    if (json_object_get(in, "bos_token")) json_object_set(ctx, "bos_token", json_object_get(in, "bos_token"));
    if (json_object_get(in, "eos_token")) json_object_set(ctx, "eos_token", json_object_get(in, "eos_token"));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(in, "extra"), k, v) json_object_set(ctx, k, v);
    char *s = json_dumps(ctx, JSON_COMPACT);
    json_decref(ctx);
    return s;
}

static void test_reference(void **state) {
    (void)state;
    size_t size;
    char *all = (char *)tu_read_file(tu_shared("reference/templates.jsonl"), &size);
    assert_non_null(all);
    int line = 0, passed = 0, failed = 0, unexpected = 0, renders = 0, raises = 0;
    for (char *p = all, *nl; p < all + size; p = nl + 1, line++) {
        nl = memchr(p, '\n', (size_t)(all + size - p));
        if (!nl) nl = all + size;
        *nl = 0;
        json_error_t err;
        json_t *j = json_loads(p, 0, &err);
        assert_non_null(j);
        const char *name = json_string_value(json_object_get(j, "template"));
        json_t *in = json_object_get(j, "input"), *expected = json_object_get(j, "expected");
        char path[512];
        snprintf(path, sizeof path, "templates/%s", name);
        size_t tlen;
        char *tmpl = (char *)tu_read_file(tu_shared(path), &tlen);
        assert_non_null(tmpl);
        char *ctx = context_of(in);
        tkv__jinja_options opts = {.now = json_string_value(json_object_get(in, "now"))};
        char *out;
        size_t len;
        tkv_status st = tkv__jinja_render(tmpl, tlen, ctx, &opts, &out, &len);
        bool ok;
        char why[600];
        if (expected) {
            renders++;
            ok = st == TKV_OK && len == json_string_length(expected) && !memcmp(out, json_string_value(expected), len);
            if (st != TKV_OK) snprintf(why, sizeof why, "failed: %s", tkv_last_error(NULL));
            else snprintf(why, sizeof why, "rendered differently");
        } else {
            raises++;
            ok = st != TKV_OK;
            snprintf(why, sizeof why, "rendered, but transformers raised");
        }
        if (ok) passed++;
        else failed++;
        bool known = known_failing(line, name);
        if (ok == known) {
            unexpected++;
            if (ok) print_message("line %d (%s) passes now: remove it from KNOWN_FAILING\n", line, name);
            else print_message("line %d (%s): %s\n", line, name, why);
        }
        tkv__free(out);
        free(ctx);
        free(tmpl);
        json_decref(j);
    }
    print_message("templates.jsonl: %d lines (%d renders, %d raises): %d passed, %d failed (%zu known)\n", line,
                  renders, raises, passed, failed, sizeof KNOWN_FAILING / sizeof *KNOWN_FAILING - 1);
    free(all);
    assert_int_equal(line, 778);
    assert_int_equal(unexpected, 0);
}

/* `is filter` answers what applying the filter does: for Jinja2's filter names and some that are not filters,
   a filter the render applies (any error but "no filter named") is one `is filter` knows, and the other way. */
static void test_is_filter(void **state) {
    (void)state;
    static const char *const names[] = {
        "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
        "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent", "int", "items", "join",
        "last", "length", "list", "lower", "map", "max", "min", "pprint", "random", "reject", "rejectattr",
        "replace", "reverse", "round", "safe", "select", "selectattr", "slice", "sort", "string", "striptags",
        "sum", "title", "tojson", "trim", "truncate", "unique", "upper", "urlencode", "urlize", "wordcount",
        "wordwrap", "xmlattr", "nothing", "defined", "strip"};
    int known = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char tmpl[128], *out;
        snprintf(tmpl, sizeof tmpl, "{{ xs | %s }}", names[i]);
        const tkv_status st = render(tmpl, CTX, &out);
        const bool applies = st == TKV_OK || !strstr(tkv_last_error(NULL), "no filter named");
        free(out);
        snprintf(tmpl, sizeof tmpl, "{{ '%s' is filter }}", names[i]);
        assert_int_equal(render(tmpl, CTX, &out), TKV_OK);
        if (strcmp(out, applies ? "True" : "False")) fail_msg("'%s' is filter gave %s", names[i], out);
        free(out);
        known += applies;
    }
    assert_true(known >= 40); /* the filters the chat templates use, and more */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_is_filter),
        cmocka_unit_test(test_printing),
        cmocka_unit_test(test_expressions),
        cmocka_unit_test(test_loops),
        cmocka_unit_test(test_set_namespace_macros),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_tojson),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_tests),
        cmocka_unit_test(test_undefined_and_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_accumulation),
        cmocka_unit_test(test_compiled_and_context),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_random_templates),
        cmocka_unit_test(test_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
