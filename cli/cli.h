/*
 * cli.h — the subcommands of the `tokenkv` command.
 *
 * Each takes the arguments after its name (argv[0] is the subcommand) and
 * returns the process exit status: 0 success, 1 failure (one line on
 * stderr), 2 bad usage.
 */
#ifndef TKV_CLI_H
#define TKV_CLI_H

#include "tokenkv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_quantize(int argc, char **argv);

/* A whole file ("-": standard input), NUL-terminated, malloc'd; *len its bytes. NULL on failure. */
char *cli_read_file(const char *path, size_t *len);

/* The KV cache type named `name` (case-insensitive: f16, f32, q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl, as
   llama.cpp's --cache-type-k/v take them) into *out; false for any other name. */
#define CLI_KV_TYPES "f16, f32, q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl"
bool cli_kv_type(const char *name, tkv_type *out);

/* The decimal integer v (the whole string) in [lo, hi] into *out; false, after "tokenkv SUB: OPT: 'V' is not
   an integer in [LO, HI]" on stderr, for anything else (a sign, spaces, a NULL v, out of range). */
bool cli_uint(const char *sub, const char *opt, const char *v, uint64_t lo, uint64_t hi, uint64_t *out);

/* The same for a number (strtod's syntax; NaN is out of every range). */
bool cli_num(const char *sub, const char *opt, const char *v, double lo, double hi, double *out);

/* Seconds on the monotonic clock (for durations). */
double cli_now(void);

/* Print "tokenkv SUB: message" on stderr; returns 1 for `return fail(...)`. */
int cli_fail(const char *sub, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
