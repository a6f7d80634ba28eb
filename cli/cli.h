/*
 * cli.h — the subcommands of the `tokenkv` command.
 *
 * Each takes the arguments after its name (argv[0] is the subcommand) and
 * returns the process exit status: 0 success, 1 failure (one line on
 * stderr), 2 bad usage.
 */
#ifndef TKV_CLI_H
#define TKV_CLI_H

int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_template(int argc, char **argv);

/* Print "tokenkv SUB: message" on stderr; returns 1 for `return fail(...)`. */
int cli_fail(const char *sub, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
