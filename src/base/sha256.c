/* sha256.c: see sha256.h. */
#include "sha256.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <unistd.h>

#define PIECES_MAX 16
#define PIECE_BYTES ((size_t)1 << 20)

static int sha256(const void *const *parts, const size_t *lens, int n, unsigned char *out) {
    unsigned int len = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    for (int i = 0; ok && i < n; i++) ok = EVP_DigestUpdate(c, parts[i], lens[i]);
    ok = ok && EVP_DigestFinal_ex(c, out, &len);
    EVP_MD_CTX_free(c);
    return ok && len == IRIS_SHA256_BYTES ? 0 : -1;
}

typedef struct piece {
    const unsigned char *p;
    size_t n;
    unsigned char d[IRIS_SHA256_BYTES];
    int rc;
} piece;

/* One thread's share: pieces first, first + stride, ... */
typedef struct share {
    piece *pc;
    int first, stride, n;
} share;

static void *run_share(void *arg) {
    share *s = arg;
    for (int i = s->first; i < s->n; i += s->stride) {
        const void *parts[1] = {s->pc[i].p};
        s->pc[i].rc = sha256(parts, &s->pc[i].n, 1, s->pc[i].d);
    }
    return NULL;
}

int iris_sha256_pieces(const void *head, size_t head_len, const void *data, size_t n, unsigned char out[IRIS_SHA256_BYTES]) {
    int k = (int)((n + PIECE_BYTES - 1) / PIECE_BYTES);
    if (k > PIECES_MAX) k = PIECES_MAX;
    if (k < 1) k = 1;
    piece pc[PIECES_MAX];
    size_t per = (n / (size_t)k + 63) & ~(size_t)63;
    for (int i = 0; i < k; i++) {
        size_t a = (size_t)i * per < n ? (size_t)i * per : n, b = a + per < n ? a + per : n;
        pc[i].p = (const unsigned char *)data + a, pc[i].n = b - a, pc[i].rc = 0;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int t = cpus > 0 && cpus < k ? (int)cpus : k;
    share sh[PIECES_MAX];
    pthread_t th[PIECES_MAX];
    int started[PIECES_MAX] = {0};
    for (int i = 0; i < t; i++) {
        sh[i] = (share){pc, i, t, k};
        /* share 0 on this thread; a thread that cannot start is run here too */
        if (i > 0) started[i] = pthread_create(&th[i], NULL, run_share, &sh[i]) == 0;
    }
    run_share(&sh[0]);
    for (int i = 1; i < t; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else run_share(&sh[i]);
    }
    const void *parts[1 + PIECES_MAX];
    size_t lens[1 + PIECES_MAX];
    parts[0] = head, lens[0] = head_len;
    for (int i = 0; i < k; i++) {
        if (pc[i].rc) return -1;
        parts[1 + i] = pc[i].d, lens[1 + i] = IRIS_SHA256_BYTES;
    }
    return sha256(parts, lens, 1 + k, out);
}
