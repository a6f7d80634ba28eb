/*
 * tool_calls.h — tool calls: what a chat model writes when it calls a function,
 * in the syntax its chat template taught it, read back into OpenAI's
 * `message.tool_calls`; and the grammar that makes it write one
 * (tool_choice "required" or a named function).
 *
 * The syntax is chosen once from the template's source (srv_tools_detect):
 *
 *   hermes    <tool_call>{"name": N, "arguments": {...}}</tool_call>   (Qwen, Hermes, GLM, Granite, ...)
 *   llama3    {"name": N, "parameters": {...}}, optionally after <|python_tag|>
 *   mistral   [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]      (Nemo, older)
 *             [TOOL_CALLS]N[ARGS]{...}                                 (Small 3.2, Devstral: "[ARGS]")
 *   deepseek  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *             ```json {...} ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>  (R1; V3.1 writes N<｜tool▁sep｜>{...})
 *   harmony   <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}<|call|>   (gpt-oss)
 *   xml       <tool_call>\n<function=N>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 *             (Qwen3.5/3.6, Qwen3-Coder, Nemotron 3, Step 3.5: a value is text, typed by the parameter's schema)
 *   seed-xml  the same inside <seed:tool_call>...</seed:tool_call>, values without the newlines (Seed-OSS)
 *   generic   {"name": N, "arguments": {...}} as the whole answer (any template)
 *
 * Every syntax also accepts the generic one: an answer that is, as a whole,
 * a JSON call object (or an array of them) is a call.
 *
 * The parser works on a text that grows (a stream) as on a final one, the
 * way reasoning.h does: what it reports for a prefix of the text is only
 * ever extended by a longer prefix, so a stream sends the difference.
 */
#ifndef SRV_TOOLS_H
#define SRV_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum {
    SRV_TOOLS_GENERIC,
    SRV_TOOLS_HERMES,
    SRV_TOOLS_LLAMA3,
    SRV_TOOLS_MISTRAL,
    SRV_TOOLS_MISTRAL_ARGS, /* [TOOL_CALLS]N[ARGS]{...} */
    SRV_TOOLS_DEEPSEEK,
    SRV_TOOLS_HARMONY,
    SRV_TOOLS_XML,      /* <tool_call><function=N><parameter=P>VALUE</parameter>...</function></tool_call> */
    SRV_TOOLS_SEED_XML, /* the same in <seed:tool_call> */
} srv_tool_format;

/* The call syntax a chat template's source teaches (NULL: generic). */
srv_tool_format srv_tools_detect(const char *tmpl, size_t n);
const char *srv_tools_format_name(srv_tool_format f);

typedef struct srv_tool_call {
    char *name;      /* malloc'd */
    char *arguments; /* malloc'd: the arguments object as compact JSON text */
} srv_tool_call;

typedef struct srv_tool_parse {
    size_t content_end; /* text[0, content_end) is content, before any call */
    size_t rest;        /* final only: text[rest, n) is content after the calls (rest == n: none) */
    srv_tool_call *calls;
    size_t n_calls; /* complete calls, in order */
} srv_tool_parse;

/*
 * Read the calls in the first n bytes of a model's answer. tools: the
 * request's `tools` (may be NULL): an XML call's value is a string where
 * its parameter's schema says "string", else the JSON it spells (a string
 * when it spells none). final: no more
 * text will come; otherwise what may still change (a partial marker, a
 * call not finished yet, whitespace before what may be a call) is left out.
 * For a growing text, content_end only grows, calls are only appended, and
 * the final parse's content_end and calls extend those of every earlier
 * one. A marker followed by text that is not a call becomes content when
 * the text is final. false: out of memory (*out then empty).
 */
bool srv_tools_parse(srv_tool_format f, const json_t *tools, const char *text, size_t n, bool final,
                     srv_tool_parse *out);
void srv_tool_parse_free(srv_tool_parse *p);

/*
 * The GBNF that makes a model write tool calls in format f: one call of one
 * of `tools` (OpenAI's [{"type": "function", "function": {"name",
 * "parameters"}}]), or only of the function named `only` (non-NULL), whose
 * arguments validate against the function's `parameters` schema; up to 4
 * calls when parallel (and the syntax can hold several). think_first: the
 * prompt ends inside a think block (reasoning.h), so the answer may reason
 * first (text without "</"), then closes the block with "</think>" before
 * the calls. malloc'd; NULL with
 * *err (a static message or a schema's error, copied into err[cap]) on a
 * schema the converter refuses.
 */
char *srv_tools_grammar(srv_tool_format f, const json_t *tools, const char *only, bool parallel, bool think_first,
                        char *err, size_t cap);

/*
 * The messages a chat template gets: a copy of the client's in which each
 * assistant tool call's `function.arguments`, a JSON string as OpenAI
 * sends it, is the object it encodes (templates print it with `tojson`);
 * NULL when no message has such a call (use the messages as they are).
 */
json_t *srv_tools_messages(const json_t *messages);

/* A call id, "call_" and 24 letters and digits, from a seed (the request's id and the call's index). */
void srv_tools_call_id(const char *req_id, size_t index, char out[32]);

#endif
