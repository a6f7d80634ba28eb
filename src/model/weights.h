/*
 * weights.h — the tensors of a llama-family model, bound by role.
 */
#ifndef TKV_WEIGHTS_H
#define TKV_WEIGHTS_H

#include "arch.h"
#include "moe.h"
#include "compute/quant/repack.h"
#include "format/gguf.h"
#include "tokenkv.h"

/* A 1-D or 2-D tensor in the mapped file: ne1 rows of ne0 elements. */
typedef struct tkv__tensor {
    const void *data; /* NULL: absent (optional tensors) */
    tkv_type type;
    size_t ne0, ne1;
    size_t row_size; /* bytes of one row */
    /* NULL, or the same rows packed for the active level's product
       (compute/repack.h; groups of TKV__PACK_ROWS rows, pack_stride bytes
       apart): made at load, owned by tkv__weights */
    const void *packed;
    size_t pack_stride;
} tkv__tensor;

/* Rows [r0, r0 + n) of a matrix, as a tensor of its own (no copy): a fused
   projection's parts, one expert of a stack. Packed rows follow when r0
   starts a group (else the view reads the file's rows). */
static inline tkv__tensor tkv__tensor_rows(const tkv__tensor *t, size_t r0, size_t n) {
    tkv__tensor v = *t;
    v.data = (const uint8_t *)t->data + r0 * t->row_size;
    v.ne1 = n;
    v.packed = t->packed && r0 % TKV__PACK_ROWS == 0
                   ? (const uint8_t *)t->packed + r0 / TKV__PACK_ROWS * t->pack_stride
                   : NULL;
    return v;
}

typedef struct tkv__layer {
    tkv__tensor attn_norm;  /* (n_embd) F32; absent with post_norms */
    tkv__tensor wq, wk, wv; /* (n_head*hd | n_head_kv*hd rows, n_embd) */
    tkv__tensor bq, bk, bv; /* arch->qkv_bias: biases, F32; else absent */
    tkv__tensor q_norm, k_norm; /* arch->qk_norm: F32 RMSNorm weights, (head_dim) per head or
                                   (n_q) / (n_kv) whole; else absent */
    tkv__tensor post_attn_norm, post_ffn_norm; /* arch->post_norms: (n_embd) F32 */
    tkv__tensor router;          /* arch->moe: (n_expert rows, n_embd) */
    tkv__tensor exp_gate, exp_up; /* arch->moe: (n_expert n_ff_exp rows, n_embd): expert e's rows
                                     e n_ff_exp .. (e + 1) n_ff_exp - 1 */
    tkv__tensor exp_down;        /* arch->moe: (n_expert n_embd rows, n_ff_exp) */
    tkv__tensor bo, sinks;       /* arch->oai: (n_embd) attn_output bias, (n_head) attention sinks */
    tkv__tensor router_b, exp_gate_b, exp_up_b, exp_down_b; /* arch->oai: (n_expert), (n_expert,
                                                               n_ff_exp) x2, (n_expert, n_embd) F32 */
    tkv__tensor exp_gate_up; /* gemma4 MoE, instead of exp_gate and exp_up: (n_expert 2 n_ff_exp rows, n_embd),
                                expert e's gate rows e 2 n_ff_exp .., then its up rows */
    tkv__tensor exp_gate_s, exp_up_s, exp_down_s; /* gemma4 MoE, optional: (n_expert) F32, each expert's
                                                     gate / up / down output times its scale */
    tkv__tensor router_s;   /* gemma4 MoE: (n_embd) F32, the router's input rmsnorm(x) / sqrt(n_embd) times it */
    tkv__tensor pre_norm_2, post_norm_1, post_norm_2; /* gemma4 MoE: (n_embd) F32, the experts' input norm, the
                                                        dense FFN's and the experts' output norms */
    tkv__tensor exp_bias;   /* arch->expert_bias: (n_expert) F32, added to the sigmoid gates to choose the
                               experts (not to weigh them) */
    tkv__tensor sh_gate;    /* arch->shared_expert: (1 row, n_embd) F32, the shared expert's gate; its
                               SwiGLU is w_gate, w_up, w_down (n_ff_shared wide) */
    tkv__tensor wo;         /* (n_embd rows, n_head*hd) */
    tkv__tensor ffn_norm;   /* (n_embd) F32; absent with post_norms */
    tkv__tensor w_gate, w_up; /* (n_ff rows, n_embd) */
    tkv__tensor w_down;     /* (n_embd rows, n_ff) */
    tkv__tensor conv_in;    /* short-conv layers: (3 n_embd rows: B, C, x; n_embd) */
    tkv__tensor conv_w;     /* short-conv layers: (n_embd rows, conv_len taps) F32, oldest tap first */
    tkv__tensor conv_out;   /* short-conv layers: (n_embd rows, n_embd) */
    /* delta-net layers (deltanet.h): inner = n_v d_v */
    tkv__tensor dn_qkv;     /* (channels rows, n_embd): q, k, v before the conv */
    tkv__tensor dn_z;       /* (inner rows, n_embd): the output gate */
    tkv__tensor dn_conv;    /* (channels rows, d_conv taps) F32, the current token's last */
    tkv__tensor dn_dt, dn_a;/* (n_v) F32: the decay's bias and A = -exp(A_log) */
    tkv__tensor dn_beta, dn_alpha; /* (n_v rows, n_embd) */
    tkv__tensor dn_norm;    /* (d_v) F32 */
    tkv__tensor dn_out;     /* (n_embd rows, inner) */
    /* Mamba-2 layers (mamba2.h) */
    tkv__tensor m_in;       /* (in_proj rows, n_embd): z, xBC, dt */
    tkv__tensor m_conv;     /* (channels rows, d_conv taps) F32, the current token's last */
    tkv__tensor m_conv_b;   /* (channels) F32 */
    tkv__tensor m_dt, m_a, m_d; /* (n_head) F32: the step's bias, A = -exp(A_log), the skip D */
    tkv__tensor m_norm;     /* (d_inner) F32: each group's d_inner / n_group weights */
    tkv__tensor m_out;      /* (n_embd rows, d_inner) */
    /* arch->per_layer_input (gemma4): n_pli = embedding_length_per_layer_input */
    tkv__tensor inp_gate;   /* (n_pli rows, n_embd) */
    tkv__tensor proj;       /* (n_embd rows, n_pli) */
    tkv__tensor post_norm;  /* (n_embd) F32 */
    tkv__tensor out_scale;  /* (1) F32: the layer's output is multiplied by it */
} tkv__layer;

typedef struct tkv__weights {
    tkv__tensor tok_embd;   /* (n_vocab rows, n_embd) */
    tkv__tensor out_norm;   /* (n_embd) F32 */
    tkv__tensor output;     /* (n_vocab rows, n_embd): token_embd when tied */
    tkv__tensor rope_freqs; /* optional (n_rot/2) F32 divisors of the angles */
    tkv__tensor rope_short, rope_long; /* LongRoPE (phi3): (n_rot/2) F32 divisors for contexts up to
                                          n_ctx_orig and beyond it; else absent */
    /* arch->per_layer_input (gemma4), else absent */
    tkv__tensor pl_embd;    /* (n_vocab rows, n_layer n_pli): each token's per-layer embeddings */
    tkv__tensor pl_proj;    /* (n_layer n_pli rows, n_embd): their projection of the scaled embedding */
    tkv__tensor pl_norm;    /* (n_pli) F32: the RMS norm of each layer's slice of that projection */
    tkv__layer *layers;     /* (n_layer) */
    void *pack_mem;         /* every tensor's packed rows (one allocation), or NULL */
    size_t pack_bytes;
    size_t pack_held;       /* the growth of the enlarging layouts left unpacked for lack of room, or 0 */
} tkv__weights;

/*
 * Bind every tensor of a model (tensors.h) whose shapes the load has checked.
 * Returns TKV_ERR_UNSUPPORTED naming the tensor and its type when a weight
 * type has no kernels (or a norm or bias is not F32), TKV_ERR_NOMEM.
 */
typedef struct tkv__layout tkv__layout;
tkv_status tkv__weights_bind(const tkv__gguf *g, const tkv_hparams *hp, const tkv__arch *arch, const tkv__layout *lay,
                             tkv__weights *w);

/*
 * Pack every matrix whose type the active kernel level reads faster packed
 * (compute/repack.h), into one allocation the weights own. The file's rows
 * stay mapped for everything else (embeddings, other levels, views that do
 * not start a group), but their pages are released (tkv__gguf_release): they
 * come back from the file only if one of those reads them. `huge`: the
 * allocation starts on a 2 MiB boundary and asks for huge pages
 * (tkv__advise_huge_pages). `room`: the bytes of memory the packed copies
 * may take beyond the rows they replace (SIZE_MAX: no bound). The layouts
 * that enlarge their rows by more than an eighth (the IQ1-IQ3 ones) are
 * packed only when all of their growth fits in it; the others always are
 * (their groups round them up by a few percent at most).
 * Returns TKV_ERR_NOMEM (nothing packed, weights as they were).
 */
tkv_status tkv__weights_pack(tkv__weights *w, const tkv_hparams *hp, const tkv__gguf *g, bool huge, size_t room);

/*
 * Bytes the products read for the file's span [data, data + n) (one tensor's
 * rows): the span's own size, with each packed matrix in it (tkv__weights_pack)
 * counted at its packed size instead of its rows'. n when nothing in it is
 * packed.
 */
size_t tkv__weights_read_bytes(const tkv__weights *w, const tkv_hparams *hp, const void *data, size_t n);

void tkv__weights_free(tkv__weights *w);

#endif
