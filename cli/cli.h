/*
 * cli.h — the subcommands of the `tokenkv` command.
 *
 * Each takes the arguments after its name (argv[0] is the subcommand) and
 * returns the process exit status: 0 success, 1 failure (one line on
 * stderr), 2 bad usage.
 */
#ifndef TKV_CLI_H
#define TKV_CLI_H

#include <stddef.h>

int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_template(int argc, char **argv);

/* A whole file ("-": standard input), NUL-terminated, malloc'd; *len its bytes. NULL on failure. */
char *cli_read_file(const char *path, size_t *len);

/* Print "tokenkv SUB: message" on stderr; returns 1 for `return fail(...)`. */
int cli_fail(const char *sub, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
