/*
 * fuzz_request.c — libFuzzer target for what the server parses from a
 * client: a request body (JSON) into a completion or chat request, the chat
 * templates that render it, and the responses built from any text.
 *
 * The first byte picks the endpoint, the chat template family and the tool
 * call syntax the answer is read in; the rest
 * is the body. Whatever the bytes, parsing either succeeds with a prompt of
 * in-range ids that fits the context, or fails with a 4xx and an error body
 * that is valid JSON.
 */
#include "openai/body.h"
#include "openai/parse.h"
#include "openai/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

static tkv_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    model = fuzz_load_model("fuzz_request", "stories260K.gguf", true);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const bool chat = data[0] & 1;
    static const uint8_t secret[SRV_NS_SECRET_BYTES] = {1, 2, 3}; /* any key: ids only need to differ */
    const srv_api api = {
        .model = model, .model_id = "fuzz", .max_tokens = 64, .n_ctx = 256, .chat = (srv_chat_kind)((data[0] >> 1) % 7),
        .ns_secret = secret, .tools = (srv_tool_format)((data[0] >> 4) % (SRV_TOOLS_SEED_XML + 1)),
    };
    json_error_t je;
    srv_err e;
    memset(&e, 0, sizeof e);
    json_t *body = srv_body_parse((const char *)data + 1, size - 1, &e); /* as the server reads it: NULs in texts */
    if (!body && (e.status != 400 || !e.message[0])) abort();
    memset(&e, 0, sizeof e);
    srv_req *r = srv_req_new();
    if (!r) abort();
    if (body && srv_api_parse(&api, body, chat, r, &e)) {
        if (!r->n_prompt || r->n_prompt >= api.n_ctx || r->max_tokens < 1 || r->max_tokens > api.max_tokens) abort();
        for (size_t i = 0; i < r->n_prompt; i++)
            if (r->prompt[i] < 0 || (size_t)r->prompt[i] >= tkv_vocab_size(model)) abort();
        /* responses over arbitrary bytes as the generated text */
        srv_req_append(r, (const char *)data + 1, size - 1);
        srv_req_finish(r, "length", 1);
        char *resp = srv_api_response(&api, &r, 1);
        char *chunk = srv_api_chunk(&api, r, SRV_CHUNK_DELTA, (const char *)data + 1, size - 1, true, NULL);
        json_t *back = resp ? json_loads(resp, JSON_ALLOW_NUL, &je) : NULL; /* text may hold NUL (\u0000) */
        if (resp && !back) abort(); /* what we send must parse */
        json_decref(back);
        free(resp);
        free(chunk);
    } else if (body) {
        if (e.status < 400 || e.status > 599) abort();
        char *s = srv_err_json(&e);
        json_t *back = s ? json_loads(s, JSON_ALLOW_NUL, &je) : NULL;
        if (s && !back) abort();
        json_decref(back);
        free(s);
    }
    json_decref(body);
    srv_req_unref(r);
    return 0;
}
