/*
 * legacy_fields.h — the fields only the legacy /v1/completions has (legacy_fields.c).
 */
#ifndef TKV_SRV_OPENAI_LEGACY_FIELDS_H
#define TKV_SRV_OPENAI_LEGACY_FIELDS_H

#include "fields.h"

/* echo and suffix of the legacy completions into r, after its prompt (legacy_fields.c). false with *e set. */
bool srv_api_parse_legacy(const srv_api *a, const json_t *body, srv_req *r, srv_err *e);

#endif
