/*
 * model_induction.c — the weights of a model that copies (see
 * model_induction.h for the circuit).
 */
#include "model_induction.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The residual's subspaces (first index; T, P1, P2 have CODE values, U and O UCODE). */
enum {
    HD = 128,       /* head size the circuit is laid out for */
    CODE = 32,      /* c_t: what positions are matched by */
    UCODE = 256,    /* u_t: what the output reads (two KV heads of 128) */
    FAST = 16,      /* RoPE pairs 0..15 turn fast: layer 0 finds positions with them */
    SLOW = 64,      /* dims 64..127 (pairs 32..63) turn by at most 1e-4 radians per position: layer 1
                       matches on them */
    R_T = 0, R_B = 32, R_P1 = 64, R_P2 = 96, R_U = 128, R_O = 384, R_END = 640,
};

/* How far each softmax's chosen position scores above the next best (in logits). */
static const float MARGIN = 25.0f;
/* The output's scale: logit t = OUT_GAIN * |normed O| * cos(u_t, O). */
static const float OUT_GAIN = 2.0f;

tkv_status tkv__induction_check(const tkv__model_spec *s, char *why, size_t cap) {
    const uint32_t hd = s->head_dim ? s->head_dim : s->dim / s->heads, kvh = s->kv_heads ? s->kv_heads : s->heads;
    if (strcmp(s->arch, "llama") || s->layers < 2 || hd != HD || kvh < 2 || s->dim < R_END)
        return snprintf(why, cap,
                        "--weights induction needs --arch llama, at least 2 layers, --head-dim %d, at least 2 "
                        "KV heads and --dim >= %d (got %s, %u layers, head size %u, %u KV heads, dim %u)",
                        HD, R_END, s->arch, s->layers, hd, kvh, s->dim),
               TKV_ERR_INVALID;
    return TKV_OK;
}

/* splitmix64 on a state seeded by (seed, token, which code) */
static uint64_t mix64(uint64_t *st) {
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Code `which` (0: c_t, 1: u_t) of token t: n Gaussian values (Box-Muller) scaled to unit length, into v. */
static void token_code(uint64_t seed, uint64_t t, int which, float *v, size_t n) {
    uint64_t st = seed ^ (t * 0xd1b54a32d192ed03ull) ^ ((uint64_t)which << 62);
    double sum = 0;
    for (size_t i = 0; i < n; i += 2) {
        const double u1 = ((double)(mix64(&st) >> 11) + 1.0) * 0x1p-53, u2 = (double)(mix64(&st) >> 11) * 0x1p-53;
        const double r = sqrt(-2.0 * log(u1));
        v[i] = (float)(r * cos(6.283185307179586 * u2));
        if (i + 1 < n) v[i + 1] = (float)(r * sin(6.283185307179586 * u2));
    }
    for (size_t i = 0; i < n; i++) sum += (double)v[i] * v[i];
    const float k = (float)(1.0 / sqrt(sum));
    for (size_t i = 0; i < n; i++) v[i] *= k;
}

/* RoPE's angle per position of pair k (the loader's base^(-2k/hd)). */
static double theta(int k) { return pow((double)TKV__INDUCTION_ROPE_BASE, -2.0 * k / HD); }

/*
 * Layer 0's worst gap: with query pairs (1, 0) and key pairs turned back by
 * delta positions, the score of distance d is sum_k cos((delta - d) theta_k)
 * over the fast pairs, FAST at d = delta. The least FAST - score over every
 * other d in 0..ctx-1, for delta 1 and 2.
 */
static double fast_gap(uint32_t ctx) {
    double gap = FAST;
    for (int delta = 1; delta <= 2; delta++)
        for (uint32_t d = 0; d < ctx; d++) {
            if ((int)d == delta) continue;
            double s = 0;
            for (int k = 0; k < FAST; k++) s += cos((double)(delta - (int)d) * theta(k));
            if (FAST - s < gap) gap = FAST - s;
        }
    return gap;
}

static bool named(const tkv__tensor_need *t, const char *tail) {
    const size_t n = strlen(t->name), m = strlen(tail);
    return n >= m && !strcmp(t->name + n - m, tail);
}

/* x[row][col] of a matrix with rows of ne0 */
#define AT(row, col) x[(size_t)(row) * t->ne[0] + (size_t)(col)]

void tkv__induction_fill(const tkv__model_spec *s, const tkv__tensor_need *t, float *x) {
    const size_t n = (size_t)(t->ne[0] * t->ne[1] * t->ne[2]);
    memset(x, 0, n * sizeof *x);
    const uint32_t kvh = s->kv_heads ? s->kv_heads : s->heads, group = s->heads / kvh;
    /* RMS norm's factor on each layer's input: |x|^2 is 3 (T, B, U) before layer 1, 5 after it (P1, P2) */
    const float n0 = sqrtf((float)s->dim / 3.0f), n1 = sqrtf((float)s->dim / 5.0f);
    float code[UCODE];
    if (!strcmp(t->name, "token_embd.weight")) {
        for (uint64_t tok = 0; tok < t->ne[1]; tok++) {
            token_code(s->seed, tok, 0, code, CODE);
            for (int i = 0; i < CODE; i++) AT(tok, R_T + i) = code[i];
            AT(tok, R_B) = 1.0f;
            token_code(s->seed, tok, 1, code, UCODE);
            for (int i = 0; i < UCODE; i++) AT(tok, R_U + i) = code[i];
        }
    } else if (!strcmp(t->name, "output.weight")) {
        for (uint64_t tok = 0; tok < t->ne[1]; tok++) {
            token_code(s->seed, tok, 1, code, UCODE);
            for (int i = 0; i < UCODE; i++) AT(tok, R_O + i) = OUT_GAIN * code[i];
        }
    } else if (t->layer == 0) {
        /* head (delta - 1) * group attends delta positions back: query pairs (a, 0) from B, key pairs
           (a cos(delta theta_k), a sin(delta theta_k)), so that after RoPE their product is
           a^2 n0^2 cos((j - i + delta) theta_k); the scale puts the gap at MARGIN */
        const double a = sqrt(MARGIN * sqrt((double)HD) / ((double)n0 * n0 * fast_gap(s->ctx)));
        for (uint32_t g = 0; g < 2; g++) {
            const uint32_t qh = g * group, delta = g + 1, r_p = g ? R_P2 : R_P1;
            for (int k = 0; k < FAST; k++) {
                if (named(t, "attn_q.weight")) AT(qh * HD + 2 * k, R_B) = (float)a;
                if (named(t, "attn_k.weight")) {
                    AT(g * HD + 2 * k, R_B) = (float)(a * cos(delta * theta(k)));
                    AT(g * HD + 2 * k + 1, R_B) = (float)(a * sin(delta * theta(k)));
                }
            }
            for (int i = 0; i < CODE; i++) {
                if (named(t, "attn_v.weight")) AT(g * HD + i, R_T + i) = 1.0f;
                if (named(t, "attn_output.weight")) AT(r_p + i, qh * HD + i) = 1.0f / n0;
            }
        }
    } else if (t->layer == 1) {
        /* query (T, P1) and key (P1, P2) on the slow pairs: a two-token match scores 2 b^2 n1^2 / sqrt(HD),
           a one-token match half that; b puts the step at MARGIN. The value is U, written to O. */
        const float b = sqrtf(MARGIN * sqrtf((float)HD) / (n1 * n1));
        for (uint32_t g = 0; g < 2; g++) {
            const uint32_t qh = g * group;
            for (int i = 0; i < CODE; i++) {
                if (named(t, "attn_q.weight")) {
                    AT(qh * HD + SLOW + i, R_T + i) = b;
                    AT(qh * HD + SLOW + CODE + i, R_P1 + i) = b;
                }
                if (named(t, "attn_k.weight")) {
                    AT(g * HD + SLOW + i, R_P1 + i) = b;
                    AT(g * HD + SLOW + CODE + i, R_P2 + i) = b;
                }
            }
            for (int i = 0; i < HD; i++) {
                if (named(t, "attn_v.weight")) AT(g * HD + i, R_U + g * HD + i) = 1.0f;
                if (named(t, "attn_output.weight")) AT(R_O + g * HD + i, qh * HD + i) = 1.0f / n1;
            }
        }
    }
}
