/*
 * error.c — status names and the per-thread last-error message.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Per thread, like errno: a shared tkv_model may fail in several threads. */
static _Thread_local char last_error[512];

tkv_status tkv__fail(tkv_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

void tkv__clear_error(void) { last_error[0] = '\0'; }

tkv_status tkv__handle_fail(tkv__handle *h, tkv_status st) {
    snprintf(h->error, sizeof h->error, "%s", last_error);
    return st;
}

const char *tkv_last_error(const void *obj) {
    if (obj) {
        uint32_t magic;
        memcpy(&magic, obj, sizeof magic);
        if (magic == TKV__CONTEXT_MAGIC) return ((const tkv__handle *)obj)->error;
    }
    return last_error; /* models, and calls without a handle: per thread */
}

const char *tkv_status_str(tkv_status status) {
    switch (status) {
    case TKV_OK: return "TKV_OK";
    case TKV_ERR_NOMEM: return "TKV_ERR_NOMEM";
    case TKV_ERR_IO: return "TKV_ERR_IO";
    case TKV_ERR_FORMAT: return "TKV_ERR_FORMAT";
    case TKV_ERR_UNSUPPORTED: return "TKV_ERR_UNSUPPORTED";
    case TKV_ERR_INVALID: return "TKV_ERR_INVALID";
    case TKV_ERR_FULL: return "TKV_ERR_FULL";
    case TKV_ERR_ABORTED: return "TKV_ERR_ABORTED";
    case TKV_ERR_BUSY: return "TKV_ERR_BUSY";
    }
    return "unknown status";
}
