/*
 * params.h — reading a caller's parameter struct whatever header version it
 * was built with.
 *
 * Every public params struct starts with `uint32_t size`, which its
 * _default_params() function sets to sizeof the struct of this header. A
 * program built against an older header passes a shorter struct: the fields
 * it does not know keep their defaults. One built against a newer header
 * passes a longer one: accepted when every field this library does not know
 * is zero (its default), refused otherwise, so that a setting is never
 * silently ignored.
 */
#ifndef TKV_PARAMS_H
#define TKV_PARAMS_H

#include "tokenkv_types.h"

#include <stddef.h>

/*
 * Copy `given` (a params struct, size in its first uint32_t) over `dst`,
 * which holds the defaults and is `ours` bytes long. TKV_ERR_INVALID naming
 * `what` (e.g. "tkv_context_params") when size is smaller than the size
 * field itself (a struct not started from the defaults), or when a longer
 * struct sets fields unknown here; dst is then unchanged.
 */
tkv_status tkv__params_read(void *dst, size_t ours, const void *given, const char *what);

#endif
