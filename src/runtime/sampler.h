/*
 * sampler.h — what the runtime asks of a sampler beyond the public calls: whether its choice is the argmax of the
 * logits as they are (so that a token it chose is a fact about the prefix, kvcache.h's known tokens), and recording
 * a choice made without logits (a known token taken from the tree).
 */
#ifndef TKV_SAMPLER_H
#define TKV_SAMPLER_H

#include "tokenkv.h"

/* Whether s always chooses the argmax of the logits it is given, lowest id on ties: greedy, and no repetition,
   presence or frequency penalty, logit bias or grammar that could change which token is highest. */
bool tkv__sampler_argmax(const tkv_sampler *s);

/* Record tok as chosen without logits, as tkv_sampler_sample records a choice (for the penalties' history);
   tkv_sampler_last_probs then has nothing to report. */
void tkv__sampler_took(tkv_sampler *s, tkv_token tok);

#endif
