/*
 * bench_prefix_reuse.c — what the token-aware cache saves on a realistic
 * workload, in process.
 *
 *   bench_prefix_reuse [MODEL] [-t THREADS] [-c CELLS]
 *
 * Workload (sequential requests, each one tkv_seq_sync of its prompt, then
 * 16 greedy tokens decoded onto the sequence):
 *   - 4 clients, 3 turns each, all starting with one shared system prompt;
 *     each turn's prompt is the conversation so far (replies included);
 *   - one client branches: it redoes its second turn with another question,
 *     then returns to the first branch;
 *   - one shared document asked 8 questions.
 * Reported: tokens requested, computed and reused; the ideal reuse (the
 * longest prefix of each prompt among everything computed before it, less
 * the last token, which is always recomputed for its logits); the time of a
 * prefix look-up per request; wall time against the same workload with
 * reuse disabled (a fresh context per request). Every request's last-token
 * logits must equal the run without reuse within 1e-2 (1 + |logit|) (batches
 * of 32+ tokens attend in float, shorter ones in F16, so results depend a
 * little on how a prompt was split into batches) and the greedy tokens must
 * be the same.
 */
#include "bench_clock.h"
#include "tokenkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_TOK = 2048, MAX_REQ = 64, GEN = 16 };

typedef struct request {
    tkv_seq seq;
    size_t n;
    tkv_token t[MAX_TOK];
} request;

static tkv_model *model;
static size_t n_vocab;

static size_t tok(const char *text, tkv_token *out, size_t cap, bool bos) {
    size_t n;
    if (tkv_tokenize(model, text, strlen(text), bos ? TKV_TOKENIZE_ADD_SPECIAL : 0, out, cap, &n) != TKV_OK) {
        fprintf(stderr, "tokenize: %s\n", tkv_last_error(model));
        exit(1);
    }
    return n;
}

/* Run one request: sync, then GEN greedy tokens appended to the sequence
   (and to r, so later turns can include them). Returns the logits of the
   prompt's last token in `first` and the generated ids in gen. */
static size_t serve(tkv_context *ctx, request *r, float *first, tkv_token *gen, size_t *reused) {
    if (tkv_seq_sync(ctx, r->seq, 0, r->t, r->n, reused) != TKV_OK) {
        fprintf(stderr, "sync: %s\n", tkv_last_error(ctx));
        exit(1);
    }
    const float *l = tkv_get_logits_last(ctx);
    memcpy(first, l, n_vocab * sizeof *first);
    for (size_t g = 0; g < GEN; g++) {
        size_t best = 0;
        for (size_t k = 1; k < n_vocab; k++)
            if (l[k] > l[best]) best = k;
        gen[g] = (tkv_token)best;
        tkv_pos p = (tkv_pos)(r->n + g);
        tkv_batch b = {1, &gen[g], &p, &r->seq, NULL};
        if (tkv_decode(ctx, &b) != TKV_OK) {
            fprintf(stderr, "decode: %s\n", tkv_last_error(ctx));
            exit(1);
        }
        l = tkv_get_logits(ctx, 0);
    }
    return GEN;
}

int main(int argc, char **argv) {
    const char *path = "../shared/models/stories260K.gguf";
    tkv_context_params cp = tkv_context_default_params();
    cp.n_seq_max = 16;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) cp.n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) cp.n_cells = (uint32_t)atoi(argv[++i]);
        else path = argv[i];
    }
    if (tkv_model_load(path, NULL, &model) != TKV_OK) {
        fprintf(stderr, "%s\n", tkv_last_error(NULL));
        return 1;
    }
    n_vocab = tkv_vocab_size(model);

    /* the texts */
    static const char *system_prompt =
        "You are a helpful storyteller. You tell short, kind stories for children about animals, friends and the "
        "park. You use simple words. You never say anything scary. Every story has a happy ending, and the "
        "characters are nice to each other. When a child asks a question, you answer it in one or two sentences "
        "and then ask them what they would like to hear next. Lily and Tom are friends who play in the park.";
    static const char *document =
        "Once upon a time there was a little dog named Max. Max lived in a small house near a big green park. "
        "Every morning Max ran to the park to play with his ball. One day the ball rolled under a tree and Max "
        "could not find it. A kind bird named Sue saw the ball and helped Max. Max was very happy and thanked "
        "Sue. From that day Max and Sue were best friends and played together every day in the sun.";
    static const char *questions[8] = {" Who is Max?", " Where does Max live?", " What did Max lose?",
                                       " Who helped Max?", " What is the bird called?", " Were they friends?",
                                       " When did Max play?", " Was Max happy?"};
    static const char *turns[4][3] = {
        {" Tell me about a cat.", " What did the cat eat?", " Did the cat sleep?"},
        {" Tell me about a dog.", " Where did the dog go?", " Who did the dog meet?"},
        {" Tell me about a bird.", " Can the bird sing?", " What did the bird see?"},
        {" Tell me about a fish.", " Was the fish big?", " Did the fish have friends?"},
    };

    static request req[MAX_REQ];
    size_t n_req = 0;
    static tkv_token sys[MAX_TOK];
    const size_t n_sys = tok(system_prompt, sys, MAX_TOK, true);

    /* plan the requests; replies are filled in while serving (the plan
       needs them), so both runs serve in the same order */
    typedef struct step {
        int kind; /* 0 turn, 1 branch turn, 2 return to branch, 3 document question */
        int client, turn;
    } step;
    step plan[MAX_REQ];
    size_t n_plan = 0;
    for (int turn = 0; turn < 3; turn++)
        for (int c = 0; c < 4; c++) plan[n_plan++] = (step){0, c, turn};
    plan[n_plan++] = (step){1, 0, 1}; /* client 0 redoes turn 2 differently */
    plan[n_plan++] = (step){2, 0, 2}; /* ... and goes back to its first branch */
    for (int q = 0; q < 8; q++) plan[n_plan++] = (step){3, 4 + q % 4, q};

    float *logits_a = malloc(MAX_REQ * n_vocab * sizeof(float)), *logits_b = malloc(MAX_REQ * n_vocab * sizeof(float));
    static tkv_token gen_a[MAX_REQ][GEN], gen_b[MAX_REQ][GEN];
    size_t requested = 0, reused_total = 0, ideal_total = 0;
    double lookup_time = 0, wall_reuse = 0, wall_fresh = 0;

    for (int run = 0; run < 2; run++) {
        /* conversation state per client: tokens so far (prompt + replies) */
        static tkv_token conv[8][MAX_TOK], branch_keep[MAX_TOK];
        static size_t conv_n[8], branch_n, first_reply_end[8];
        for (int c = 0; c < 8; c++) memcpy(conv[c], sys, n_sys * sizeof *sys), conv_n[c] = n_sys;
        tkv_context *ctx = NULL;
        if (run == 0 && tkv_context_create(model, &cp, &ctx) != TKV_OK) {
            fprintf(stderr, "%s\n", tkv_last_error(NULL));
            return 1;
        }
        n_req = 0;
        double t0 = now();
        for (size_t s = 0; s < n_plan; s++) {
            step st = plan[s];
            request *r = &req[n_req];
            r->seq = st.client;
            if (st.kind == 3) { /* the shared document, a question */
                size_t n = n_sys;
                memcpy(r->t, sys, n_sys * sizeof *sys);
                n += tok(document, r->t + n, MAX_TOK - n, false);
                n += tok(questions[st.turn], r->t + n, MAX_TOK - n, false);
                r->n = n;
            } else {
                tkv_token *h = conv[st.client];
                size_t hn = conv_n[st.client];
                if (st.kind == 1) { /* branch: back to after the first reply, ask something else */
                    memcpy(branch_keep, h, hn * sizeof *h);
                    branch_n = hn;
                    hn = first_reply_end[st.client];
                    hn += tok(" Tell me something else.", h + hn, MAX_TOK - hn, false);
                } else if (st.kind == 2) { /* back to the first branch, one more question */
                    memcpy(h, branch_keep, branch_n * sizeof *h);
                    hn = branch_n;
                    hn += tok(" And then?", h + hn, MAX_TOK - hn, false);
                } else {
                    hn += tok(turns[st.client][st.turn], h + hn, MAX_TOK - hn, false);
                }
                memcpy(r->t, h, hn * sizeof *h);
                r->n = hn;
            }
            float *first = (run == 0 ? logits_a : logits_b) + n_req * n_vocab;
            tkv_token *gen = run == 0 ? gen_a[n_req] : gen_b[n_req];
            size_t reused = 0;
            if (run == 0) {
                /* the ideal: the longest prefix of this prompt among all earlier token lists */
                size_t ideal = 0;
                for (size_t p = 0; p < n_req; p++) {
                    size_t k = 0, lim = req[p].n + GEN;
                    while (k < r->n && k < lim && (k < req[p].n ? req[p].t[k] : gen_a[p][k - req[p].n]) == r->t[k]) k++;
                    if (k > ideal) ideal = k;
                }
                ideal_total += ideal < r->n ? ideal : r->n - 1;
                size_t len;
                double l0 = now();
                tkv_cache_match(ctx, 0, r->t, r->n, &len);
                lookup_time += now() - l0;
                serve(ctx, r, first, gen, &reused);
                requested += r->n;
                reused_total += reused;
            } else { /* no reuse: a fresh context for every request */
                tkv_context_params fp = cp;
                fp.n_cells = (uint32_t)(r->n + GEN + 1);
                if (tkv_context_create(model, &fp, &ctx) != TKV_OK) return 1;
                serve(ctx, r, first, gen, &reused);
                tkv_context_free(ctx);
                ctx = NULL;
            }
            if (st.kind != 3) { /* the reply joins the conversation */
                memcpy(conv[st.client], r->t, r->n * sizeof *r->t);
                memcpy(conv[st.client] + r->n, gen, GEN * sizeof *gen);
                conv_n[st.client] = r->n + GEN;
                if (st.kind == 0 && st.turn == 0) first_reply_end[st.client] = conv_n[st.client];
            }
            n_req++;
        }
        *(run == 0 ? &wall_reuse : &wall_fresh) = now() - t0;
        tkv_context_free(ctx);
    }

    /* every logit and every greedy token equal */
    double max_diff = 0, max_rel = 0;
    for (size_t i = 0; i < n_req * n_vocab; i++) {
        double d = fabs((double)logits_a[i] - logits_b[i]);
        max_diff = fmax(max_diff, d);
        max_rel = fmax(max_rel, d / (1 + fabs((double)logits_b[i])));
    }
    bool same_gen = memcmp(gen_a, gen_b, n_req * sizeof gen_a[0]) == 0;

    printf("requests                    %zu\n", n_req);
    printf("prompt tokens requested     %zu\n", requested);
    printf("tokens reused               %zu (%.1f%%)\n", reused_total, 100.0 * (double)reused_total / (double)requested);
    printf("ideal reuse                 %zu (%.1f%%)\n", ideal_total, 100.0 * (double)ideal_total / (double)requested);
    printf("tokens computed (prompts)   %zu\n", requested - reused_total);
    printf("lookup per request          %.2f us\n", 1e6 * lookup_time / (double)n_req);
    printf("wall, with reuse            %.1f ms\n", 1e3 * wall_reuse);
    printf("wall, without reuse         %.1f ms\n", 1e3 * wall_fresh);
    printf("max |logit difference|      %g (%.2g of 1 + |logit|)\n", max_diff, max_rel);
    printf("greedy tokens equal         %s\n", same_gen ? "yes" : "NO");
    free(logits_a);
    free(logits_b);
    tkv_model_free(model);
    return reused_total == ideal_total && max_rel <= 1e-2 && same_gen ? 0 : 1;
}
