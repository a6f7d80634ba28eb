/*
 * quantize_file.h — a whole GGUF model to a quantization mix, as the
 * reference's quantizer (llama-quantize, no importance matrix) writes it:
 * the same tensor types per mix, the same block bytes, the same file layout.
 *
 * Which tensor gets which type (tkv__quant_tensor_type) follows the
 * reference's rules for the mixes below: norms, 1-D tensors and the few
 * matrices it never quantizes (MoE routers, ...) keep their type; output
 * (and token_embd when the model has no output.weight) gets Q6_K unless the
 * mix is Q8_0 (Q8_0 when its rows are not whole blocks); token_embd of the
 * ternary mixes Q4_K; attn_v, ffn_down and attn_output get more bits in some
 * layers depending on the mix (quantize_file.c lists them); a type whose
 * block does not divide the row falls back (Q2_K/Q3_K/TQ* -> Q4_0,
 * Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL, then F16).
 *
 * The file (tkv__quantize_file): the input's metadata pairs in their order
 * but for general.quantization_version (2) and general.file_type (the mix's
 * number), which come last, in that order, as the reference sets them (a
 * set moves the key to the end); the tensors sorted as the reference's loader
 * sorts them (non-block tensors first, then by block number, each group by
 * name), every tensor's data padded to the alignment. Written to OUT.tmp,
 * then renamed.
 */
#ifndef TKV_QUANTIZE_FILE_H
#define TKV_QUANTIZE_FILE_H

#include "tokenkv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A quantization mix: the reference's file type. */
typedef struct tkv__quant_mix {
    const char *name;  /* the reference's name (Q4_K_M, ...) */
    uint32_t ftype;    /* general.file_type: the reference's LLAMA_FTYPE number */
    tkv_type base;     /* the type of most matrices */
} tkv__quant_mix;

/* The mix of that name (case-insensitive; Q3_K, Q4_K, Q5_K mean the _M mixes), or NULL. */
const tkv__quant_mix *tkv__quant_mix_find(const char *name);

/* The names of every mix, comma-separated, into buf (cap bytes). */
void tkv__quant_mix_names(char *buf, size_t cap);

/* What the type rules need of the model (from its metadata and tensor list). */
typedef struct tkv__quant_model_info {
    char arch[64];
    uint32_t n_layer, n_head, n_head_kv, n_expert;
    bool tied_embeddings;  /* no output.weight: token_embd is quantized as the output */
    int n_attn_v;          /* tensors of the attn_v kind (attn_v, attn_qkv, attn_kv_b) */
} tkv__quant_model_info;

/* The counters the rules advance, tensor after tensor in the file's order. */
typedef struct tkv__quant_rule_state {
    int i_attn_v, i_ffn_down;
} tkv__quant_rule_state;

/*
 * The type the mix gives tensor `name` (n_dims dims, rows of ne0 elements,
 * stored now as `cur`), advancing *st as the reference does. Call it for
 * every tensor in the output's order. *fell_back is set when the rows forced
 * a fallback type.
 */
tkv_type tkv__quant_tensor_type(const tkv__quant_mix *mix, const tkv__quant_model_info *info,
                                tkv__quant_rule_state *st, const char *name, uint32_t n_dims, uint64_t ne0,
                                tkv_type cur, bool *fell_back);

/*
 * Quantize the GGUF file `in` to `out` under `mix`, with `threads` threads
 * (>= 1). log, when not NULL, receives one line per tensor. Returns TKV_OK,
 * or an error with a one-line reason in why (cap bytes): an unreadable or
 * malformed input, a mix that needs an importance matrix, a tensor type that
 * cannot be read, a write failure (out is then left untouched).
 */
tkv_status tkv__quantize_file(const char *in, const char *out, const tkv__quant_mix *mix, int threads, FILE *log,
                              char *why, size_t cap);

#endif
