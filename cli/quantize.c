/*
 * quantize.c — `tokenkv quantize IN OUT TYPE [--threads N]`: a GGUF model to
 * one of the reference's quantization mixes (tools/quantize_file.h: the
 * rules, the file layout, and which mixes give the reference's bytes).
 */
#include "cli.h"
#include "tokenkv.h"

/* the tools library: the quantizer and the GGUF writer */
#include "tools/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void help(FILE *f) {
    char names[512];
    tkv__quant_mix_names(names, sizeof names);
    fprintf(f,
            "usage: tokenkv quantize IN.gguf OUT.gguf TYPE [--threads N]\n"
            "\n"
            "Quantize a model (F32, F16, BF16 or any type tokenkv reads) to TYPE, as the\n"
            "reference's llama-quantize does without an importance matrix: the same tensor\n"
            "types per mix (output Q6_K, more bits for attn_v/ffn_down where the mix says),\n"
            "the same blocks, the same file. Norms and 1-D tensors stay as they are.\n"
            "OUT is written as OUT.tmp and renamed when complete.\n"
            "\n"
            "  TYPE          %s\n"
            "                (Q3_K, Q4_K, Q5_K: the _M mixes; Q2_K_S is refused: the\n"
            "                reference needs an importance matrix for it)\n"
            "  --threads N   threads (default 4)\n"
            "  -q, --quiet   no line per tensor\n"
            "  -h, --help    show this help\n",
            names);
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL};
    int npos = 0, threads = 4;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            uint64_t v;
            if (!cli_uint("quantize", a, i + 1 < argc ? argv[i + 1] : NULL, 1, 256, &v)) return 2;
            threads = (int)v;
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tokenkv quantize: unknown option '%s'\n", a);
            help(stderr);
            return 2;
        } else if (npos < 3) {
            pos[npos++] = a;
        } else {
            fprintf(stderr, "tokenkv quantize: too many arguments ('%s')\n", a);
            return 2;
        }
    }
    if (npos < 3) {
        help(stderr);
        return 2;
    }
    const tkv__quant_mix *mix = tkv__quant_mix_find(pos[2]);
    if (!mix) {
        char names[512];
        tkv__quant_mix_names(names, sizeof names);
        fprintf(stderr, "tokenkv quantize: unknown type '%s' (one of: %s)\n", pos[2], names);
        return 2;
    }
    char why[512];
    const clock_t t0 = clock();
    const tkv_status st = tkv__quantize_file(pos[0], pos[1], mix, threads, quiet ? NULL : stdout, why, sizeof why);
    if (st) return cli_fail("quantize", "%s", why);
    if (!quiet)
        printf("%s: %s (general.file_type %u), %.2f s of CPU\n", pos[1], mix->name, mix->ftype,
               (double)(clock() - t0) / CLOCKS_PER_SEC);
    return 0;
}
