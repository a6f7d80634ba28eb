/*
 * test_cli_quantize.c — `tokenkv quantize` as a user runs it, against the
 * reference's quantizer.
 *
 * Byte identity: llama-quantize (llama.cpp 3f545bec, one thread, no
 * importance matrix) given ../shared/models/parity/parity-F16.gguf wrote, for
 * each type below, a file of the size and XXH64 (seed 0) recorded here
 * (`llama-quantize parity-F16.gguf out.gguf TYPE 1`). `tokenkv quantize`
 * must write the very same file, whole: metadata, tensor table, data and
 * padding. All 18 types are identical.
 *
 * The shipped parity-TYPE.gguf files were quantized by the same tool from the
 * F32 model (not shipped), of which parity-F16 is a rounding, so they are not
 * the same bytes. Against them the output must have the same metadata (the
 * pairs, their order, general.file_type), the same tensors with the same
 * types (the mix rules), and exactly the recorded number of blocks that
 * differ: those the F16 rounding moved (measured with the reference's own
 * output from parity-F16; the five F32 norm tensors count as blocks of one).
 *
 * Also: errors (an unknown type, an unreadable input, Q2_K_S which the
 * reference refuses without an importance matrix) leave no file behind, and
 * rows that are not whole blocks fall back as the reference does; the hybrid
 * architectures' recurrent tensors stay as the reference's quantizer leaves
 * them.
 */
#include "testutil.h"

#include "compute/quant/quant.h"
#include "format/gguf.h"
#include "tools/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static char dir[64];

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(dir, "quantize");
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(dir);
}

static const struct {
    const char *type;
    uint32_t ftype;
    size_t size;
    uint64_t xxh64;     /* of llama-quantize's file from parity-F16 */
    unsigned differing; /* blocks that differ from the shipped parity-TYPE.gguf (of `blocks`) */
    unsigned blocks;
} cases[] = {
    {"Q2_K", 10, 744384, 0x35895bada6e487f2ull, 2128, 8448},
    {"Q3_K_S", 11, 857536, 0xefb6e51eb7bee637ull, 1619, 8448},
    {"Q3_K_M", 12, 944064, 0xc3b8a38bdb615711ull, 2035, 8448},
    {"Q3_K_L", 13, 1009600, 0xe45dac831d1770ccull, 2498, 8448},
    {"Q4_K_S", 14, 1092032, 0xb704f8eb86ef49b5ull, 2789, 8448},
    {"Q4_K_M", 15, 1142976, 0xc80e2bc780fbeb22ull, 2952, 8448},
    {"Q5_K_S", 16, 1296832, 0x89469a8d22239b3aull, 4221, 8448},
    {"Q5_K_M", 17, 1327296, 0x0064a7bc4aa4ba54ull, 4212, 8448},
    {"Q6_K", 18, 1523136, 0x2e92229805b9d8ceull, 4244, 8448},
    {"Q8_0", 7, 1967552, 0xb4eb22f38a0af2e4ull, 28533, 58624},
    {"Q4_0", 2, 1083840, 0x79255dd92e187990ull, 1710, 55040},
    {"Q4_1", 3, 1190336, 0x25ac1d888b9d8756ull, 10630, 55040},
    {"Q5_0", 8, 1296832, 0xf4c9a8ee40f8a06cull, 2968, 55040},
    {"Q5_1", 9, 1403328, 0x961e0c34c3d6ea39ull, 12133, 55040},
    {"IQ4_NL", 25, 1083840, 0xc951c68aacb935ebull, 5249, 55040},
    {"IQ4_XS", 30, 1030592, 0x03137a3f9582f123ull, 1439, 8448},
    {"TQ1_0", 36, 530880, 0xb78d6951897e9a4cull, 700, 8448},
    {"TQ2_0", 37, 604608, 0x0a93432cdc89707eull, 700, 8448},
};

/* Blocks of t (units of one element for float types). */
static uint64_t n_blocks(const tkv__gguf_tensor *t) {
    const size_t be = tkv__quant_block_elems(t->type);
    return be ? t->n_elems / be : 0;
}

/* Same metadata and tensor table as the shipped file; the number of blocks whose bytes differ. */
static void compare_with_parity(const char *type, const char *ours, unsigned *differing, unsigned *blocks) {
    char path[512];
    snprintf(path, sizeof path, "%s", tu_shared("models/parity/parity-"));
    strncat(path, type, sizeof path - strlen(path) - 7);
    strcat(path, ".gguf");
    tkv__gguf *a, *b;
    assert_int_equal(tkv__gguf_open(ours, &a), TKV_OK);
    assert_int_equal(tkv__gguf_open(path, &b), TKV_OK);
    assert_int_equal(a->n_kv, b->n_kv);
    for (size_t i = 0; i < a->n_kv; i++) {
        const tkv__gguf_kv *x = &a->kv[i], *y = &b->kv[i];
        assert_string_equal(x->key.s, y->key.s);
        assert_int_equal(x->type, y->type);
        if (x->type == TKV_META_STRING) assert_string_equal(x->str.s, y->str.s);
        else if (x->type != TKV_META_ARRAY) assert_true(x->v.u == y->v.u);
        else assert_true(x->n == y->n && x->elem_type == y->elem_type);
    }
    assert_int_equal(a->n_tensors, b->n_tensors);
    *differing = *blocks = 0;
    for (size_t i = 0; i < a->n_tensors; i++) {
        const tkv__gguf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        assert_string_equal(x->name.s, y->name.s);
        if (x->type != y->type)
            fail_msg("%s: %s is %s here, %s in the reference's file", type, x->name.s, tkv_type_name(x->type),
                     tkv_type_name(y->type));
        assert_int_equal(x->n_bytes, y->n_bytes);
        const uint64_t nb = n_blocks(x), bsize = x->n_bytes / nb;
        for (uint64_t k = 0; k < nb; k++)
            *differing += memcmp(a->data + x->offset + k * bsize, b->data + y->offset + k * bsize, bsize) != 0;
        *blocks += (unsigned)nb;
    }
    tkv__gguf_free(a);
    tkv__gguf_free(b);
}

static void test_parity_types(void **state) {
    (void)state;
    char args[1024], out[256];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(out, sizeof out, "%s/%s.gguf", dir, cases[c].type);
        snprintf(args, sizeof args, "quantize '%s' '%s' %s --threads 2",
                 tu_shared("models/parity/parity-F16.gguf"), out, cases[c].type);
        tu_run_result r = tu_run(args);
        if (r.status != 0) fail_msg("%s: exit %d: %s", cases[c].type, r.status, r.err);
        assert_non_null(strstr(r.out, "blk.1.ffn_up.weight"));
        tu_run_free(&r);
        size_t size;
        uint8_t *img = tu_read_file(out, &size);
        assert_non_null(img);
        const uint64_t h = XXH64(img, size, 0);
        free(img);
        if (size != cases[c].size || h != cases[c].xxh64)
            fail_msg("%s: %zu bytes, XXH64 %016llx; the reference's file: %zu bytes, %016llx", cases[c].type, size,
                     (unsigned long long)h, cases[c].size, (unsigned long long)cases[c].xxh64);
        unsigned differing, blocks;
        compare_with_parity(cases[c].type, out, &differing, &blocks);
        print_message("%-6s identical to the reference's file; %5u of %5u blocks differ from parity-%s (F32 source)\n",
                      cases[c].type, differing, blocks, cases[c].type);
        assert_int_equal(blocks, cases[c].blocks);
        assert_int_equal(differing, cases[c].differing);
        remove(out);
    }
}

/* Nothing at OUT nor OUT.tmp after a failure. */
static void assert_no_output(const char *out) {
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    assert_int_equal(access(out, F_OK), -1);
    assert_int_equal(access(tmp, F_OK), -1);
}

static void test_errors(void **state) {
    (void)state;
    char args[1024], out[256];
    snprintf(out, sizeof out, "%s/bad.gguf", dir);
    const char *src = tu_shared("models/parity/parity-F16.gguf");
    snprintf(args, sizeof args, "quantize '%s' '%s' Q7_K", src, out);
    tu_run_result r = tu_run(args);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "unknown type 'Q7_K'"));
    assert_non_null(strstr(r.err, "Q4_K_M")); /* the valid names are listed */
    tu_run_free(&r);
    assert_no_output(out);

    snprintf(args, sizeof args, "quantize '%s/none.gguf' '%s' Q4_K_M", dir, out);
    r = tu_run(args);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "none.gguf"));
    tu_run_free(&r);
    assert_no_output(out);

    snprintf(args, sizeof args, "quantize '%s' '%s' Q2_K_S", src, out);
    r = tu_run(args);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "importance matrix"));
    tu_run_free(&r);
    assert_no_output(out);

    r = tu_run("quantize only-one-arg.gguf");
    assert_int_equal(r.status, 2);
    tu_run_free(&r);
}

/*
 * Rows of 96 and 160 elements are not whole super-blocks: the reference
 * falls back (Q4_K -> Q5_0, Q6_K -> Q8_0, Q2_K/Q3_K/TQ2_0 -> Q4_0,
 * IQ4_XS -> IQ4_NL) and, for the output, goes to Q8_0 at once. Rows of 48
 * fit no 32-element block either: F16. The type rules alone, on a table of
 * tensors (the whole-file path is the test above).
 */
static void test_fallbacks(void **state) {
    (void)state;
    tkv__quant_model_info info = {.arch = "llama", .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_attn_v = 2};
    static const struct {
        const char *mix, *name;
        uint64_t ne0;
        tkv_type want;
        bool fell;
    } rules[] = {
        {"Q4_K_M", "blk.0.attn_q.weight", 96, TKV_TYPE_Q5_0, true},
        {"Q4_K_M", "blk.0.attn_v.weight", 96, TKV_TYPE_Q5_0, true},
        {"Q4_K_M", "blk.1.attn_v.weight", 96, TKV_TYPE_Q8_0, true}, /* Q6_K in the last layer ("more bits") */
        {"Q4_K_M", "output.weight", 96, TKV_TYPE_Q8_0, false},
        {"Q4_K_M", "blk.0.attn_q.weight", 256, TKV_TYPE_Q4_K, false},
        {"Q2_K", "blk.0.ffn_up.weight", 160, TKV_TYPE_Q4_0, true},
        {"Q3_K_S", "blk.0.ffn_up.weight", 160, TKV_TYPE_Q4_0, true},
        {"TQ2_0", "token_embd.weight", 160, TKV_TYPE_Q5_0, true}, /* Q4_K for the ternary mixes, then Q5_0 */
        {"IQ4_XS", "blk.0.ffn_up.weight", 160, TKV_TYPE_IQ4_NL, true},
        {"Q5_K_S", "blk.0.ffn_up.weight", 160, TKV_TYPE_Q5_1, true},
        {"Q8_0", "blk.0.ffn_up.weight", 48, TKV_TYPE_F16, true},
        {"Q4_K_M", "blk.0.attn_norm.weight", 96, TKV_TYPE_F32, false}, /* never quantized */
    };
    for (size_t c = 0; c < sizeof rules / sizeof rules[0]; c++) {
        const tkv__quant_mix *mix = tkv__quant_mix_find(rules[c].mix);
        assert_non_null(mix);
        /* the counters as they stand when the rules reach that tensor in a 2-layer model */
        tkv__quant_rule_state st = {strstr(rules[c].name, "blk.1.") ? 1 : 0, 0};
        bool fell;
        const uint32_t n_dims = strstr(rules[c].name, "norm") ? 1 : 2;
        const tkv_type t = tkv__quant_tensor_type(mix, &info, &st, rules[c].name, n_dims, rules[c].ne0,
                                                  TKV_TYPE_F32, &fell);
        if (t != rules[c].want || fell != rules[c].fell)
            fail_msg("%s %s (rows of %llu): %s%s, expected %s", rules[c].mix, rules[c].name,
                     (unsigned long long)rules[c].ne0, tkv_type_name(t), fell ? " (fallback)" : "",
                     tkv_type_name(rules[c].want));
    }
    assert_null(tkv__quant_mix_find("Q7_K"));
    assert_string_equal(tkv__quant_mix_find("q4_k")->name, "Q4_K_M");
}

/* Whether the reference's quantizer (llama.cpp's tensor_allows_quantization, 81ff7abe5) leaves a hybrid's
   tensor as it is: 1-D tensors, names not ending in "weight" (ssm_a, ssm_d, biases), norms, the MoE router,
   the convs' taps, gemma4's per-layer projection. Written from that list, not from the quantizer's. */
static bool reference_keeps(const tkv_tensor_info *t) {
    static const char *const kept[] = {"_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d", "shortconv.conv.weight",
                                       "per_layer_model_proj"};
    const size_t n = strlen(t->name);
    if (t->n_dims < 2 || n < 6 || strcmp(t->name + n - 6, "weight")) return true;
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (strstr(t->name, kept[i])) return true;
    return false;
}

static bool float_type(tkv_type t) { return t == TKV_TYPE_F32 || t == TKV_TYPE_F16 || t == TKV_TYPE_BF16; }

/* The hybrids at Q4_K_M and Q8_0 from mkmodel's F16 files: every tensor the reference keeps (the recurrent
   layers' A, D, dt bias, conv taps and grouped norms, lfm2's short-conv taps, routers, gemma4's per-layer
   projection) keeps its type and bytes; every other matrix (the shared expert's gate included, which the
   reference quantizes) is quantized. The files load and generate. */
static void test_hybrids(void **state) {
    (void)state;
    static const struct {
        const char *arch, *opts;
    } models[] = {
        {"qwen35", "--heads 4 --kv-heads 1 --head-dim 64 --ff 512 --ssm-state 64 --ssm-groups 2 --ssm-heads 4 "
                   "--ssm-inner 256 --attn-every 2 --layers 4"},
        {"qwen35moe", "--heads 4 --kv-heads 2 --head-dim 64 --ff 256 --experts 4 --experts-used 2 --expert-ff 256 "
                      "--ssm-state 64 --ssm-groups 2 --ssm-heads 4 --ssm-inner 256 --attn-every 2 --layers 2"},
        {"lfm2", "--heads 4 --kv-heads 2 --ff 512 --pattern 'C*C' --layers 3"},
        {"granitehybrid", "--heads 4 --kv-heads 2 --ff 512 --ssm-state 16 --ssm-groups 1 --ssm-heads 8 "
                          "--ssm-inner 512 --attn-every 2 --layers 2"},
        {"nemotron_h", "--heads 4 --kv-heads 2 --ff 512 --ssm-state 16 --ssm-groups 2 --ssm-heads 8 --ssm-inner 512 "
                       "--pattern 'M-*' --layers 3"},
        {"gemma4", "--heads 4 --kv-heads 2 --head-dim 64 --ff 512 --attn-every 2 --shared-kv 1 --per-layer 32 "
                   "--layers 3"},
    };
    char src[128], out[128], args[1024];
    snprintf(src, sizeof src, "%s/hybrid-F16.gguf", dir);
    snprintf(out, sizeof out, "%s/hybrid-q.gguf", dir);
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        snprintf(args, sizeof args, "mkmodel '%s' --arch %s --dim 256 %s --type F16 --vocab-from '%s'", src,
                 models[k].arch, models[k].opts, tu_shared("models/stories260K.gguf"));
        tu_run_result r = tu_run(args);
        if (r.status != 0) fail_msg("%s: %s", args, r.err);
        tu_run_free(&r);
        for (int q = 0; q < 2; q++) {
            const char *type = q ? "Q8_0" : "Q4_K_M";
            snprintf(args, sizeof args, "quantize '%s' '%s' %s", src, out, type);
            r = tu_run(args);
            if (r.status != 0) fail_msg("%s %s: %s", models[k].arch, type, r.err);
            tu_run_free(&r);
            tkv_model *in = NULL, *m = NULL;
            assert_int_equal(tkv_model_load(src, NULL, &in), TKV_OK);
            if (tkv_model_load(out, NULL, &m) != TKV_OK) fail_msg("%s %s: %s", models[k].arch, type, tkv_last_error(NULL));
            assert_int_equal(tkv_model_tensor_count(m), tkv_model_tensor_count(in));
            size_t kept = 0, quantized = 0;
            for (size_t i = 0; i < tkv_model_tensor_count(in); i++) {
                tkv_tensor_info a, b;
                assert_int_equal(tkv_model_tensor_at(in, i, &a), TKV_OK);
                if (tkv_model_tensor_find(m, a.name, &b) != TKV_OK) fail_msg("%s: %s is gone", models[k].arch, a.name);
                if (reference_keeps(&a)) {
                    if (b.type != a.type || b.n_bytes != a.n_bytes || memcmp(a.data, b.data, a.n_bytes))
                        fail_msg("%s %s: %s became %s (the reference keeps it)", models[k].arch, type, a.name,
                                 tkv_type_name(b.type));
                    kept++;
                } else {
                    if (float_type(b.type))
                        fail_msg("%s %s: %s stayed %s (the reference quantizes it)", models[k].arch, type, a.name,
                                 tkv_type_name(b.type));
                    quantized++;
                }
            }
            assert_true(kept > 0 && quantized > 0);
            tkv_model_free(in);
            tkv_model_free(m);
            snprintf(args, sizeof args, "run -m '%s' -p 'Once upon a time' -n 4 -t 1 --temp 0", out);
            r = tu_run(args);
            if (r.status != 0) fail_msg("run %s %s: %s", models[k].arch, type, r.err);
            tu_run_free(&r);
        }
    }
    /* the kept set holds what it should: a Mamba-2 layer's A and D, its conv, a delta net's dt bias */
    tkv_tensor_info t = {.name = "blk.0.ssm_a", .n_dims = 2};
    assert_true(reference_keeps(&t));
    t.name = "blk.0.ssm_in.weight";
    assert_false(reference_keeps(&t));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hybrids),
        cmocka_unit_test(test_parity_types),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fallbacks),
    };
    return TU_RESULT(cmocka_run_group_tests(tests, setup, teardown));
}
