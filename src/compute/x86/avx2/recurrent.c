/*
 * compute/x86/avx2/recurrent.c — the recurrent layers' per-token steps, the
 * gated delta net's (kernels.h tkv__delta_step_fn) and Mamba-2's
 * (tkv__ssm_step_fn), 8 outputs at a time: a lane is one output, summed in
 * the scalar twin's sequence of separate multiplies and adds (this file is
 * compiled with -ffp-contract=off so that none is fused), so every level
 * gives the scalar level's bits; a tail of fewer than 8 outputs runs the
 * same sequence one by one.
 */
#include "compute/kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

void tkv__delta_step_avx2(float *S, const float *q, const float *k, const float *v, float decay, float beta, float scale,
                         uint32_t dk, uint32_t dv, float *o) {
    const uint32_t nv = dv / 8 * 8;
    const __m256 vdecay = _mm256_set1_ps(decay), vbeta = _mm256_set1_ps(beta), vscale = _mm256_set1_ps(scale);
    for (uint32_t j = 0; j < nv; j += 8) { /* outputs j..j+7: column block j of S (dk rows of dv) */
        __m256 kv = _mm256_setzero_ps();
        for (uint32_t i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(s), vdecay);
            _mm256_storeu_ps(s, r);
            kv = _mm256_add_ps(kv, _mm256_mul_ps(r, _mm256_set1_ps(k[i])));
        }
        const __m256 delta = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + j), kv), vbeta);
        __m256 qo = _mm256_setzero_ps();
        for (uint32_t i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            const __m256 r = _mm256_add_ps(_mm256_loadu_ps(s), _mm256_mul_ps(_mm256_set1_ps(k[i]), delta));
            _mm256_storeu_ps(s, r);
            qo = _mm256_add_ps(qo, _mm256_mul_ps(r, _mm256_set1_ps(q[i])));
        }
        _mm256_storeu_ps(o + j, _mm256_mul_ps(qo, vscale));
    }
    for (uint32_t j = nv; j < dv; j++) { /* the tail, as the scalar twin */
        float kv = 0;
        for (uint32_t i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            *s = *s * decay;
            kv = kv + *s * k[i];
        }
        const float delta = (v[j] - kv) * beta;
        float qo = 0;
        for (uint32_t i = 0; i < dk; i++) {
            float *s = S + (size_t)i * dv + j;
            *s = *s + k[i] * delta;
            qo = qo + *s * q[i];
        }
        o[j] = qo * scale;
    }
}

void tkv__ssm_step_avx2(float *S, const float *x, const float *B, const float *C, float dt, float dA, uint32_t hd,
                       uint32_t ds, float *y) {
    const uint32_t nv = hd / 8 * 8;
    const __m256 vA = _mm256_set1_ps(dA), vdt = _mm256_set1_ps(dt);
    for (uint32_t i = 0; i < nv; i += 8) { /* outputs i..i+7: column block i of S (ds rows of hd) */
        const __m256 xdt = _mm256_mul_ps(_mm256_loadu_ps(x + i), vdt);
        __m256 sum = _mm256_setzero_ps();
        for (uint32_t j = 0; j < ds; j++) {
            float *s = S + (size_t)j * hd + i;
            const __m256 r = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(s), vA), _mm256_mul_ps(_mm256_set1_ps(B[j]), xdt));
            _mm256_storeu_ps(s, r);
            sum = _mm256_add_ps(sum, _mm256_mul_ps(r, _mm256_set1_ps(C[j])));
        }
        _mm256_storeu_ps(y + i, sum);
    }
    for (uint32_t i = nv; i < hd; i++) { /* the tail, as the scalar twin */
        const float x_dt = x[i] * dt;
        float sum = 0;
        for (uint32_t j = 0; j < ds; j++) {
            float *s = S + (size_t)j * hd + i;
            *s = *s * dA + B[j] * x_dt;
            sum = sum + *s * C[j];
        }
        y[i] = sum;
    }
}

#endif
