/*
 * views.c — GET /v1/cache, GET /metrics and GET /slots: the cache's own
 * view of what it holds and the scheduler's slots, read on the inference
 * thread (the only thread that may touch the context) by a job the HTTP
 * side posts (srv_sched_post).
 */
#include "http.h"
#include "tiers/dir_saver.h"
#include "tiers/redis_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* At most this many nodes are listed, and this many tokens of text each. */
#define VIEW_MAX_NODES 2000
#define VIEW_MAX_TEXT_TOKENS 64

typedef struct view {
    srv_state *S;
    tkv_context *ctx;
    bool detail, check;
    bool ids;    /* each node's token ids (the web page finds a conversation's path with them) */
    bool all;    /* every namespace (admin), else only ns */
    uint64_t ns;
    json_t *nodes;
    size_t n_nodes;
    tkv_token *tok; /* (n_cells) a node's tokens */
    size_t tok_cap;
} view;

static void add_node(const tkv_cache_node *nd, void *user) {
    view *v = user;
    if (nd->parent == TKV_CACHE_NODE_NONE) return; /* a namespace's root holds no tokens */
    if (!v->all && nd->ns != v->ns) return;         /* another tenant's */
    if (v->n_nodes++ >= VIEW_MAX_NODES) return;
    char ns[24];
    snprintf(ns, sizeof ns, "%016llx", (unsigned long long)nd->ns);
    json_t *o = json_pack("{s:I,s:o,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "id", (json_int_t)nd->id, "parent",
                          nd->depth ? json_integer(nd->parent) : json_null(), "namespace", ns, "depth",
                          (json_int_t)nd->depth, "tokens", (json_int_t)nd->n_tokens, "refs", (json_int_t)nd->refs,
                          "hits", (json_int_t)nd->hits, "last_use", (json_int_t)nd->last_use, "pins",
                          (json_int_t)nd->pins, "pinned", nd->pins > 0);
    size_t n = 0;
    if (o && v->tok && tkv_cache_node_tokens(v->ctx, nd->id, v->tok, v->tok_cap, &n) == TKV_OK) {
        if (v->ids) {
            json_t *ids = json_array();
            for (size_t i = 0; i < n; i++) json_array_append_new(ids, json_integer(v->tok[i]));
            json_object_set_new(o, "token_ids", ids);
        }
        if (v->detail) {
            const size_t shown = n < VIEW_MAX_TEXT_TOKENS ? n : VIEW_MAX_TEXT_TOKENS;
            char buf[4096];
            size_t len = 0;
            if (tkv_detokenize(v->S->model, v->tok, shown, TKV_DETOKENIZE_SPECIAL, buf, sizeof buf, &len) == TKV_OK)
                json_object_set_new(o, "text", srv_json_text(buf, len));
            json_object_set_new(o, "text_truncated", json_boolean(shown < n));
        }
    }
    if (o) json_array_append_new(v->nodes, o);
}

void srv_cache_view(tkv_context *ctx, void *user) {
    srv_view *req = user;
    view vv = {.S = req->S, .ctx = ctx, .detail = req->detail, .ids = req->ids, .check = req->check, .all = req->all,
               .ns = req->ns},
         *v = &vv;
    tkv_stats st;
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    v->tok_cap = st.cells_total;
    v->tok = v->detail || v->ids ? malloc(v->tok_cap * sizeof *v->tok) : NULL;
    v->nodes = json_array();
    tkv_cache_walk(ctx, add_node, v);
    free(v->tok);

    tkv_seq seqs[256];
    const srv_req *reqs[256];
    size_t n = srv_sched_slots(v->S->sched, seqs, reqs, 256);
    json_t *sequences = json_array();
    for (size_t i = 0; i < n; i++)
        if (v->all || reqs[i]->ns == v->ns)
            json_array_append_new(sequences, json_pack("{s:i,s:I,s:s}", "seq", seqs[i], "length",
                                                   (json_int_t)tkv_seq_len(ctx, seqs[i]), "request", reqs[i]->id));
    json_t *o = json_pack(
        "{s:{s:I,s:I,s:I,s:I,s:I,s:I},s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o,s:b}", "cells", "total",
        (json_int_t)st.cells_total, "used", (json_int_t)st.cells_used, "free",
        (json_int_t)(st.cells_total - st.cells_used), "evictable", (json_int_t)st.cells_evictable, "shared",
        (json_int_t)st.cells_shared, "pinned", (json_int_t)st.cells_pinned, "nodes", (json_int_t)st.nodes, "lookups",
        (json_int_t)st.lookups, "tokens_reused", (json_int_t)st.tokens_reused, "tokens_computed",
        (json_int_t)st.tokens_computed, "evictions", (json_int_t)st.evictions, "kv_bytes", (json_int_t)st.kv_bytes,
        "meta_bytes", (json_int_t)st.meta_bytes, "sequences", sequences, "tree", v->nodes, "tree_truncated",
        v->n_nodes > VIEW_MAX_NODES);
    if (o && st.checkpoint_budget_bytes) /* a hybrid model's recurrent-state checkpoints */
        json_object_set_new(o, "checkpoints",
                            json_pack("{s:I,s:I,s:I,s:I,s:I}", "held", (json_int_t)st.checkpoints, "bytes",
                                      (json_int_t)st.checkpoint_bytes, "budget_bytes",
                                      (json_int_t)st.checkpoint_budget_bytes, "evictions",
                                      (json_int_t)st.checkpoint_evictions, "scratch_bytes",
                                      (json_int_t)st.state_scratch_bytes));
    if (o && v->check) {
        tkv_status cs = tkv_cache_check(ctx);
        json_object_set_new(o, "check", json_string(cs ? tkv_last_error(NULL) : "ok"));
    }
    req->out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
}

void srv_metrics_view(tkv_context *ctx, void *user) {
    srv_view *m = user;
    tkv_stats st;
    tkv_cache_stats_ex(ctx, &st, sizeof st);
    size_t waiting, running;
    srv_sched_load(m->S->sched, &waiting, &running);
    m->out = srv_metrics_render(m->S->metrics, &st, waiting, running);
    if (m->out && m->S->store) { /* the shared store's counters follow */
        char *more = srv_store_render(m->S->store);
        size_t a = strlen(m->out), b = more ? strlen(more) : 0;
        char *all = more ? realloc(m->out, a + b + 1) : NULL;
        if (all) memcpy(all + a, more, b + 1), m->out = all;
        free(more);
    }
    if (m->out && m->S->save) {
        char *more = srv_save_render(m->S->save);
        size_t a = strlen(m->out), b = more ? strlen(more) : 0;
        char *all = more ? realloc(m->out, a + b + 1) : NULL;
        if (all) memcpy(all + a, more, b + 1), m->out = all;
        free(more);
    }
}

/* One entry per slot, in llama-server's /slots field names where the meaning is the same. */
void srv_slots_view(tkv_context *ctx, void *user) {
    (void)ctx;
    srv_view *v = user;
    srv_slot_state st[256];
    const size_t n = srv_sched_slot_states(v->S->sched, st, 256);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const srv_req *r = st[i].req;
        if (r && !v->all && r->ns != v->ns) { /* another tenant's: busy, nothing of its request */
            json_array_append_new(arr, json_pack("{s:i,s:I,s:b,s:n}", "id", (int)i, "n_ctx",
                                                 (json_int_t)v->S->api.n_ctx, "is_processing", true, "request"));
            continue;
        }
        json_t *o = json_pack("{s:i,s:I,s:b,s:o,s:I,s:I,s:I}", "id", (int)i, "n_ctx", (json_int_t)v->S->api.n_ctx,
                              "is_processing", r != NULL, "request", r ? json_string(r->id) : json_null(),
                              "n_prompt_tokens", (json_int_t)(r ? r->n_prompt : 0), "n_cached_tokens",
                              (json_int_t)(r ? r->n_cached : 0), "n_past", (json_int_t)st[i].n_past);
        if (o && r)
            json_object_set_new(o, "params", json_pack("{s:i,s:f,s:i,s:f,s:f}", "n_predict", r->max_tokens,
                                                       "temperature", (double)r->sp.temperature, "top_k",
                                                       (int)r->sp.top_k, "top_p", (double)r->sp.top_p, "min_p",
                                                       (double)r->sp.min_p));
        if (o) /* llama-server's shape: an array of one; n_remain -1 when idle */
            json_object_set_new(o, "next_token", json_pack("[{s:b,s:i,s:i,s:s}]", "has_next_token", r != NULL,
                                                           "n_decoded", st[i].n_gen, "n_remain",
                                                           r ? r->max_tokens - st[i].n_gen : -1, "stopping_word", ""));
        json_array_append_new(arr, o);
    }
    v->out = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
}
