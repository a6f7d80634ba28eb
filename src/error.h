/*
 * error.h — recording the message of a failure.
 */
#ifndef TKV_ERROR_H
#define TKV_ERROR_H

#include "tokenkv.h"

/*
 * Record a printf-style message as the calling thread's last error and
 * return `status`, so failure paths read `return tkv__fail(TKV_ERR_X, ...)`.
 */
tkv_status tkv__fail(tkv_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clear the calling thread's last error (tests). */
void tkv__clear_error(void);

#endif
