/*
 * test_quant.c — number formats: fp16/bf16 conversion (exhaustive round
 * trips, rounding of chosen values), the block layouts checked against real
 * blocks written by llama.cpp (../shared/models/parity), the activation
 * quantizers against their formulas, and vec_dot on real weight rows against
 * a float dot product, at every kernel level the CPU has.
 */
#include "testutil.h"

#include "compute/kernels.h"
#include "compute/quant/quant.h"
#include "compute/quant/grids.h"
#include "compute/quant/iq.h"
#include "compute/quant/repack.h"
#include "format/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- fp16 / bf16 ------------------------------------------------------------ */

static void test_f16_roundtrip_exhaustive(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = tkv__quant_f16_to_f32((uint16_t)h);
        const uint16_t back = tkv__quant_f32_to_f16(f);
        const int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan) {
            if (!isnan(f)) fail_msg("f16 %04x: not NaN as float", h);
            if (!((back & 0x7c00) == 0x7c00 && (back & 0x3ff))) fail_msg("f16 %04x: NaN came back as %04x", h, back);
            if ((back & 0x8000) != (h & 0x8000)) fail_msg("f16 %04x: NaN lost its sign", h);
        } else if (back != h) {
            fail_msg("f16 %04x -> %a -> %04x", h, (double)f, back);
        }
    }
    /* the float value of every finite pattern, against ldexp */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        const int e = (int)(h >> 10), m = (int)(h & 0x3ff);
        const double want = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
        assert_true(tkv__quant_f16_to_f32((uint16_t)h) == (float)want);
        assert_true(tkv__quant_f16_to_f32((uint16_t)(h | 0x8000)) == (float)-want);
    }
    assert_true(isinf(tkv__quant_f16_to_f32(0x7c00)) && tkv__quant_f16_to_f32(0x7c00) > 0);
    assert_true(isinf(tkv__quant_f16_to_f32(0xfc00)) && tkv__quant_f16_to_f32(0xfc00) < 0);
}

static void test_f16_rounding(void **state) {
    (void)state;
    const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {65504.0f, 0x7bff},              /* largest finite */
        {65519.99f, 0x7bff},             /* just below the halfway point to 65536 */
        {65520.0f, 0x7c00},              /* halfway: ties to even, which is infinity */
        {1e10f, 0x7c00},                 /* overflow */
        {-1e10f, 0xfc00},
        {INFINITY, 0x7c00},
        {1.0f + 0x1p-11f, 0x3c00},       /* halfway between 1 and 1+2^-10: even is 1 */
        {1.0f + 3 * 0x1p-11f, 0x3c02},   /* halfway between 1+2^-10 and 1+2^-9: even is up */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just above halfway */
        {0x1p-14f, 0x0400},              /* smallest normal */
        {0x1p-24f, 0x0001},              /* smallest subnormal */
        {0x1p-25f, 0x0000},              /* halfway to the smallest subnormal: even is 0 */
        {0x1.000002p-25f, 0x0001},       /* just above it */
        {3 * 0x1p-25f, 0x0002},          /* 1.5 subnormal units: even is 2 */
        {5 * 0x1p-25f, 0x0002},          /* 2.5 units: even is 2 */
        {0x1p-14f - 0x1p-25f, 0x0400},   /* 1023.5 units: even rounds up into the normals */
        {1e-30f, 0x0000},                /* underflow */
        {-1e-30f, 0x8000},
        {0x1.ffep-15f, 0x0400},          /* below the smallest normal, rounds up to it */
        {3.14159265f, 0x4248},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = tkv__quant_f32_to_f16(cases[i].f);
        if (got != cases[i].h) fail_msg("f32 %a -> f16 %04x, want %04x", (double)cases[i].f, got, cases[i].h);
    }
    /* NaN stays NaN, with its sign */
    assert_true((tkv__quant_f32_to_f16(NAN) & 0x7fff) > 0x7c00);
    assert_true((tkv__quant_f32_to_f16(u2f(0xff800001u)) & 0xfc00) == 0xfc00); /* payload only in low bits */
    assert_true((tkv__quant_f32_to_f16(u2f(0xff800001u)) & 0x3ff) != 0);
    /* every float between consecutive halves rounds to the nearer one (sampled) */
    uint32_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 1664525u + 1013904223u;
        const float f = u2f(((s >> 1) % 0x477fe000u) | (s << 31)); /* |f| < 65504, random sign */
        const uint16_t h = tkv__quant_f32_to_f16(f);
        const double hv = tkv__quant_f16_to_f32(h);
        const double err = fabs((double)f - hv);
        /* the neighbours of h on both sides are no closer */
        const double lo = tkv__quant_f16_to_f32((uint16_t)(h - ((h & 0x7fff) ? 1 : 0)));
        const double hi = tkv__quant_f16_to_f32((uint16_t)((h & 0x7fff) < 0x7bff ? h + 1 : h));
        if (fabs((double)f - lo) < err || fabs((double)f - hi) < err) fail_msg("f32 %a -> f16 %04x not nearest", (double)f, h);
    }
}

static void test_bf16(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = tkv__quant_bf16_to_f32((uint16_t)h);
        assert_int_equal(f2u(f), h << 16);
        const uint16_t back = tkv__quant_f32_to_bf16(f);
        if (isnan(f)) {
            assert_true((back & 0x7f80) == 0x7f80 && (back & 0x7f));
        } else {
            assert_int_equal(back, h);
        }
    }
    assert_int_equal(tkv__quant_f32_to_bf16(u2f(0x3f808000u)), 0x3f80); /* tie, even down */
    assert_int_equal(tkv__quant_f32_to_bf16(u2f(0x3f818000u)), 0x3f82); /* tie, even up */
    assert_int_equal(tkv__quant_f32_to_bf16(u2f(0x3f808001u)), 0x3f81); /* above the tie */
    assert_int_equal(tkv__quant_f32_to_bf16(u2f(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
    assert_int_equal(tkv__quant_f32_to_bf16(u2f(0x00000001u)), 0x0000); /* subnormals round, not flush */
    assert_int_equal(tkv__quant_f32_to_bf16(u2f(0x00008000u)), 0x0000);
    assert_int_equal(tkv__quant_f32_to_bf16(u2f(0x00018000u)), 0x0002);
    const uint16_t nan = tkv__quant_f32_to_bf16(u2f(0x7f800001u)); /* payload only in the dropped bits */
    assert_true((nan & 0x7f80) == 0x7f80 && (nan & 0x7f));
}

/* ---- type facts and block layouts ---------------------------------------------- */

static void test_type_facts(void **state) {
    (void)state;
    const tkv_type w[] = {TKV_TYPE_F32,  TKV_TYPE_F16,  TKV_TYPE_BF16, TKV_TYPE_Q8_0, TKV_TYPE_Q4_0,  TKV_TYPE_Q5_0,
                          TKV_TYPE_Q4_1, TKV_TYPE_Q5_1, TKV_TYPE_Q4_K, TKV_TYPE_Q5_K, TKV_TYPE_Q6_K, TKV_TYPE_IQ4_NL,
                          TKV_TYPE_IQ4_XS, TKV_TYPE_Q2_K, TKV_TYPE_Q3_K, TKV_TYPE_MXFP4, TKV_TYPE_TQ1_0,
                          TKV_TYPE_TQ2_0, TKV_TYPE_IQ2_XXS, TKV_TYPE_IQ2_XS, TKV_TYPE_IQ2_S, TKV_TYPE_IQ1_S,
                          TKV_TYPE_IQ1_M, TKV_TYPE_IQ3_XXS, TKV_TYPE_IQ3_S};
    const tkv_type a[] = {TKV_TYPE_F32,  TKV_TYPE_F16,  TKV_TYPE_BF16, TKV_TYPE_Q8_0, TKV_TYPE_Q8_0, TKV_TYPE_Q8_0,
                          TKV_TYPE_Q8_1, TKV_TYPE_Q8_1, TKV_TYPE_Q8_K, TKV_TYPE_Q8_K, TKV_TYPE_Q8_K, TKV_TYPE_Q8_0,
                          TKV_TYPE_Q8_K, TKV_TYPE_Q8_K, TKV_TYPE_Q8_K, TKV_TYPE_Q8_0, TKV_TYPE_Q8_K,
                          TKV_TYPE_Q8_K, TKV_TYPE_Q8_K, TKV_TYPE_Q8_K, TKV_TYPE_Q8_K, TKV_TYPE_Q8_K, TKV_TYPE_Q8_K,
                          TKV_TYPE_Q8_K, TKV_TYPE_Q8_K};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        assert_true(tkv__quant_supported(w[i]));
        assert_int_equal(tkv__quant_vec_dot_type(w[i]), a[i]);
    }
    assert_false(tkv__quant_supported(TKV_TYPE_I8));
    assert_int_equal(tkv__quant_vec_dot_type(TKV_TYPE_I8), TKV_TYPE_COUNT);
    assert_int_equal(tkv__quant_row_size(TKV_TYPE_Q4_0, 4096), 4096 / 32 * 18);
    assert_int_equal(tkv__quant_row_size(TKV_TYPE_Q8_K, 512), 2 * 292);
    assert_int_equal(tkv__quant_row_size(TKV_TYPE_F16, 7), 14);
    assert_int_equal(tkv__quant_block_elems(TKV_TYPE_Q6_K), 256);
    /* the struct sizes agree with the library's type table */
    const struct {
        tkv_type t;
        size_t size;
    } sz[] = {{TKV_TYPE_Q4_0, sizeof(tkv__block_q4_0)}, {TKV_TYPE_Q4_1, sizeof(tkv__block_q4_1)},
              {TKV_TYPE_Q5_0, sizeof(tkv__block_q5_0)}, {TKV_TYPE_Q5_1, sizeof(tkv__block_q5_1)},
              {TKV_TYPE_Q8_0, sizeof(tkv__block_q8_0)}, {TKV_TYPE_Q8_1, sizeof(tkv__block_q8_1)},
              {TKV_TYPE_Q4_K, sizeof(tkv__block_q4_K)}, {TKV_TYPE_Q5_K, sizeof(tkv__block_q5_K)},
              {TKV_TYPE_Q6_K, sizeof(tkv__block_q6_K)}, {TKV_TYPE_Q8_K, sizeof(tkv__block_q8_K)},
              {TKV_TYPE_IQ2_XXS, sizeof(tkv__block_iq2_xxs)}, {TKV_TYPE_IQ2_XS, sizeof(tkv__block_iq2_xs)},
              {TKV_TYPE_IQ2_S, sizeof(tkv__block_iq2_s)},       {TKV_TYPE_IQ1_S, sizeof(tkv__block_iq1_s)},
              {TKV_TYPE_IQ1_M, sizeof(tkv__block_iq1_m)},       {TKV_TYPE_IQ3_XXS, sizeof(tkv__block_iq3_xxs)},
              {TKV_TYPE_IQ3_S, sizeof(tkv__block_iq3_s)}};
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) {
        uint32_t be, bb;
        assert_int_equal(tkv_type_block(sz[i].t, &be, &bb), TKV_OK);
        assert_int_equal(bb, sz[i].size);
    }
}

/* The 6-bit packing: every (scale, min) pair of every group survives a pack/unpack. */
static void test_k4_scales(void **state) {
    (void)state;
    uint32_t s = 99;
    for (int iter = 0; iter < 2000; iter++) {
        uint8_t sc[8], mn[8], packed[12] = {0};
        for (int j = 0; j < 8; j++) {
            s = s * 1664525u + 1013904223u;
            sc[j] = (uint8_t)((s >> 8) & 63);
            mn[j] = (uint8_t)((s >> 20) & 63);
        }
        /* pack as the format describes it (compute/quant/quant.h), independently of the reader */
        for (int j = 0; j < 8; j++) {
            if (j < 4) {
                packed[j] |= sc[j];
                packed[j + 4] |= mn[j];
            } else {
                packed[j + 4] = (uint8_t)((sc[j] & 15) | ((mn[j] & 15) << 4));
                packed[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
                packed[j] |= (uint8_t)((mn[j] >> 4) << 6);
            }
        }
        uint8_t all[16];
        tkv__quant_k4_unpack(packed, all);
        for (int j = 0; j < 8; j++) {
            uint8_t a, b;
            tkv__quant_k4_scale_min(j, packed, &a, &b);
            assert_int_equal(a, sc[j]);
            assert_int_equal(b, mn[j]);
            assert_int_equal(all[j], sc[j]);
            assert_int_equal(all[8 + j], mn[j]);
        }
    }
}

/* Hand-made blocks: one element at a time, to pin the element order. */
static void test_layout_by_hand(void **state) {
    (void)state;
    float y[256];
    /* Q4_0: d = 1; byte 3 = 0xa2: element 3 is 2 - 8, element 19 is 10 - 8 */
    tkv__block_q4_0 b40;
    memset(&b40, 0x88, sizeof b40);
    b40.d = 0x3c00;
    b40.qs[3] = 0xa2;
    tkv__quant_dequantize_row(TKV_TYPE_Q4_0, &b40, y, 32);
    for (int j = 0; j < 32; j++) assert_true(y[j] == (j == 3 ? -6.0f : j == 19 ? 2.0f : 0.0f));
    /* Q5_0: the fifth bit of element 21 is bit 21 of qh */
    tkv__block_q5_0 b50;
    memset(&b50, 0, sizeof b50);
    b50.d = 0x3c00;
    b50.qh[2] = 0x20; /* bit 21 */
    tkv__quant_dequantize_row(TKV_TYPE_Q5_0, &b50, y, 32);
    for (int j = 0; j < 32; j++) assert_true(y[j] == (j == 21 ? 0.0f : -16.0f));
    /* Q4_K: group 5 (elements 160..191) = chunk 2, high nibbles; scale 5 is in byte 9 + bits of byte 1 */
    tkv__block_q4_K bk;
    memset(&bk, 0, sizeof bk);
    bk.d = 0x3c00;
    bk.dmin = 0x3c00;
    bk.scales[9] = 0x03;        /* scale 5 low bits = 3, min 5 low bits = 0 */
    bk.scales[1] = 0x40;        /* scale 5 high bits = 1: scale 19 */
    bk.qs[64 + 7] = 0x50;       /* chunk 2, byte 7, high nibble 5: element 160 + 7 */
    tkv__quant_dequantize_row(TKV_TYPE_Q4_K, &bk, y, 256);
    for (int e = 0; e < 256; e++) assert_true(y[e] == (e == 167 ? 95.0f : 0.0f));
    /* Q6_K: element 128 + 64 + 5 = high nibble of ql[64 + 5], bits 4-5 of qh[32 + 5]; group 12 */
    tkv__block_q6_K b6;
    memset(&b6, 0, sizeof b6);
    b6.d = 0x3c00;
    for (int g = 0; g < 16; g++) b6.scales[g] = (int8_t)(g + 1);
    memset(b6.ql, 0, sizeof b6.ql);
    memset(b6.qh, 0xaa, sizeof b6.qh); /* every q = 32 (bit pattern 10): value 0 */
    b6.ql[64 + 5] = 0x70;
    tkv__quant_dequantize_row(TKV_TYPE_Q6_K, &b6, y, 256);
    for (int e = 0; e < 256; e++) assert_true(y[e] == (e == 197 ? 13.0f * 7.0f : 0.0f));
    /* IQ1_S, d = 1, all zero: grid point 0, scale 2*0+1, shift +1/8 everywhere but
       sub-block 1 (elements 32-63): qh[1] gives group 5 (its l = 1) the high
       index bits 101, the scale 2*3+1 and the shift -1/8; qs[5] the low bits 0x37 */
    tkv__block_iq1_s b1s;
    memset(&b1s, 0, sizeof b1s);
    b1s.d = 0x3c00;
    b1s.qh[1] = 0x8000 | 3 << 12 | 5 << 3;
    b1s.qs[5] = 0x37;
    tkv__quant_dequantize_row(TKV_TYPE_IQ1_S, &b1s, y, 256);
    for (int e = 0; e < 256; e++) {
        const float g0 = (float)(int8_t)(tkv__iq1s_grid[0] >> 8 * (e % 8));
        const float g5 = (float)(int8_t)(tkv__iq1s_grid[0x537] >> 8 * (e % 8));
        const float want = e / 8 == 5 ? 7.0f * (g5 - 0.125f) : e / 32 == 1 ? 7.0f * (g0 - 0.125f) : g0 + 0.125f;
        if (y[e] != want) fail_msg("IQ1_S element %d: %g, want %g", e, y[e], want);
    }
    /* IQ1_M: d = 1 (fp16 0x3c00: nibbles 0, 0, c, 3 atop the scale words);
       sub-block 3's second half (elements 112-127, groups 14 and 15) has
       scale 2*5+1 (bits 9-11 of word 1); group 14 the high index bits 011
       and a negative shift (low nibble of qh[7]), low bits qs[14] = 0xa5 */
    tkv__block_iq1_m b1m;
    memset(&b1m, 0, sizeof b1m);
    b1m.scales[5] = 0xc0;
    b1m.scales[7] = 0x30;
    b1m.scales[3] = 5 << 1;
    b1m.qh[7] = 0x08 | 0x3;
    b1m.qs[14] = 0xa5;
    assert_int_equal(tkv__iq1_m_d(&b1m), 0x3c00);
    tkv__quant_dequantize_row(TKV_TYPE_IQ1_M, &b1m, y, 256);
    for (int e = 0; e < 256; e++) {
        const float g0 = (float)(int8_t)(tkv__iq1s_grid[0] >> 8 * (e % 8));
        const float g14 = (float)(int8_t)(tkv__iq1s_grid[0x3a5] >> 8 * (e % 8));
        const float want = e / 8 == 14 ? 11.0f * (g14 - 0.125f) : e / 8 == 15 ? 11.0f * (g0 + 0.125f) : g0 + 0.125f;
        if (y[e] != want) fail_msg("IQ1_M element %d: %g, want %g", e, y[e], want);
    }
}

/*
 * IQ3_XXS and IQ3_S element e of a raw block, read the way compute/quant/iq.h
 * describes the layouts (independently of compute/quant/iq3.c): the IQ3_XXS sign of
 * the 8th element of each group of 8 is the parity of the other seven.
 */
static float iq3_element(tkv_type t, const uint8_t *blk, int e) {
    const int b = e / 32, g = e % 32 / 4, k = e % 4;
    uint16_t h;
    memcpy(&h, blk, 2);
    const float d = tkv__quant_f16_to_f32(h);
    if (t == TKV_TYPE_IQ3_XXS) {
        const uint8_t *qs = blk + 2;
        const uint32_t word = (uint32_t)qs[64 + 4 * b] | (uint32_t)qs[65 + 4 * b] << 8 |
                              (uint32_t)qs[66 + 4 * b] << 16 | (uint32_t)qs[67 + 4 * b] << 24;
        const int j = e % 8, pattern = (int)(word >> (7 * (e % 32 / 8))) & 127;
        int neg;
        if (j < 7) {
            neg = pattern >> j & 1;
        } else {
            neg = 0;
            for (int i = 0; i < 7; i++) neg ^= pattern >> i & 1;
        }
        const float v = (float)(tkv__iq3xxs_grid[qs[8 * b + g]] >> (8 * k) & 0xff);
        const float x = d * (0.5f + (float)(word >> 28)) * 0.5f * v;
        return neg ? -x : x;
    }
    const uint8_t *qs = blk + 2, *qh = blk + 66, *signs = blk + 74, *scales = blk + 106;
    const int idx = qs[8 * b + g] | (qh[b] >> g & 1) << 8;
    const int ls = b % 2 ? scales[b / 2] >> 4 : scales[b / 2] & 15;
    const float x = d * (float)(1 + 2 * ls) * (float)(tkv__iq3s_grid[idx] >> (8 * k) & 0xff);
    return signs[4 * b + g / 2] >> (4 * (g % 2) + k) & 1 ? -x : x;
}

/* IQ3_XXS and IQ3_S: hand-made blocks (one index's 9th bit, one sign, one
   scale nibble), then random ones, element by element to the bit; and the
   dot product of a hand-made block at every level, exact here. */
static void test_iq3_layouts(void **state) {
    (void)state;
    const tkv_type types[] = {TKV_TYPE_IQ3_XXS, TKV_TYPE_IQ3_S};
    uint8_t blk[110];
    float y[256];
    /* IQ3_S, d = 1: index 0 is (1, 1, 1, 1). Sub-block 5 scale 3 (x7), its
       group 3 index 0x12a (qh bit), element 4 * 3 + 2 negative. */
    memset(blk, 0, sizeof blk);
    blk[1] = 0x3c;
    blk[2 + 8 * 5 + 3] = 0x2a;
    blk[66 + 5] = 1 << 3;
    blk[74 + 4 * 5 + 1] = 1 << 6;
    blk[106 + 2] = 0x30;
    tkv__quant_dequantize_row(TKV_TYPE_IQ3_S, blk, y, 256);
    for (int e = 0; e < 256; e++) {
        float want = e >= 160 && e < 192 ? 7.0f : 1.0f;
        if (e >= 172 && e < 176) want = 7.0f * (float)(tkv__iq3s_grid[0x12a] >> (8 * (e - 172)) & 0xff);
        if (e == 174) want = -want;
        assert_true(y[e] == want);
    }
    /* IQ3_XXS, d = 1: index 0 is (4, 4, 4, 4), scale field 0 gives 1/4. Sub-block
       6: scale field 2 (5/4), its third sign pattern 1 (element 16 and, by
       parity, 23 negative), group 5 index 17. */
    memset(blk, 0, sizeof blk);
    blk[1] = 0x3c;
    blk[2 + 8 * 6 + 5] = 17;
    const uint32_t word = 2u << 28 | 1u << 14;
    memcpy(blk + 2 + 64 + 4 * 6, &word, 4);
    tkv__quant_dequantize_row(TKV_TYPE_IQ3_XXS, blk, y, 256);
    for (int e = 0; e < 256; e++) {
        float want = e >= 192 && e < 224 ? 5.0f : 1.0f;
        if (e >= 212 && e < 216) want = 1.25f * (float)(tkv__iq3xxs_grid[17] >> (8 * (e - 212)) & 0xff);
        if (e == 208 || e == 215) want = -want;
        assert_true(y[e] == want);
    }
    /* its dot product with activations 1..127 (d = 1), exact in float here */
    tkv__block_q8_K a;
    memset(&a, 0, sizeof a);
    a.d = 1.0f;
    double want = 0;
    for (int e = 0; e < 256; e++) a.qs[e] = (int8_t)(e % 127 + 1), want += (double)y[e] * a.qs[e];
    for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *kt = tkv__kernel_table((tkv__kernel_level)l);
        if (kt) assert_true(kt->vec_dot[TKV_TYPE_IQ3_XXS](256, blk, &a) == (float)want);
    }
    /* random blocks with sane scales */
    uint32_t s = 12345;
    for (int rep = 0; rep < 200; rep++) {
        const tkv_type t = types[rep % 2];
        for (size_t i = 0; i < sizeof blk; i++) s = s * 1664525u + 1013904223u, blk[i] = (uint8_t)(s >> 24);
        const uint16_t d = tkv__quant_f32_to_f16((float)((int)(s >> 8 & 255) - 128) / 4096.0f);
        memcpy(blk, &d, 2);
        tkv__quant_dequantize_row(t, blk, y, 256);
        for (int e = 0; e < 256; e++)
            if (y[e] != iq3_element(t, blk, e))
                fail_msg("%s block %d element %d: %g, by the layout %g", tkv_type_name(t), rep, e, y[e],
                         iq3_element(t, blk, e));
    }
}

/* ---- the parity files --------------------------------------------------------- */

static tkv_model *load_parity(const char *type) {
    char rel[128];
    snprintf(rel, sizeof rel, "models/parity/parity-%s.gguf", type);
    tkv_model *m = NULL;
    /* the tensor table is all these tests read; the IQ1 files' IQ2_XXS
       tensors would fail a full load while that type is unsupported */
    tkv_model_params p = tkv_model_default_params();
    p.vocab_only = !strncmp(type, "IQ1", 3);
    tkv_status st = tkv_model_load(tu_shared(rel), &p, &m);
    if (st) fail_msg("%s: %s: %s", rel, tkv_status_str(st), tkv_last_error(NULL));
    return m;
}

/*
 * Bounds on the RMS error of a dequantized tensor relative to the RMS of the
 * same tensor from the F16 file (itself exact to ~2^-11). The worst tensor
 * measured on these files (random weights; the test prints them), then ~1.5x
 * margin. A wrong layout (swapped nibbles, wrong scale packing, wrong bit of
 * qh) gives errors of 50% to over 100%.
 */
static double rel_bound(tkv_type t) {
    switch (t) {            /* measured */
    case TKV_TYPE_BF16: return 0.003; /* 0.0016 */
    case TKV_TYPE_Q8_0: return 0.006; /* 0.0038 */
    case TKV_TYPE_Q6_K: return 0.022; /* 0.0133 */
    case TKV_TYPE_Q5_0: return 0.05;  /* 0.0314 */
    case TKV_TYPE_Q5_1: return 0.05;  /* 0.0294 */
    case TKV_TYPE_Q5_K: return 0.045; /* 0.0277 */
    case TKV_TYPE_Q4_0: return 0.10;  /* 0.0653 */
    case TKV_TYPE_Q4_1: return 0.10;  /* 0.0609 */
    case TKV_TYPE_Q4_K: return 0.085; /* 0.0548 */
    case TKV_TYPE_IQ4_NL: return 0.10; /* 0.0643 */
    case TKV_TYPE_IQ4_XS: return 0.10; /* 0.0648 */
    case TKV_TYPE_Q2_K: return 0.35;  /* 0.2336 */
    case TKV_TYPE_Q3_K: return 0.19;  /* 0.1257 */
    case TKV_TYPE_MXFP4: return 0.22; /* 0.1441 */
    case TKV_TYPE_TQ1_0:
    case TKV_TYPE_TQ2_0: return 0.75; /* 0.4994: ternary random weights */
    case TKV_TYPE_IQ2_XXS: return 0.50; /* 0.3476 */
    case TKV_TYPE_IQ2_XS: return 0.45;  /* 0.3067 */
    case TKV_TYPE_IQ2_S: return 0.36;   /* 0.2439 */
    /* the IQ1 types: close, since a wrong scale or shift bit (not a wrong
       index) moves them only to 0.48-0.54; test_layout_by_hand pins those */
    case TKV_TYPE_IQ1_S: return 0.47;  /* 0.4495 */
    case TKV_TYPE_IQ1_M: return 0.455; /* 0.4349 */
    case TKV_TYPE_IQ3_XXS: return 0.27; /* 0.1759 */
    case TKV_TYPE_IQ3_S: return 0.22;   /* 0.1433 */
    default: return 0.0;
    }
}

/* The IQ1 files' attn_output tensors are IQ2_XXS, another type's work:
   skipped while it is unsupported (these tests cover it with its own files). */
static bool iq1_companion(const char *file, tkv_type t) {
    return !strncmp(file, "IQ1", 3) && t == TKV_TYPE_IQ2_XXS;
}

static void test_parity_dequantize(void **state) {
    (void)state;
    const char *files[] = {"BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS",
                           "Q2_K", "Q3_K_S", "MXFP4", "TQ1_0", "TQ2_0", "IQ1_S", "IQ1_M", "IQ3_S", "IQ3_XS"};
    tkv_model *ref = load_parity("F16");
    int seen[TKV_TYPE_COUNT] = {0};
    double worst[TKV_TYPE_COUNT] = {0};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        tkv_model *m = load_parity(files[f]);
        for (size_t i = 0; i < tkv_model_tensor_count(m); i++) {
            tkv_tensor_info t, r;
            assert_int_equal(tkv_model_tensor_at(m, i, &t), TKV_OK);
            if (t.n_dims != 2) continue;
            assert_int_equal(tkv_model_tensor_find(ref, t.name, &r), TKV_OK);
            assert_int_equal(r.type, TKV_TYPE_F16);
            assert_int_equal(r.n_elems, t.n_elems);
            if (!tkv__quant_supported(t.type)) {
                if (iq1_companion(files[f], t.type)) continue;
                fail_msg("%s: %s has unsupported type %d", files[f], t.name, t.type);
            }
            float *a = malloc(t.n_elems * sizeof(float)), *b = malloc(t.n_elems * sizeof(float));
            assert_non_null(a);
            assert_non_null(b);
            tkv__quant_dequantize_row(t.type, t.data, a, t.n_elems);
            tkv__quant_dequantize_row(TKV_TYPE_F16, r.data, b, r.n_elems);
            double se = 0, sr = 0;
            for (size_t k = 0; k < t.n_elems; k++) {
                se += ((double)a[k] - b[k]) * ((double)a[k] - b[k]);
                sr += (double)b[k] * b[k];
            }
            const double rel = sqrt(se / sr);
            if (rel > worst[t.type]) worst[t.type] = rel;
            seen[t.type] = 1;
            if (!(rel <= rel_bound(t.type)))
                fail_msg("%s: %s (%s): relative RMS error %.4f > %.4f", files[f], t.name, tkv_type_name(t.type), rel,
                         rel_bound(t.type));
            free(a);
            free(b);
        }
        tkv_model_free(m);
    }
    const tkv_type want[] = {TKV_TYPE_BF16, TKV_TYPE_Q8_0, TKV_TYPE_Q4_0, TKV_TYPE_Q4_1, TKV_TYPE_Q5_0,
                             TKV_TYPE_Q5_1, TKV_TYPE_Q4_K, TKV_TYPE_Q5_K, TKV_TYPE_Q6_K, TKV_TYPE_IQ4_NL,
                             TKV_TYPE_IQ4_XS, TKV_TYPE_Q2_K, TKV_TYPE_Q3_K, TKV_TYPE_MXFP4, TKV_TYPE_TQ1_0,
                          TKV_TYPE_TQ2_0, TKV_TYPE_IQ1_S, TKV_TYPE_IQ1_M, TKV_TYPE_IQ3_XXS, TKV_TYPE_IQ3_S};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!seen[want[i]]) fail_msg("no tensor of type %s in the parity files", tkv_type_name(want[i]));
        print_message("  %-5s worst relative RMS error %.4f (bound %.3f)\n", tkv_type_name(want[i]), worst[want[i]],
                      rel_bound(want[i]));
    }
    tkv_model_free(ref);
}

/*
 * Bound on |vec_dot(w, quantized x) - sum(w_i x_i)|. The integer parts of
 * every kernel are exact, and the K formats' min term uses exact quant sums,
 * so the result is sum(w_i * xq_i) up to float rounding, where xq_i is the
 * activation as quantized; |xq_i - x_i| is at most
 *   Q8_0/Q8_1: half a step amax/254, plus the fp16 rounding of d: 127 * d * 2^-11 = amax * 2^-11
 *   Q8_K:      half a step amax/254 (d is a float)
 *   F16: |x| 2^-11, BF16: |x| 2^-8, F32: 0.
 * Q4_1/Q5_1 add m * (s - sum(xq)) per block, with |s - sum(xq)| <= 64 amax 2^-11
 * (fp16 rounding of s, and d vs its fp16). Float rounding: 1e-5 of sum|w x|
 * (at most n/32 float additions of exact block terms, or n for float rows).
 */
static double dot_bound(tkv_type wt, const float *w, const float *x, size_t n, const float *mvals) {
    const tkv_type at = tkv__quant_vec_dot_type(wt);
    const size_t bs = at == TKV_TYPE_Q8_K ? 256 : 32;
    double bound = 0, mag = 0;
    for (size_t b0 = 0; b0 < n; b0 += bs) {
        double amax = 0;
        for (size_t i = b0; i < b0 + bs && i < n; i++) amax = fmax(amax, fabs(x[i]));
        for (size_t i = b0; i < b0 + bs && i < n; i++) {
            double e;
            switch (at) {
            case TKV_TYPE_Q8_0:
            case TKV_TYPE_Q8_1: e = amax / 254 + amax * 0x1p-11; break;
            case TKV_TYPE_Q8_K: e = amax / 254; break;
            case TKV_TYPE_F16: e = fabs(x[i]) * 0x1p-11 + 0x1p-25; break;
            case TKV_TYPE_BF16: e = fabs(x[i]) * 0x1p-8; break;
            default: e = 0;
            }
            bound += fabs(w[i]) * e * 1.001;
            mag += fabs((double)w[i] * x[i]);
        }
        if (mvals) bound += fabs(mvals[b0 / 32]) * 64 * amax * 0x1p-11;
    }
    return bound + 1e-5 * mag + 1e-30;
}

static void test_parity_vec_dot(void **state) {
    (void)state;
    const char *files[] = {"F16",    "BF16",   "Q8_0",   "Q4_0", "Q4_1",   "Q5_0",
                           "Q5_1",   "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS",
                           "Q2_K",   "Q3_K_S", "MXFP4",  "TQ1_0", "TQ2_0", "IQ1_S", "IQ1_M",
                           "IQ3_S",  "IQ3_XS"};
    uint32_t s = 7;
    size_t checked = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        tkv_model *m = load_parity(files[f]);
        for (size_t i = 0; i < tkv_model_tensor_count(m); i++) {
            tkv_tensor_info t;
            assert_int_equal(tkv_model_tensor_at(m, i, &t), TKV_OK);
            if (t.n_dims != 2 || (!tkv__quant_supported(t.type) && iq1_companion(files[f], t.type))) continue;
            const size_t n = t.ne[0], rs = tkv__quant_row_size(t.type, n);
            const tkv_type at = tkv__quant_vec_dot_type(t.type);
            float *x = malloc(n * sizeof(float)), *w = malloc(n * sizeof(float));
            uint8_t *xq = malloc(tkv__quant_row_size(at, n));
            assert_true(x && w && xq);
            const uint64_t rows[] = {0, t.ne[1] / 2, t.ne[1] - 1};
            for (int ri = 0; ri < 3; ri++) {
                for (size_t k = 0; k < n; k++) {
                    s = s * 1664525u + 1013904223u;
                    x[k] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (ri == 1 ? 40.0f : 2.0f);
                }
                const uint8_t *row = (const uint8_t *)t.data + rows[ri] * rs;
                tkv__quant_dequantize_row(t.type, row, w, n);
                tkv__quant_quantize_row(at, x, xq, n);
                float mv[64];
                const float *mvals = NULL;
                if (t.type == TKV_TYPE_Q4_1 || t.type == TKV_TYPE_Q5_1) {
                    const size_t bsz = t.type == TKV_TYPE_Q4_1 ? 20 : 24;
                    for (size_t b = 0; b < n / 32; b++) {
                        uint16_t mh;
                        memcpy(&mh, row + b * bsz + 2, 2);
                        mv[b] = tkv__quant_f16_to_f32(mh);
                    }
                    mvals = mv;
                }
                double want = 0;
                for (size_t k = 0; k < n; k++) want += (double)w[k] * x[k];
                const double bound = dot_bound(t.type, w, x, n, mvals);
                for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
                    const tkv__kernels *kt = tkv__kernel_table((tkv__kernel_level)l);
                    if (!kt) continue;
                    const double got = kt->vec_dot[t.type](n, row, xq);
                    if (!(fabs(got - want) <= bound))
                        fail_msg("%s %s row %llu (%s): vec_dot %.7g, float dot %.7g, bound %.3g", files[f], t.name,
                                 (unsigned long long)rows[ri], kt->name, got, want, bound);
                    checked++;
                }
            }
            free(x);
            free(w);
            free(xq);
        }
        tkv_model_free(m);
    }
    assert_true(checked > 100);
}

/* ---- IQ2_XXS, IQ2_XS, IQ2_S ------------------------------------------------------- */

/*
 * The sign byte of a 7-bit IQ2 sign index, from the rule (the eighth bit
 * makes the count of set bits even), not from the library's table.
 */
static uint8_t iq2_sign_byte(unsigned idx) {
    return (uint8_t)(idx | (unsigned)(__builtin_popcount(idx) & 1) << 7);
}

/* Element j of group g as compute/quant/iq.h defines it, d = 1. */
static float iq2_expect(uint64_t grid, uint8_t signs, int ls, int j) {
    const float m = (float)(grid >> 8 * j & 0xff) * (ls + 0.5f) / 4.0f;
    return signs >> j & 1 ? -m : m;
}

/*
 * One hand-made block of each type: chosen groups with chosen indices,
 * signs and scales, every other group index 0 with no signs; then the dot
 * product with a Q8_K row of known quants at every level against the sum of
 * those values times the quants.
 */
static void check_iq2_block(tkv_type t, const void *blk, const float *want) {
    float y[256];
    tkv__quant_dequantize_row(t, blk, y, 256);
    for (int e = 0; e < 256; e++)
        if (y[e] != want[e]) fail_msg("%s element %d: %g, want %g", tkv_type_name(t), e, y[e], want[e]);
    tkv__block_q8_K a;
    memset(&a, 0, sizeof a);
    a.d = 0.5f;
    double ref = 0;
    for (int e = 0; e < 256; e++) {
        a.qs[e] = (int8_t)((e * 37) % 255 - 127);
        ref += (double)want[e] * a.qs[e] * a.d;
    }
    for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
        const tkv__kernels *k = tkv__kernel_table((tkv__kernel_level)l);
        if (!k) continue;
        const double got = k->vec_dot[t](256, blk, &a);
        if (!(fabs(got - ref) <= 1e-6 * fabs(ref) + 1e-6))
            fail_msg("%s %s vec_dot %.9g, want %.9g", tkv_type_name(t), k->name, got, ref);
    }
}

static void test_iq2_layouts(void **state) {
    (void)state;
    float want[256];
    /* IQ2_XXS: sub-block 1 = qs[4..7]: grid bytes 3, 77, 200, 255; sign indices
       5, 0, 127, 64 in bits 0-27 of the second word; ls 9 in bits 28-31 */
    tkv__block_iq2_xxs bx;
    memset(&bx, 0, sizeof bx);
    bx.d = 0x3c00;
    const uint8_t gi[4] = {3, 77, 200, 255};
    const unsigned si[4] = {5, 0, 127, 64};
    uint32_t word = 9u << 28;
    for (int l = 0; l < 4; l++) word |= si[l] << 7 * l;
    memcpy((uint8_t *)bx.qs + 8, gi, 4);
    memcpy((uint8_t *)bx.qs + 12, &word, 4);
    for (int e = 0; e < 256; e++) {
        const int g = e / 8, l = g % 4;
        want[e] = g / 4 == 1 ? iq2_expect(tkv__iq2xxs_grid[gi[l]], iq2_sign_byte(si[l]), 9, e % 8)
                             : iq2_expect(tkv__iq2xxs_grid[0], 0, 0, e % 8);
    }
    check_iq2_block(TKV_TYPE_IQ2_XXS, &bx, want);

    /* IQ2_XS: group 13 (sub-block 3, first half) index 300, sign index 33;
       group 14 (second half) index 511, sign index 127; scales[3] = 0x5a */
    tkv__block_iq2_xs bs;
    memset(&bs, 0, sizeof bs);
    bs.d = 0x3c00;
    const uint16_t q13 = 300 | 33 << 9, q14 = 511 | 127 << 9;
    memcpy((uint8_t *)bs.qs + 26, &q13, 2);
    memcpy((uint8_t *)bs.qs + 28, &q14, 2);
    bs.scales[3] = 0x5a;
    for (int e = 0; e < 256; e++) {
        const int g = e / 8, ls = g / 4 != 3 ? 0 : g % 4 < 2 ? 10 : 5;
        want[e] = g == 13   ? iq2_expect(tkv__iq2xs_grid[300], iq2_sign_byte(33), ls, e % 8)
                  : g == 14 ? iq2_expect(tkv__iq2xs_grid[511], iq2_sign_byte(127), ls, e % 8)
                            : iq2_expect(tkv__iq2xs_grid[0], 0, ls, e % 8);
    }
    check_iq2_block(TKV_TYPE_IQ2_XS, &bs, want);

    /* IQ2_S: group 8 (sub-block 2, l 0) index 0x1c7 (qh[2] bits 0-1 = 1),
       group 11 (l 3) index 0x29c (bits 6-7 = 2); sign bytes 0xa5 and 0x3c
       as they are; scales[2] = 0x3e: ls 14 for groups 8-9, 3 for 10-11 */
    tkv__block_iq2_s b2;
    memset(&b2, 0, sizeof b2);
    b2.d = 0x3c00;
    b2.qs[8] = 0xc7;
    b2.qs[11] = 0x9c;
    b2.qh[2] = 0x81;
    b2.qs[32 + 8] = 0xa5;
    b2.qs[32 + 11] = 0x3c;
    b2.scales[2] = 0x3e;
    for (int e = 0; e < 256; e++) {
        const int g = e / 8, ls = g / 4 != 2 ? 0 : g % 4 < 2 ? 14 : 3;
        want[e] = g == 8    ? iq2_expect(tkv__iq2s_grid[0x1c7], 0xa5, ls, e % 8)
                  : g == 11 ? iq2_expect(tkv__iq2s_grid[0x29c], 0x3c, ls, e % 8)
                            : iq2_expect(tkv__iq2s_grid[0], 0, ls, e % 8);
    }
    check_iq2_block(TKV_TYPE_IQ2_S, &b2, want);
}

/*
 * The grid types' packed rows (compute/quant/repack.h: IQ2 planes, IQ3
 * nibbles, IQ1 planes): rows of random IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S, IQ1_S and IQ1_M blocks packed, then every element read back from the packed bytes as the
 * header describes them (code, sign, scale, d) and held to the scalar
 * dequantization of the file's rows, to the bit. 19 rows: a whole group and
 * a partial one; the rows past the end are zero.
 */
typedef struct grid_pack {
    tkv_type type;
    size_t block;      /* packed bytes a block */
    float level[8];    /* by code */
} grid_pack;

/* Element e (< 32) of sub-block b of a packed block, dequantized in the scalar code's order (quant/iq1.c, iq2.c,
   iq3.c). */
static float packed_element(const grid_pack *g, const uint8_t *blk, size_t b, size_t e) {
    if (g->type == TKV_TYPE_IQ1_S || g->type == TKV_TYPE_IQ1_M) {
        const int mag = blk[TKV__IQ1_PACK_MAGS + e] >> b & 1, neg = blk[TKV__IQ1_PACK_SIGNS + e] >> b & 1;
        assert_true(mag || !neg);
        const float v = mag ? (neg ? -1.0f : 1.0f) : 0.0f;
        uint16_t dh;
        int ls, shift_neg;
        if (g->type == TKV_TYPE_IQ1_S) {
            const uint8_t sc = blk[TKV__IQ1S_PACK_SCALES + b];
            ls = 2 * (sc & 7) + 1, shift_neg = sc >> 3 & 1;
            memcpy(&dh, blk + TKV__IQ1S_PACK_D, 2);
        } else {
            const size_t grp = 4 * b + e / 8; /* group of the block */
            uint32_t shifts;
            memcpy(&shifts, blk + TKV__IQ1M_PACK_SHIFTS, 4);
            ls = blk[TKV__IQ1M_PACK_LS + 2 * b + e / 16];
            shift_neg = (int)(shifts >> (grp % 2 ? 16 + grp / 2 : grp / 2) & 1);
            memcpy(&dh, blk + TKV__IQ1M_PACK_D, 2);
        }
        const float dl = tkv__quant_f16_to_f32(dh) * (float)ls;
        return dl * (v + (shift_neg ? -TKV__IQ1_DELTA : TKV__IQ1_DELTA));
    }
    if (g->block == TKV__IQ2_PACK_BLOCK) {
        uint16_t dh;
        memcpy(&dh, blk + TKV__IQ2_PACK_D, 2);
        const unsigned code = blk[TKV__IQ2_PACK_CODES + 32 * (b / 4) + e] >> 2 * (b % 4) & 3;
        const int neg = blk[TKV__IQ2_PACK_SIGNS + e] >> b & 1;
        const uint8_t sc = blk[TKV__IQ2_PACK_SCALES + b];
        const int ls = e < 16 ? sc & 15 : sc >> 4;
        assert_true(code < 3);
        const float dl = tkv__quant_f16_to_f32(dh) * (0.5f + (float)ls) * 0.25f;
        return dl * (neg ? -g->level[code] : g->level[code]);
    }
    uint16_t dh;
    memcpy(&dh, blk + TKV__IQ3_PACK_D, 2);
    const unsigned nib = blk[TKV__IQ3_PACK_CODES + 32 * (b / 2) + e] >> 4 * (b % 2) & 15;
    const unsigned s = blk[TKV__IQ3_PACK_SCALES + b]; /* 2 ls + 1 */
    assert_true(s % 2 == 1 && s <= 31);
    const float d = tkv__quant_f16_to_f32(dh);
    const float db = g->type == TKV_TYPE_IQ3_XXS ? d * (0.5f + (float)((s - 1) / 2)) * 0.5f : d * (float)s;
    return db * (nib & 8 ? -g->level[nib & 7] : g->level[nib & 7]);
}

static void test_grid_packs(void **state) {
    (void)state;
    static const grid_pack packs[] = {
        {TKV_TYPE_IQ2_XXS, TKV__IQ2_PACK_BLOCK, {8, 25, 43}},
        {TKV_TYPE_IQ2_XS, TKV__IQ2_PACK_BLOCK, {8, 25, 43}},
        {TKV_TYPE_IQ2_S, TKV__IQ2_PACK_BLOCK, {8, 25, 43}},
        {TKV_TYPE_IQ3_XXS, TKV__IQ3_PACK_BLOCK, {4, 12, 20, 28, 36, 44, 52, 62}},
        {TKV_TYPE_IQ3_S, TKV__IQ3_PACK_BLOCK, {1, 3, 5, 7, 9, 11, 13, 15}},
        {TKV_TYPE_IQ1_S, TKV__IQ1_PACK_BLOCK(TKV_TYPE_IQ1_S), {0}},
        {TKV_TYPE_IQ1_M, TKV__IQ1_PACK_BLOCK(TKV_TYPE_IQ1_M), {0}},
    };
    const size_t n = 768, nb = n / TKV__QK_K, nr = 19;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (size_t pi = 0; pi < sizeof packs / sizeof packs[0]; pi++) {
        const grid_pack *g = &packs[pi];
        const tkv_type t = g->type;
        assert_true(tkv__pack_supported(t));
        const size_t rs = tkv__quant_row_size(t, n), bs = rs / nb, gs = tkv__pack_stride(t, n);
        assert_int_equal(gs, (TKV__PACK_ROWS * nb * g->block + 63) / 64 * 64);
        uint8_t *w = malloc(nr * rs), *pk = malloc(tkv__pack_bytes(t, n, nr));
        float *want = malloc(n * sizeof(float));
        assert_true(w && pk && want);
        for (size_t i = 0; i < nr * rs; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            w[i] = (uint8_t)(rng >> 24);
        }
        /* a finite d: the fp16 at the start of the block in [1/16, 2); IQ1_M's, whose top nibble is the top
           nibble of its last scale byte, in [1/8, 2) (that nibble 3: sign 0, the exponent's top bits 011) */
        for (size_t i = 0; i < nr * nb; i++) {
            uint8_t *blk = w + i * bs;
            if (t == TKV_TYPE_IQ1_M) blk[bs - 1] = (uint8_t)((blk[bs - 1] & 0x0f) | 0x30);
            else blk[1] = (uint8_t)(0x2c + blk[1] % 16);
        }
        tkv__pack_rows(t, w, n, nr, pk);
        for (size_t r = 0; r < nr; r++) {
            tkv__quant_dequantize_row(t, w + r * rs, want, n);
            const uint8_t *row = pk + r / TKV__PACK_ROWS * gs + r % TKV__PACK_ROWS * nb * g->block;
            for (size_t i = 0; i < nb; i++)
                for (size_t b = 0; b < 8; b++)
                    for (size_t e = 0; e < 32; e++) {
                        const float got = packed_element(g, row + i * g->block, b, e);
                        const size_t at = 256 * i + 32 * b + e;
                        if (f2u(got) != f2u(want[at]))
                            fail_msg("%s row %zu element %zu: packed %g, the file's row %g", tkv_type_name(t), r, at,
                                     (double)got, (double)want[at]);
                    }
        }
        for (size_t k = nr % TKV__PACK_ROWS; k < TKV__PACK_ROWS; k++) /* the last group's rows past the end */
            for (size_t j = 0; j < nb * g->block; j++)
                assert_int_equal(pk[nr / TKV__PACK_ROWS * gs + k * nb * g->block + j], 0);
        free(w), free(pk), free(want);
    }
}

/*
 * The IQ2 tensors of the parity files against the F16 file, and vec_dot on
 * three of their rows at every level against a float dot product (as the
 * tests above do for the other types). Read through the GGUF reader, not a
 * model load: parity-IQ2_M's IQ2_S rows sit beside IQ3_S ones.
 */
static void test_parity_iq2(void **state) {
    (void)state;
    const char *files[] = {"IQ2_XXS", "IQ2_XS", "IQ2_M"};
    tkv__gguf *ref;
    assert_int_equal(tkv__gguf_open(tu_shared("models/parity/parity-F16.gguf"), &ref), TKV_OK);
    double worst[TKV_TYPE_COUNT] = {0};
    int seen[TKV_TYPE_COUNT] = {0};
    size_t checked = 0;
    uint32_t s = 11;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/parity/parity-%s.gguf", files[f]);
        tkv__gguf *g;
        assert_int_equal(tkv__gguf_open(tu_shared(rel), &g), TKV_OK);
        for (size_t i = 0; i < g->n_tensors; i++) {
            const tkv__gguf_tensor *t = &g->tensors[i];
            if (t->type != TKV_TYPE_IQ2_XXS && t->type != TKV_TYPE_IQ2_XS && t->type != TKV_TYPE_IQ2_S) continue;
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.s);
            const tkv__gguf_tensor *r = tkv__gguf_tensor_find(ref, name);
            assert_non_null(r);
            assert_int_equal(r->type, TKV_TYPE_F16);
            assert_int_equal(r->n_elems, t->n_elems);
            const uint8_t *data = g->data + t->offset;
            float *a = malloc(t->n_elems * sizeof(float)), *b = malloc(t->n_elems * sizeof(float));
            assert_true(a && b);
            tkv__quant_dequantize_row(t->type, data, a, t->n_elems);
            tkv__quant_dequantize_row(TKV_TYPE_F16, ref->data + r->offset, b, r->n_elems);
            double se = 0, sr = 0;
            for (size_t k = 0; k < t->n_elems; k++) se += ((double)a[k] - b[k]) * ((double)a[k] - b[k]), sr += (double)b[k] * b[k];
            const double relerr = sqrt(se / sr);
            if (!(relerr <= rel_bound(t->type)))
                fail_msg("%s: %s (%s): relative RMS error %.4f > %.4f", files[f], name, tkv_type_name(t->type), relerr,
                         rel_bound(t->type));
            if (relerr > worst[t->type]) worst[t->type] = relerr;
            seen[t->type] = 1;

            const size_t n = t->ne[0], rs = tkv__quant_row_size(t->type, n);
            float *x = malloc(n * sizeof(float));
            uint8_t *xq = malloc(tkv__quant_row_size(TKV_TYPE_Q8_K, n));
            assert_true(x && xq);
            const uint64_t rows[] = {0, t->ne[1] / 2, t->ne[1] - 1};
            for (int ri = 0; ri < 3; ri++) {
                for (size_t k = 0; k < n; k++) {
                    s = s * 1664525u + 1013904223u;
                    x[k] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (ri == 1 ? 40.0f : 2.0f);
                }
                const float *w = a + rows[ri] * n;
                tkv__quant_quantize_row(TKV_TYPE_Q8_K, x, xq, n);
                double want = 0;
                for (size_t k = 0; k < n; k++) want += (double)w[k] * x[k];
                const double bound = dot_bound(t->type, w, x, n, NULL);
                for (int l = 0; l < TKV__KERNEL_LEVELS; l++) {
                    const tkv__kernels *kt = tkv__kernel_table((tkv__kernel_level)l);
                    if (!kt) continue;
                    const double got = kt->vec_dot[t->type](n, data + rows[ri] * rs, xq);
                    if (!(fabs(got - want) <= bound))
                        fail_msg("%s %s row %llu (%s): vec_dot %.7g, float dot %.7g, bound %.3g", files[f], name,
                                 (unsigned long long)rows[ri], kt->name, got, want, bound);
                    checked++;
                }
            }
            free(x);
            free(xq);
            free(a);
            free(b);
        }
        tkv__gguf_free(g);
    }
    const tkv_type want[] = {TKV_TYPE_IQ2_XXS, TKV_TYPE_IQ2_XS, TKV_TYPE_IQ2_S};
    for (size_t i = 0; i < 3; i++) {
        if (!seen[want[i]]) fail_msg("no tensor of type %s in the parity files", tkv_type_name(want[i]));
        print_message("  %-7s worst relative RMS error %.4f (bound %.3f)\n", tkv_type_name(want[i]), worst[want[i]],
                      rel_bound(want[i]));
    }
    assert_true(checked > 50);
    tkv__gguf_free(ref);
}

/* ---- the activation quantizers against their formulas --------------------------- */

static void test_quantize_formulas(void **state) {
    (void)state;
    float x[512];
    uint32_t s = 3;
    for (int i = 0; i < 512; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f * 6.0f - 3.0f;
    }
    x[5] = 4.5f;    /* block 0's amax */
    x[300] = -7.0f; /* block 1 of Q8_K: the max is negative */
    x[301] = 7.0f;  /* same magnitude later: the first one wins */
    for (int i = 32; i < 64; i++) x[i] = 0.0f; /* an all-zero Q8_0 block */

    tkv__block_q8_0 q0[16];
    tkv__quant_quantize_q8_0(x, q0, 512);
    assert_int_equal(q0[0].d, tkv__quant_f32_to_f16(4.5f / 127.0f));
    assert_int_equal(q0[0].qs[5], 127);
    for (int j = 0; j < 32; j++) assert_int_equal(q0[0].qs[j], (int)lrintf(x[j] * (127.0f / 4.5f)));
    assert_int_equal(q0[1].d, 0);
    for (int j = 0; j < 32; j++) assert_int_equal(q0[1].qs[j], 0);

    tkv__block_q8_1 q1[16];
    tkv__quant_quantize_q8_1(x, q1, 512);
    for (int b = 0; b < 16; b++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += q1[b].qs[j];
        assert_int_equal(q1[b].d, q0[b].d);
        assert_memory_equal(q1[b].qs, q0[b].qs, 32);
        const float d = tkv__quant_f16_to_f32(q1[b].d);
        /* s = fp16(d * sum) with the unrounded d: within one fp16 step of the rounded-d product */
        assert_true(fabsf(tkv__quant_f16_to_f32(q1[b].s) - d * (float)sum) <= fabsf(d * (float)sum) * 0x1p-9f + 1e-6f);
    }

    tkv__block_q8_K qk[2];
    tkv__quant_quantize_q8_K(x, qk, 512);
    /* block 0: max = +4.5, so d < 0 and the largest element is -127 */
    assert_true(qk[0].d == 1.0f / (-127.0f / 4.5f));
    assert_int_equal(qk[0].qs[5], -127);
    /* block 1: max = -7 (the first of -7, +7): d > 0, x[300] -> -127, x[301] -> +127 */
    assert_true(qk[1].d == 1.0f / (-127.0f / -7.0f));
    assert_int_equal(qk[1].qs[300 - 256], -127);
    assert_int_equal(qk[1].qs[301 - 256], 127);
    for (int b = 0; b < 2; b++) {
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += qk[b].qs[16 * g + l];
            assert_int_equal(qk[b].bsums[g], sum);
        }
        float y[256];
        tkv__quant_dequantize_row(TKV_TYPE_Q8_K, &qk[b], y, 256);
        for (int j = 0; j < 256; j++) assert_true(fabsf(y[j] - x[256 * b + j]) <= fabsf(qk[b].d) * 0.5001f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_roundtrip_exhaustive),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_type_facts),
        cmocka_unit_test(test_k4_scales),
        cmocka_unit_test(test_layout_by_hand),
        cmocka_unit_test(test_iq3_layouts),
        cmocka_unit_test(test_parity_dequantize),
        cmocka_unit_test(test_parity_vec_dot),
        cmocka_unit_test(test_iq2_layouts),
        cmocka_unit_test(test_grid_packs),
        cmocka_unit_test(test_parity_iq2),
        cmocka_unit_test(test_quantize_formulas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
