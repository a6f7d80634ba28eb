/*
 * sampler.h — what the runtime asks of a sampler beyond the public calls: whether its choice is the argmax of the
 * logits as they are, a key of the state its choice depends on (so that a token it chose is a fact about the prefix
 * and that state, kvcache.h's known tokens), and recording a choice made without logits (a known token taken from
 * the tree).
 */
#ifndef TKV_SAMPLER_H
#define TKV_SAMPLER_H

#include "tokenkv.h"

/* Whether s always chooses the argmax of the logits it is given, lowest id on ties: greedy, and no repetition,
   presence or frequency penalty, logit bias or grammar that could change which token is highest. */
bool tkv__sampler_argmax(const tkv_sampler *s);

/*
 * The key of s's state as it stands: any sampler whose key is the same chooses the same token from the same logits
 * (its parameters, generator state and the tokens it has seen are the same), so a choice recorded under a key
 * (kv/kvknown.c) is a fact for every sampler that reaches the prefix with that key. TKV__SAMPLER_KEY_ARGMAX for a
 * sampler whose choice is the argmax whatever its state (tkv__sampler_argmax); TKV__SAMPLER_KEY_NONE where no
 * key is given (a grammar at a temperature: its rejection may draw twice; a grammar whose matcher lost track of
 * the tokens). A greedy sampler with a grammar has one: the grammar's id, and the history since it was set.
 */
enum { TKV__SAMPLER_KEY_NONE = 0, TKV__SAMPLER_KEY_ARGMAX = 1 };
uint64_t tkv__sampler_key(const tkv_sampler *s);

/* The part of a sampler's state its key follows, copied: the keys of the choices after tokens taken without
   changing the sampler (tkv_seq_follow_known walks them before it decides how many it takes). */
typedef struct tkv__sampler_sim {
    uint64_t s[4], hist;
} tkv__sampler_sim;
void tkv__sampler_sim_start(const tkv_sampler *s, tkv__sampler_sim *sim);
/* tkv__sampler_key of s as if its state were sim's. */
uint64_t tkv__sampler_sim_key(const tkv_sampler *s, const tkv__sampler_sim *sim);
/* sim after s returned tok (tkv__sampler_took on the copy). */
void tkv__sampler_sim_took(const tkv_sampler *s, tkv__sampler_sim *sim, tkv_token tok);

/* Record tok as chosen without logits, as tkv_sampler_sample records a choice: the generator's draw at a
   temperature, the grammar's matcher past it, the penalties' history and the key's; tkv_sampler_last_probs then
   has nothing to report. */
void tkv__sampler_took(tkv_sampler *s, tkv_token tok);

#endif
