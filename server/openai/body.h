/*
 * body.h — a request body from its bytes: JSON that may carry U+0000
 * (\u0000) in the texts that are rendered and tokenized by length (a prompt,
 * a message's content, a system prompt, an input), and nowhere else.
 */
#ifndef TKV_SRV_OPENAI_BODY_H
#define TKV_SRV_OPENAI_BODY_H

#include "fields.h"

/*
 * Parse n bytes at p (need not end with a NUL) as a JSON request body. A
 * model's answer may hold U+0000 and a client sends it back in a later
 * turn, so a string may hold NULs where its text is handled by length:
 * "prompt" (a string, or the texts of an array), "content" (/tokenize),
 * "messages[i].content" and its parts' "text" (and their tool results'
 * "content"), "system" and its blocks' "text", "input", "input[i].content"
 * and its parts' "text", "instructions". Anywhere else (a role, a name, a stop
 * string, a key) a NUL is refused with a 400 naming the field, as
 * "messages[2].role", since that text is read as a C string.
 * Returns the body (json_decref it), or NULL with *e set (400).
 */
json_t *srv_body_parse(const char *p, size_t n, srv_err *e);

#endif
