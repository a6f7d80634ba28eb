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
        return tkv__fail(TKV_ERR_INVALID, "%s: size is %u: start from the _default_params() function, which sets it",
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
