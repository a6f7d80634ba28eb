/*
 * parse.h — /v1/completions and /v1/chat/completions bodies into a srv_req
 * (parse.c), and the prompt a chat body renders to.
 */
#ifndef TKV_SRV_OPENAI_PARSE_H
#define TKV_SRV_OPENAI_PARSE_H

#include "fields.h"

/*
 * Fill r's input (prompt tokens, sampling, stop strings, stream flags,
 * namespace) from a request body; chat selects /v1/chat/completions.
 * Returns false with *e set (400) on any invalid field.
 */
bool srv_api_parse(const srv_api *a, const json_t *body, bool chat, srv_req *r, srv_err *e);

/*
 * The prompt text of a chat request body (messages, tools,
 * chat_template_kwargs), as the model's template renders it: malloc'd,
 * *len bytes. A final assistant message with text is continued (llama-server's
 * prefill, continue_final_message) unless --no-prefill-assistant: the prompt
 * then ends with its text, and *prefilled (may be NULL) says so. NULL with
 * *e set (400) on an invalid field or a template that raises.
 */
char *srv_api_chat_prompt(const srv_api *a, const json_t *body, size_t *len, bool *prefilled, srv_err *e);

/* How many prompts a body's "prompt" holds: an array of texts or token lists is several (llama-server's
   /completion answers each); a text, a token list or llama-server's mixed list is one. */
size_t srv_api_prompt_count(const json_t *body);

/* Make r, parsed from the same body as first (its choice 0), its choice i: the same id, the seed plus i. */
void srv_api_choice(srv_req *first, srv_req *r, size_t i);

#endif
