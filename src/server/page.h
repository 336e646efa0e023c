/* page.h: the web page `iris serve` answers at / (src/server/page/: index.html, page.css,
 * page.js), embedded in the binary at build time (the Makefile turns each file into a C array,
 * build/gen/page_assets.inc).  Public: no API key is asked for these paths; the page asks for
 * one when the API answers 401. */
#ifndef IRIS_SERVER_PAGE_H
#define IRIS_SERVER_PAGE_H

#include <microhttpd.h>
#include <stddef.h>

typedef struct iris_page_asset {
    const char *path;          /* "/", "/page.css", "/page.js" */
    const char *type;          /* its Content-Type */
    const unsigned char *data; /* static, never freed */
    size_t n;
} iris_page_asset;

/* The asset served at url, or NULL. */
const iris_page_asset *iris_page_find(const char *url);

/* GET/HEAD of a page path (http.c's route R_PAGE): the asset with its security headers. */
struct srv_conn;
enum MHD_Result srv_page_reply(struct MHD_Connection *c, struct srv_conn *cc, const char *url);

#endif
