/*
 * tool_fields.h — tool calling's request fields and the tool_calls of responses
 * (tool_fields.c); the call syntax itself is tool_calls.h's.
 */
#ifndef TKV_SRV_OPENAI_TOOL_FIELDS_H
#define TKV_SRV_OPENAI_TOOL_FIELDS_H

#include "fields.h"
#include "tool_calls.h"

/*
 * tools, tool_choice, parallel_tool_calls of a chat request into r (after
 * its grammar fields): whether the answer is read for calls, and with
 * "required" or a named function the grammar that forces one
 * (tool_fields.c). Returns false with *e set.
 */
bool srv_api_parse_tools(const srv_api *a, const json_t *body, srv_req *r, srv_err *e);

/* A finished choice's finish_reason: "tool_calls" when its answer held n_calls > 0 calls and it stopped. */
const char *srv_api_finish_reason(const srv_req *r, size_t n_calls);

/* message.tool_calls of a parsed answer: [{id, type, function: {name, arguments}}]. */
json_t *srv_api_tool_calls_json(const srv_req *r, const srv_tool_parse *p);

/* The SSE event of a streamed call k: head, its first delta (index, id, type, function.name, arguments ""),
   else the one that carries its arguments. first: the chat role goes with it. malloc'd; NULL when out of memory. */
char *srv_api_tool_chunk(const srv_api *a, const srv_req *r, size_t k, const srv_tool_call *c, bool head, bool first);

#endif
