/*
 * chat_template.h — turn OpenAI-style chat messages into the prompt text a
 * model was trained on.
 *
 * We do not run Jinja. A GGUF file's `tokenizer.chat_template` is matched
 * against the distinctive markers of a few well-known families, and each
 * family has a hand-written renderer that produces what that family's
 * published template produces with add_generation_prompt = true. A template
 * we cannot place gets the plain fallback (the server warns at start-up and
 * `--chat-template NAME` overrides the detection).
 *
 * What each family renders, for system S, user U1, assistant A1, user U2
 * (shown with C escapes; <bos>/<eos> are the `bos`/`eos` texts passed in):
 *
 *   plain    "System: S\nUser: U1\nAssistant: A1\nUser: U2\nAssistant:"
 *            (role capitalised, one "Role: content\n" line per message, then
 *            the prompt "Assistant:" with no trailing space)
 *   chatml   "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
 *            "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
 *            "<|im_start|>assistant\n"
 *   llama2   "[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 <eos><bos>[INST] U2 [/INST]"
 *            (Llama-2-chat: user and assistant texts are stripped of
 *            surrounding whitespace; no generation prompt beyond "[/INST]")
 *   llama3   "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
 *            "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
 *            "<|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|>"
 *            "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
 *            "<|start_header_id|>assistant<|end_header_id|>\n\n"
 *            (every content is trimmed, as the template's `| trim` does)
 *   mistral  "[INST] S\n\nU1 [/INST]A1<eos>[INST] U2 [/INST]"
 *            (Mistral-7B-Instruct-v0.1/v0.2, Mixtral-8x7B-Instruct)
 *   zephyr   "<|system|>\nS<eos>\n<|user|>\nU1<eos>\n<|assistant|>\nA1<eos>\n"
 *            "<|user|>\nU2<eos>\n<|assistant|>\n"
 *   phi3     "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n"
 *            "<|user|>\nU2<|end|>\n<|assistant|>\n"
 *
 * BOS: templates that print bos_token at the very start (llama2, llama3,
 * mistral, some phi3) would double it, because the server tokenizes the
 * rendered text with TKV_TOKENIZE_ADD_SPECIAL and the vocabulary adds BOS
 * itself. So the leading BOS is never printed. A BOS the template prints
 * *inside* the conversation (llama2 starts every later [INST] turn with it)
 * is printed, from `bos`. EOS texts are printed wherever the template prints
 * them. Tokenize the result with TKV_TOKENIZE_PARSE_SPECIAL so the markers
 * become control tokens.
 *
 * System messages: chatml, llama3, zephyr, phi3 and plain render a system
 * message anywhere. Llama-2 takes one, first, into <<SYS>> of the first turn.
 * The classic Mistral template rejects system messages; because clients send
 * them routinely we take one, first, and fold it into the first user turn as
 * "S\n\nU1" (the later Mistral template's "system\n\nuser" joining, but on
 * the first turn rather than the last so that the rendered prefix of a
 * conversation does not change from turn to turn and stays cached).
 * The role "developer" is a system message; it renders as "system".
 */
#ifndef SRV_CHAT_TEMPLATE_H
#define SRV_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    SRV_CHAT_PLAIN = 0,
    SRV_CHAT_CHATML,
    SRV_CHAT_LLAMA2,
    SRV_CHAT_LLAMA3,
    SRV_CHAT_MISTRAL,
    SRV_CHAT_ZEPHYR,
    SRV_CHAT_PHI3
} srv_chat_kind;

/*
 * Which family a GGUF tokenizer.chat_template is. NULL or empty ->
 * SRV_CHAT_PLAIN with *recognised = true (an absent template expects plain);
 * a template we cannot place -> SRV_CHAT_PLAIN with *recognised = false.
 * `recognised` may be NULL.
 */
srv_chat_kind srv_chat_detect(const char *tmpl, bool *recognised);

/*
 * Parse a --chat-template name: chatml, llama2, llama3, mistral, zephyr,
 * phi3 or plain. Returns false (and leaves *out alone) for anything else.
 */
bool srv_chat_from_name(const char *name, srv_chat_kind *out);

/* The name srv_chat_from_name accepts for k; "unknown" for a bad value. */
const char *srv_chat_name(srv_chat_kind k);

/*
 * One message. role: "system", "developer" (= system), "user" or
 * "assistant", exactly. content: the text; NULL counts as "". content_len:
 * its length in bytes, which counts any NUL (U+0000) inside it; 0 means
 * strlen(content).
 */
typedef struct {
    const char *role;
    const char *content;
    size_t content_len;
} srv_chat_msg;

/*
 * Render n messages in family k, ending with the assistant generation
 * prompt. bos/eos: the model's BOS/EOS token texts (NULL -> ""), printed as
 * described above.
 *
 * On success: *out receives a malloc'd NUL-terminated string (free() it),
 * and *out_len (if out_len is not NULL) its length, which counts the NULs a
 * content holds.
 * On failure: returns false, *out = NULL, and err (errcap bytes, may be
 * NULL/0) receives a message naming the offending message, for: no messages;
 * an unknown role; llama2/mistral conversations that do not alternate
 * user/assistant after an optional first system message, or do not end with
 * a user message (these templates have no way to prompt after an assistant
 * turn); out of memory; an invalid kind.
 */
bool srv_chat_render(srv_chat_kind k, const srv_chat_msg *msgs, size_t n, const char *bos, const char *eos,
                     char **out, size_t *out_len, char *err, size_t errcap);

#endif
