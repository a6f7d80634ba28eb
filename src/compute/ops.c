/*
 * ops.c — forward-pass operations over the active kernel table (see ops.h).
 */
#include "ops.h"

#include "kernels.h"
#include "compute/quant/quant.h"
#include "compute/quant/repack.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>

void tkv__ops_rmsnorm(float *y, const float *x, const float *w, size_t n, float eps) {
    assert(n >= 1);
    tkv__kernel_get()->rmsnorm(y, x, w, n, eps);
}

void tkv__ops_softmax(float *x, size_t n) {
    assert(n >= 1);
    tkv__kernel_get()->softmax(x, n);
}

void tkv__ops_silu(float *y, const float *x, size_t n) {
    tkv__kernel_get()->silu(y, x, n);
}

void tkv__ops_swiglu(float *y, const float *gate, const float *up, size_t n) {
    tkv__kernel_get()->swiglu(y, gate, up, n);
}

void tkv__ops_softcap(float *x, size_t n, float c) {
    tkv__kernel_get()->softcap(x, n, c);
}

/*
 * gelu of every fp16 value, rounded to fp16 and widened back: the
 * reference's table, so that GeGLU costs a lookup per element instead of a
 * tanhf (which took ~40% of a Gemma prefill). Filled once, on first use,
 * and read-only after that.
 */
static float gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_fill(void) {
    const float c = 0.79788456080286535587989211986876f, a = 0.044715f; /* sqrt(2 / pi) */
    for (uint32_t i = 0; i < (1u << 16); i++) {
        const float h = tkv__quant_f16_to_f32((uint16_t)i);
        gelu_table[i] = tkv__quant_f16_to_f32(tkv__quant_f32_to_f16(0.5f * h * (1.0f + tanhf(c * h * (1.0f + a * h * h)))));
    }
}

void tkv__ops_geglu(float *y, const float *gate, const float *up, size_t n) {
    pthread_once(&gelu_once, gelu_fill);
    for (size_t i = 0; i < n; i++) {
        const float x = gate[i];
        const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : gelu_table[tkv__quant_f32_to_f16(x)];
        y[i] = g * up[i];
    }
}

/* ---- RoPE ------------------------------------------------------------------ */

void tkv__ops_rope_cache(float *cs, size_t n_rot, int32_t pos, float freq_base, float freq_scale) {
    assert(n_rot >= 2 && n_rot % 2 == 0);
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos; /* pos * base^(-2i/n_rot), built step by step as ggml does */
    for (size_t i = 0; i < n_rot / 2; i++) {
        const float t = freq_scale * theta;
        cs[2 * i] = cosf(t);
        cs[2 * i + 1] = sinf(t);
        theta *= theta_scale;
    }
}

void tkv__ops_rope(float *x, size_t n_head, size_t head_dim, size_t n_rot, const float *cs, tkv__rope_mode mode) {
    assert(n_rot % 2 == 0 && n_rot <= head_dim);
    const size_t half = n_rot / 2;
    const tkv__rope_pairs_fn pairs = tkv__kernel_get()->rope_pairs;
    for (size_t h = 0; h < n_head; h++) {
        float *v = x + h * head_dim; /* (head_dim) */
        if (mode == TKV__ROPE_NORMAL) {
            pairs(v, cs, half); /* adjacent pairs */
            continue;
        }
        /* NEOX: dimension i turns with i + half, in the same arithmetic */
        for (size_t i = 0; i < half; i++) tkv__kernel_rope_rotate(&v[i], &v[i + half], cs[2 * i], cs[2 * i + 1]);
    }
}

void tkv__ops_to_f16(const float *x, void *y, size_t n) { tkv__kernel_get()->quantize[TKV_TYPE_F16](x, y, n); }

/* ---- matrix products ---------------------------------------------------------- */

size_t tkv__ops_act_row_size(tkv_type wtype, size_t n) {
    const tkv_type vdt = tkv__quant_vec_dot_type(wtype);
    if (vdt == TKV_TYPE_COUNT) return 0;
    return tkv__quant_row_size(vdt, n);
}

void tkv__ops_quantize_acts(tkv_type wtype, const float *x, size_t n_tok, size_t n, void *xq) {
    const tkv_type vdt = tkv__quant_vec_dot_type(wtype);
    assert(vdt != TKV_TYPE_COUNT);
    const tkv__quantize_fn q = tkv__kernel_get()->quantize[vdt];
    const size_t rs = tkv__quant_row_size(vdt, n);
    uint8_t *out = xq; /* (n_tok, rs) */
    for (size_t t = 0; t < n_tok; t++) q(x + t * n, out + t * rs, n);
}

/*
 * Rows are taken in tiles small enough that a tile of weights stays in cache
 * while every token's activations pass over it: the weights, by far the
 * bigger operand, are read from memory once per call.
 */
#define ROW_TILE 16

/*
 * From this many tokens on, products go to the level's tiled kernel where it
 * has one (kernels.h: bit for bit the vec_dot, so the choice never changes a
 * result). Below, unpacking the weights for the tile costs more than it
 * saves.
 */
#define GEMM_MIN_TOK 3

void tkv__ops_matmul(tkv_type wtype, const void *w, size_t n, size_t r0, size_t r1, const void *xq, size_t n_tok,
                     float *y, size_t ldy) {
    const tkv__kernels *k = tkv__kernel_get();
    const tkv__vec_dot_fn dot = k->vec_dot[wtype];
    assert(dot && r0 <= r1 && r1 <= ldy);
    const size_t wrs = tkv__quant_row_size(wtype, n);      /* bytes per weight row */
    const size_t xrs = tkv__ops_act_row_size(wtype, n);    /* bytes per activation row */
    const uint8_t *wb = w;                                 /* (n_rows, wrs) */
    const uint8_t *xb = xq;                                /* (n_tok, xrs) */
    if (n_tok <= TKV__GEMV_MAX_TOK && k->gemv[wtype] && n > 0 && n <= TKV__GEMV_MAX_N) {
        if (r1 > r0) k->gemv[wtype](n, wb + r0 * wrs, wrs, r1 - r0, xb, xrs, n_tok, y + r0, ldy);
        return;
    }
    if (n_tok >= GEMM_MIN_TOK && k->gemm[wtype] && n > 0 && n <= TKV__GEMM_MAX_N) {
        if (r1 > r0) k->gemm[wtype](n, wb + r0 * wrs, wrs, r1 - r0, xb, xrs, n_tok, y + r0, ldy);
        return;
    }
    if (k->gemv[wtype] && n > 0 && n <= TKV__GEMV_MAX_N) {
        if (r1 > r0) k->gemv[wtype](n, wb + r0 * wrs, wrs, r1 - r0, xb, xrs, n_tok, y + r0, ldy);
        return;
    }
    for (size_t rt = r0; rt < r1; rt += ROW_TILE) {
        const size_t re = rt + ROW_TILE < r1 ? rt + ROW_TILE : r1;
        for (size_t t = 0; t < n_tok; t++) {
            const uint8_t *xt = xb + t * xrs;
            float *yt = y + t * ldy; /* (ldy) */
            for (size_t r = rt; r < re; r++) yt[r] = dot(n, wb + r * wrs, xt);
        }
    }
}

bool tkv__ops_packed_ok(tkv_type wtype) {
    return wtype < TKV_TYPE_COUNT && tkv__kernel_get()->packed[wtype] && tkv__pack_supported(wtype);
}

void tkv__ops_matmul_packed(tkv_type wtype, const void *packed, size_t n, size_t r0, size_t r1, const void *xq,
                            size_t n_tok, float *y, size_t ldy) {
    const tkv__kernels *k = tkv__kernel_get();
    assert(k->packed[wtype] && r0 % TKV__PACK_ROWS == 0 && r0 <= r1 && r1 <= ldy && n <= TKV__GEMM_MAX_N);
    const size_t gs = tkv__pack_stride(wtype, n);
    if (r1 > r0)
        k->packed[wtype](n, (const uint8_t *)packed + r0 / TKV__PACK_ROWS * gs, gs, r1 - r0, xq,
                         tkv__ops_act_row_size(wtype, n), n_tok, y + r0, ldy);
}

bool tkv__ops_lanes_ok(tkv_type wtype, size_t n, size_t n_rows) {
    const tkv__kernels *k = tkv__kernel_get();
    return k->lanes[wtype] && n > 0 && n % k->lanes_kn[wtype] == 0 && n_rows % 4 == 0;
}

void tkv__ops_matmul_lanes(tkv__lanes_order order, tkv_type wtype, const void *w, size_t n, size_t r0, size_t r1,
                           const void *xq, size_t n_tok, float *y, size_t ldy) {
    const tkv__kernels *k = tkv__kernel_get();
    assert(k->lanes[wtype] && r0 <= r1 && r1 <= ldy);
    const tkv__gemm_fn f = order == TKV__LANES_REFERENCE && k->lanes_ref[wtype] ? k->lanes_ref[wtype] : k->lanes[wtype];
    const size_t wrs = tkv__quant_row_size(wtype, n), xrs = tkv__ops_act_row_size(wtype, n);
    if (r1 > r0) f(n, (const uint8_t *)w + r0 * wrs, wrs, r1 - r0, xq, xrs, n_tok, y + r0, ldy);
}

bool tkv__ops_ref_ok(tkv_type wtype) {
    return wtype < TKV_TYPE_COUNT && tkv__kernel_get()->vec_dot_ref[wtype];
}

void tkv__ops_matmul_ref(tkv_type wtype, const void *w, size_t n, size_t r0, size_t r1, const void *xq, size_t n_tok,
                         float *y, size_t ldy) {
    const tkv__kernels *k = tkv__kernel_get();
    const tkv__vec_dot_fn dot = k->vec_dot_ref[wtype];
    assert(dot && r0 <= r1 && r1 <= ldy);
    const size_t wrs = tkv__quant_row_size(wtype, n), xrs = tkv__ops_act_row_size(wtype, n);
    const uint8_t *wb = w, *xb = xq;
    if (n_tok >= GEMM_MIN_TOK && k->gemm_ref[wtype] && n > 0 && n <= TKV__GEMM_MAX_N) {
        if (r1 > r0) k->gemm_ref[wtype](n, wb + r0 * wrs, wrs, r1 - r0, xb, xrs, n_tok, y + r0, ldy);
        return;
    }
    for (size_t t = 0; t < n_tok; t++)
        for (size_t r = r0; r < r1; r++) y[t * ldy + r] = dot(n, wb + r * wrs, xb + t * xrs);
}
