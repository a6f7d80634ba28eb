/*
 * compute/quant/repack.c — the packed row layouts of compute/quant/repack.h (the kernels that read them
 * are in the SIMD files; this file only moves bytes).
 */
#include "repack.h"

#include "quant.h"
#include "grids.h"
#include "iq.h"

#include <assert.h>
#include <string.h>

enum { Q4_0_CHUNK = 64 };

/* How a type's rows are packed (compute/quant/repack.h). */
typedef enum pack_kind {
    PACK_NONE = 0,
    PACK_TRANSPOSED,  /* Q4_0's 4-byte chunks per row and lane */
    PACK_Q8_0,        /* the same for Q8_0, in pairs of blocks with their scales */
    PACK_Q5_0,        /* the same for Q5_0, its fifth bits and scales after each block */
    PACK_K45,         /* Q4_K's and Q5_K's transposed superblocks */
    PACK_Q2K,         /* Q2_K's transposed superblocks */
    PACK_Q3K,         /* Q3_K's */
    PACK_IQ4XS,       /* IQ4_XS's */
    PACK_Q6K,         /* Q6_K's */
    PACK_IQ2,         /* IQ2_XXS's, IQ2_XS's and IQ2_S's blocks as planes of codes and signs, a row at a time */
    PACK_IQ3,         /* IQ3_XXS's and IQ3_S's as nibbles of code and sign, a row at a time */
    PACK_IQ1,         /* IQ1_S's and IQ1_M's as planes of magnitudes and signs, a row at a time */
} pack_kind;

static const pack_kind kinds[TKV_TYPE_COUNT] = {
    [TKV_TYPE_Q4_0] = PACK_TRANSPOSED,   [TKV_TYPE_IQ4_NL] = PACK_TRANSPOSED, [TKV_TYPE_Q8_0] = PACK_Q8_0,
    [TKV_TYPE_Q5_0] = PACK_Q5_0,
    [TKV_TYPE_Q4_K] = PACK_K45, [TKV_TYPE_Q5_K] = PACK_K45, [TKV_TYPE_Q6_K] = PACK_Q6K,
    [TKV_TYPE_IQ4_XS] = PACK_IQ4XS, [TKV_TYPE_Q2_K] = PACK_Q2K, [TKV_TYPE_Q3_K] = PACK_Q3K,
    [TKV_TYPE_IQ2_XXS] = PACK_IQ2, [TKV_TYPE_IQ2_XS] = PACK_IQ2, [TKV_TYPE_IQ2_S] = PACK_IQ2,
    [TKV_TYPE_IQ3_XXS] = PACK_IQ3, [TKV_TYPE_IQ3_S] = PACK_IQ3,
    [TKV_TYPE_IQ1_S] = PACK_IQ1, [TKV_TYPE_IQ1_M] = PACK_IQ1,
};

/* The superblock layouts' packing, a group of 16 rows at a time (NULL: the other layouts, a row at a time). */
typedef void superblocks_fn(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out);

static superblocks_fn *const superblock_packers[TKV_TYPE_COUNT] = {
    [TKV_TYPE_Q4_K] = tkv__pack_q4k_blocks,   [TKV_TYPE_Q5_K] = tkv__pack_q5k_blocks,
    [TKV_TYPE_Q2_K] = tkv__pack_q2k_blocks,   [TKV_TYPE_Q3_K] = tkv__pack_q3k_blocks,
    [TKV_TYPE_IQ4_XS] = tkv__pack_iq4xs_blocks, [TKV_TYPE_Q6_K] = tkv__pack_q6k_blocks,
};

static pack_kind kind_of(tkv_type type) {
    return (unsigned)type < TKV_TYPE_COUNT ? kinds[type] : PACK_NONE;
}

/* A Q5_0 block's fifth bits (bit e: element e's) with element 4s + b's at bit 8b + s (repack.h). */
static uint32_t q5_0_fifth_by_step(const uint8_t qh[4]) {
    uint32_t h, out = 0;
    memcpy(&h, qh, 4);
    for (unsigned e = 0; e < 32; e++) out |= ((h >> e) & 1u) << (8 * (e % 4) + e / 4);
    return out;
}

/*
 * One IQ2_XXS, IQ2_XS or IQ2_S block as planes (repack.h) at o (TKV__IQ2_PACK_BLOCK bytes): per group g = 4b + l
 * (b the sub-block), its grid point, its 8 sign bits and its sub-block's two ls read as compute/quant/iq.h
 * describes each type. Every element's code and sign first, then each output byte whole: a 1B model's IQ2_XS
 * file loads in 2.0-2.2 s where a read-modify-write per element and bit took 4.0 (0.75 s without packing; Zen 3,
 * 2 threads, `tokenkv bench -p 8 -n 0 -r 1` under /usr/bin/time).
 */
static void iq2_planes(tkv_type type, const uint8_t *blk, uint8_t *o) {
    uint8_t code[8][32], neg[8][32]; /* [sub-block][element] */
    memcpy(o + TKV__IQ2_PACK_D, blk, 2); /* every IQ2 block starts with its fp16 d */
    for (unsigned b = 0; b < 8; b++) {
        uint64_t grid[4];
        uint8_t signs[4], ls;
        if (type == TKV_TYPE_IQ2_XXS) {
            const tkv__block_iq2_xxs *x = (const tkv__block_iq2_xxs *)(const void *)blk;
            uint32_t aux[2]; /* four grid index bytes, then the sign indices and ls */
            memcpy(aux, (const uint8_t *)x->qs + 8 * b, 8);
            for (unsigned l = 0; l < 4; l++) {
                grid[l] = tkv__iq2xxs_grid[(aux[0] >> 8 * l) & 255];
                signs[l] = tkv__iq_signs[(aux[1] >> 7 * l) & 127];
            }
            ls = (uint8_t)(aux[1] >> 28 | (aux[1] >> 28) << 4); /* one ls for both halves */
        } else if (type == TKV_TYPE_IQ2_XS) {
            const tkv__block_iq2_xs *x = (const tkv__block_iq2_xs *)(const void *)blk;
            for (unsigned l = 0; l < 4; l++) {
                uint16_t q;
                memcpy(&q, (const uint8_t *)x->qs + 2 * (4 * b + l), 2);
                grid[l] = tkv__iq2xs_grid[q & 511];
                signs[l] = tkv__iq_signs[q >> 9];
            }
            ls = x->scales[b];
        } else {
            const tkv__block_iq2_s *x = (const tkv__block_iq2_s *)(const void *)blk;
            for (unsigned l = 0; l < 4; l++) {
                grid[l] = tkv__iq2s_grid[x->qs[4 * b + l] | ((x->qh[b] >> 2 * l) & 3u) << 8];
                signs[l] = x->qs[32 + 4 * b + l];
            }
            ls = x->scales[b];
        }
        o[TKV__IQ2_PACK_SCALES + b] = ls;
        for (unsigned e = 0; e < 32; e++) { /* element e of sub-block b: group e / 8's byte e % 8 */
            const uint8_t v = (uint8_t)(grid[e / 8] >> 8 * (e % 8));
            assert(v == 8 || v == 25 || v == 43); /* every IQ2 grid byte is one of the three levels */
            code[b][e] = (uint8_t)((v > 8) + (v > 25));
            neg[b][e] = (uint8_t)(signs[e / 8] >> (e % 8) & 1);
        }
    }
    for (unsigned e = 0; e < 32; e++) {
        for (unsigned h = 0; h < 2; h++)
            o[TKV__IQ2_PACK_CODES + 32 * h + e] = (uint8_t)(code[4 * h][e] | code[4 * h + 1][e] << 2 |
                                                           code[4 * h + 2][e] << 4 | code[4 * h + 3][e] << 6);
        unsigned sg = 0;
        for (unsigned b = 0; b < 8; b++) sg |= (unsigned)neg[b][e] << b;
        o[TKV__IQ2_PACK_SIGNS + e] = (uint8_t)sg;
    }
}

/* The code of an IQ3 grid level (repack.h): IQ3_XXS's 4, 12, .., 52, 62 and IQ3_S's 1, 3, .., 15 -> 0..7. */
static unsigned iq3_code(tkv_type type, unsigned level) {
    if (type == TKV_TYPE_IQ3_XXS) {
        assert(level == 62 || (level >= 4 && level <= 52 && level % 8 == 4));
        return level == 62 ? 7 : (level - 4) / 8;
    }
    assert(level % 2 == 1 && level <= 15);
    return (level - 1) / 2;
}

/*
 * One IQ3_XXS or IQ3_S block as nibbles (repack.h) at o (TKV__IQ3_PACK_BLOCK bytes): per element its grid
 * level's code and its sign, per sub-block 2 ls + 1, read as compute/quant/iq.h describes each type.
 */
static void iq3_nibbles(tkv_type type, const uint8_t *blk, uint8_t *o) {
    memset(o, 0, TKV__IQ3_PACK_BLOCK);
    memcpy(o + TKV__IQ3_PACK_D, blk, 2); /* both blocks start with their fp16 d */
    for (unsigned b = 0; b < 8; b++) {
        uint8_t level[32], neg[32];
        unsigned ls;
        if (type == TKV_TYPE_IQ3_XXS) {
            const tkv__block_iq3_xxs *x = (const tkv__block_iq3_xxs *)(const void *)blk;
            uint32_t word; /* four 7-bit sign indices (8 elements each), then ls */
            memcpy(&word, x->qs + 64 + 4 * b, 4);
            ls = word >> 28;
            for (unsigned e = 0; e < 32; e++) {
                level[e] = (uint8_t)(tkv__iq3xxs_grid[x->qs[8 * b + e / 4]] >> 8 * (e % 4));
                neg[e] = (uint8_t)(tkv__iq_signs[(word >> 7 * (e / 8)) & 127] >> (e % 8) & 1);
            }
        } else {
            const tkv__block_iq3_s *x = (const tkv__block_iq3_s *)(const void *)blk;
            ls = (x->scales[b / 2] >> 4 * (b % 2)) & 15u;
            for (unsigned e = 0; e < 32; e++) {
                const unsigned g = e / 4;
                level[e] = (uint8_t)(tkv__iq3s_grid[x->qs[8 * b + g] | ((x->qh[b] >> g) & 1u) << 8] >> 8 * (e % 4));
                neg[e] = (uint8_t)(x->signs[4 * b + g / 2] >> (4 * (g % 2) + e % 4) & 1);
            }
        }
        o[TKV__IQ3_PACK_SCALES + b] = (uint8_t)(2 * ls + 1);
        for (unsigned e = 0; e < 32; e++)
            o[TKV__IQ3_PACK_CODES + 32 * (b / 2) + e] |=
                (uint8_t)((neg[e] << 3 | iq3_code(type, level[e])) << 4 * (b % 2));
    }
}

/*
 * One IQ1_S or IQ1_M block as planes (repack.h) at o (TKV__IQ1_PACK_BLOCK bytes): per element whether its grid
 * value is nonzero and whether it is -1; IQ1_S's per sub-block scale and shift sign as in its qh; IQ1_M's 2 ls + 1
 * per half sub-block, its groups' shift signs and its assembled d (compute/quant/iq.h).
 */
static void iq1_planes(tkv_type type, const uint8_t *blk, uint8_t *o) {
    memset(o, 0, TKV__IQ1_PACK_BLOCK(type));
    const int m = type == TKV_TYPE_IQ1_M;
    const tkv__block_iq1_s *xs = (const tkv__block_iq1_s *)(const void *)blk;
    const tkv__block_iq1_m *xm = (const tkv__block_iq1_m *)(const void *)blk;
    for (unsigned g = 0; g < 32; g++) { /* group g: elements 8 (g % 4) .. of sub-block g / 4 */
        unsigned idx;
        if (m) {
            idx = xm->qs[g] | ((xm->qh[g / 2] >> 4 * (g % 2)) & 7u) << 8;
        } else {
            uint16_t qh;
            memcpy(&qh, (const uint8_t *)xs->qh + 2 * (g / 4), 2);
            idx = xs->qs[g] | ((qh >> 3 * (g % 4)) & 7u) << 8;
        }
        for (unsigned k = 0; k < 8; k++) {
            const uint8_t v = (uint8_t)(tkv__iq1s_grid[idx] >> 8 * k); /* 0xff, 0 or 1 */
            assert(v == 0xff || v <= 1);
            const unsigned e = 8 * (g % 4) + k, b = g / 4;
            o[TKV__IQ1_PACK_MAGS + e] |= (uint8_t)((v != 0) << b);
            o[TKV__IQ1_PACK_SIGNS + e] |= (uint8_t)((v == 0xff) << b);
        }
    }
    if (m) {
        for (unsigned h = 0; h < 16; h++) { /* half h of sub-block h / 2: field h % 4 of word h / 4 */
            const unsigned w = xm->scales[2 * (h / 4)] | (unsigned)xm->scales[2 * (h / 4) + 1] << 8;
            o[TKV__IQ1M_PACK_LS + h] = (uint8_t)(2 * ((w >> 3 * (h % 4)) & 7u) + 1);
        }
        uint32_t shifts = 0;
        for (unsigned j = 0; j < 16; j++)
            shifts |= (uint32_t)(xm->qh[j] >> 3 & 1u) << j | (uint32_t)(xm->qh[j] >> 7 & 1u) << (16 + j);
        memcpy(o + TKV__IQ1M_PACK_SHIFTS, &shifts, 4);
        const uint16_t d = tkv__iq1_m_d(xm);
        memcpy(o + TKV__IQ1M_PACK_D, &d, 2);
    } else {
        for (unsigned b = 0; b < 8; b++) {
            uint16_t qh;
            memcpy(&qh, (const uint8_t *)xs->qh + 2 * b, 2);
            o[TKV__IQ1S_PACK_SCALES + b] = (uint8_t)(qh >> 12);
        }
        memcpy(o + TKV__IQ1S_PACK_D, blk, 2); /* IQ1_S starts with its fp16 d */
    }
}

int tkv__pack_supported(tkv_type type) {
    _Static_assert(sizeof(tkv__block_iq4_nl) == sizeof(tkv__block_q4_0), "IQ4_NL has Q4_0's block layout");
    return kind_of(type) != PACK_NONE;
}

size_t tkv__pack_stride(tkv_type type, size_t n) {
    const pack_kind k = kind_of(type);
    if (k == PACK_NONE) return 0;
    const size_t be = tkv__quant_block_elems(type), nb = n / be;
    const size_t bytes = k == PACK_TRANSPOSED ? (nb + 1) / 2 * TKV__B4_PACK_PAIR
                         : k == PACK_Q8_0     ? (nb + 1) / 2 * TKV__Q8_0_PACK_PAIR
                         : k == PACK_Q5_0     ? nb * TKV__Q5_0_PACK_BLOCK
                         : k == PACK_K45      ? nb * TKV__K45_PACK_BLOCK(type == TKV_TYPE_Q5_K)
                         : k == PACK_Q2K      ? nb * TKV__Q2K_PACK_BLOCK
                         : k == PACK_Q3K      ? TKV__Q3K_PACK_RUN(nb)
                         : k == PACK_IQ4XS    ? nb * TKV__IQ4XS_PACK_BLOCK
                         : k == PACK_IQ2      ? TKV__PACK_ROWS * nb * TKV__IQ2_PACK_BLOCK
                         : k == PACK_IQ3      ? TKV__PACK_ROWS * nb * TKV__IQ3_PACK_BLOCK
                         : k == PACK_IQ1      ? TKV__PACK_ROWS * nb * TKV__IQ1_PACK_BLOCK(type)
                                              : nb * TKV__Q6K_PACK_BLOCK;
    return (bytes + 63) / 64 * 64;
}

size_t tkv__pack_bytes(tkv_type type, size_t n, size_t nr) {
    return (nr + TKV__PACK_ROWS - 1) / TKV__PACK_ROWS * tkv__pack_stride(type, n);
}

void tkv__pack_rows(tkv_type type, const void *w, size_t n, size_t nr, void *out) {
    const pack_kind kind = kind_of(type);
    const size_t be = tkv__quant_block_elems(type);
    assert(kind != PACK_NONE && n % be == 0);
    const size_t nb = n / be, bs = tkv__quant_row_size(type, be), rs = nb * bs, stride = tkv__pack_stride(type, n);
    const uint8_t *src = w;
    uint8_t *dst = out;
    memset(dst, 0, tkv__pack_bytes(type, n, nr));
    superblocks_fn *const pack_superblocks = superblock_packers[type];
    if (pack_superblocks) {
        for (size_t r = 0; r < nr; r += TKV__PACK_ROWS) {
            const void *rows[TKV__PACK_ROWS];
            for (size_t k = 0; k < TKV__PACK_ROWS; k++) rows[k] = r + k < nr ? src + (r + k) * rs : NULL;
            pack_superblocks(rows, 0, nb, dst + r / TKV__PACK_ROWS * stride);
        }
        return;
    }
    for (size_t r = 0; r < nr; r++) {
        uint8_t *g = dst + r / TKV__PACK_ROWS * stride;
        const size_t k = r % TKV__PACK_ROWS;
        const uint8_t *row = src + r * rs;
        if (kind == PACK_IQ2) {
            for (size_t i = 0; i < nb; i++)
                iq2_planes(type, row + i * bs, g + (k * nb + i) * TKV__IQ2_PACK_BLOCK);
            continue;
        }
        if (kind == PACK_IQ3) {
            for (size_t i = 0; i < nb; i++)
                iq3_nibbles(type, row + i * bs, g + (k * nb + i) * TKV__IQ3_PACK_BLOCK);
            continue;
        }
        if (kind == PACK_IQ1) {
            for (size_t i = 0; i < nb; i++)
                iq1_planes(type, row + i * bs, g + (k * nb + i) * TKV__IQ1_PACK_BLOCK(type));
            continue;
        }
        if (kind == PACK_Q8_0) {
            const tkv__block_q8_0 *b = (const tkv__block_q8_0 *)(const void *)row;
            for (size_t i = 0; i < nb; i++) {
                for (size_t j = 0; j < 8; j++) memcpy(g + tkv__q8_0_pack_quants(i) + 64 * j + 4 * k, b[i].qs + 4 * j, 4);
                memcpy(g + tkv__q8_0_pack_scales(i) + 2 * k, &b[i].d, 2);
            }
            continue;
        }
        if (kind == PACK_Q5_0) {
            const tkv__block_q5_0 *b = (const tkv__block_q5_0 *)(const void *)row;
            for (size_t i = 0; i < nb; i++) {
                uint8_t *o = g + i * TKV__Q5_0_PACK_BLOCK;
                for (size_t j = 0; j < 4; j++) memcpy(o + j * Q4_0_CHUNK + 4 * k, b[i].qs + 4 * j, 4);
                const uint32_t fifth = q5_0_fifth_by_step(b[i].qh);
                memcpy(o + TKV__Q5_0_PACK_FIFTH + 4 * k, &fifth, 4);
                memcpy(o + TKV__Q5_0_PACK_SCALES + 2 * k, &b[i].d, 2);
            }
            continue;
        }
        const tkv__block_q4_0 *b = (const tkv__block_q4_0 *)(const void *)row;
        for (size_t i = 0; i < nb; i++) {
            for (size_t j = 0; j < 4; j++) memcpy(g + tkv__b4_pack_quants(i) + j * Q4_0_CHUNK + 4 * k, b[i].qs + 4 * j, 4);
            memcpy(g + tkv__b4_pack_scales(i) + 2 * k, &b[i].d, 2);
        }
    }
}

void tkv__pack_k45_blocks(const void *const rows[TKV__PACK_ROWS], int five, size_t i0, size_t i1, void *out) {
    _Static_assert(TKV__K45_PACK_BLOCK(0) % 64 == 0 && TKV__K45_PACK_BLOCK(1) % 64 == 0,
                   "a superblock of a group fills whole cache lines");
    _Static_assert(sizeof(tkv__block_q5_K) == sizeof(tkv__block_q4_K) + 32, "Q5_K is Q4_K with qh before qs");
    const size_t bs = five ? sizeof(tkv__block_q5_K) : sizeof(tkv__block_q4_K), S = TKV__K45_PACK_SCALES(five);
    uint8_t *o = out;
    for (size_t i = i0; i < i1; i++, o += TKV__K45_PACK_BLOCK(five)) {
        memset(o, 0, TKV__K45_PACK_BLOCK(five));
        for (size_t k = 0; k < TKV__PACK_ROWS; k++) {
            if (!rows[k]) continue;
            /* d, dmin and scales sit at the same place in both; Q5_K's qs after its qh */
            const uint8_t *blk = (const uint8_t *)rows[k] + i * bs;
            const tkv__block_q4_K *b = (const tkv__block_q4_K *)(const void *)blk;
            const uint8_t *qs = five ? ((const tkv__block_q5_K *)(const void *)blk)->qs : b->qs;
            uint8_t sm[16];
            tkv__quant_k4_unpack(b->scales, sm);
            for (size_t c = 0; c < 4; c++)
                for (size_t j = 0; j < 8; j++) memcpy(o + 64 * (8 * c + j) + 4 * k, qs + 32 * c + 4 * j, 4);
            if (five) {
                const uint8_t *qh = ((const tkv__block_q5_K *)(const void *)blk)->qh;
                for (size_t j = 0; j < 8; j++) memcpy(o + TKV__K45_PACK_QH + 64 * j + 4 * k, qh + 4 * j, 4);
            }
            for (size_t g = 0; g < 8; g++) {
                o[S + 16 * g + k] = sm[g];
                o[S + 128 + 32 * (g / 2) + 2 * k + g % 2] = sm[8 + g];
            }
            memcpy(o + S + 256 + 2 * k, &b->d, 2);
            memcpy(o + S + 288 + 2 * k, &b->dmin, 2);
        }
    }
}

void tkv__pack_q4k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out) {
    tkv__pack_k45_blocks(rows, 0, i0, i1, out);
}

void tkv__pack_q5k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out) {
    tkv__pack_k45_blocks(rows, 1, i0, i1, out);
}

void tkv__pack_q2k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out) {
    _Static_assert(TKV__Q2K_PACK_BLOCK % 64 == 0 && TKV__Q2K_PACK_BLOCK == TKV__PACK_ROWS * sizeof(tkv__block_q2_K),
                   "a superblock of a group fills whole cache lines with the file's bytes");
    uint8_t *o = out;
    for (size_t i = i0; i < i1; i++, o += TKV__Q2K_PACK_BLOCK) {
        memset(o, 0, TKV__Q2K_PACK_BLOCK);
        for (size_t k = 0; k < TKV__PACK_ROWS; k++) {
            if (!rows[k]) continue;
            const tkv__block_q2_K *b = (const tkv__block_q2_K *)rows[k] + i;
            for (size_t j = 0; j < 16; j++) memcpy(o + 64 * j + 4 * k, b->qs + 4 * j, 4);
            for (size_t sb = 0; sb < 16; sb++) o[TKV__Q2K_PACK_SCALES + 32 * (sb / 2) + 2 * k + sb % 2] = b->scales[sb];
            memcpy(o + TKV__Q2K_PACK_D + 2 * k, &b->d, 2);
            memcpy(o + TKV__Q2K_PACK_DMIN + 2 * k, &b->dmin, 2);
        }
    }
}

void tkv__pack_q3k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out) {
    _Static_assert(TKV__Q3K_PACK_BLOCK % 64 == 0 && 2 * TKV__PACK_ROWS == 32,
                   "a superblock of a run fills whole cache lines, and a d per row fills its 32 bytes");
    uint8_t *o = out, *ds = (uint8_t *)out + TKV__Q3K_PACK_DS(i1 - i0, 0);
    memset(ds, 0, 32 * (i1 - i0));
    for (size_t i = i0; i < i1; i++, o += TKV__Q3K_PACK_BLOCK, ds += 32) {
        memset(o, 0, TKV__Q3K_PACK_BLOCK);
        for (size_t k = 0; k < TKV__PACK_ROWS; k++) {
            if (!rows[k]) continue;
            const tkv__block_q3_K *b = (const tkv__block_q3_K *)rows[k] + i;
            int8_t sc[16];
            tkv__q3_K_scales(b->scales, sc);
            for (size_t j = 0; j < 16; j++) memcpy(o + 64 * j + 4 * k, b->qs + 4 * j, 4);
            for (size_t u = 0; u < 8; u++) memcpy(o + TKV__Q3K_PACK_HMASK + 64 * u + 4 * k, b->hmask + 4 * u, 4);
            for (size_t sb = 0; sb < 16; sb++) o[TKV__Q3K_PACK_SCALES + 32 * (sb / 2) + 2 * k + sb % 2] = (uint8_t)sc[sb];
            memcpy(ds + 2 * k, &b->d, 2);
        }
    }
}

void tkv__pack_iq4xs_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out) {
    _Static_assert(TKV__IQ4XS_PACK_BLOCK % 64 == 0 && TKV__IQ4XS_PACK_D + 2 * TKV__PACK_ROWS <= TKV__IQ4XS_PACK_BLOCK,
                   "a superblock of a group fills whole cache lines");
    uint8_t *o = out;
    for (size_t i = i0; i < i1; i++, o += TKV__IQ4XS_PACK_BLOCK) {
        memset(o, 0, TKV__IQ4XS_PACK_BLOCK);
        for (size_t k = 0; k < TKV__PACK_ROWS; k++) {
            if (!rows[k]) continue;
            const tkv__block_iq4_xs *b = (const tkv__block_iq4_xs *)rows[k] + i;
            for (int sb = 0; sb < 8; sb++) {
                for (size_t j = 0; j < 4; j++) memcpy(o + 256 * (size_t)sb + 64 * j + 4 * k, b->qs + 16 * sb + 4 * j, 4);
                o[TKV__IQ4XS_PACK_SCALES + 16 * sb + k] = (uint8_t)(int8_t)tkv__iq4_xs_scale(b, sb);
            }
            memcpy(o + TKV__IQ4XS_PACK_D + 2 * k, &b->d, 2);
        }
    }
}

void tkv__pack_q6k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out) {
    _Static_assert(TKV__Q6K_PACK_BLOCK % 64 == 0 && TKV__Q6K_PACK_D + 2 * TKV__PACK_ROWS <= TKV__Q6K_PACK_BLOCK,
                   "a superblock of a group fills whole cache lines");
    uint8_t *o = out;
    for (size_t i = i0; i < i1; i++, o += TKV__Q6K_PACK_BLOCK) {
        memset(o, 0, TKV__Q6K_PACK_BLOCK);
        for (size_t k = 0; k < TKV__PACK_ROWS; k++) {
            if (!rows[k]) continue;
            const tkv__block_q6_K *b = (const tkv__block_q6_K *)rows[k] + i;
            for (size_t n = 0; n < 2; n++)
                for (size_t m = 0; m < 8; m++) {
                    uint8_t *u = o + TKV__Q6K_PACK_UNIT * (8 * n + m);
                    memcpy(u + 4 * k, b->ql + 64 * n + 4 * m, 4);
                    memcpy(u + 64 + 4 * k, b->ql + 64 * n + 32 + 4 * m, 4);
                    memcpy(u + 128 + 4 * k, b->qh + 32 * n + 4 * m, 4);
                }
            for (size_t g = 0; g < 16; g++) o[TKV__Q6K_PACK_SCALES + 32 * (g / 2) + 2 * k + g % 2] = (uint8_t)b->scales[g];
            memcpy(o + TKV__Q6K_PACK_D + 2 * k, &b->d, 2);
        }
    }
}
