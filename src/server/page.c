/* page.c: the page's files, served at /, /page.css and /page.js (http.c's route table sends
 * those paths here).  The bytes are the files of src/server/page/ as the build embedded them
 * (page_assets.inc, made by the Makefile with od and sed); nothing is read from disk or fetched
 * from the network at run time.
 *
 * Every answer carries a Content-Security-Policy that lets the page load only its own files and
 * talk only to this server (data: and blob: images for what the user drops), no framing, and
 * nosniff, so that an answer's text (shown with textContent, never as HTML) cannot become code. */
#include "server/page.h"

#include <string.h>

#include "server/server_internal.h"

#include "page_assets.inc"

static const iris_page_asset ASSETS[] = {
    {"/", "text/html; charset=utf-8", index_html, sizeof index_html},
    {"/index.html", "text/html; charset=utf-8", index_html, sizeof index_html},
    {"/page.css", "text/css; charset=utf-8", page_css, sizeof page_css},
    {"/page.js", "text/javascript; charset=utf-8", page_js, sizeof page_js},
};

const iris_page_asset *iris_page_find(const char *url) {
    for (size_t i = 0; i < sizeof ASSETS / sizeof *ASSETS; i++)
        if (!strcmp(url, ASSETS[i].path)) return &ASSETS[i];
    return NULL;
}

enum MHD_Result srv_page_reply(struct MHD_Connection *c, srv_conn *cc, const char *url) {
    const iris_page_asset *a = iris_page_find(url);
    if (!a) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(a->n, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->type);
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
                            "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    cc->status = 200;
    return ret;
}
