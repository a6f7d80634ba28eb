/*
 * responses.h — the bodies of OpenAI responses (responses.c): a finished request's
 * response, the events of a stream, the usage chunk.
 */
#ifndef TKV_SRV_OPENAI_RESPONSES_H
#define TKV_SRV_OPENAI_RESPONSES_H

#include "fields.h"

/* The complete (non-streamed) response of a finished request: its n choices (one request each, index 0 first,
   sharing the prompt). Locks each. malloc'd. */
char *srv_api_response(const srv_api *a, srv_req *const *reqs, size_t n);

/*
 * One SSE event ("data: {...}\n\n") of a stream: a chat stream's first, the
 * role alone (content null, as llama-server sends it; first true), a text
 * delta, a reasoning delta (delta.reasoning_content), or
 * the final chunk with its finish reason (for it, n is the number of tool
 * calls the stream sent). With logprobs, a delta or final chunk carries
 * those of the tokens generated since *lp_sent (then advanced); lp_sent may
 * be NULL (none). The choice's index is r->index. The caller holds r->mu.
 * malloc'd; NULL when out of memory.
 */
typedef enum { SRV_CHUNK_DELTA, SRV_CHUNK_REASONING, SRV_CHUNK_FINISH, SRV_CHUNK_ROLE } srv_chunk_kind;
char *srv_api_chunk(const srv_api *a, srv_req *r, srv_chunk_kind kind, const char *text, size_t n, bool first,
                    size_t *lp_sent);

/* llama-server's return_progress event of r's prompt step i (r->prog[i]): prompt_progress {total, cache,
   processed, time_ms}, in a chunk with no choices (OpenAI routes) or an empty native event. The caller holds
   r->mu. malloc'd "data: {...}\n\n"; NULL when out of memory. */
char *srv_api_progress_event(const srv_api *a, const srv_req *r, size_t i);

/* llama-server's "timings" of a request's choices (the prompt of the first, the completions together):
   cache_n, prompt_n (the prompt tokens computed), predicted_n, and their milliseconds and rates; draft_n and
   draft_n_accepted when the completions verified drafts. The caller
   holds no lock (the counts are final once the requests are done). */
json_t *srv_api_timings(srv_req *const *reqs, size_t n);

/* llama-server's completion_probabilities of generated tokens [from, to) (n_probs): {id, token, logprob, bytes,
   top_logprobs: [{id, token, logprob, bytes}]} each. The caller holds r->mu. */
json_t *srv_api_native_probs(const srv_api *a, const srv_req *r, size_t from, size_t to);

/* The prompt as text: its tokens' pieces, control tokens included (llama-server's "prompt" field). */
json_t *srv_api_prompt_text(const srv_api *a, const srv_req *r);

/* --verbose: llama-server's "__verbose" object, the prompt as text and the answer. The caller holds r->mu. */
json_t *srv_api_verbose(const srv_api *a, const srv_req *r);

/* The last event of a stream with include_usage: no choices, the usage of all n choices. Locks each. malloc'd. */
char *srv_api_usage_chunk(const srv_api *a, srv_req *const *reqs, size_t n);

#endif
