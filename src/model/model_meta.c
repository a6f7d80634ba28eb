/*
 * model_meta.c — the public accessors of a model's metadata and tensor table.
 */
#include "model.h"

#include "base/error.h"

#include <string.h>

/* Find `key`, or fail with TKV_ERR_INVALID naming it. */
static tkv_status find(const tkv_model *m, const char *key, const tkv__gguf_kv **out) {
    if (!m || !key) return tkv__fail(TKV_ERR_INVALID, "metadata look-up: NULL model or key");
    *out = tkv__gguf_find(m->gguf, key);
    if (!*out) return tkv__fail(TKV_ERR_INVALID, "metadata key '%s' is missing", key);
    return TKV_OK;
}

static tkv_status wrong_type(const tkv__gguf_kv *kv, const char *expected) {
    const char *got = tkv_meta_type_name(kv->type);
    if (kv->type == TKV_META_ARRAY)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': type array of %s, expected %s", kv->key.s,
                         tkv_meta_type_name(kv->elem_type), expected);
    return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': type %s, expected %s", kv->key.s, got, expected);
}

static bool is_int_type(tkv_meta_type t) {
    return t <= TKV_META_I32 || t == TKV_META_BOOL || t == TKV_META_U64 || t == TKV_META_I64;
}

static bool is_signed(tkv_meta_type t) {
    return t == TKV_META_I8 || t == TKV_META_I16 || t == TKV_META_I32 || t == TKV_META_I64;
}

/* Decode one little-endian numeric element of an array. */
static void element(const tkv__gguf_kv *kv, size_t i, uint64_t *u, int64_t *s, double *f) {
    size_t sz = tkv__gguf_meta_size(kv->elem_type);
    const uint8_t *p = kv->arr + i * sz;
    uint64_t raw = 0;
    for (size_t b = 0; b < sz; b++) raw |= (uint64_t)p[b] << (8 * b);
    *u = raw;
    switch (kv->elem_type) {
    case TKV_META_I8: *s = (int8_t)raw; break;
    case TKV_META_I16: *s = (int16_t)raw; break;
    case TKV_META_I32: *s = (int32_t)raw; break;
    default: *s = (int64_t)raw; break;
    }
    if (kv->elem_type == TKV_META_F32) {
        float x;
        uint32_t r = (uint32_t)raw;
        memcpy(&x, &r, 4);
        *f = x;
    } else if (kv->elem_type == TKV_META_F64) {
        memcpy(f, &raw, 8);
    } else {
        *f = is_signed(kv->elem_type) ? (double)*s : (double)raw;
    }
}

/* An unsigned value as int64, or TKV_ERR_FORMAT when it does not fit. */
static tkv_status to_int(const tkv__gguf_kv *kv, tkv_meta_type t, uint64_t u, int64_t s, int64_t *out) {
    if (is_signed(t)) {
        *out = s;
        return TKV_OK;
    }
    if (u > (uint64_t)INT64_MAX)
        return tkv__fail(TKV_ERR_FORMAT, "metadata key '%s': value %llu does not fit an int64", kv->key.s,
                         (unsigned long long)u);
    *out = (int64_t)u;
    return TKV_OK;
}

size_t tkv_model_meta_count(const tkv_model *model) { return model ? model->gguf->n_kv : 0; }

tkv_status tkv_model_meta_at(const tkv_model *model, size_t i, const char **key, tkv_meta_type *type) {
    if (!model || i >= model->gguf->n_kv)
        return tkv__fail(TKV_ERR_INVALID, "metadata index %zu is out of range", i);
    if (key) *key = model->gguf->kv[i].key.s;
    if (type) *type = model->gguf->kv[i].type;
    return TKV_OK;
}

tkv_status tkv_model_meta_find(const tkv_model *model, const char *key, tkv_meta_type *type) {
    const tkv__gguf_kv *kv = model && key ? tkv__gguf_find(model->gguf, key) : NULL;
    if (!kv) return TKV_ERR_INVALID;
    if (type) *type = kv->type;
    return TKV_OK;
}

tkv_status tkv_model_meta_str(const tkv_model *model, const char *key, const char **out, size_t *len) {
    const tkv__gguf_kv *kv;
    tkv_status st = find(model, key, &kv);
    if (st) return st;
    if (kv->type != TKV_META_STRING) return wrong_type(kv, "string");
    if (out) *out = kv->str.s;
    if (len) *len = kv->str.n;
    return TKV_OK;
}

tkv_status tkv_model_meta_int(const tkv_model *model, const char *key, int64_t *out) {
    const tkv__gguf_kv *kv;
    tkv_status st = find(model, key, &kv);
    if (st) return st;
    if (!is_int_type(kv->type)) return wrong_type(kv, "an integer");
    int64_t v = 0;
    if ((st = to_int(kv, kv->type, kv->v.u, kv->v.i, &v))) return st;
    if (out) *out = v;
    return TKV_OK;
}

tkv_status tkv_model_meta_float(const tkv_model *model, const char *key, double *out) {
    const tkv__gguf_kv *kv;
    tkv_status st = find(model, key, &kv);
    if (st) return st;
    double v;
    if (kv->type == TKV_META_F32 || kv->type == TKV_META_F64) v = kv->v.f;
    else if (is_int_type(kv->type)) v = is_signed(kv->type) ? (double)kv->v.i : (double)kv->v.u;
    else return wrong_type(kv, "a number");
    if (out) *out = v;
    return TKV_OK;
}

tkv_status tkv_model_meta_bool(const tkv_model *model, const char *key, bool *out) {
    const tkv__gguf_kv *kv;
    tkv_status st = find(model, key, &kv);
    if (st) return st;
    if (kv->type != TKV_META_BOOL) return wrong_type(kv, "bool");
    if (out) *out = kv->v.u != 0;
    return TKV_OK;
}

tkv_status tkv_model_meta_array(const tkv_model *model, const char *key, tkv_meta_type *elem_type, size_t *n) {
    const tkv__gguf_kv *kv;
    tkv_status st = find(model, key, &kv);
    if (st) return st;
    if (kv->type != TKV_META_ARRAY) return wrong_type(kv, "an array");
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = (size_t)kv->n;
    return TKV_OK;
}

/* Find an array element: the key must be an array and i in range. */
static tkv_status find_elem(const tkv_model *model, const char *key, size_t i, const tkv__gguf_kv **out) {
    tkv_status st = find(model, key, out);
    if (st) return st;
    if ((*out)->type != TKV_META_ARRAY) return wrong_type(*out, "an array");
    if (i >= (*out)->n)
        return tkv__fail(TKV_ERR_INVALID, "metadata key '%s': index %zu is past the array's %llu elements", key, i,
                         (unsigned long long)(*out)->n);
    return TKV_OK;
}

tkv_status tkv_model_meta_arr_str(const tkv_model *model, const char *key, size_t i, const char **out, size_t *len) {
    const tkv__gguf_kv *kv;
    tkv_status st = find_elem(model, key, i, &kv);
    if (st) return st;
    if (kv->elem_type != TKV_META_STRING) return wrong_type(kv, "an array of string");
    if (out) *out = kv->strs[i].s;
    if (len) *len = kv->strs[i].n;
    return TKV_OK;
}

tkv_status tkv_model_meta_arr_int(const tkv_model *model, const char *key, size_t i, int64_t *out) {
    const tkv__gguf_kv *kv;
    tkv_status st = find_elem(model, key, i, &kv);
    if (st) return st;
    if (!is_int_type(kv->elem_type)) return wrong_type(kv, "an array of integers");
    uint64_t u;
    int64_t s, v = 0;
    double f;
    element(kv, i, &u, &s, &f);
    if ((st = to_int(kv, kv->elem_type, u, s, &v))) return st;
    if (out) *out = v;
    return TKV_OK;
}

tkv_status tkv_model_meta_arr_float(const tkv_model *model, const char *key, size_t i, double *out) {
    const tkv__gguf_kv *kv;
    tkv_status st = find_elem(model, key, i, &kv);
    if (st) return st;
    if (kv->elem_type == TKV_META_STRING) return wrong_type(kv, "an array of numbers");
    uint64_t u;
    int64_t s;
    double f;
    element(kv, i, &u, &s, &f);
    if (out) *out = f;
    return TKV_OK;
}

/* ---- tensors ------------------------------------------------------------ */

static void fill_info(const tkv_model *m, const tkv__gguf_tensor *t, tkv_tensor_info *out) {
    out->name = t->name.s;
    out->type = t->type;
    out->n_dims = t->n_dims;
    memcpy(out->ne, t->ne, sizeof out->ne);
    out->n_elems = t->n_elems;
    out->n_bytes = t->n_bytes;
    out->offset = t->offset;
    out->data = m->gguf->data + t->offset;
}

size_t tkv_model_tensor_count(const tkv_model *model) { return model ? model->gguf->n_tensors : 0; }

tkv_status tkv_model_tensor_at(const tkv_model *model, size_t i, tkv_tensor_info *out) {
    if (!model || !out || i >= model->gguf->n_tensors)
        return tkv__fail(TKV_ERR_INVALID, "tensor index %zu is out of range", i);
    fill_info(model, &model->gguf->tensors[i], out);
    return TKV_OK;
}

uint64_t tkv_model_tensor_read_bytes(const tkv_model *model, size_t i) {
    if (!model || i >= model->gguf->n_tensors) return 0;
    const tkv__gguf_tensor *t = &model->gguf->tensors[i];
    return tkv__weights_read_bytes(&model->w, &model->hp, model->gguf->data + t->offset, t->n_bytes);
}

tkv_status tkv_model_tensor_find(const tkv_model *model, const char *name, tkv_tensor_info *out) {
    const tkv__gguf_tensor *t = model && name ? tkv__gguf_tensor_find(model->gguf, name) : NULL;
    if (!t || !out) return TKV_ERR_INVALID;
    fill_info(model, t, out);
    return TKV_OK;
}
