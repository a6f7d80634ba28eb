/*
 * compute/x86/avx512/dot_iq1.c — the IQ1_S and IQ1_M dot products of compute/x86/iq1.h built with
 * this level's flags: the avx2 level's C, bit for bit its results, with 32 vector registers where the
 * avx2 build has 16 and spills in the sub-block loop. The tiled products stay the avx2 level's (bit for
 * bit these dots, so the table pairs them).
 */
#include "compute/gemm.h"
#include "compute/x86/iq1.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX2__)

float tkv__dot_iq1_s_avx512(size_t n, const void *w, const void *a) {
    return iq1_s_dot(n, w, a);
}

float tkv__dot_iq1_m_avx512(size_t n, const void *w, const void *a) {
    return iq1_m_dot(n, w, a);
}

#endif
