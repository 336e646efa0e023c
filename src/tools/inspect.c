/* inspect.c: the report behind `iris inspect` (see inspect.h).
 *
 * Reads headers only (iris_st_open_headers), so inspecting a multi-GB model
 * costs a few kB of reads.  Beyond listing, it cross-checks the config against
 * the tensors where a mismatch would make loading fail later (embedding shape,
 * layer and block counts, lm_head present or tied, F8 weights without scales)
 * and reports those as warnings rather than errors: inspect is how a user
 * finds out what is wrong with a checkpoint.
 */
#include "inspect.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/config.h"
#include "err.h"
#include "hub/resolve.h"
#include "formats/safetensors.h"

const char *iris_inspect_part(const char *name) {
    if (!strncmp(name, "model.visual.", 13) || !strncmp(name, "visual.", 7)) return "vision";
    if (strstr(name, "embed_tokens.") || !strncmp(name, "lm_head.", 8)) return "embeddings";
    return "language model";
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Add n to an integer member (created at 0). */
static void add_int(json_t *o, const char *key, uint64_t n) {
    json_t *v = json_object_get(o, key);
    json_object_set_new(o, key, json_integer((json_int_t)((v ? (uint64_t)json_integer_value(v) : 0) + n)));
}

/* The row for `key` in an array of {label_key: key, ...} rows, appended if new. */
static json_t *row(json_t *arr, const char *label_key, const char *key) {
    size_t i;
    json_t *r;
    json_array_foreach(arr, i, r) if (!strcmp(json_string_value(json_object_get(r, label_key)), key)) return r;
    r = json_pack("{s:s, s:i, s:i, s:i}", label_key, key, "tensors", 0, "params", 0, "bytes", 0);
    json_array_append_new(arr, r);
    return r;
}

static json_t *int_array(const int *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *float_array(const float *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

static json_t *config_json(const iris_config *c) {
    const iris_text_config *t = &c->text_config;
    const iris_vision_config *v = &c->vision_config;
    json_t *text = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:o, s:b, s:b, s:s}", "num_hidden_layers",
        t->num_hidden_layers, "hidden_size", t->hidden_size, "intermediate_size", t->intermediate_size,
        "num_attention_heads", t->num_attention_heads, "num_key_value_heads", t->num_key_value_heads, "head_dim",
        t->head_dim, "vocab_size", t->vocab_size, "max_position_embeddings", t->max_position_embeddings,
        "rms_norm_eps", (double)t->rms_norm_eps, "rope_theta", t->rope_theta, "mrope_section",
        int_array(t->mrope_section, 3), "mrope_interleaved", t->mrope_interleaved, "attention_bias",
        t->attention_bias, "hidden_act", t->hidden_act);
    json_t *vision = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:f, s:s}", "depth", v->depth,
                               "hidden_size", v->hidden_size, "intermediate_size", v->intermediate_size, "num_heads",
                               v->num_heads, "in_channels", v->in_channels, "patch_size", v->patch_size,
                               "temporal_patch_size", v->temporal_patch_size, "spatial_merge_size",
                               v->spatial_merge_size, "out_hidden_size", v->out_hidden_size,
                               "num_position_embeddings", v->num_position_embeddings, "deepstack_visual_indexes",
                               int_array(v->deepstack_visual_indexes, v->n_deepstack), "rope_theta", v->rope_theta,
                               "hidden_act", v->hidden_act);
    const iris_quant_config *q = &c->quantization_config;
    json_t *quant = q->fp8    ? json_pack("{s:s, s:o}", "quant_method", "fp8", "weight_block_size",
                                          int_array(q->weight_block_size, 2))
                    : q->int4 ? json_pack("{s:s, s:s, s:i, s:i, s:b}", "quant_method", "compressed-tensors", "format",
                                          "pack-quantized", "num_bits", 4, "group_size", q->group_size, "symmetric",
                                          q->symmetric)
                              : json_null();
    return json_pack("{s:s, s:s, s:b, s:{s:i, s:i, s:i, s:i}, s:o, s:o, s:o}", "model_type", c->model_type,
                     "architecture", c->architecture, "tie_word_embeddings", c->tie_word_embeddings, "token_ids",
                     "image", c->image_token_id, "video", c->video_token_id, "vision_start", c->vision_start_token_id,
                     "vision_end", c->vision_end_token_id, "text_config", text, "vision_config", vision,
                     "quantization_config", quant);
}

/* Count distinct N in "<prefix>N." names. */
static int count_indexed(const iris_st *st, const char *prefix) {
    int max = -1;
    size_t pl = strlen(prefix);
    for (int i = 0; i < iris_st_count(st); i++) {
        const char *n = iris_st_at(st, i)->name;
        if (strncmp(n, prefix, pl) || n[pl] < '0' || n[pl] > '9') continue;
        int k = atoi(n + pl);
        if (k > max && k < 1000000) max = k;
    }
    return max + 1;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strverscmp((*(const iris_st_tensor *const *)a)->name, (*(const iris_st_tensor *const *)b)->name);
}

static void warn(json_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(json_t *w, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_array_append_new(w, json_string(buf));
}

static void check_against_config(const iris_st *st, const iris_config *c, json_t *warnings, const char **lm_head) {
    const iris_text_config *t = &c->text_config;
    const iris_st_tensor *emb = iris_st_find(st, "model.language_model.embed_tokens.weight");
    if (!emb) warn(warnings, "model.language_model.embed_tokens.weight is missing");
    else if (emb->n_dims != 2 || emb->shape[0] != t->vocab_size || emb->shape[1] != t->hidden_size)
        warn(warnings, "embed_tokens is [%lld, %lld] but config.json says vocab_size %d x hidden_size %d",
             (long long)emb->shape[0], (long long)(emb->n_dims > 1 ? emb->shape[1] : 0), t->vocab_size, t->hidden_size);
    int layers = count_indexed(st, "model.language_model.layers.");
    if (layers != t->num_hidden_layers)
        warn(warnings, "the checkpoint has %d text layers, config.json says num_hidden_layers %d", layers,
             t->num_hidden_layers);
    int blocks = count_indexed(st, "model.visual.blocks.");
    if (blocks != c->vision_config.depth)
        warn(warnings, "the checkpoint has %d vision blocks, config.json says depth %d", blocks, c->vision_config.depth);
    if (iris_st_find(st, "lm_head.weight")) *lm_head = "stored";
    else if (c->tie_word_embeddings) *lm_head = "tied";
    else {
        *lm_head = "missing";
        warn(warnings, "lm_head.weight is not stored and config.json does not tie it (tie_word_embeddings false)");
    }
}

int iris_inspect(const char *path, json_t **out, iris_err *err) {
    *out = NULL;
    struct stat sb;
    char dir[4096];
    int rc, is_dir = 0;
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
        snprintf(dir, sizeof dir, "%s", path); /* a .safetensors or index.json file */
    } else {
        if ((rc = iris_model_resolve(path, dir, sizeof dir, err))) return rc;
        is_dir = 1;
    }
    iris_config cfg;
    iris_generation_config gc;
    iris_preprocessor_config pc;
    if (is_dir && ((rc = iris_config_load(dir, &cfg, err)) || (rc = iris_generation_config_load(dir, &gc, err)) ||
                   (rc = iris_preprocessor_config_load(dir, &pc, err))))
        return rc;
    iris_st *st = NULL;
    if ((rc = iris_st_open_headers(dir, &st, err))) return rc;

    json_t *r = json_object(), *files = json_array(), *tensors = json_array(), *by_dtype = json_array(),
           *by_part = json_array(), *warnings = json_array(), *unscaled = json_array();
    json_object_set_new(r, "path", json_string(path));
    json_object_set_new(r, "dir", json_string(dir));
    const char *lm_head = "n/a";
    if (is_dir) {
        json_object_set_new(r, "config", config_json(&cfg));
        json_object_set_new(r, "generation",
                            json_pack("{s:i, s:i, s:o, s:b, s:i, s:f, s:f, s:f}", "bos_token_id", gc.bos_token_id,
                                      "pad_token_id", gc.pad_token_id, "eos_token_id", int_array(gc.eos_token_id, gc.n_eos),
                                      "do_sample", gc.do_sample, "top_k", gc.top_k, "top_p", (double)gc.top_p,
                                      "temperature", (double)gc.temperature, "repetition_penalty",
                                      (double)gc.repetition_penalty));
        json_object_set_new(r, "preprocessor",
                            json_pack("{s:I, s:I, s:i, s:i, s:i, s:o, s:o}", "min_pixels", (json_int_t)pc.min_pixels,
                                      "max_pixels", (json_int_t)pc.max_pixels, "patch_size", pc.patch_size,
                                      "temporal_patch_size", pc.temporal_patch_size, "merge_size", pc.merge_size,
                                      "image_mean", float_array(pc.image_mean, 3), "image_std",
                                      float_array(pc.image_std, 3)));
        check_against_config(st, &cfg, warnings, &lm_head);
    }
    for (int i = 0; i < iris_st_n_files(st); i++) json_array_append_new(files, json_string(iris_st_file_path(st, i)));
    uint64_t params = 0, n_fp8 = 0, n_int4 = 0;
    char prefix[IRIS_ST_MAX_NAME_BYTES + 1];
    /* Listed in name order, numbers compared as numbers (layers.2 before layers.10). */
    int n = iris_st_count(st);
    const iris_st_tensor **order = malloc((size_t)(n ? n : 1) * sizeof *order);
    if (!order) {
        json_decref(r);
        json_decref(files), json_decref(tensors), json_decref(by_dtype), json_decref(by_part);
        json_decref(warnings), json_decref(unscaled);
        iris_st_close(st);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) order[i] = iris_st_at(st, i);
    qsort(order, (size_t)n, sizeof *order, cmp_tensor_name);
    for (int i = 0; i < n; i++) {
        const iris_st_tensor *t = order[i];
        /* FP8 and 4-bit scales, zero points and shapes are bookkeeping, not parameters; a 4-bit word is 8 */
        int is_scale = ends_with(t->name, "_scale_inv") || ends_with(t->name, ".weight_scale") ||
                       ends_with(t->name, ".weight_zero_point") || ends_with(t->name, ".weight_shape");
        int packed = ends_with(t->name, ".weight_packed");
        uint64_t p = is_scale ? 0 : packed ? 8 * t->n_elems : t->n_elems;
        n_int4 += packed;
        json_t *shape = json_array();
        for (int d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->shape[d]));
        const char *part = iris_inspect_part(t->name);
        json_t *tj = json_pack("{s:s, s:s, s:o, s:I, s:i, s:s}", "name", t->name, "dtype", iris_dtype_name(t->dtype),
                               "shape", shape, "bytes", (json_int_t)t->n_bytes, "file", t->file, "part", part);
        if (t->dtype == IRIS_DT_F8_E4M3 && ends_with(t->name, ".weight")) {
            snprintf(prefix, sizeof prefix, "%.*s", (int)(strlen(t->name) - 7), t->name);
            int fp8 = iris_st_is_fp8_linear(st, prefix);
            json_object_set_new(tj, "fp8_linear", json_boolean(fp8));
            if (fp8) n_fp8++;
            else json_array_append_new(unscaled, json_string(t->name));
        }
        json_array_append_new(tensors, tj);
        json_t *rows[2] = {row(by_dtype, "dtype", iris_dtype_name(t->dtype)), row(by_part, "part", part)};
        for (int k = 0; k < 2; k++) {
            add_int(rows[k], "tensors", 1);
            add_int(rows[k], "params", p);
            add_int(rows[k], "bytes", t->n_bytes);
        }
        params += p;
    }
    free(order);
    if (json_array_size(unscaled))
        warn(warnings, "%zu F8_E4M3 weights have no sibling weight_scale_inv (first: %s); they cannot be dequantized",
             json_array_size(unscaled), json_string_value(json_array_get(unscaled, 0)));
    json_object_set_new(r, "files", files);
    json_object_set_new(r, "tensors", tensors);
    json_object_set_new(r, "totals",
                        json_pack("{s:i, s:I, s:I, s:o, s:o}", "tensors", iris_st_count(st), "params",
                                  (json_int_t)params, "bytes", (json_int_t)iris_st_total_bytes(st), "by_dtype",
                                  by_dtype, "by_part", by_part));
    json_object_set_new(r, "fp8", json_pack("{s:I, s:o}", "linears", (json_int_t)n_fp8, "unscaled_f8_weights", unscaled));
    json_object_set_new(r, "int4", json_pack("{s:I}", "linears", (json_int_t)n_int4));
    json_object_set_new(r, "lm_head", json_string(lm_head));
    json_object_set_new(r, "warnings", warnings);
    iris_st_close(st);
    *out = r;
    return 0;
}

/* ---- text form ---- */

static const char *human(uint64_t n, char buf[32]) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1024 && i < 4) v /= 1024, i++;
    snprintf(buf, 32, i ? "%.2f %s" : "%.0f %s", v, u[i]);
    return buf;
}

static long long gi(const json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }
static double gf(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void print_ints(FILE *f, const json_t *a) {
    size_t i;
    json_t *v;
    fputc('[', f);
    json_array_foreach(a, i, v) fprintf(f, "%s%lld", i ? ", " : "", (long long)json_integer_value(v));
    fputc(']', f);
}

static void print_totals(FILE *f, const json_t *rows, const char *key, const char *title) {
    char h[32];
    fprintf(f, "\n%-16s %8s %15s %16s\n", title, "tensors", "params", "bytes");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
        fprintf(f, "%-16s %8lld %15lld %16lld  (%s)\n", json_string_value(json_object_get(r, key)), gi(r, "tensors"),
                gi(r, "params"), gi(r, "bytes"), human((uint64_t)gi(r, "bytes"), h));
}

void iris_inspect_print(FILE *f, const json_t *r, int with_tensors) {
    char h[32];
    const json_t *c = json_object_get(r, "config");
    fprintf(f, "model       %s\n", json_string_value(json_object_get(r, "dir")));
    if (c) {
        const json_t *t = json_object_get(c, "text_config"), *v = json_object_get(c, "vision_config"),
                     *q = json_object_get(c, "quantization_config"), *g = json_object_get(r, "generation"),
                     *p = json_object_get(r, "preprocessor");
        fprintf(f, "type        %s (%s)\n", json_string_value(json_object_get(c, "model_type")),
                json_string_value(json_object_get(c, "architecture")));
        fprintf(f, "text        %lld layers, hidden %lld, %lld q / %lld kv heads x %lld, MLP %lld, vocab %lld, context %lld\n",
                gi(t, "num_hidden_layers"), gi(t, "hidden_size"), gi(t, "num_attention_heads"),
                gi(t, "num_key_value_heads"), gi(t, "head_dim"), gi(t, "intermediate_size"), gi(t, "vocab_size"),
                gi(t, "max_position_embeddings"));
        fprintf(f, "            rope theta %g, mrope_section ", gf(t, "rope_theta"));
        print_ints(f, json_object_get(t, "mrope_section"));
        fprintf(f, "%s, rms_norm_eps %g, lm_head %s\n",
                json_is_true(json_object_get(t, "mrope_interleaved")) ? " interleaved" : "", gf(t, "rms_norm_eps"),
                json_string_value(json_object_get(r, "lm_head")));
        fprintf(f, "vision      %lld blocks, hidden %lld, %lld heads, MLP %lld, patch %lldx%lld x%lld frames, merge %lldx%lld -> %lld, "
                   "%lld position embeddings, deepstack ",
                gi(v, "depth"), gi(v, "hidden_size"), gi(v, "num_heads"), gi(v, "intermediate_size"), gi(v, "patch_size"),
                gi(v, "patch_size"), gi(v, "temporal_patch_size"), gi(v, "spatial_merge_size"),
                gi(v, "spatial_merge_size"), gi(v, "out_hidden_size"), gi(v, "num_position_embeddings"));
        print_ints(f, json_object_get(v, "deepstack_visual_indexes"));
        fputc('\n', f);
        if (json_is_object(q) && json_object_get(q, "group_size")) {
            fprintf(f, "quantized   int4 W4A16 (compressed-tensors pack-quantized), groups of %lld, %s; %lld 4-bit "
                       "linears in the checkpoint\n",
                    gi(q, "group_size"), json_is_true(json_object_get(q, "symmetric")) ? "symmetric" : "with zero points",
                    gi(json_object_get(r, "int4"), "linears"));
        } else if (json_is_object(q)) {
            const json_t *b = json_object_get(q, "weight_block_size");
            fprintf(f, "quantized   fp8 e4m3, %lldx%lld blocks; %lld FP8 linears in the checkpoint\n",
                    (long long)json_integer_value(json_array_get(b, 0)), (long long)json_integer_value(json_array_get(b, 1)),
                    gi(json_object_get(r, "fp8"), "linears"));
        } else {
            fprintf(f, "quantized   no (%lld FP8 linears in the checkpoint)\n", gi(json_object_get(r, "fp8"), "linears"));
        }
        fprintf(f, "generation  eos ");
        if (json_array_size(json_object_get(g, "eos_token_id"))) print_ints(f, json_object_get(g, "eos_token_id"));
        else fprintf(f, "none given");
        fprintf(f, ", %s, top_k %lld, top_p %g, temperature %g\n",
                json_is_true(json_object_get(g, "do_sample")) ? "sampling" : "greedy", gi(g, "top_k"), gf(g, "top_p"),
                gf(g, "temperature"));
        fprintf(f, "images      %lld..%lld pixels, patch %lld, merge %lld\n", gi(p, "min_pixels"), gi(p, "max_pixels"),
                gi(p, "patch_size"), gi(p, "merge_size"));
    }
    const json_t *files = json_object_get(r, "files"), *tensors = json_object_get(r, "tensors");
    fprintf(f, "files       %zu\n", json_array_size(files));
    size_t i;
    json_t *x;
    if (with_tensors) {
        int w = 6;
        json_array_foreach(tensors, i, x) {
            int n = (int)strlen(json_string_value(json_object_get(x, "name")));
            if (n > w) w = n;
        }
        fprintf(f, "\n%-*s  %-7s  %-22s %14s\n", w, "tensor", "dtype", "shape", "bytes");
        json_array_foreach(tensors, i, x) {
            char shape[96] = "[";
            size_t o = 1, d;
            json_t *s;
            json_array_foreach(json_object_get(x, "shape"), d, s)
                if (o < sizeof shape)
                    o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%lld", d ? ", " : "", (long long)json_integer_value(s));
            if (o < sizeof shape) snprintf(shape + o, sizeof shape - o, "]");
            fprintf(f, "%-*s  %-7s  %-22s %14lld%s\n", w, json_string_value(json_object_get(x, "name")),
                    json_string_value(json_object_get(x, "dtype")), shape, gi(x, "bytes"),
                    json_is_true(json_object_get(x, "fp8_linear")) ? "  fp8" : "");
        }
    }
    const json_t *tot = json_object_get(r, "totals");
    print_totals(f, json_object_get(tot, "by_dtype"), "dtype", "by dtype");
    print_totals(f, json_object_get(tot, "by_part"), "part", "by part");
    fprintf(f, "%-16s %8lld %15lld %16lld  (%s)\n", "total", gi(tot, "tensors"), gi(tot, "params"), gi(tot, "bytes"),
            human((uint64_t)gi(tot, "bytes"), h));
    json_array_foreach(json_object_get(r, "warnings"), i, x) fprintf(f, "warning: %s\n", json_string_value(x));
}
