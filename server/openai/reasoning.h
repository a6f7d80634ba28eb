/*
 * reasoning.h — the thinking part of a reasoning model's answer.
 *
 * Models whose chat template has <think> ... </think> markers (Qwen3,
 * QwQ, DeepSeek-R1 distills, SmolLM3) write their reasoning first, between
 * those markers, then the answer. The server returns the two apart, as
 * llama-server does: `message.reasoning_content` and `message.content`
 * (streamed as `delta.reasoning_content` and `delta.content`), unless the
 * request says `reasoning_format: "none"`. A template often opens the block
 * itself (its generation prompt ends with "<think>"): the text then starts
 * inside it. Whitespace around the reasoning, and between "</think>" and the
 * answer, belongs to neither.
 */
#ifndef SRV_REASONING_H
#define SRV_REASONING_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_think_split {
    size_t r0, r1; /* the reasoning: text[r0, r1) */
    size_t c0, c1; /* the answer: text[c0, c1) */
} srv_think_split;

/*
 * Where the reasoning and the answer are in the first n bytes of a
 * generated text. open: the prompt ended inside a think block. final: no
 * more text will come; otherwise what more text could still change (a
 * partial marker, trailing whitespace of the reasoning, a start that may yet
 * become "<think>") is left out, so that as the text grows each part only
 * grows: a stream can send r1 - (what it sent) of each.
 */
srv_think_split srv_think_split_text(const char *text, size_t n, bool open, bool final);

/* Whether a prompt ends inside a think block: its last "<think>" has no "</think>" after it. */
bool srv_think_open(const char *prompt, size_t n);

/* Whether a template's source has think markers (a "</think>"). */
bool srv_think_markers(const char *src, size_t n);

#endif
