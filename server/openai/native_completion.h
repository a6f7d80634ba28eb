/*
 * native_completion.h — llama-server's POST /completion (native_completion.c): its
 * request fields and its response shapes.
 */
#ifndef TKV_SRV_OPENAI_NATIVE_COMPLETION_H
#define TKV_SRV_OPENAI_NATIVE_COMPLETION_H

#include "fields.h"

/*
 * llama-server's POST /completion (native_completion.c): its fields (n_predict,
 * cache_prompt, its sampling defaults) mapped onto srv_api_parse's, and
 * r->native set. Fields it cannot honour (json_schema, id_slot, ...) are a
 * 400 naming them. Returns false with *e set.
 */
bool srv_api_parse_native(const srv_api *a, const json_t *body, srv_req *r, srv_err *e);

/* The /completion response of a finished native request: content, stop_type, stopping_word, tokens_predicted,
   tokens_evaluated, tokens_cached, generation_settings, timings. malloc'd. */
char *srv_api_native_response(const srv_api *a, srv_req *r);

/* The answer of a native /completion of n prompts (llama-server's several prompts in one request): the response
   of the one, or an array of each one's, in order. malloc'd. */
char *srv_api_native_responses(const srv_api *a, srv_req *const *reqs, size_t n);

/* One SSE event of a native stream: {"content": the new text, "tokens": [the id of generated token tok (-1:
   none)], "stop": false} (with n_probs, its completion_probabilities), or (final) the response object with empty
   content and "stop": true. The caller holds r->mu. malloc'd; NULL when out of memory. */
char *srv_api_native_event(const srv_api *a, srv_req *r, const char *text, size_t n, bool final, long tok);

#endif
