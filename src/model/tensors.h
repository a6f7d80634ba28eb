/*
 * tensors.h — the tensors a model of each architecture stores: their names,
 * shapes and where each binds, as one list that the load's shape checks
 * (model.c), the binding (weights.c) and `tokenkv mkmodel` (tools/) walk,
 * so the three cannot disagree about what an architecture needs.
 */
#ifndef TKV_TENSORS_H
#define TKV_TENSORS_H

#include "arch.h"
#include "deltanet.h"
#include "mamba2.h"
#include "moe.h"
#include "tokenkv.h"

#include <stddef.h>
#include <stdint.h>

/* tkv__tensor_need.bind of a fused tensor: bound as views of its parts (weights.c) */
#define TKV__BIND_VIEWS ((size_t)-1)

typedef struct tkv__tensor_need {
    char name[64];   /* "token_embd.weight", "blk.3.attn_q.weight" */
    unsigned n_dims; /* 1 (norms, biases, factors), 2 (matrices, expert biases), 3 (expert stacks) */
    uint64_t ne[3];  /* the shape, row length first; 1 past n_dims */
    bool matrix;     /* a weight of any supported type; else F32 */
    bool optional;   /* may be absent: output.weight (then tied to token_embd), RoPE factors */
    int layer;       /* its block, or -1 for the model's own tensors */
    size_t bind;     /* offset of its tkv__tensor in tkv__weights (layer -1) or in tkv__layer,
                        or TKV__BIND_VIEWS */
} tkv__tensor_need;

typedef tkv_status (*tkv__tensor_fn)(const tkv__tensor_need *t, void *ud);

/* What tensor shapes depend on beyond tkv_hparams. */
typedef struct tkv__layout {
    const tkv__moe_dims *moe;     /* the expert sizes (read when arch->moe, or gemma4's when it has experts) */
    const tkv__delta_dims *delta; /* the delta net's sizes (read only for delta-net layers) */
    const tkv__mamba_dims *mamba; /* Mamba-2's sizes (read only for Mamba-2 layers) */
    const uint8_t *kind;          /* (n_layer) each layer's tkv__layer_kind, or NULL: every layer attends */
    const tkv__attn_layer *attn;  /* (n_layer) each layer's attention shape and FFN width, or NULL: the
                                     hyperparameters' on every layer, each owning its K and V */
    uint32_t n_pli;               /* arch->per_layer_input: each layer's slice of the per-layer inputs */
} tkv__layout;

/*
 * Call fn once per tensor of a model with these hyperparameters and layout:
 * the model's own tensors first, then block by block in the order the
 * reference's converter writes them. Stops at, and returns, the first
 * status fn returns that is not TKV_OK.
 */
tkv_status tkv__tensors_each(const tkv__arch *arch, const tkv_hparams *hp, const tkv__layout *lay, tkv__tensor_fn fn,
                             void *ud);

#endif
