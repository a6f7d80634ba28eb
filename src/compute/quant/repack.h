/*
 * compute/quant/repack.h — weight rows rearranged at load time into the layout a level's
 * products read fastest ("packed rows"), next to the file's own rows.
 *
 * Two layouts, both in groups of TKV__PACK_ROWS = 16 rows (rows past the
 * matrix's end are zero), the next group tkv__pack_stride() bytes on (a
 * multiple of 64), each group one sequential stream of the same bytes as
 * the file's rows in another order.
 *
 * Transposed (Q4_0 and IQ4_NL: one block layout, an fp16 d and 16 bytes
 * of nibbles; the products over it are in each level's gemm_q4_0_iq4_nl.c):
 * rows in groups of TKV__PACK_ROWS = 16, so that a zmm's lane k is row k of
 * the group and a block of 16 rows reduces to one integer per lane with no
 * transposes. Group g (rows 16 g .. 16 g + 15; rows past the matrix's end
 * are zero) of a matrix with nb blocks per row holds its blocks in pairs of
 * TKV__B4_PACK_PAIR = 576 bytes (9 cache lines), pair p = blocks 2p, 2p + 1:
 *
 *   bytes [0, 256)      quants of block 2p, as 4 chunks of 64 bytes; chunk j,
 *                       bytes 4k .. 4k + 3 = row k's qs[4j .. 4j + 3] (both
 *                       nibbles, as stored)
 *   bytes [256, 512)    quants of block 2p + 1, the same way
 *   bytes [512, 576)    scales of block 2p, then of 2p + 1: row k's fp16 d
 *                       at + 2k
 *
 * (tkv__b4_pack_quants, tkv__b4_pack_scales); an odd nb's last pair has its
 * second block's bytes zero. With the scales inline a group is one stream,
 * as Q8_0's below: the quants and a separate run of scales after them (the
 * order before) read 32-34 GB/s from memory on one thread where this one
 * reads more (bench/RESULTS.md, "Q4_0 and IQ4_NL in one stream").
 *
 * Transposed Q8_0 (the same products): the same chunks, 8 a block (32
 * bytes a row), with the scales inline so that a group is one stream,
 * which the hardware prefetcher follows alone (the order above, with
 * software prefetches, read 39-44 GB/s from memory on two threads here;
 * one stream without them, 58-81: bench/RESULTS.md):
 * blocks in pairs of TKV__Q8_0_PACK_PAIR = 1088 bytes (17 cache lines),
 * block i's quants at tkv__q8_0_pack_quants(i) (chunk j at + 64 j, bytes
 * 4k .. 4k + 3 = row k's qs[4j .. 4j + 3]) and its scales at
 * tkv__q8_0_pack_scales(i) (row k's fp16 d at + 2k); an odd nb's last pair
 * has its second block's bytes zero.
 *
 * Transposed Q4_K and Q5_K (the block-reduced products of each level's
 * gemm_q4_q5_k.c): superblock i of the group at tkv__pack_k45_block(type) i,
 * 2368 bytes for Q4_K (37 cache lines), 2880 for Q5_K (45):
 *
 *   [0, 2048)     quants: chunk 8c + j (c < 4, j < 8) at 64 (8c + j), bytes
 *                 4k .. 4k + 3 = row k's qs[32c + 4j .. 32c + 4j + 3] (the low
 *                 nibbles multiply activations 64c + 4j.., group 2c; the high
 *                 ones 64c + 32 + 4j.., group 2c + 1)
 *   Q5_K only: [2048, 2560) fifth bits: chunk j (j < 8) at 2048 + 64j, bytes
 *                 4k .. 4k + 3 = row k's qh[4j .. 4j + 3] (bit 2c of each the
 *                 fifth bit of its low-nibble element of chunk 8c + j, bit
 *                 2c + 1 of the high one's)
 *   then (at S = 2048, Q5_K 2560):
 *   [S, S + 128)        scales: byte 16g + k = row k's 6-bit scale of group g
 *   [S + 128, S + 256)  mins: byte 32h + 2k + e = row k's 6-bit min of group 2h + e
 *                       (a word pair per row: one vpmaddwd with a token's group sums)
 *   [S + 256, S + 288)  row k's fp16 d at + 2k;  [S + 288, S + 320) its fp16 dmin at + 2k
 *
 * (Q4_K 2.8%, Q5_K 2.3% more bytes than the file's: the scales unpacked to bytes).
 *
 * Transposed Q2_K (the block-reduced products of each level's gemm_q2_q3_k.c):
 * superblock i of the group at TKV__Q2K_PACK_BLOCK i = 1344 i (21 cache
 * lines, the file's bytes):
 *
 *   [0, 1024)     quants: chunk j (j < 16) at 64 j, bytes 4k .. 4k + 3 = row
 *                 k's qs[4j .. 4j + 3] (bits 2s of each: element 128 (j / 8) +
 *                 32 s + 4 (j % 8) + 0..3, sub-block 8 (j / 8) + 2 s + (j % 8) / 4)
 *   [1024, 1280)  scales and mins as the file's bytes (scale low nibble, min
 *                 high): byte 32h + 2k + e = row k's byte of sub-block 2h + e
 *                 (a word pair per row once widened: one vpmaddwd or
 *                 vpdpwssd with a token's two sums of 16)
 *   [1280, 1312)  row k's fp16 d at + 2k;  [1312, 1344) its fp16 dmin at + 2k
 *
 * Transposed Q3_K (the block-reduced products of each level's gemm_q2_q3_k.c):
 * a run of cnt superblocks (a group's nb, or a panel of them packed on a
 * product's stack) holds superblock i at TKV__Q3K_PACK_BLOCK i = 1792 i (28
 * cache lines), then the run's d: superblock i's at TKV__Q3K_PACK_DS(cnt, i)
 * = 1792 cnt + 32 i, row k's fp16 d at + 2k (3.6% over the file's bytes,
 * the scales unpacked to bytes):
 *
 *   [0, 1024)     quants: as Q2_K's (the two low bits of each element)
 *   [1024, 1536)  high bits: chunk u (u < 8) at 1024 + 64u, bytes 4k .. 4k + 3
 *                 = row k's hmask[4u .. 4u + 3] (bit 4h + s of each: element
 *                 128h + 32s + 4u + 0..3's, for quant chunk 8h + u)
 *   [1536, 1792)  scales: byte 32h + 2k + e = row k's sc - 32 (a signed byte)
 *                 of sub-block 2h + e
 *
 * The d's apart keep a superblock at 28 lines: with them inside (29 lines,
 * the 29th d and zeros) two threads from memory read 18-25% slower
 * (bench_kernels -n 2048 -r 262144 -T 2 -c 2048, Zen 5: 32-36 against 38-45
 * GB/s; 30 lines read as 29, 27 as 28), and llama1b Q3_K_M generated 2-14%
 * slower (bench/RESULTS.md).
 *
 * Transposed IQ4_XS (the block-reduced products of each level's
 * gemm_iq4_xs.c): superblock i of the group at TKV__IQ4XS_PACK_BLOCK i =
 * 2240 i (35 cache lines: 2.9% over the file's bytes, the scales unpacked
 * to bytes):
 *
 *   [0, 2048)     quants: sub-block b (b < 8) at 256 b, as a Q4_0 block's
 *                 (chunk j at 256 b + 64 j, bytes 4k .. 4k + 3 = row k's
 *                 qs[16 b + 4j .. 16 b + 4j + 3]: the low nibbles elements
 *                 32 b + 4j.., the high ones 32 b + 16 + 4j..)
 *   [2048, 2176)  scales: byte 16 b + k = row k's ls_b - 32 (a signed byte)
 *   [2176, 2208)  row k's fp16 d at + 2k; then 32 bytes of zeros
 *
 * Transposed Q5_0 (the avx2 level's block-reduced products, in its
 * gemm_q4_0_iq4_nl.c): one stream, block i of the group at
 * TKV__Q5_0_PACK_BLOCK i = 352 i (11 x 32 bytes: the file's bytes),
 *
 *   [0, 256)      quants: as Q4_0's block (chunk j at 64 j, bytes 4k .. 4k + 3
 *                 = row k's qs[4j .. 4j + 3])
 *   [256, 320)    fifth bits: row k's 32 at + 4k, bit 8b + s of them the fifth
 *                 bit of its element 4s + b (s the product's step: bit s of
 *                 every byte, which one shift brings to bit 4 for all rows)
 *   [320, 352)    row k's fp16 d at + 2k
 *
 * Transposed Q6_K (the block-reduced products of each level's gemm_q6_k.c):
 * superblock i of the group at TKV__Q6K_PACK_BLOCK i = 3392 i (53 cache
 * lines: 1% over the file's bytes), in 16 units of TKV__Q6K_PACK_UNIT =
 * 192 bytes, unit 8n + m (n < 2, m < 8) at 192 (8n + m), so that a unit
 * holds all the bits of 4 elements of each of 4 sub-blocks:
 *
 *   [0, 64)       bytes 4k .. 4k + 3 = row k's ql[64n + 4m ..] (low nibbles:
 *                 elements 128n + 4m.., high: 128n + 64 + 4m..)
 *   [64, 128)     row k's ql[64n + 32 + 4m ..] (elements 128n + 32 + 4m..
 *                 and 128n + 96 + 4m..)
 *   [128, 192)    row k's qh[32n + 4m ..] (bits 0-1, 2-3, 4-5, 6-7: the
 *                 high bits of those four elements, in that order)
 *   then [3072, 3328)  scales: byte 32 p + 2 k + e = row k's scale of
 *                 sub-block 2 p + e (a row's pair as one word pair: the
 *                 multipliers of vpmaddwd and vpdpwssd)
 *   [3328, 3360)  row k's fp16 d at + 2k; then 32 bytes of zeros
 *
 * IQ2 planes (IQ2_XXS, IQ2_XS and IQ2_S; the one product over all three is
 * compute/x86/avx2/packed_planes.c's): not transposed, a row at a time, row k of
 * the group at TKV__IQ2_PACK_BLOCK nb k, its block i TKV__IQ2_PACK_BLOCK i on,
 * each block's 256 elements as the 3 bits that decide them. Every byte of the
 * three grids is a level 8, 25 or 43 (compute/quant/grids.c), whose code
 * 0, 1, 2 one vpshufb turns back into the level; the 8 signs of a group are
 * stored whatever rule made them (IQ2_XXS's and IQ2_XS's parity, IQ2_S's
 * bytes). Element e (e < 32) of sub-block b of a block of 106 bytes:
 *
 *   [0, 64)       codes: bits 2 (b % 4), + 1 of byte 32 (b / 4) + e
 *   [64, 96)      signs: bit b of byte 64 + e (set: negative)
 *   [96, 98)      the block's fp16 d
 *   [98, 106)     scales: byte 98 + b = the low nibble ls of the sub-block's
 *                 first 16 elements, the high one of its last 16 (IQ2_XS's
 *                 and IQ2_S's byte; IQ2_XXS's one ls in both nibbles)
 *
 * The same integers in the same lanes as the vec_dots, so the same floats.
 * The block is 43% over IQ2_XS's 74 bytes (29% over IQ2_S's 82, 61% over
 * IQ2_XXS's 66): a one-token product decodes a sub-block in five vector
 * operations where the file's 16-bit indices take some forty scalar ones
 * (bench/RESULTS.md).
 *
 * IQ3 nibbles (IQ3_XXS and IQ3_S, the same product): as the IQ2 planes, a
 * row at a time, row k of the group at TKV__IQ3_PACK_BLOCK nb k. Each
 * element is a nibble, its sign (set: negative) over the 3-bit code of its
 * grid level (IQ3_XXS's 4, 12, .., 52, 62 and IQ3_S's 1, 3, .., 15 are
 * codes 0..7, which one vpshufb turns back into the level). Element e (e <
 * 32) of sub-block b of a block of 138 bytes:
 *
 *   [0, 128)      nibbles: the low nibble of byte 32 (b / 2) + e for even b,
 *                 the high one for odd b
 *   [128, 136)    byte 128 + b = the sub-block's 2 ls + 1
 *   [136, 138)    the block's fp16 d
 *
 * (41% over IQ3_XXS's 98 bytes, 25% over IQ3_S's 110: the 4.3 bits an
 * element of IQ4_XS.)
 *
 * IQ1 planes (IQ1_S and IQ1_M): as the IQ2 planes, a row at a time, row k
 * of the group at TKV__IQ1_PACK_BLOCK(type) nb k. The grid's values are -1,
 * 0 and +1; element e (e < 32) of sub-block b:
 *
 *   [0, 32)       magnitudes: bit b of byte e (set: the value is not 0)
 *   [32, 64)      signs: bit b of byte 32 + e (set: the value is -1)
 *   IQ1_S, 74 bytes (+48% over its 50):
 *   [64, 72)      byte 64 + b = the top nibble of qh[b]: the scale s in
 *                 bits 0-2, the shift's sign in bit 3
 *   [72, 74)      the block's fp16 d
 *   IQ1_M, 86 bytes (+54% over its 56):
 *   [64, 80)      byte 64 + h = the 2 ls + 1 of half h of the block (half
 *                 2b + j: sub-block b's elements 16 j ..)
 *   [80, 84)      a little-endian uint32: bit j (j < 16) the shift sign of
 *                 group 2j, bit 16 + j that of group 2j + 1
 *   [84, 86)      the block's fp16 d, assembled from its scales
 *
 */
#ifndef TKV_REPACK_H
#define TKV_REPACK_H

#include "tokenkv_types.h"

#include <stddef.h>

#define TKV__PACK_ROWS 16

/*
 * Whether `type` has a packed layout (Q4_0, IQ4_NL, Q8_0, Q5_0, Q4_K, Q5_K, Q2_K, Q3_K, IQ4_XS, Q6_K, IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M). A level's kernel table says
 * whether it has a product that reads it (kernels.h, `packed`).
 */
int tkv__pack_supported(tkv_type type);

/* Bytes from one group of packed rows of n elements to the next; 0 when
   the type has no packed layout. */
size_t tkv__pack_stride(tkv_type type, size_t n);

/* Bytes of nr rows of n elements, packed (whole groups). */
size_t tkv__pack_bytes(tkv_type type, size_t n, size_t nr);

/*
 * Rearrange nr rows of n elements (the file's layout, row_size bytes apart
 * from w) into out (tkv__pack_bytes bytes, 64-byte aligned for the kernels'
 * aligned loads). Preconditions: tkv__pack_supported(type), n a multiple of
 * the block size.
 */
void tkv__pack_rows(tkv_type type, const void *w, size_t n, size_t nr, void *out);

/* Offsets in one Q4_K (five = 0) or Q5_K (five = 1) superblock of a packed group (above). */
#define TKV__K45_PACK_QH 2048
#define TKV__K45_PACK_SCALES(five) ((five) ? 2560 : 2048)
#define TKV__K45_PACK_MINS(five) (TKV__K45_PACK_SCALES(five) + 128)
#define TKV__K45_PACK_D(five) (TKV__K45_PACK_SCALES(five) + 256)
#define TKV__K45_PACK_DMIN(five) (TKV__K45_PACK_SCALES(five) + 288)
#define TKV__K45_PACK_BLOCK(five) (TKV__K45_PACK_SCALES(five) + 320)

/*
 * Superblocks [i0, i1) of 16 Q4_K (five = 0) or Q5_K (five = 1) rows
 * (rows[k]: row k's blocks; NULL: a row of zeros) in the transposed layout
 * above, superblock i at out + (i - i0) TKV__K45_PACK_BLOCK(five): what
 * tkv__pack_rows writes for a group, and what the products over the file's
 * rows build a panel of on the stack.
 */
void tkv__pack_k45_blocks(const void *const rows[TKV__PACK_ROWS], int five, size_t i0, size_t i1, void *out);
/* The same for Q4_K (five = 0) and Q5_K (five = 1) alone, with the other layouts' signature. */
void tkv__pack_q4k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out);
void tkv__pack_q5k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out);

/* Where block i of a packed Q8_0 group (above) has its quants and its scales. */
#define TKV__Q8_0_PACK_PAIR 1088
static inline size_t tkv__q8_0_pack_quants(size_t i) {
    return i / 2 * TKV__Q8_0_PACK_PAIR + i % 2 * 512;
}

static inline size_t tkv__q8_0_pack_scales(size_t i) {
    return i / 2 * TKV__Q8_0_PACK_PAIR + 1024 + i % 2 * 32;
}

/* Where block i of a packed Q4_0 or IQ4_NL group (above) has its quants and its scales. */
#define TKV__B4_PACK_PAIR 576
static inline size_t tkv__b4_pack_quants(size_t i) {
    return i / 2 * TKV__B4_PACK_PAIR + i % 2 * 256;
}

static inline size_t tkv__b4_pack_scales(size_t i) {
    return i / 2 * TKV__B4_PACK_PAIR + 512 + i % 2 * 32;
}

/* Offsets in one Q5_0 block of a packed group (above). */
#define TKV__Q5_0_PACK_FIFTH 256
#define TKV__Q5_0_PACK_SCALES 320
#define TKV__Q5_0_PACK_BLOCK 352

/* Offsets in one Q2_K superblock of a packed group (above). */
#define TKV__Q2K_PACK_SCALES 1024
#define TKV__Q2K_PACK_D 1280
#define TKV__Q2K_PACK_DMIN 1312
#define TKV__Q2K_PACK_BLOCK 1344

/* Superblocks [i0, i1) of 16 Q2_K rows (rows[k]: row k's blocks; NULL: a row of zeros) in the transposed layout
   above, superblock i at out + (i - i0) TKV__Q2K_PACK_BLOCK: as tkv__pack_k45_blocks. */
void tkv__pack_q2k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out);

/* Offsets in one Q3_K superblock of a packed run (above), and of superblock i's d in a run of cnt. */
#define TKV__Q3K_PACK_HMASK 1024
#define TKV__Q3K_PACK_SCALES 1536
#define TKV__Q3K_PACK_BLOCK 1792
#define TKV__Q3K_PACK_DS(cnt, i) (TKV__Q3K_PACK_BLOCK * (size_t)(cnt) + 32 * (size_t)(i))

/* The same for 16 Q3_K rows as one run of i1 - i0 superblocks (TKV__Q3K_PACK_RUN(i1 - i0) bytes at out),
   superblock i at out + (i - i0) TKV__Q3K_PACK_BLOCK, its d at out + TKV__Q3K_PACK_DS(i1 - i0, i - i0). */
void tkv__pack_q3k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out);

/* Bytes of a packed Q3_K run of cnt superblocks (its d's included). */
#define TKV__Q3K_PACK_RUN(cnt) ((size_t)(cnt) * (TKV__Q3K_PACK_BLOCK + 32))

/* A one-token product streaming runs of cnt superblocks (a group's, one after the other) at superblock i asks for
   the d's of superblock i + TKV__Q3K_PACK_D_AHEAD: at this offset from the run, in it or past its end in the next
   run. The d's lie after the superblocks, where the products' far prefetch reaches them a few superblocks into a
   run: the first d's of a run longer than ~18 superblocks (ffn_down's rows of 5632) were read from memory where
   they were needed (bench_kernels -n 5632 -c 2048 -T 2, avx512, Zen 5, each run between read probes, medians:
   71 -> 78 GB/s where the probe read 70 or more, 45.5 -> 48.1 under 60; rows of 2048 unchanged, 82 and 56). */
#define TKV__Q3K_PACK_D_AHEAD 8
#define TKV__Q3K_PACK_DS_NEXT(cnt, i)                                                                                  \
    ((i) + TKV__Q3K_PACK_D_AHEAD < (cnt) ? TKV__Q3K_PACK_DS(cnt, (i) + TKV__Q3K_PACK_D_AHEAD)                        \
                                         : TKV__Q3K_PACK_RUN(cnt) + TKV__Q3K_PACK_DS(cnt, (i) + TKV__Q3K_PACK_D_AHEAD - (cnt)))

/* Offsets in one IQ4_XS superblock of a packed group (above). */
#define TKV__IQ4XS_PACK_SCALES 2048
#define TKV__IQ4XS_PACK_D 2176
#define TKV__IQ4XS_PACK_BLOCK 2240

/* The same for 16 IQ4_XS rows, superblock i at out + (i - i0) TKV__IQ4XS_PACK_BLOCK. */
void tkv__pack_iq4xs_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out);

/* Offsets in one Q6_K superblock of a packed group (above). */
#define TKV__Q6K_PACK_UNIT 192
#define TKV__Q6K_PACK_SCALES 3072
#define TKV__Q6K_PACK_D 3328
#define TKV__Q6K_PACK_BLOCK 3392

/* The same for 16 Q6_K rows, superblock i at out + (i - i0) TKV__Q6K_PACK_BLOCK. */
void tkv__pack_q6k_blocks(const void *const rows[TKV__PACK_ROWS], size_t i0, size_t i1, void *out);

/* Offsets in one block of IQ1 planes (above). */
#define TKV__IQ1_PACK_MAGS 0
#define TKV__IQ1_PACK_SIGNS 32
#define TKV__IQ1S_PACK_SCALES 64
#define TKV__IQ1S_PACK_D 72
#define TKV__IQ1M_PACK_LS 64
#define TKV__IQ1M_PACK_SHIFTS 80
#define TKV__IQ1M_PACK_D 84
#define TKV__IQ1_PACK_BLOCK(type) ((type) == TKV_TYPE_IQ1_M ? 86 : 74)

/* Offsets in one block of IQ3 nibbles (above). */
#define TKV__IQ3_PACK_CODES 0
#define TKV__IQ3_PACK_SCALES 128
#define TKV__IQ3_PACK_D 136
#define TKV__IQ3_PACK_BLOCK 138

/* Offsets in one block of IQ2 planes (above). */
#define TKV__IQ2_PACK_CODES 0
#define TKV__IQ2_PACK_SIGNS 64
#define TKV__IQ2_PACK_D 96
#define TKV__IQ2_PACK_SCALES 98
#define TKV__IQ2_PACK_BLOCK 106

#endif
