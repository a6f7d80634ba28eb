/*
 * arch.h — what each supported architecture changes in the llama block,
 * decided once when a model loads (model.c) and read by the tensor checks,
 * the weight binding and the forward pass instead of comparing names.
 *
 * A new architecture is a row in arch.c; a new kind of difference is a
 * field here, used at the one place in forward.c where that step happens.
 */
#ifndef TKV_ARCH_H
#define TKV_ARCH_H

#include "compute/ops.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct tkv__arch {
    const char *name;     /* general.architecture */
    tkv__rope_mode rope;  /* NEOX: pairs (i, i + n_rot / 2); NORMAL: adjacent pairs */
    bool qkv_bias;        /* blk.N.attn_{q,k,v}.bias are added after the projections */
    bool qk_norm;         /* blk.N.attn_{q,k}_norm: RMSNorm of each head of q and k
                             (head_dim wide), before RoPE */
    unsigned nope_period; /* > 0: layers l with (l + 1) % nope_period == 0 apply no
                             RoPE (a built-in rule: no metadata key sets it) */
} tkv__arch;

/* The architecture called `name`, or NULL when it is not supported. */
const tkv__arch *tkv__arch_find(const char *name);

/* "llama, qwen2, ...": the supported names into buf (truncated to cap),
   for error messages. Returns buf. */
const char *tkv__arch_names(char *buf, size_t cap);

#endif
