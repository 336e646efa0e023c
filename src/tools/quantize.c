/* quantize.c: `iris quantize`: BF16 checkpoint -> Qwen's block-FP8 format, or
 * with --int4 compressed-tensors' pack-quantized W4A16 (rules and numerics in
 * quantize.h and int4.h).
 *
 * Owns: the input checkpoint (mmap, through safetensors.h), the output writer
 * (st_write.h) and, for every quantized weight, its scales (FP8: per 128x128
 * block; int4: bf16 per group, with zero points) computed once, on the first
 * of its output tensors the writer asks for (it orders by element size: FP8's
 * F32 scales before the F8 weights; int4's I64 weight_shape, then the I32
 * packed words and zero points, then the BF16 scales).
 * Memory: one 128-row band of one weight in fp32 and its codes, plus the
 * scales of every target (int4: 1/group of the weights' bf16 bytes); the rest
 * streams from the input mmap to the output file.
 * Does not: quantize the vision tower, embeddings, norms or lm_head (as
 * Qwen's own FP8 checkpoints and llm-compressor's W4A16 recipes for
 * Qwen3-VL), or touch an already quantized checkpoint.
 */
#include "tools/quantize.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "log.h"
#include "pool.h"
#include "formats/safetensors.h"
#include "formats/st_write.h"
#include "tools/int4.h"

/* ---- e4m3fn ---- */

int iris_quantize_is_target(const char *name) {
    static const char *const pre = "model.language_model.layers.";
    static const char *const suffixes[] = {
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",
    };
    size_t pl = strlen(pre);
    if (strncmp(name, pre, pl)) return 0;
    const char *p = name + pl;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    if (*p++ != '.') return 0;
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++)
        if (!strcmp(p, suffixes[i])) return 1;
    return 0;
}

/* 448 / amax (as torch computes it) per 128-column block of one band (1 for an all-zero block), fp32 as transformers. */
static void band_scales(const float *src, int nr, int64_t cols, float *scale) {
    int64_t nb = (cols + IRIS_FP8_BLOCK - 1) / IRIS_FP8_BLOCK;
    for (int64_t b = 0; b < nb; b++) {
        int64_t c0 = b * IRIS_FP8_BLOCK, c1 = c0 + IRIS_FP8_BLOCK < cols ? c0 + IRIS_FP8_BLOCK : cols;
        float amax = 0.0f;
        for (int r = 0; r < nr; r++)
            for (int64_t c = c0; c < c1; c++) {
                float a = fabsf(src[r * cols + c]);
                if (a > amax) amax = a;
            }
        /* torch evaluates transformers' `448.0 / max_abs` (a Python scalar over a tensor) as
         * max_abs.reciprocal() * 448: two roundings, kept so the scales match bit for bit. */
        scale[b] = amax > 0.0f ? (1.0f / amax) * IRIS_FP8_MAX : 1.0f;
    }
}

static void band_encode(const float *src, int nr, int64_t cols, const float *scale, uint8_t *q) {
    for (int r = 0; r < nr; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = src[r * cols + c] * scale[c / IRIS_FP8_BLOCK];
            v = v < -IRIS_FP8_MAX ? -IRIS_FP8_MAX : v > IRIS_FP8_MAX ? IRIS_FP8_MAX : v;
            q[r * cols + c] = iris_fp8_e4m3_encode(v);
        }
}

/* ---- the directory ---- */

typedef enum { OUT_COPY, OUT_SCALE, OUT_WEIGHT, OUT_I4_PACKED, OUT_I4_SCALE, OUT_I4_ZERO, OUT_I4_SHAPE } out_kind;

typedef struct out_entry {
    out_kind kind;
    const iris_st_tensor *src;  /* the input tensor (for SCALE: its weight) */
    int target;                 /* index into the scale cache (SCALE, WEIGHT) */
} out_entry;

typedef struct target {
    const iris_st_tensor *w;
    float *scale;               /* FP8: [ceil(rows/128) * ceil(cols/128)]: 448 / amax */
    uint16_t *gscale;           /* int4: bf16 [rows, cols / group] */
    int8_t *gzero;              /* int4: [rows, cols / group] */
} target;

static void load_band_f32(const iris_st_tensor *t, int64_t r0, int nr, float *dst) {
    int64_t cols = t->shape[1];
    size_t n = (size_t)nr * (size_t)cols;
    if (t->dtype == IRIS_DT_F32) {
        memcpy(dst, (const float *)t->data + r0 * cols, n * 4);
        return;
    }
    const uint16_t *s = (const uint16_t *)t->data + r0 * cols;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)s[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

static int compute_scales(target *tg, float *band, iris_err *err) {
    const iris_st_tensor *t = tg->w;
    int64_t rows = t->shape[0], cols = t->shape[1];
    int64_t rb = (rows + IRIS_FP8_BLOCK - 1) / IRIS_FP8_BLOCK, cb = (cols + IRIS_FP8_BLOCK - 1) / IRIS_FP8_BLOCK;
    tg->scale = malloc((size_t)(rb * cb) * sizeof *tg->scale);
    if (!tg->scale) return iris_err_set(err, IRIS_ENOMEM, "quantize: out of memory");
    for (int64_t b = 0; b < rb; b++) {
        int nr = (int)(rows - b * IRIS_FP8_BLOCK < IRIS_FP8_BLOCK ? rows - b * IRIS_FP8_BLOCK : IRIS_FP8_BLOCK);
        load_band_f32(t, b * IRIS_FP8_BLOCK, nr, band);
        for (size_t i = 0; i < (size_t)nr * (size_t)cols; i++)
            if (!isfinite(band[i]))
                return iris_err_set(err, IRIS_EFORMAT, "tensor \"%s\": element [%lld, %lld] is %g; cannot quantize",
                                    t->name, (long long)(b * IRIS_FP8_BLOCK + (int64_t)(i / (size_t)cols)),
                                    (long long)(i % (size_t)cols), band[i]);
        band_scales(band, nr, cols, tg->scale + b * cb);
    }
    return 0;
}

/* ---- one matrix in memory (iris_quantize_fp8_matrix) ---- */

typedef struct matrix_job {
    const iris_st_tensor *t;    /* a view of the matrix, as load_band_f32 reads it */
    uint8_t *q;
    float *scale_inv;
    int64_t bad;                /* first non-finite element (row * cols + col), or -1; written by one band */
} matrix_job;

/* Bands [b0, b1) of 128 rows: scales, codes and the multipliers, one band buffer a worker. */
static void matrix_bands(void *ctx, int64_t b0, int64_t b1) {
    matrix_job *j = ctx;
    int64_t rows = j->t->shape[0], cols = j->t->shape[1], cb = (cols + IRIS_FP8_BLOCK - 1) / IRIS_FP8_BLOCK;
    float *band = malloc(sizeof *band * (size_t)IRIS_FP8_BLOCK * (size_t)cols), *scale = malloc(sizeof *scale * (size_t)cb);
    for (int64_t b = b0; b < b1; b++) {
        int nr = (int)(rows - b * IRIS_FP8_BLOCK < IRIS_FP8_BLOCK ? rows - b * IRIS_FP8_BLOCK : IRIS_FP8_BLOCK);
        if (!band || !scale) {
            __atomic_store_n(&j->bad, (int64_t)-2, __ATOMIC_RELAXED);
            break;
        }
        load_band_f32(j->t, b * IRIS_FP8_BLOCK, nr, band);
        for (size_t i = 0; i < (size_t)nr * (size_t)cols; i++)
            if (!isfinite(band[i])) {
                __atomic_store_n(&j->bad, b * IRIS_FP8_BLOCK * cols + (int64_t)i, __ATOMIC_RELAXED);
                break;
            }
        band_scales(band, nr, cols, scale);
        band_encode(band, nr, cols, scale, j->q + b * IRIS_FP8_BLOCK * cols);
        for (int64_t k = 0; k < cb; k++) j->scale_inv[b * cb + k] = 1.0f / scale[k];
    }
    free(band);
    free(scale);
}

int iris_quantize_fp8_matrix(const char *name, const void *src, iris_dtype dt, int64_t rows, int64_t cols, uint8_t *q,
                             float *scale_inv, iris_err *err) {
    if ((dt != IRIS_DT_BF16 && dt != IRIS_DT_F32) || rows <= 0 || cols <= 0)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "tensor \"%s\": %s [%lld, %lld]; FP8 quantization takes a BF16 or "
                            "F32 matrix", name, iris_dtype_name(dt), (long long)rows, (long long)cols);
    iris_st_tensor view = {.dtype = dt, .n_dims = 2, .shape = {rows, cols}, .data = src};
    matrix_job j = {&view, q, scale_inv, -1};
    iris_pool_for((rows + IRIS_FP8_BLOCK - 1) / IRIS_FP8_BLOCK, matrix_bands, &j);
    if (j.bad == -2) return iris_err_set(err, IRIS_ENOMEM, "quantize: out of memory");
    if (j.bad >= 0)
        return iris_err_set(err, IRIS_EFORMAT, "tensor \"%s\": element [%lld, %lld] is not finite; cannot quantize", name,
                            (long long)(j.bad / cols), (long long)(j.bad % cols));
    return 0;
}

/* int4: the bf16 scale and zero point of every group, the codes dropped (they are computed again,
 * band by band, when the packed words are due: the same function, the same result). */
static int compute_groups(target *tg, int group, int symmetric, float *band, int8_t *codes, iris_err *err) {
    const iris_st_tensor *t = tg->w;
    int64_t rows = t->shape[0], cols = t->shape[1], ng = cols / group;
    tg->gscale = malloc((size_t)(rows * ng) * sizeof *tg->gscale);
    tg->gzero = malloc((size_t)(rows * ng));
    if (!tg->gscale || !tg->gzero) return iris_err_set(err, IRIS_ENOMEM, "quantize: out of memory");
    for (int64_t r = 0; r < rows; r++) {
        load_band_f32(t, r, 1, band);
        for (int64_t c = 0; c < cols; c++)
            if (!isfinite(band[c]))
                return iris_err_set(err, IRIS_EFORMAT, "tensor \"%s\": element [%lld, %lld] is %g; cannot quantize",
                                    t->name, (long long)r, (long long)c, band[c]);
        for (int64_t g = 0; g < ng; g++)
            iris_int4_quantize_group(band + g * group, group, symmetric, &tg->gscale[r * ng + g],
                                     &tg->gzero[r * ng + g], codes);
    }
    return 0;
}

/* int4: the packed words of one weight, band by band. */
static int write_packed(iris_st_writer *w, const target *tg, int group, int symmetric, float *band, int8_t *codes,
                        iris_err *err) {
    int64_t rows = tg->w->shape[0], cols = tg->w->shape[1];
    int rc = 0;
    for (int64_t r0 = 0; r0 < rows && !rc; r0 += IRIS_FP8_BLOCK) {
        int nr = (int)(rows - r0 < IRIS_FP8_BLOCK ? rows - r0 : IRIS_FP8_BLOCK);
        load_band_f32(tg->w, r0, nr, band);
        for (int64_t i = 0; i < (int64_t)nr * cols; i += group) {
            uint16_t sc;
            int8_t z;
            iris_int4_quantize_group(band + i, group, symmetric, &sc, &z, codes + i);
        }
        iris_int4_pack(codes, (int64_t)nr * cols, (uint32_t *)band);   /* words fit where the floats were */
        rc = iris_st_writer_write(w, band, (size_t)nr * (size_t)cols / 2, err);
    }
    return rc;
}

static int same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* Copy the tokenizer, generation and preprocessor configs, chat templates, ... */
static int copy_other_files(const char *in_dir, const char *out_dir, iris_err *err) {
    DIR *d = opendir(in_dir);
    if (!d) return iris_err_set(err, IRIS_EIO, "cannot list %s: %s", in_dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    char src[4096], dst[4096];
    while (!rc && (e = readdir(d))) {
        const char *n = e->d_name;
        if (n[0] == '.' || !strcmp(n, "config.json") || ends_with(n, ".safetensors") ||
            ends_with(n, ".safetensors.index.json") || ends_with(n, ".tmp"))
            continue;
        snprintf(src, sizeof src, "%s/%s", in_dir, n);
        snprintf(dst, sizeof dst, "%s/%s", out_dir, n);
        struct stat st;
        if (stat(src, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        rc = iris_st_copy_file(src, dst, err);
        if (!rc) iris_log(IRIS_LOG_INFO, "quantize", "copied %s", n);
    }
    closedir(d);
    return rc;
}

static json_t *fp8_quant_config(void) {
    json_t *q = json_object(), *bs = json_array(), *skip = json_array();
    json_object_set_new(q, "quant_method", json_string("fp8"));
    json_object_set_new(q, "fmt", json_string("e4m3"));
    json_object_set_new(q, "activation_scheme", json_string("dynamic"));
    json_array_append_new(bs, json_integer(IRIS_FP8_BLOCK));
    json_array_append_new(bs, json_integer(IRIS_FP8_BLOCK));
    json_object_set_new(q, "weight_block_size", bs);
    json_array_append_new(skip, json_string("lm_head"));
    json_array_append_new(skip, json_string("model.visual"));
    json_object_set_new(q, "modules_to_not_convert", skip);
    return q;
}

json_t *iris_quantize_int4_config(int group, int symmetric) {
    json_t *w = json_pack("{s:n, s:n, s:b, s:i, s:i, s:s, s:o, s:s, s:b, s:s}", "actorder", "block_structure",
                          "dynamic", 0, "group_size", group, "num_bits", 4, "observer", "minmax", "observer_kwargs",
                          json_object(), "strategy", "group", "symmetric", symmetric, "type", "int");
    json_t *g = json_pack("{s:s, s:n, s:n, s:[s], s:o}", "format", "pack-quantized", "input_activations",
                          "output_activations", "targets", "Linear", "weights", w);
    return json_pack("{s:{s:o}, s:s, s:n, s:[s, s], s:n, s:s, s:s, s:{}, s:{}, s:s}", "config_groups", "group_0", g,
                     "format", "pack-quantized", "global_compression_ratio", "ignore", "lm_head", "re:.*visual.*",
                     "kv_cache_scheme", "quant_method", "compressed-tensors", "quantization_status", "compressed",
                     "sparsity_config", "transform_config", "version", "0.12.2");
}

/* config.json with quantization_config added; *n_layers from text_config. */
static int read_config(const char *in_dir, const iris_quantize_opts *o, json_t **out, int *n_layers, iris_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) return iris_err_set(err, IRIS_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return iris_err_set(err, IRIS_EFORMAT, "%s: not a JSON object", path);
    }
    if (json_object_get(cfg, "quantization_config")) {
        json_decref(cfg);
        return iris_err_set(err, IRIS_EINVAL, "%s already has a quantization_config: the checkpoint is quantized",
                            path);
    }
    json_t *tc = json_object_get(cfg, "text_config");
    json_t *nl = json_object_get(json_is_object(tc) ? tc : cfg, "num_hidden_layers");
    *n_layers = json_is_integer(nl) ? (int)json_integer_value(nl) : -1;
    json_t *qc = o->int4 ? iris_quantize_int4_config(o->group_size, !o->asymmetric) : fp8_quant_config();
    if (!qc) {
        json_decref(cfg);
        return iris_err_set(err, IRIS_ENOMEM, "quantize: out of memory");
    }
    json_object_set_new(cfg, "quantization_config", qc);
    *out = cfg;
    return 0;
}

static int make_dir(const char *dir, iris_err *err) {
    if (mkdir(dir, 0755) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return 0;
        return iris_err_set(err, IRIS_EINVAL, "%s exists and is not a directory", dir);
    }
    return iris_err_set(err, IRIS_EIO, "cannot create %s: %s", dir, strerror(errno));
}

/* Declares the output tensors of target number `ti` (its weight `t`). */
static int declare_target(iris_st_writer *w, const iris_st_tensor *t, const iris_quantize_opts *o, int ti,
                          out_entry *ent, iris_err *err) {
    char name[1100];
    int idx;
#define ADD(kind, nm, dt, nd, shape)                                                  \
    if ((idx = iris_st_writer_add(w, nm, dt, nd, shape, err)) < 0) return idx;      \
    ent[idx] = (out_entry){kind, t, ti};
    if (!o->int4) {
        int64_t sshape[2] = {(t->shape[0] + IRIS_FP8_BLOCK - 1) / IRIS_FP8_BLOCK,
                             (t->shape[1] + IRIS_FP8_BLOCK - 1) / IRIS_FP8_BLOCK};
        snprintf(name, sizeof name, "%s_scale_inv", t->name);
        ADD(OUT_WEIGHT, t->name, IRIS_DT_F8_E4M3, 2, t->shape);
        ADD(OUT_SCALE, name, IRIS_DT_F32, 2, sshape);
        return 0;
    }
    int64_t rows = t->shape[0], cols = t->shape[1], ng = cols / o->group_size;
    if (cols % o->group_size)
        return iris_err_set(err, IRIS_EUNSUPPORTED, "tensor \"%s\": %lld columns are not a multiple of the group "
                            "size %d; give --group-size that divides them", t->name, (long long)cols, o->group_size);
    int pl = (int)strlen(t->name) - (int)strlen(".weight");
    int64_t packed[2] = {rows, cols / 8}, scales[2] = {rows, ng}, zeros[2] = {(rows + 7) / 8, ng}, two = 2;
    snprintf(name, sizeof name, "%.*s.weight_packed", pl, t->name);
    ADD(OUT_I4_PACKED, name, IRIS_DT_I32, 2, packed);
    snprintf(name, sizeof name, "%.*s.weight_scale", pl, t->name);
    ADD(OUT_I4_SCALE, name, IRIS_DT_BF16, 2, scales);
    snprintf(name, sizeof name, "%.*s.weight_shape", pl, t->name);
    ADD(OUT_I4_SHAPE, name, IRIS_DT_I64, 1, &two);
    if (o->asymmetric) {
        snprintf(name, sizeof name, "%.*s.weight_zero_point", pl, t->name);
        ADD(OUT_I4_ZERO, name, IRIS_DT_I32, 2, zeros);
    }
#undef ADD
    return 0;
}

/* The bytes of one output tensor. */
static int write_entry(iris_st_writer *w, const out_entry *e, target *t, const iris_quantize_opts *o, float *band,
                       uint8_t *codes, iris_err *err) {
    int rc = 0, sym = !o->asymmetric, gs = o->group_size;
    if (e->kind == OUT_COPY) return iris_st_writer_write(w, e->src->data, (size_t)e->src->n_bytes, err);
    int64_t rows = t->w->shape[0], cols = t->w->shape[1];
    if (e->kind != OUT_SCALE && e->kind != OUT_WEIGHT && !t->gscale &&
        (rc = compute_groups(t, gs, sym, band, (int8_t *)codes, err)))
        return rc;
    switch (e->kind) {
    case OUT_SCALE: {
        if ((rc = compute_scales(t, band, err))) return rc;
        size_t nb = (size_t)((rows + 127) / 128 * ((cols + 127) / 128));
        for (size_t k = 0; k < nb && !rc; k++) {
            float inv = 1.0f / t->scale[k];
            rc = iris_st_writer_write(w, &inv, 4, err);
        }
        return rc;
    }
    case OUT_WEIGHT: {
        int64_t cb = (cols + 127) / 128;
        for (int64_t r0 = 0; r0 < rows && !rc; r0 += IRIS_FP8_BLOCK) {
            int nr = (int)(rows - r0 < IRIS_FP8_BLOCK ? rows - r0 : IRIS_FP8_BLOCK);
            load_band_f32(t->w, r0, nr, band);
            band_encode(band, nr, cols, t->scale + (r0 / IRIS_FP8_BLOCK) * cb, codes);
            rc = iris_st_writer_write(w, codes, (size_t)nr * (size_t)cols, err);
        }
        return rc;
    }
    case OUT_I4_PACKED: return write_packed(w, t, gs, sym, band, (int8_t *)codes, err);
    case OUT_I4_SCALE: return iris_st_writer_write(w, t->gscale, (size_t)(rows * (cols / gs)) * 2, err);
    case OUT_I4_SHAPE: return iris_st_writer_write(w, t->w->shape, 2 * sizeof(int64_t), err);
    case OUT_I4_ZERO: {
        int64_t ng = cols / gs;
        uint32_t *zw = malloc(sizeof *zw * (size_t)(((rows + 7) / 8) * ng));
        if (!zw) return iris_err_set(err, IRIS_ENOMEM, "quantize: out of memory");
        iris_int4_pack_zero(t->gzero, rows, ng, zw);
        rc = iris_st_writer_write(w, zw, sizeof *zw * (size_t)(((rows + 7) / 8) * ng), err);
        free(zw);
        return rc;
    }
    default: return 0;
    }
}

int iris_quantize_dir(const char *in_dir, const char *out_dir, iris_err *err) {
    return iris_quantize_dir_opts(in_dir, out_dir, NULL, err);
}

int iris_quantize_dir_opts(const char *in_dir, const char *out_dir, const iris_quantize_opts *opts, iris_err *err) {
    static const iris_quantize_opts fp8 = {0};
    const iris_quantize_opts *o = opts ? opts : &fp8;
    int rc = 0, n_layers = -1, n_targets = 0;
    json_t *cfg = NULL;
    iris_st *st = NULL;
    iris_st_writer *w = NULL;
    out_entry *ent = NULL;
    target *tg = NULL;
    float *band = NULL;
    uint8_t *codes = NULL;
    char path[4096];

    if (o->int4 && (o->group_size <= 0 || o->group_size % 8))
        return iris_err_set(err, IRIS_EINVAL, "--group-size %d: give a positive multiple of 8 (32, 64 or 128)",
                            o->group_size);
    struct stat sb;
    if (stat(in_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return iris_err_set(err, IRIS_ENOTFOUND, "%s: not a directory (give a BF16 checkpoint directory)", in_dir);
    if ((rc = read_config(in_dir, o, &cfg, &n_layers, err))) return rc;
    if ((rc = make_dir(out_dir, err))) goto done;
    if (same_dir(in_dir, out_dir)) {
        rc = iris_err_set(err, IRIS_EINVAL, "the output directory %s is the input directory: give another one",
                          out_dir);
        goto done;
    }
    if ((rc = iris_st_open(in_dir, &st, err))) goto done;

    int n = iris_st_count(st);
    ent = calloc((size_t)n * 4 + 1, sizeof *ent);
    tg = calloc((size_t)n + 1, sizeof *tg);
    if (!ent || !tg) {
        rc = iris_err_set(err, IRIS_ENOMEM, "quantize: out of memory");
        goto done;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if ((rc = iris_st_writer_open(path, &w, err))) goto done;
    int64_t max_cols = 0;
    for (int i = 0; i < n; i++) {
        const iris_st_tensor *t = iris_st_at(st, i);
        if (t->dtype == IRIS_DT_F8_E4M3 || t->dtype == IRIS_DT_F8_E5M2 || ends_with(t->name, "_scale_inv") ||
            ends_with(t->name, ".weight_packed")) {
            rc = iris_err_set(err, IRIS_EINVAL, "tensor \"%s\" is %s: %s is already quantized", t->name,
                              iris_dtype_name(t->dtype), in_dir);
            goto done;
        }
        if (!iris_quantize_is_target(t->name)) {
            int idx = iris_st_writer_add(w, t->name, t->dtype, t->n_dims, t->shape, err);
            if (idx < 0) {
                rc = idx;
                goto done;
            }
            ent[idx] = (out_entry){OUT_COPY, t, -1};
            continue;
        }
        if (t->n_dims != 2 || (t->dtype != IRIS_DT_BF16 && t->dtype != IRIS_DT_F32)) {
            rc = iris_err_set(err, IRIS_EUNSUPPORTED, "tensor \"%s\": %s with %d dimensions; a linear weight must be "
                              "a 2-D BF16 (or F32) matrix", t->name, iris_dtype_name(t->dtype), t->n_dims);
            goto done;
        }
        if ((rc = declare_target(w, t, o, n_targets, ent, err))) goto done;
        tg[n_targets++].w = t;
        if (t->shape[1] > max_cols) max_cols = t->shape[1];
    }
    if (n_layers > 0 && n_targets != 7 * n_layers) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: found %d decoder linear weights, expected 7 x %d layers = %d",
                          in_dir, n_targets, n_layers, 7 * n_layers);
        goto done;
    }
    if (n_targets == 0) {
        rc = iris_err_set(err, IRIS_EFORMAT, "%s: no decoder linear weights (model.language_model.layers.N.*_proj)",
                          in_dir);
        goto done;
    }
    band = malloc((size_t)IRIS_FP8_BLOCK * (size_t)max_cols * sizeof *band);
    codes = malloc((size_t)IRIS_FP8_BLOCK * (size_t)max_cols);
    if (!band || !codes) {
        rc = iris_err_set(err, IRIS_ENOMEM, "quantize: out of memory");
        goto done;
    }
    if ((rc = iris_st_writer_begin(w, err))) goto done;
    iris_log(IRIS_LOG_INFO, "quantize", "%s: %d tensors, %d linears to %s -> %s (%.2f GB)", in_dir, n, n_targets,
             o->int4 ? "int4" : "FP8", path, (double)iris_st_writer_file_bytes(w) / 1e9);

    for (int idx; !rc && (idx = iris_st_writer_next(w)) >= 0;)
        rc = write_entry(w, &ent[idx], ent[idx].target >= 0 ? &tg[ent[idx].target] : NULL, o, band, codes, err);
    if (!rc) rc = iris_st_writer_finish(w, err);
    if (rc) goto done;
    iris_log(IRIS_LOG_INFO, "quantize", "%d linears quantized", n_targets);
    /* config.json last but one: a directory with it is complete but for the side files. */
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    char *text = json_dumps(cfg, JSON_INDENT(2));
    if (!text) {
        rc = iris_err_set(err, IRIS_ENOMEM, "quantize: out of memory");
        goto done;
    }
    size_t tl = strlen(text);
    char *t2 = realloc(text, tl + 2);
    if (t2) {
        text = t2;
        text[tl++] = '\n';
        text[tl] = '\0';
    }
    rc = iris_st_write_file(path, text, tl, err);
    free(text);
    if (!rc) rc = copy_other_files(in_dir, out_dir, err);

done:
    if (tg)
        for (int i = 0; i < n_targets; i++) {
            free(tg[i].scale);
            free(tg[i].gscale);
            free(tg[i].gzero);
        }
    free(tg);
    free(ent);
    free(band);
    free(codes);
    iris_st_writer_close(w);
    iris_st_close(st);
    json_decref(cfg);
    return rc;
}
