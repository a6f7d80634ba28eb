/*
 * params.h — reading a caller's parameter struct whatever header version it
 * was built with.
 *
 * Every public params struct starts with `uint32_t size`, which its
 * _params_init(&p, sizeof p) function sets to the caller's sizeof (the
 * header's _default_params() is an inline call of it, compiled into the
 * caller). A program built against an older header passes a shorter struct:
 * the fields it does not know keep their defaults, and nothing is written
 * past its end. One built against a newer header
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

/*
 * Fill the caller's struct dst of `size` bytes with `defaults` (ours bytes
 * long): the first min(size, ours) bytes of them, zeros after (fields of a
 * newer header than the library's), and size in the size field. Writes
 * exactly size bytes. TKV_ERR_INVALID naming `what` for a NULL dst or a
 * size below 4 or above UINT32_MAX: nothing is written.
 */
tkv_status tkv__params_init(void *dst, size_t size, const void *defaults, size_t ours, const char *what);

#endif
