/*
 * arch.c — the supported architectures (see arch.h).
 */
#include "arch.h"

#include <stdio.h>
#include <string.h>

static const tkv__arch archs[] = {
    /* name      RoPE pairs        qkv_bias  q/k norm             post_norms fused  nope_period */
    {"llama",   TKV__ROPE_NORMAL, false,    TKV__QK_NORM_NONE,  false,     false, 0},
    {"qwen2",   TKV__ROPE_NEOX,   true,     TKV__QK_NORM_NONE,  false,     false, 0},
    {"qwen3",   TKV__ROPE_NEOX,   false,    TKV__QK_NORM_HEAD,  false,     false, 0},
    {"smollm3", TKV__ROPE_NORMAL, false,    TKV__QK_NORM_NONE,  false,     false, 4},
    {"olmo2",   TKV__ROPE_NEOX,   false,    TKV__QK_NORM_WHOLE, true,      false, 0},
    {"phi3",    TKV__ROPE_NEOX,   false,    TKV__QK_NORM_NONE,  false,     true,  0},
    {"mistral3", TKV__ROPE_NORMAL, false,   TKV__QK_NORM_NONE,  false,     false, 0},
};

const tkv__arch *tkv__arch_find(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!strcmp(archs[i].name, name)) return &archs[i];
    return NULL;
}

const char *tkv__arch_names(char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < sizeof archs / sizeof archs[0] && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", archs[i].name);
    return buf;
}
