/*
 * serve_args.h — the options of `tokenkv serve`: one table (serve_args.c)
 * of every name the command takes, its own and llama-server's, with its
 * environment variables, its arity and what it does; and the parser that
 * reads the environment and the command line through it.
 *
 * What an option of llama-server does here is one of: the same thing (it
 * sets the field it sets there); nothing, because it has no meaning on this
 * CPU-only server (-ngl, --mlock, -fa: accepted, with one log line saying
 * so); what this server always does (--cont-batching, --jinja: accepted,
 * one log line); or it is refused by name, because what it asks for is not
 * implemented (--lora, --hf-repo: one line, exit 2). An option no server
 * knows gets one line naming it and the nearest known one, exit 2.
 */
#ifndef TKV_CLI_SERVE_ARGS_H
#define TKV_CLI_SERVE_ARGS_H

#include "../server/server.h"

#include <stdio.h>

/* What serve_args_parse found. */
typedef enum {
    SERVE_ARGS_RUN,   /* *o is complete: start the server */
    SERVE_ARGS_HELP,  /* -h/--help: print the help, exit 0 */
    SERVE_ARGS_USAGE, /* a bad option or value: one line on err was printed, exit 2 */
} serve_args_result;

/* The options' defaults, before any variable or argument (tokenkv's own; llama-server's where it has one). */
void serve_args_defaults(srv_opts *o);

/*
 * Fill *o from the environment, then from argv[1..argc) (the command line
 * wins): each option's LLAMA_ARG_* variable first (llama-server's name),
 * then its TOKENKV_* one. env looks a variable up (getenv, or a test's
 * table). Log lines (an option accepted without effect) and errors go to
 * err. Strings in *o point into argv or into what env returned.
 */
serve_args_result serve_args_parse(srv_opts *o, int argc, char **argv, const char *(*env)(const char *name), FILE *err);

/* The known option name nearest to `name` (by edit distance), for "did you mean". */
const char *serve_args_nearest(const char *name);

#endif
