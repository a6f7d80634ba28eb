/*
 * kernels.c — choosing the kernel table from what the CPU supports.
 *
 * On first use: detect the CPU features, build the complete table of every
 * supported level (scalar entries, overridden by avx2 ones, overridden by
 * avx512 ones; on CPUs that run pdep in hardware the avx2 level takes its
 * IQ1 dots with pdep too), and make the best one active. The environment variable
 * TKV_KERNELS=scalar|avx2|avx512 lowers the best level, as if the CPU
 * supported no more. Building a table only copies
 * function pointers out of static data, so nothing compiled with -mavx2 or
 * -mavx512* runs before the CPU is known to support it.
 */
#include "kernels.h"

#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static tkv__kernels tables[TKV__KERNEL_LEVELS]; /* complete tables */
static int supported[TKV__KERNEL_LEVELS];
static tkv__kernel_level best_level;
static _Atomic int active_level;
static int cpu_bf16_dot; /* AVX512_BF16, on a CPU of the avx512 level */
static int cpu_fast_pdep; /* BMI2 with pdep in hardware (tkv__kernel_cpu_fast_pdep) */

/* Copy the non-NULL entries of `part` over `t`. */
static void overlay_attn(tkv__attn_ops *t, const tkv__attn_ops *part) {
    if (part->dot) t->dot = part->dot;
    if (part->mad) t->mad = part->mad;
    if (part->scale) t->scale = part->scale;
    if (part->dot_f32) t->dot_f32 = part->dot_f32;
    if (part->mad_f32) t->mad_f32 = part->mad_f32;
    if (part->widen16) t->widen16 = part->widen16;
    if (part->scores16) t->scores16 = part->scores16;
    if (part->wsum16) t->wsum16 = part->wsum16;
    if (part->scores16_rows) t->scores16_rows = part->scores16_rows;
    if (part->wsum16_rows) t->wsum16_rows = part->wsum16_rows;
}

/* Copy the non-NULL entries of `part` (and of its level's attention set `attn`) over `t`. */
static void overlay(tkv__kernels *t, const tkv__kernels *part, const tkv__attn_ops *attn) {
    t->level = part->level;
    t->name = part->name;
    for (int i = 0; i < TKV_TYPE_COUNT; i++) {
        /* a tiled product must give its level's vec_dot bit for bit: it goes
           with that vec_dot, and a part replacing one drops the level
           below's (NULL: the product loops over that vec_dot) */
        if (part->vec_dot[i]) {
            t->vec_dot[i] = part->vec_dot[i], t->gemm[i] = part->gemm[i], t->gemv[i] = part->gemv[i];
            t->packed[i] = part->packed[i];
            t->lanes[i] = part->lanes[i], t->lanes_kn[i] = part->lanes_kn[i], t->lanes_ref[i] = part->lanes_ref[i];
        }
        if (part->vec_dot_ref[i]) t->vec_dot_ref[i] = part->vec_dot_ref[i], t->gemm_ref[i] = part->gemm_ref[i];
        if (part->quantize[i]) t->quantize[i] = part->quantize[i];
    }
    if (part->rmsnorm) t->rmsnorm = part->rmsnorm;
    if (part->softmax) t->softmax = part->softmax;
    if (part->silu) t->silu = part->silu;
    if (part->swiglu) t->swiglu = part->swiglu;
    if (part->softcap) t->softcap = part->softcap;
    if (part->rope_pairs) t->rope_pairs = part->rope_pairs;
    if (part->delta_step) t->delta_step = part->delta_step;
    if (part->ssm_step) t->ssm_step = part->ssm_step;
    overlay_attn(&t->attn, attn);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

/* XCR0: which register states the OS saves on a context switch. */
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* AMD's CPUs before Zen 3 (family 0x17, Hygon's Zen-based 0x18 and the older ones) run pdep and pext in
   microcode, 18 or more cycles each where later cores and Intel's take one. */
static int pdep_in_microcode(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 1;
    const int amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;   /* "AuthenticAMD" */
    const int hygon = b == 0x6f677948u && d == 0x6e65476eu && c == 0x656e6975u; /* "HygonGenuine" */
    if (!amd && !hygon) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 1;
    const unsigned family = ((a >> 8) & 0xf) + (((a >> 8) & 0xf) == 0xf ? (a >> 20) & 0xff : 0);
    return family < 0x19;
}

/*
 * CPUID and XGETBV rather than __builtin_cpu_supports, which not every
 * compiler we build with knows all of these names for (clang 14: "f16c").
 */
static tkv__kernel_level detect_x86(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return TKV__KERNEL_SCALAR;
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!(osxsave && avx && fma && f16c)) return TKV__KERNEL_SCALAR;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return TKV__KERNEL_SCALAR; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return TKV__KERNEL_SCALAR;
    const int avx2 = (b >> 5) & 1;
    if (!avx2) return TKV__KERNEL_SCALAR;
    const int avx512f = (b >> 16) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
    const int bmi2 = (b >> 8) & 1; /* every AVX-512 CPU has it; the level's IQ1_M dot uses pdep */
    cpu_fast_pdep = bmi2 && !pdep_in_microcode();
    const int zmm_state = (xcr0 & 0xe6) == 0xe6; /* plus opmask, ZMM0-15 upper halves, ZMM16-31 */
    if (!(avx512f && avx512bw && avx512vl && vnni && bmi2 && zmm_state)) return TKV__KERNEL_AVX2;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) cpu_bf16_dot = (a >> 5) & 1;
    return TKV__KERNEL_AVX512;
}
#endif

static tkv__kernel_level detect(void) {
    tkv__kernel_level l = TKV__KERNEL_SCALAR;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    l = detect_x86();
#endif
    /* a build for another architecture (or without the -m flags) leaves SIMD parts empty */
    if (l >= TKV__KERNEL_AVX512 && !tkv__kernel_avx512_part.name) l = TKV__KERNEL_AVX2;
    if (l < TKV__KERNEL_AVX512) cpu_bf16_dot = 0;
    if (l >= TKV__KERNEL_AVX2 && !tkv__kernel_avx2_part.name) l = TKV__KERNEL_SCALAR;
    if (l < TKV__KERNEL_AVX2 || !tkv__kernel_avx2_bmi2_part.name) cpu_fast_pdep = 0;
    return l;
}

static void init(void) {
    best_level = detect();
    /* TKV_KERNELS caps the level, as if the CPU supported no more (tests, benchmarks) */
    const char *env = getenv("TKV_KERNELS");
    if (env) {
        for (int l = 0; l < TKV__KERNEL_LEVELS; l++)
            if (strcmp(env, tkv__kernel_level_name((tkv__kernel_level)l)) == 0 && l < (int)best_level)
                best_level = (tkv__kernel_level)l;
    }
    const tkv__kernels *parts[TKV__KERNEL_LEVELS] = {&tkv__kernel_scalar_part, &tkv__kernel_avx2_part,
                                                     &tkv__kernel_avx512_part};
    const tkv__attn_ops *attn[TKV__KERNEL_LEVELS] = {&tkv__attn_scalar_part, &tkv__attn_avx2_part,
                                                     &tkv__attn_avx512_part};
    tkv__kernels t;
    memset(&t, 0, sizeof t);
    for (int l = 0; l <= (int)best_level; l++) {
        overlay(&t, parts[l], attn[l]);
        if (l == TKV__KERNEL_AVX2 && cpu_fast_pdep) overlay(&t, &tkv__kernel_avx2_bmi2_part, attn[l]);
        tables[l] = t;
        supported[l] = 1;
    }
    atomic_store(&active_level, (int)best_level);
}

const tkv__kernels *tkv__kernel_get(void) {
    pthread_once(&init_once, init);
    return &tables[atomic_load_explicit(&active_level, memory_order_relaxed)];
}

tkv__kernel_level tkv__kernel_level_active(void) {
    pthread_once(&init_once, init);
    return (tkv__kernel_level)atomic_load(&active_level);
}

tkv__kernel_level tkv__kernel_level_best(void) {
    pthread_once(&init_once, init);
    return best_level;
}

int tkv__kernel_cpu_bf16_dot(void) {
    pthread_once(&init_once, init);
    return cpu_bf16_dot;
}

int tkv__kernel_cpu_fast_pdep(void) {
    pthread_once(&init_once, init);
    return cpu_fast_pdep;
}

const tkv__kernels *tkv__kernel_table(tkv__kernel_level level) {
    pthread_once(&init_once, init);
    if ((unsigned)level >= TKV__KERNEL_LEVELS || !supported[level]) return NULL;
    return &tables[level];
}

int tkv__kernel_force_level(tkv__kernel_level level) {
    pthread_once(&init_once, init);
    if ((unsigned)level >= TKV__KERNEL_LEVELS || !supported[level]) return -1;
    atomic_store(&active_level, (int)level);
    return 0;
}

const char *tkv__kernel_level_name(tkv__kernel_level level) {
    switch (level) {
    case TKV__KERNEL_SCALAR: return "scalar";
    case TKV__KERNEL_AVX2: return "avx2";
    case TKV__KERNEL_AVX512: return "avx512";
    default: return "?";
    }
}
