/*
 * forward_impl.h — what forward.c and forward_recurrent.c share: the
 * forward pass's scratch, one pass's state and the steps both call. Private
 * to them: everything else goes through forward.h.
 */
#ifndef TKV_FORWARD_IMPL_H
#define TKV_FORWARD_IMPL_H

#include "forward.h"

#include "compute/attention.h"

#include <stdatomic.h>

struct tkv__fwd {
    const tkv_model *m;
    const uint8_t *rope_factors; /* (n_rot / 2) F32 divisors of the angles, or NULL */
    float *cs_swa;               /* (n_batch, n_rot) window layers' angles (arch->swa_own_rope), or NULL */
    float *gi, *gr;              /* (n_batch, n_embd) x2: gemma4's experts' input and router input */
    /* experts (arch->moe, gemma4's): the router's logits and choices, and one expert's batch */
    float *router;               /* (n_batch, n_expert) */
    uint32_t *chosen;            /* (n_batch, n_used) experts */
    float *chosen_w;             /* (n_batch, n_used) their weights */
    uint32_t *rows;              /* (n_batch n_used + n_expert + 1) every choice (token t, slot k: t n_used + k)
                                    grouped by expert, tokens in order, then each expert's first index */
    float *ex, *eg, *eu, *ey;    /* (n_batch, n_embd), (R, n_ff_exp) x2, (R, n_embd): R = max(n_batch,
                                    n_used), one batch's rows of an expert or one token's experts */
    uint32_t n_batch;
    size_t n_embd, n_q, n_kv, n_ff, hd, n_rot, n_vocab; /* n_q, n_kv, hd: the widest layer's; n_rot:
                                                           the widest rotation (cs rows' stride) */
    /* activations, one row per token */
    float *x;    /* (n_batch, n_embd) residual stream */
    float *h;    /* (n_batch, n_embd) normed input of a block */
    float *q;    /* (n_batch, n_q) */
    float *k;    /* (n_batch, n_kv) */
    float *v;    /* (n_batch, n_kv) */
    float *att;  /* (n_batch, n_q) attention output */
    float *tmp;  /* (n_batch, n_embd) a block's output before the residual add */
    float *gate; /* (n_batch, n_ff) */
    float *up;   /* (n_batch, n_ff) */
    float *cs;   /* (n_batch, n_rot) RoPE cos/sin per token */
    float *bcx;  /* (n_batch, 3 n_embd) a short-conv layer's B, C, x (arch->shortconv), or NULL */
    float *qg;   /* (n_batch, 2 n_q) arch->q_gate: each head's q and its gate, interleaved by head */
    float *qgate;/* (n_batch, n_q) arch->q_gate: the gates */
    /* arch->deltanet (deltanet.h): inner = n_v d_v */
    float *dqkv; /* (n_batch, channels) q, k, v before the conv */
    float *dc;   /* (n_batch, channels) after it */
    float *dz;   /* (n_batch, inner) the output gate */
    float *dbeta, *dalpha; /* (n_batch, n_v) */
    float *dout; /* (n_batch, inner) */
    uint32_t *ridx; /* (n_batch) token i's index in its run */
    float *shg, *shy; /* (n_batch), (n_batch, n_embd): a shared expert's gate and output (arch->shared_expert) */
    /* arch->mamba2 (mamba2.h) */
    float *mz;   /* (n_batch, in_proj) z, xBC, dt */
    float *mc;   /* (n_batch, channels) xBC after the conv */
    float *my;   /* (n_batch, d_inner) */
    float attn_scale; /* the scores' scale: the architecture's, attention.scale, or 1 / sqrt(head_dim) */
    float *ones; /* (hd) 1s: the weight of arch->v_norm's RMS norm, which has none */
    /* arch->per_layer_input: pli = embedding_length_per_layer_input */
    float *ple;  /* (n_batch, n_layer, pli) each token's per-layer inputs */
    float *plg;  /* (n_batch, pli) a layer's gelu(inp_gate x) * its slice */
    int32_t *prev;  /* (n_batch) the batch index of the token before i in its run, or -1 */
    int32_t *last;  /* (n_batch) scratch of index_runs: each run's last token so far */
    uint8_t *xq; /* (n_batch, act row of the widest input) quantized activations */
    float *attn_scratch; /* (n_threads, attn_scratch_per_thread): q/accumulator, or one weight per cell */
    float *rows1;        /* (n_threads, 2, n_embd) one token (generation): each thread's own copy of the residual row
                            and a row of scratch (forward.c, one_row_add) */
    size_t attn_scratch_per_thread;
    int n_threads;
};

/* ---- one pass: the shared state of the threads ---------------------------- */

typedef struct pass {
    tkv__fwd *f;
    tkv__kvrows *kv;
    tkv__pool *pool;
    const tkv__fwd_batch *b;
    tkv_abort_fn abort_cb;
    void *abort_user;
    atomic_bool aborted;
    const tkv__attn_ops *attn;
} pass;

/* What f->xq holds, so a second product on the same input skips quantizing.
   Each thread keeps its own copy; all make the same decisions. */
typedef struct acts_tag {
    const float *src;
    tkv_type vdt;
} acts_tag;

/* All threads: y (n rows, w->ne1) = x (n rows, w->ne0) W^T. */
void tkv__fwd_matmul(pass *P, int ith, int nth, acts_tag *tag, const tkv__tensor *w, const float *x, uint32_t n, float *y);

/* A K or V row of `type` from n floats; a row wider than n (a hybrid's
   cache, sized for its conv rows) is padded with zeros in pad (n_embd_kv). */
void tkv__fwd_store_row(const tkv__kvrows *kv, tkv_type type, void *dst, const float *src, size_t n, float *pad);

/* y += the F32 bias b (n). */
void tkv__fwd_add_bias(float *y, const tkv__tensor *b, size_t n);

/* All threads: tkv__pool_barrier, where a thread that has to wait asks for the first lines of its share of w's
   product (the next it reads; NULL: none) meanwhile. */
void tkv__fwd_barrier_warm(pass *P, int ith, int nth, const tkv__tensor *w);

/* The attention block of layer l (forward_attn.c), run by all threads: tmp (n, n_embd) =
   attention(attn_in) Wo, each token's K/V into its cell. */
void tkv__fwd_attn_mixer(pass *P, int ith, int nth, uint32_t l, acts_tag *tag, const float *attn_in);

/* The mixers of the recurrent layer kinds (forward_recurrent.c), run by all threads:
   tmp (n, n_embd) from the layer's normed input `in`. */
void tkv__fwd_conv_mixer(pass *P, int ith, int nth, uint32_t l, acts_tag *tag, const float *in);
void tkv__fwd_delta_mixer(pass *P, int ith, int nth, uint32_t l, acts_tag *tag, const float *in);
void tkv__fwd_mamba_mixer(pass *P, int ith, int nth, uint32_t l, acts_tag *tag, const float *in);

#endif
