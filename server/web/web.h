/*
 * web.h — the web page at / (server/web/), compiled into the binary by
 * server/web.cmake, so `tokenkv serve` needs no files and no network to
 * serve it.
 */
#ifndef TKV_SRV_WEB_H
#define TKV_SRV_WEB_H

#include <stddef.h>

typedef struct srv_web_file {
    const char *path;         /* "/index.html" */
    const char *content_type;
    const unsigned char *data;
    size_t size;
} srv_web_file;

extern const srv_web_file srv_web_files[];
extern const size_t srv_web_n_files;

#endif
