/*
 * model_induction.h — the weights of a model that copies: a two-layer
 * "induction" circuit built by hand into a llama file of any size, for the
 * workloads that need a model whose answers repeat spans of their prompt
 * (drafts from the cache, issue 37) where no trained model is at hand.
 *
 * What the model computes (hd = 128, RoPE base 1e8; the residual's
 * subspaces, each token's codes c_t (32 values) and u_t (256) unit vectors
 * drawn from the seed and the token id):
 *
 *   embedding     T = c_t, B = 1 (a constant), U = u_t
 *   layer 0       two heads that attend to the previous token and to the one
 *                 before it, by position alone (their queries and keys come
 *                 from B; RoPE's fast pairs make the score peak at the
 *                 offset), copy its T into P1 and P2
 *   layer 1       heads whose query is (T, P1) of the current position and
 *                 whose key is (P1, P2) of each earlier one, on RoPE's slow
 *                 pairs (they turn by 1e-4 radians per position): a position
 *                 whose two previous tokens are the current and the previous
 *                 token scores twice what a one-token match does; the heads
 *                 copy that position's U into O
 *   layers 2..    zero weights (their products cost what any weights do)
 *   output        logit t = 2 u_t . O: the token that followed the last
 *                 two tokens where they occurred before
 *
 * So greedy decoding continues any span of the context whose last two
 * tokens it has just produced: it copies. The sizes of the scores are set
 * so that each softmax picks its position by about 25 (layer 0: computed
 * from the RoPE angles over the context length). Random weights are the
 * other kind (model_write.c); the shapes are the same, so is the speed.
 */
#ifndef TKV_MODEL_INDUCTION_H
#define TKV_MODEL_INDUCTION_H

#include "model_write.h"
#include "model/tensors.h"

/* The RoPE base an induction model records (its slow pairs must stay still over the context). */
#define TKV__INDUCTION_ROPE_BASE 1e8f

/*
 * Whether spec s can hold the circuit: llama, at least 2 layers, heads of
 * 128 (--head-dim 128), at least 2 KV heads, dim >= 640. Returns TKV_OK, or
 * TKV_ERR_INVALID with the reason in why (at most cap bytes).
 */
tkv_status tkv__induction_check(const tkv__model_spec *s, char *why, size_t cap);

/*
 * The float values of matrix t of the induction model of spec s into x
 * (t's elements, row-major: row r at x + r * ne[0]); a matrix the circuit
 * does not use is zero. The other tensors (norms 1) are model_write.c's
 * as for random weights. s must have passed tkv__induction_check. No
 * allocation; deterministic in s->seed.
 */
void tkv__induction_fill(const tkv__model_spec *s, const tkv__tensor_need *t, float *x);

#endif
