/*
 * tokenizer.c — building the tokenizer from GGUF metadata, splitting out
 * special tokens, and the tokenize half of the public API.
 *
 * Defaults follow the reference implementation for each vocabulary type
 * when a key is absent:
 *   SPM ("llama"): bos 1, eos 2, unk 0; add_bos true, add_eos false,
 *                  add_space_prefix true.
 *   BPE ("gpt2"):  bos = eos = 11, no unk; add_bos as the pre-tokenizer type
 *                  says (true for Llama 3), add_eos false, no space prefix.
 *   "gemma4":      BPE with no bos, eos or unk; pre-tokenizer type gemma4
 *                  (whatever the file says), which always adds BOS.
 */
#define _GNU_SOURCE /* memmem */
#include "tokenizer.h"

#include "base/alloc.h"
#include "base/grow.h"
#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tkv_status tkv__tokbuf_push(tkv__tokbuf *b, tkv_token id) {
    if (b->n == b->cap) {
        tkv_token *p = tkv__grow(b->ids, &b->cap, b->n + 1, sizeof *p, 256);
        if (!p) return TKV_ERR_NOMEM;
        b->ids = p;
    }
    b->ids[b->n++] = id;
    return TKV_OK;
}

/* ---- building ----------------------------------------------------------- */

void tkv__tokenizer_free(tkv__tokenizer *t) {
    if (!t) return;
    tkv__free(t->score);
    tkv__free(t->type);
    tkv__strmap_free(&t->token_map);
    tkv__strmap_free(&t->merge_map);
    tkv__free(t->special);
    tkv__free(t->eog);
    tkv__pretok_free(t->pre);
    tkv__free(t);
}

/* An array key of the expected element type and length n (0: any). */
static tkv_status get_array(const tkv__gguf *g, const char *key, tkv_meta_type et, uint64_t n, bool required,
                            const tkv__gguf_kv **out) {
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    *out = NULL;
    if (!kv) return required ? tkv__fail(TKV_ERR_FORMAT, "metadata key '%s' is missing", key) : TKV_OK;
    if (kv->type != TKV_META_ARRAY || kv->elem_type != et)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': expected an array of %s", key, tkv_meta_type_name(et));
    if (n && kv->n != n)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': %llu elements, expected one per token (%llu)", key,
                         (unsigned long long)kv->n, (unsigned long long)n);
    *out = kv;
    return TKV_OK;
}

/* A special token id: any integer key; out-of-range values keep the default. */
static tkv_status get_id(const tkv__gguf *g, const char *name, uint32_t n_vocab, tkv_token *id) {
    char key[96];
    snprintf(key, sizeof key, "tokenizer.ggml.%s", name);
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    if (kv) {
        int64_t v;
        if (kv->type == TKV_META_U32 || kv->type == TKV_META_U64 || kv->type == TKV_META_U16 || kv->type == TKV_META_U8)
            v = kv->v.u > INT32_MAX ? -1 : (int64_t)kv->v.u;
        else if (kv->type == TKV_META_I32 || kv->type == TKV_META_I64 || kv->type == TKV_META_I16 || kv->type == TKV_META_I8)
            v = kv->v.i;
        else
            return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': type %s, expected an integer", key,
                             tkv_meta_type_name(kv->type));
        if (v >= 0 && v < (int64_t)n_vocab) *id = (tkv_token)v;
    }
    if (*id >= (tkv_token)n_vocab) *id = TKV_TOKEN_NULL;
    return TKV_OK;
}

static tkv_status get_flag(const tkv__gguf *g, const char *name, bool *flag) {
    char key[96];
    snprintf(key, sizeof key, "tokenizer.ggml.%s", name);
    const tkv__gguf_kv *kv = tkv__gguf_find(g, key);
    if (!kv) return TKV_OK;
    if (kv->type != TKV_META_BOOL)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': type %s, expected bool", key, tkv_meta_type_name(kv->type));
    *flag = kv->v.u != 0;
    return TKV_OK;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* Texts that mark an end-of-generation token in the vocabularies in use. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
    "<|end_of_text|>", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
    "<|return|>", "<|call|>",                 /* gpt-oss (harmony) */
    "<|flush|>", "<|calls|>",                 /* solar-open */
    "[EOT]", "[EOS]",                         /* Kimi-K2 */
    "<eos>", "<turn|>", "<|tool_response>",   /* Gemma 4 */
    "[e~[",                                   /* MiniMax-M2 */
};

/* Whether the vocabulary has a token of this text. */
static bool has_text(const tkv__tokenizer *t, const char *s) { return tkv__strmap_get(&t->token_map, s, strlen(s)) >= 0; }

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Order t->special by text length, longest first, then by id. */
static tkv_status sort_specials(tkv__tokenizer *t) {
    uint64_t *keys = tkv__malloc((t->n_special ? t->n_special : 1) * sizeof *keys);
    if (!keys) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the vocabulary");
    for (size_t i = 0; i < t->n_special; i++) {
        size_t len = t->text[t->special[i]].n;
        uint64_t inv = UINT32_MAX - (len > UINT32_MAX ? UINT32_MAX : len);
        keys[i] = inv << 32 | (uint32_t)t->special[i];
    }
    qsort(keys, t->n_special, sizeof *keys, cmp_u64);
    for (size_t i = 0; i < t->n_special; i++) t->special[i] = (int32_t)(keys[i] & 0xffffffffu);
    tkv__free(keys);
    return TKV_OK;
}

static tkv_status build(const tkv__gguf *g, tkv__tokenizer *t) {
    tkv_status st;
    const tkv__gguf_kv *model = tkv__gguf_find(g, "tokenizer.ggml.model");
    if (model->type != TKV_META_STRING)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key 'tokenizer.ggml.model': type %s, expected string",
                         tkv_meta_type_name(model->type));
    /* Gemma 4's "gemma4" is BPE whose pre-tokenizer type is implied */
    const bool gemma4 = !strcmp(model->str.s, "gemma4");
    if (!strcmp(model->str.s, "llama")) t->kind = TKV__VOCAB_SPM;
    else if (!strcmp(model->str.s, "gpt2") || gemma4) t->kind = TKV__VOCAB_BPE;
    else
        return tkv__fail(TKV_ERR_UNSUPPORTED,
                         "metadata key 'tokenizer.ggml.model': tokenizer '%.40s' is not supported (llama, gpt2, gemma4)",
                         model->str.s);

    const tkv__gguf_kv *tokens, *scores, *types, *merges = NULL;
    if ((st = get_array(g, "tokenizer.ggml.tokens", TKV_META_STRING, 0, true, &tokens))) return st;
    if (tokens->n == 0 || tokens->n > INT32_MAX)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key 'tokenizer.ggml.tokens': %llu tokens", (unsigned long long)tokens->n);
    t->n_vocab = (uint32_t)tokens->n;
    t->text = tokens->strs;
    if ((st = get_array(g, "tokenizer.ggml.scores", TKV_META_F32, t->n_vocab, false, &scores))) return st;
    if ((st = get_array(g, "tokenizer.ggml.token_type", TKV_META_I32, t->n_vocab, false, &types))) return st;
    if (t->kind == TKV__VOCAB_BPE && (st = get_array(g, "tokenizer.ggml.merges", TKV_META_STRING, 0, true, &merges)))
        return st;

    t->score = tkv__calloc(t->n_vocab, sizeof *t->score);
    t->type = tkv__malloc(t->n_vocab);
    if (!t->score || !t->type) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the vocabulary");
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        if (scores) {
            uint32_t bits = le32(scores->arr + 4 * (size_t)i);
            memcpy(&t->score[i], &bits, 4);
        }
        int32_t ty = types ? (int32_t)le32(types->arr + 4 * (size_t)i) : TKV__TOK_NORMAL;
        t->type[i] = ty >= TKV__TOK_NORMAL && ty <= TKV__TOK_BYTE ? (uint8_t)ty : TKV__TOK_UNDEFINED;
    }

    /* text -> id; when texts repeat the reference keeps the last id, so insert
       from the end and keep the first insertion */
    if (tkv__strmap_init(&t->token_map, t->n_vocab)) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the vocabulary");
    for (uint32_t i = t->n_vocab; i-- > 0;) tkv__strmap_put(&t->token_map, t->text[i].s, t->text[i].n, (int32_t)i, NULL);

    if (merges) {
        if (merges->n > INT32_MAX) return tkv__fail(TKV_ERR_FORMAT, "metadata key 'tokenizer.ggml.merges': too many merges");
        if (tkv__strmap_init(&t->merge_map, (size_t)merges->n)) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the merges");
        for (uint64_t i = 0; i < merges->n; i++) {
            const tkv__str *m = &merges->strs[i];
            const char *sp = m->n > 1 ? memchr(m->s + 1, ' ', m->n - 1) : NULL;
            if (!sp)
                return tkv__fail(TKV_ERR_FORMAT, "metadata key 'tokenizer.ggml.merges': merge %llu ('%.40s') has no space",
                                 (unsigned long long)i, m->s);
            tkv__strmap_put(&t->merge_map, m->s, m->n, (int32_t)i, NULL);
        }
    }

    /* special ids and flags: type defaults, then the file's keys */
    const bool spm = t->kind == TKV__VOCAB_SPM;
    t->bos = spm ? 1 : gemma4 ? TKV_TOKEN_NULL : 11;
    t->eos = spm ? 2 : gemma4 ? TKV_TOKEN_NULL : 11;
    t->unk = spm ? 0 : TKV_TOKEN_NULL;
    t->eot = t->pad = t->sep = TKV_TOKEN_NULL;
    tkv__pretok_flags pre_flags = {0};
    if (!spm) {
        const tkv__gguf_kv *pre = gemma4 ? NULL : tkv__gguf_find(g, "tokenizer.ggml.pre");
        const char *name = gemma4 ? "gemma4" : "default";
        if (pre) {
            if (pre->type != TKV_META_STRING)
                return tkv__fail(TKV_ERR_FORMAT, "metadata key 'tokenizer.ggml.pre': type %s, expected string",
                                 tkv_meta_type_name(pre->type));
            name = pre->str.s;
        }
        snprintf(t->pre_name, sizeof t->pre_name, "%s", name);
        if ((st = tkv__pretok_create(name, &t->pre, &pre_flags))) return st;
        t->ignore_merges = pre_flags.ignore_merges;
    } else {
        snprintf(t->pre_name, sizeof t->pre_name, "default");
    }
    t->add_bos = spm ? true : pre_flags.add_bos;
    t->add_eos = false;
    t->add_space_prefix = spm;
    if ((st = get_id(g, "bos_token_id", t->n_vocab, &t->bos))) return st;
    if ((st = get_id(g, "eos_token_id", t->n_vocab, &t->eos))) return st;
    if ((st = get_id(g, "eot_token_id", t->n_vocab, &t->eot))) return st;
    if ((st = get_id(g, "unknown_token_id", t->n_vocab, &t->unk))) return st;
    if ((st = get_id(g, "padding_token_id", t->n_vocab, &t->pad))) return st;
    if ((st = get_id(g, "seperator_token_id", t->n_vocab, &t->sep))) return st;
    if ((st = get_id(g, "separator_token_id", t->n_vocab, &t->sep))) return st;
    if ((st = get_flag(g, "add_bos_token", &t->add_bos))) return st;
    if ((st = get_flag(g, "add_eos_token", &t->add_eos))) return st;
    if ((st = get_flag(g, "add_space_prefix", &t->add_space_prefix))) return st;
    if (pre_flags.spm_text) {
        /* SentencePiece's text, BPE's merges: the SPM paths with merge ranks
           (see tokenizer.h); the reference adds no space prefix to BPE text
           whatever the key says, and Gemma 4 always adds BOS */
        t->kind = TKV__VOCAB_SPM;
        t->spm_merges = true;
        t->add_space_prefix = false;
        if (pre_flags.add_bos) t->add_bos = true;
    }

    /* byte fallback */
    for (int b = 0; b < 256; b++) {
        char s[8];
        if (t->kind == TKV__VOCAB_SPM) {
            snprintf(s, sizeof s, "<0x%02X>", b);
            t->byte_token[b] = tkv__strmap_get(&t->token_map, s, 6);
            if (t->byte_token[b] < 0 && !t->spm_merges)
                t->byte_token[b] = tkv__strmap_get(&t->token_map, (char[]){(char)b}, 1);
        } else {
            /* GPT-2: printable bytes stand for themselves, the others map to U+0100.. in order */
            uint32_t c;
            if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) {
                c = (uint32_t)b;
            } else {
                c = 256;
                for (int k = 0; k < b; k++)
                    if (!((k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE)) c++;
            }
            t->byte_cpt[b] = (uint16_t)c;
            size_t n = 0;
            if (c < 0x80) s[n++] = (char)c;
            else s[n++] = (char)(0xC0 | (c >> 6)), s[n++] = (char)(0x80 | (c & 0x3F));
            t->byte_token[b] = tkv__strmap_get(&t->token_map, s, n);
        }
    }
    t->nl = t->byte_token['\n'];

    /* Can SPM text be split into words at each "▁" after another character?
       (With merge ranks only lines are split, as the reference splits them.) */
    t->spm_words = t->kind == TKV__VOCAB_SPM && !t->spm_merges;
    for (uint32_t i = 0; i < t->n_vocab && t->spm_words; i++) {
        const char *s = t->text[i].s;
        size_t n = t->text[i].n, k = 0;
        while (k + 3 <= n && !memcmp(s + k, "\xE2\x96\x81", 3)) k += 3;
        if (k < n && memmem(s + k, n - k, "\xE2\x96\x81", 3)) t->spm_words = false;
    }

    /* end-of-generation: eos, eot and the tokens known by their text, which
       count as control tokens whatever the file says */
    t->eog = tkv__malloc((2 + sizeof eog_texts / sizeof eog_texts[0]) * sizeof *t->eog);
    if (!t->eog) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the vocabulary");
    if (t->eos >= 0) t->eog[t->n_eog++] = t->eos;
    if (t->eot >= 0 && t->eot != t->eos) t->eog[t->n_eog++] = t->eot;
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = tkv__strmap_get(&t->token_map, eog_texts[i], strlen(eog_texts[i]));
        if (id < 0) continue;
        if (t->type[id] != TKV__TOK_CONTROL) t->type[id] = TKV__TOK_CONTROL;
        bool seen = false;
        for (size_t k = 0; k < t->n_eog; k++) seen |= t->eog[k] == id;
        if (!seen) t->eog[t->n_eog++] = id;
        if (t->eot < 0) t->eot = id;
    }
    /* harmony (gpt-oss) and solar-open end a message with <|end|> and the answer with <|return|> or
       <|call|> (<|calls|>, <|flush|>): there <|end|> does not end the generation, as in the reference */
    if (has_text(t, "<|end|>") && ((has_text(t, "<|return|>") && has_text(t, "<|call|>")) ||
                                   (has_text(t, "<|calls|>") && has_text(t, "<|flush|>")))) {
        const int32_t end = tkv__strmap_get(&t->token_map, "<|end|>", 7);
        size_t k = 0;
        for (size_t i = 0; i < t->n_eog; i++)
            if (t->eog[i] != end) t->eog[k++] = t->eog[i];
        t->n_eog = k;
        if (t->eot == end) t->eot = t->n_eog > 0 && t->eog[0] != t->eos ? t->eog[0] : -1;
    }

    /* special tokens, longest text first (they are split out of text first) */
    t->special = tkv__malloc(t->n_vocab * sizeof *t->special);
    if (!t->special) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the vocabulary");
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->type[i];
        if ((ty == TKV__TOK_CONTROL || ty == TKV__TOK_USER_DEFINED || ty == TKV__TOK_UNKNOWN) && t->text[i].n)
            t->special[t->n_special++] = (int32_t)i;
    }
    return sort_specials(t);
}

tkv_status tkv__tokenizer_create(const tkv__gguf *g, tkv__tokenizer **out) {
    if (!tkv__gguf_find(g, "tokenizer.ggml.model"))
        return tkv__fail(TKV_ERR_UNSUPPORTED, "the file has no tokenizer (no 'tokenizer.ggml.model')");
    tkv__tokenizer *t = tkv__calloc(1, sizeof *t);
    if (!t) return tkv__fail(TKV_ERR_NOMEM, "out of memory for the tokenizer");
    tkv_status st = build(g, t);
    if (st) {
        tkv__tokenizer_free(t);
        return st;
    }
    *out = t;
    return TKV_OK;
}
