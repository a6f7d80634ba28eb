/*
 * pretokenize.c — splitting text into words before BPE merges them.
 *
 * Each `tokenizer.ggml.pre` type names a list of regular expressions (from
 * the model's tokenizer.json, as the reference implementation adapts them).
 * They apply in order: the first splits the text into matches and the gaps
 * between them; each next one splits every piece again. A piece is matched
 * on its own, so `$` and look-aheads stop at the piece's end.
 *
 * `\s` is written out as the reference's whitespace set (WS) rather than
 * PCRE2's own (which differs on U+0085), so both agree on every code point.
 * Letters and numbers use PCRE2's Unicode properties (UTF + UCP). Where the
 * reference rewrote an expression for an engine without them (GPT-4o's and
 * Tekken's case classes), the model's own expression is used.
 *
 * Every character past ASCII is written as a \x{...} escape: raw, a Unicode
 * normalisation of the source can turn one into another (U+1F7D into U+03CE,
 * U+212A into "K") and a range backwards.
 */
#include "pretokenize.h"

#include "base/alloc.h"
#include "base/grow.h"
#include "base/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#define WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define S_ "[" WS "]"
#define NOT_S "[^" WS "]"

/* GPT-2's expression; several lists reuse it. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_ "+(?!" NOT_S ")"

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) spelled out, as the reference has it. */
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

/* How the expressions after Llama 3's end: line breaks with the blanks
   before them, blanks that leave one for the next word, any other blanks. */
#define WS_TAIL S_ "*[\\r\\n]+|" S_ "+(?!" NOT_S ")|" S_ "+"

/* Llama 3 / Qwen 2: numbers in runs of up to three (Llama 3) or one digit at
   a time (Qwen 2). */
#define RE_LLAMA3_LIKE(num) \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" num " ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" WS_TAIL

/* Qwen 3.5: combining marks stay with their letters. */
#define RE_QWEN35 \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" WS_TAIL

/* Jais 2: Llama 3's, with runs of blanks cut into powers of two. */
#define BLANKS(n) S_ "{" n "}(?!" NOT_S ")|"
#define RE_JAIS2                                                                                                \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" \
    BLANKS("512") BLANKS("256") BLANKS("128") BLANKS("64") BLANKS("32") BLANKS("16") BLANKS("8") BLANKS("4")     \
        BLANKS("1,2") S_

/*
 * GPT-4o / Tekken: a word is upper-case letters then lower-case ones, or
 * upper-case ones then lower-case ones (so "CamelCase" is two words), an
 * optional contraction after it. These are the models' own expressions:
 * the reference rewrites them with look-aheads for an engine without the
 * case properties, which makes every non-ASCII letter both upper and lower
 * case and leaves combining marks out of words.
 */
#define UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_CASED(suffix, num)                                                                                       \
    "[^\\r\\n\\p{L}\\p{N}]?" UPPER "*" LOWER "+" suffix "|[^\\r\\n\\p{L}\\p{N}]?" UPPER "+" LOWER "*" suffix "|" num \
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*|" WS_TAIL

/* DeepSeek V3 / AFMoE: one ASCII punctuation mark may lead ASCII letters. */
#define RE_DEEPSEEK3                                                                                            \
    "[!-/:-@\\[-`{-~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|" WS_TAIL

/* Kana and the common CJK ideographs. */
#define KANA_HAN "\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}"

/* Digits in groups of three from the right ("1234567": 1 234 567), each a
   word (the reference's own digit splitter joins the text before a run to
   its first group, which the next expression mostly splits again). */
#define RE_DIGITS_BY_3 "\\p{N}{1,3}(?=(?:\\p{N}{3})*(?!\\p{N}))"

/* Lines and runs of line feeds. */
#define RE_LINES "[^\\n]+|\\n+"

/* CJK ideographs, the range below them, and Hangul (DeepSeek). The range
   holds blanks (U+2009, U+3000, ...), which join a run here as in the
   model's tokenizer; the reference hands its engine every blank past ASCII
   as U+000B, so there they stay apart. */
#define RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

/* DeepSeek LLM's letter class: cased letters of many scripts, no CJK. */
#define RE_DEEPSEEK_LETTERS \
    "[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}" \
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}" \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}" \
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}" \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}" \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}" \
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}" \
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}" \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}" \
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}" \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}" \
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}" \
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}" \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}" \
    "\\x{1E900}-\\x{1E943}]"

/* Poro / BLOOM: anything up to blanks and sentence punctuation of several
   scripts (… 。 ， 、 । ۔ ،), the parentheses and '|' included as written. */
#define RE_PORO " ?[^(" WS "|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

#define MAX_RES 6
#define MAX_NAMES 16

typedef struct pre_type {
    const char *names[MAX_NAMES]; /* the `tokenizer.ggml.pre` values of this type */
    const char *res[MAX_RES];
    tkv__pretok_flags flags;
} pre_type;

/* The flags: ignore_merges, add_bos, spm_text. */
#define PLAIN {false, false, false}
#define WHOLE_WORDS {true, false, false}
#define LLAMA3_FLAGS {true, true, false}

static const pre_type pre_types[] = {
    {{"default", ""}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, PLAIN},
    {{"gpt-2", "phi-2", "roberta-bpe", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code",
      "gigachat", "mpt", "olmo", "a.x-4.0", "mellum", "modern-bert", "exaone4"},
     {RE_GPT2},
     PLAIN},
    {{"jais", "trillion", "granite-docling"}, {RE_GPT2}, PLAIN},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
     {RE_LLAMA3_LIKE("\\p{N}{1,3}|")},
     LLAMA3_FLAGS},
    {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, {RE_LLAMA3_LIKE("\\p{N}{1,3}|")}, PLAIN},
    {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "kormo", "f2llmv2", "solar-open", "grok-2"},
     {RE_LLAMA3_LIKE("\\p{N}|")},
     PLAIN},
    {{"qwen35"}, {RE_QWEN35}, PLAIN},
    {{"laguna"}, {RE_LINES, RE_LLAMA3_LIKE("\\p{N}|")}, PLAIN},
    {{"minicpm5"}, {"\\p{N}{1,3}", RE_LLAMA3_LIKE("\\p{N}+|")}, WHOLE_WORDS},
    {{"seed-coder"},
     {CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+|" WS_TAIL},
     PLAIN},
    {{"bailingmoe", "bailingmoe2", "llada-moe"},
     {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS
      "\\p{L}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]|" S_ "+(?!" NOT_S ")|" S_ "+"},
     PLAIN},
    {{"exaone-moe"},
     {CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^" WS
      "\\p{L}\\p{N}]+[\\r\\n/]?|" S_ "*[\\r\\n]|" S_ "+(?!" NOT_S ")|" S_ "+"},
     PLAIN},
    {{"jais-2"}, {RE_JAIS2}, PLAIN},
    {{"tekken"}, {RE_CASED("", "\\p{N}")}, LLAMA3_FLAGS},
    {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {RE_CASED(CONTRACTIONS "?", "\\p{N}{1,3}")}, PLAIN},
    {{"granite-embed-multi-97m"}, {RE_CASED(CONTRACTIONS "?", "\\p{N}{1,3}")}, WHOLE_WORDS},
    {{"tiny_aya", "cohere2moe"},
     {"\\d{1,3}(?=(?:\\d{3})*\\b)", RE_CASED(CONTRACTIONS "?", "\\p{N}{1,3}")},
     PLAIN},
    {{"youtu"},
     {"[\\x{AC00}-\\x{D7A3}\\x{3131}-\\x{318E}]+|[\\x{FF01}\\x{2026}\\x{201C}\\x{201D}\\x{2018}\\x{2019}\\x{2014}"
      "\\x{FF1A}\\x{FF1B}\\x{FF0C}\\x{3001}-\\x{303F}\\x{FE30}-\\x{FE4F}]+|[\\x{3105}-\\x{312F}]+|[" KANA_HAN "]+",
      RE_CASED(CONTRACTIONS "?", "\\p{N}")},
     WHOLE_WORDS},
    {{"deepseek-llm"},
     {"[\\r\\n]", S_ "?" RE_DEEPSEEK_LETTERS "+",
      S_ "?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", S_ "+$", RE_CJK,
      "\\p{N}+"},
     PLAIN},
    {{"deepseek-coder"}, {"[\\r\\n]", S_ "?\\p{L}+", S_ "?\\p{P}+", RE_CJK, "\\p{N}"}, PLAIN},
    {{"deepseek-v3", "hunyuan-dense", "joyai-llm"}, {"\\p{N}{1,3}", "[" KANA_HAN "]+", RE_DEEPSEEK3}, PLAIN},
    /* CJK, Thai, Lao, Khmer, Myanmar and Hangul in runs of their own; the
       reference's copy of the class starts the compatibility ideographs at
       U+8C48, the normalised form of U+F900 */
    {{"afmoe"},
     {RE_DIGITS_BY_3,
      "[\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{F900}-\\x{FAFF}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}\\x{FF65}-"
      "\\x{FF9F}\\x{2F00}-\\x{2FDF}\\x{E40}-\\x{E7F}\\x{E80}-\\x{EFF}\\x{1780}-\\x{17FF}\\x{1000}-\\x{109F}\\x{AA60}-"
      "\\x{AA7F}\\x{A9E0}-\\x{A9FF}\\x{AC00}-\\x{D7AF}\\x{1100}-\\x{11FF}]+",
      RE_DEEPSEEK3},
     PLAIN},
    {{"superbpe"}, {"\\p{N}+", "(?=(?:\\d{3})+(?!\\d))"}, PLAIN},
    {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, PLAIN},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
     {"\\p{N}", RE_GPT2},
     PLAIN},
    {{"chameleon"},
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2},
     {false, true, false}},
    {{"poro-chat", "bloom", "gpt3-finnish"}, {RE_PORO}, PLAIN},
    {{"viking"}, {RE_PORO, "\\p{N}"}, PLAIN},
    /* SentencePiece-style text merged by rank: only lines are split off */
    {{"gemma4", "granite-embed-multi-311m"}, {RE_LINES}, {false, true, true}},
    {{"sarvam-moe"}, {RE_LINES}, {false, false, true}},
};

struct tkv__pretok {
    size_t n;
    pcre2_code *re[MAX_RES];
};

void tkv__pretok_free(tkv__pretok *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) pcre2_code_free(p->re[i]);
    tkv__free(p);
}

tkv_status tkv__pretok_create(const char *pre_name, tkv__pretok **out, tkv__pretok_flags *flags) {
    const pre_type *type = NULL;
    for (size_t i = 0; i < sizeof pre_types / sizeof pre_types[0] && !type; i++)
        for (size_t k = 0; k < MAX_NAMES && pre_types[i].names[k] && !type; k++)
            if (!strcmp(pre_types[i].names[k], pre_name)) type = &pre_types[i];
    if (!type)
        return tkv__fail(TKV_ERR_UNSUPPORTED, "metadata key 'tokenizer.ggml.pre': pre-tokenizer type '%.40s' is not supported",
                         pre_name);
    tkv__pretok *p = tkv__calloc(1, sizeof *p);
    if (!p) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the pre-tokenizer");
    for (size_t i = 0; i < MAX_RES && type->res[i]; i++) {
        int err;
        PCRE2_SIZE at;
        p->re[i] = pcre2_compile((PCRE2_SPTR)type->res[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &err, &at, NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(err, msg, sizeof msg);
            tkv__pretok_free(p);
            /* our own expressions: reaching this is a bug, reported not hidden */
            return tkv__fail(TKV_ERR_UNSUPPORTED, "pre-tokenizer '%s': expression %zu does not compile at %zu: %s",
                             pre_name, i, (size_t)at, (const char *)msg);
        }
        p->n++;
        pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    }
    *flags = type->flags;
    *out = p;
    return TKV_OK;
}

tkv_status tkv__spans_push(tkv__spans *s, size_t start, size_t len) {
    if (s->n == s->cap) {
        struct tkv__span *v = tkv__grow(s->v, &s->cap, s->n + 1, sizeof *v, 64);
        if (!v) return TKV_ERR_NOMEM;
        s->v = v;
    }
    s->v[s->n++] = (struct tkv__span){start, len};
    return TKV_OK;
}

/* Split each span of `in` by `re` into `out` (matches and the gaps between). */
static tkv_status split_by(const pcre2_code *re, pcre2_match_data *md, const char *text, const tkv__spans *in,
                           tkv__spans *out) {
    tkv_status st = TKV_OK;
    for (size_t i = 0; i < in->n && !st; i++) {
        const PCRE2_SPTR subject = (PCRE2_SPTR)text + in->v[i].start;
        const size_t len = in->v[i].len;
        size_t pos = 0, gap = 0;
        while (pos < len && !st) {
            int rc = pcre2_match(re, subject, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) return tkv__fail(TKV_ERR_NOMEM, "pre-tokenizer: regular expression failed (PCRE2 error %d)", rc);
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t m0 = ov[0], m1 = ov[1];
            if (m0 > gap) st = tkv__spans_push(out, in->v[i].start + gap, m0 - gap);
            if (!st && m1 > m0) st = tkv__spans_push(out, in->v[i].start + m0, m1 - m0);
            if (m1 > m0) {
                pos = gap = m1;
            } else { /* an empty match splits there; then step over one character */
                gap = m0;
                pos = m1 + 1;
                while (pos < len && (subject[pos] & 0xC0) == 0x80) pos++;
            }
        }
        if (!st && gap < len) st = tkv__spans_push(out, in->v[i].start + gap, len - gap);
    }
    return st;
}

tkv_status tkv__pretok_split(const tkv__pretok *p, const char *text, size_t len, tkv__spans *out) {
    tkv__spans a = {0}, b = {0};
    pcre2_match_data *md = NULL;
    tkv_status st = tkv__spans_push(&a, 0, len);
    for (size_t i = 0; i < p->n && !st; i++) {
        pcre2_match_data_free(md);
        md = pcre2_match_data_create_from_pattern(p->re[i], NULL);
        if (!md) {
            st = TKV_ERR_NOMEM;
            break;
        }
        b.n = 0;
        st = split_by(p->re[i], md, text, &a, &b);
        tkv__spans t = a;
        a = b;
        b = t;
    }
    pcre2_match_data_free(md);
    for (size_t i = 0; i < a.n && !st; i++) st = tkv__spans_push(out, a.v[i].start, a.v[i].len);
    tkv__free(a.v);
    tkv__free(b.v);
    if (st == TKV_ERR_NOMEM && !tkv_last_error(NULL)[0]) tkv__fail(st, "out of memory in the pre-tokenizer");
    return st;
}

size_t tkv__utf8_valid_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    /* no overlong forms, no surrogates, nothing past U+10FFFF */
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}
