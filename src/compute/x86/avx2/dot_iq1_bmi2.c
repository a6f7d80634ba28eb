/*
 * compute/x86/avx2/dot_iq1_bmi2.c — the avx2 level's IQ1_S and IQ1_M dots with BMI2's pdep
 * (compute/x86/iq1.h built with -mbmi2): each sub-block's four grid indices are put together in a
 * general register instead of a vector unpack per super-block and an index table on the stack.
 * The same grid points, integers and float operations, so the same bits as dot_iq1.c's dots, and
 * its tiled products stay theirs.
 *
 * A part of its own (tkv__kernel_avx2_bmi2_part), which kernels.c lays over the avx2 level only
 * where pdep is fast: every AVX2 CPU has BMI2, but AMD's before Zen 3 (family 0x17, and Hygon's
 * 0x18) run pdep in microcode, tens of cycles, where these dots would lose what they gain.
 */
#include "compute/gemm.h"
#include "compute/kernels.h"
#include "compute/x86/iq1.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__BMI2__)

float tkv__dot_iq1_s_avx2_bmi2(size_t n, const void *w, const void *a) {
    return iq1_s_dot(n, w, a);
}

float tkv__dot_iq1_m_avx2_bmi2(size_t n, const void *w, const void *a) {
    return iq1_m_dot(n, w, a);
}

const tkv__kernels tkv__kernel_avx2_bmi2_part = {
    .level = TKV__KERNEL_AVX2,
    .name = "avx2",
    .vec_dot = {[TKV_TYPE_IQ1_S] = tkv__dot_iq1_s_avx2_bmi2, [TKV_TYPE_IQ1_M] = tkv__dot_iq1_m_avx2_bmi2},
    /* dot_iq1.c's tiled products: bit for bit these dots too */
    .gemm = {[TKV_TYPE_IQ1_S] = tkv__gemm_iq1_s_avx2, [TKV_TYPE_IQ1_M] = tkv__gemm_iq1_m_avx2},
    /* packed_planes.c's products over IQ1 planes: bit for bit these dots too */
    .packed = {[TKV_TYPE_IQ1_S] = tkv__packed_iq1_s_avx2, [TKV_TYPE_IQ1_M] = tkv__packed_iq1_m_avx2},
};

#else /* not an x86-64 build with AVX2 flags: an empty part, never laid over */

const tkv__kernels tkv__kernel_avx2_bmi2_part = {.level = TKV__KERNEL_AVX2, .name = NULL};

#endif
