/*
 * params.c — see params.h.
 */
#include "params.h"

#include "error.h"

#include <stdint.h>
#include <string.h>

tkv_status tkv__params_read(void *dst, size_t ours, const void *given, const char *what) {
    uint32_t size;
    memcpy(&size, given, sizeof size);
    if (size < sizeof size)
        return tkv__fail(TKV_ERR_INVALID, "%s: size is %u: start from its _params_init(&p, sizeof p) (or _default_params()), which sets it",
                         what, size);
    const unsigned char *g = given;
    for (size_t i = ours; i < size; i++)
        if (g[i])
            return tkv__fail(TKV_ERR_INVALID,
                             "%s: byte %zu is set, a field this library does not know (the program was built against "
                             "a newer tokenkv.h)",
                             what, i);
    memcpy(dst, given, size < ours ? size : ours);
    memcpy(dst, &(uint32_t){(uint32_t)ours}, sizeof size);
    return TKV_OK;
}

tkv_status tkv__params_init(void *dst, size_t size, const void *defaults, size_t ours, const char *what) {
    if (!dst) return tkv__fail(TKV_ERR_INVALID, "%s: init of a NULL struct", what);
    if (size < sizeof(uint32_t) || size > UINT32_MAX)
        return tkv__fail(TKV_ERR_INVALID, "%s: init with size %zu (pass sizeof the struct)", what, size);
    /* exactly `size` bytes: a caller built against an older, shorter struct gets nothing written past it */
    memcpy(dst, defaults, size < ours ? size : ours);
    if (size > ours) memset((unsigned char *)dst + ours, 0, size - ours); /* fields of a newer header: their defaults */
    const uint32_t caller = (uint32_t)size;
    memcpy(dst, &caller, sizeof caller);
    return TKV_OK;
}
