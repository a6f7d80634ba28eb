/*
 * error.h — recording the message of a failure.
 */
#ifndef TKV_ERROR_H
#define TKV_ERROR_H

#include "tokenkv_types.h"

/*
 * Record a printf-style message as the calling thread's last error and
 * return `status`, so failure paths read `return tkv__fail(TKV_ERR_X, ...)`.
 */
tkv_status tkv__fail(tkv_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clear the calling thread's last error (tests). */
void tkv__clear_error(void);

/*
 * The first member of every handle that keeps its own last error (contexts:
 * one thread at a time). tkv_last_error(obj) recognises it by the magic.
 */
#define TKV__MODEL_MAGIC 0x4d564b54u   /* "TKVM" */
#define TKV__CONTEXT_MAGIC 0x43564b54u /* "TKVC" */

typedef struct tkv__handle {
    uint32_t magic;
    char error[512];
} tkv__handle;

/* Copy the calling thread's last error into h and return st. */
tkv_status tkv__handle_fail(tkv__handle *h, tkv_status st);

#endif
