/* test_quantize.c: e4m3fn encoding, the safetensors writer, and `iris
 * quantize` on a small checkpoint made here (partial blocks, a zero block,
 * copied tensors and files, the config). */
#include "test.h"

#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "tools/quantize.h"
#include "formats/safetensors.h"
#include "formats/st_write.h"

/* e4m3fn value of a code, from the format definition (QWEN3VL.md §2). */
static double ref_decode(int c) {
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

/* Nearest code by brute force, ties to the even code, saturating. */
static int ref_encode(float x) {
    double a = fabs((double)x);
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c < 0x7f; c++) {
        double d = fabs(ref_decode(c) - a);
        if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = c;
    }
    return (x < 0 || (x == 0 && signbit(x))) ? best | 0x80 : best;
}

IRIS_TEST(quantize_e4m3_codes) {
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) {
            CHECK(isnan(iris_fp8_e4m3_decode((uint8_t)c)));
            continue;
        }
        CHECKF(iris_fp8_e4m3_decode((uint8_t)c) == (float)ref_decode(c), "decode 0x%02x", c);
        CHECKF(iris_fp8_e4m3_encode((float)ref_decode(c)) == c, "encode(decode(0x%02x))", c);
    }
    CHECK(iris_fp8_e4m3_decode(0x7e) == 448.0f);
    CHECK(iris_fp8_e4m3_encode(1000.0f) == 0x7e && iris_fp8_e4m3_encode(-INFINITY) == 0xfe);
    CHECK((iris_fp8_e4m3_encode(NAN) & 0x7f) == 0x7f);
    /* midpoints go to the even code, a hair either side to the nearest */
    for (int c = 0; c < 0x7e; c++) {
        double lo = ref_decode(c), hi = ref_decode(c + 1), mid = (lo + hi) / 2;
        int even = (c & 1) ? c + 1 : c;
        CHECKF(iris_fp8_e4m3_encode((float)mid) == even, "midpoint after 0x%02x", c);
        CHECKF(iris_fp8_e4m3_encode(nextafterf((float)mid, 0)) == c, "below midpoint after 0x%02x", c);
        CHECKF(iris_fp8_e4m3_encode(nextafterf((float)mid, 1000)) == c + 1, "above midpoint after 0x%02x", c);
    }
    /* random magnitudes over the whole range against brute force */
    uint64_t s = 99;
    for (int i = 0; i < 20000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = (float)ldexp((double)(s >> 40) / (1 << 24) + 0.5, (int)((s >> 20) % 24) - 14);
        if (s & 1) x = -x;
        int want = ref_encode(x), got = iris_fp8_e4m3_encode(x);
        CHECKF(got == want, "encode(%.9g) = 0x%02x, want 0x%02x", x, got, want);
        if (got != want) break;
    }
}

static char *tmpdir(const char *tag) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 256, "/tmp/iris-test-%s-%d-XXXXXX", tag, (int)getpid());
    return mkdtemp(p);
}

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

IRIS_TEST(st_write_roundtrip) {
    char *dir = tmpdir("stw");
    REQUIRE(dir);
    char path[512], tmp[600];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    iris_st_writer *w = NULL;
    iris_err err = {0};
    REQUIRE(iris_st_writer_open(path, &w, &err) == 0);
    uint8_t f8[9];
    uint16_t bf[6];
    float f32[3] = {1.5f, -2.0f, 3.25f};
    for (int i = 0; i < 9; i++) f8[i] = (uint8_t)(i * 7);
    for (int i = 0; i < 6; i++) bf[i] = (uint16_t)(0x3f80 + i);
    int i8 = iris_st_writer_add(w, "z.f8", IRIS_DT_F8_E4M3, 2, (int64_t[]){3, 3}, &err);
    int ib = iris_st_writer_add(w, "b.bf16", IRIS_DT_BF16, 2, (int64_t[]){2, 3}, &err);
    int i32 = iris_st_writer_add(w, "y.f32", IRIS_DT_F32, 1, (int64_t[]){3}, &err);
    REQUIRE(i8 == 0 && ib == 1 && i32 == 2);
    CHECK(iris_st_writer_add(w, "b.bf16", IRIS_DT_BF16, 1, (int64_t[]){1}, &err) < 0);
    CHECK_CONTAINS(err.msg, "declared twice");
    REQUIRE(iris_st_writer_begin(w, &err) == 0);
    /* order: F32, then BF16, then F8 */
    CHECK_EQ_INT(iris_st_writer_next(w), i32);
    REQUIRE(iris_st_writer_write(w, f32, sizeof f32, &err) == 0);
    CHECK_EQ_INT(iris_st_writer_next(w), ib);
    REQUIRE(iris_st_writer_write(w, bf, 5, &err) == 0); /* pieces may straddle tensors */
    REQUIRE(iris_st_writer_write(w, (uint8_t *)bf + 5, 7, &err) == 0);
    CHECK_EQ_INT(iris_st_writer_next(w), i8);
    REQUIRE(iris_st_writer_write(w, f8, 9, &err) == 0);
    CHECK_EQ_INT(iris_st_writer_next(w), -1);
    CHECK(iris_st_writer_write(w, f8, 1, &err) < 0);
    CHECK(access(path, F_OK) != 0 && access(tmp, F_OK) == 0);
    REQUIRE(iris_st_writer_finish(w, &err) == 0);
    iris_st_writer_close(w);
    CHECK(access(path, F_OK) == 0 && access(tmp, F_OK) != 0);

    iris_st *st = NULL;
    REQUIRE(iris_st_open(path, &st, &err) == 0);
    CHECK_EQ_INT(iris_st_count(st), 3);
    const iris_st_tensor *t = iris_st_find(st, "z.f8");
    REQUIRE(t && t->dtype == IRIS_DT_F8_E4M3 && t->n_dims == 2 && t->shape[0] == 3 && t->shape[1] == 3);
    CHECK(!memcmp(t->data, f8, 9));
    t = iris_st_find(st, "b.bf16");
    REQUIRE(t && t->dtype == IRIS_DT_BF16 && t->n_bytes == 12);
    CHECK(!memcmp(t->data, bf, 12));
    CHECK((t->file_offset & 1) == 0);
    t = iris_st_find(st, "y.f32");
    REQUIRE(t && t->dtype == IRIS_DT_F32);
    CHECK(!memcmp(t->data, f32, 12));
    CHECK_EQ_INT(t->file_offset % 8, 0); /* data starts 8-aligned, F32 first */
    CHECK_STR(iris_st_metadata(st, "format"), "pt");
    iris_st_close(st);

    /* closed before finish: nothing left behind */
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    REQUIRE(iris_st_writer_open(path, &w, &err) == 0);
    iris_st_writer_add(w, "x", IRIS_DT_F32, 1, (int64_t[]){4}, &err);
    REQUIRE(iris_st_writer_begin(w, &err) == 0);
    iris_st_writer_write(w, f32, 8, &err);
    CHECK(iris_st_writer_finish(w, &err) < 0);
    CHECK_CONTAINS(err.msg, "incomplete");
    iris_st_writer_close(w);
    CHECK(access(path, F_OK) != 0 && access(tmp, F_OK) != 0);

    /* a write error (here the file size limit: EFBIG, as a full disk) is reported, the tmp removed */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 1 << 16;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    REQUIRE(iris_st_writer_open(path, &w, &err) == 0);
    iris_st_writer_add(w, "big", IRIS_DT_U8, 1, (int64_t[]){32 << 20}, &err);
    int rc = iris_st_writer_begin(w, &err);
    uint8_t *big = calloc(32 << 20, 1);
    if (!rc && big) rc = iris_st_writer_write(w, big, 32 << 20, &err);
    if (!rc) rc = iris_st_writer_finish(w, &err);
    iris_st_writer_close(w);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    free(big);
    CHECK(rc < 0);
    CHECK_CONTAINS(err.msg, "b.safetensors.tmp");
    CHECK(access(path, F_OK) != 0 && access(tmp, F_OK) != 0);

    CHECK(iris_st_writer_open("/nonexistent-dir/x.safetensors", &w, &err) < 0);
    CHECK_CONTAINS(err.msg, "/nonexistent-dir/x.safetensors.tmp");
    rm_rf(dir);
}

/* ---- quantize a small checkpoint ---- */

typedef struct qt {
    const char *name;
    iris_dtype dt;
    int64_t r, c;
} qt;

#define LP "model.language_model.layers.0."
static const qt g_tensors[] = {
    {LP "self_attn.q_proj.weight", IRIS_DT_BF16, 200, 130}, /* partial blocks both ways */
    {LP "self_attn.k_proj.weight", IRIS_DT_BF16, 128, 130},
    {LP "self_attn.v_proj.weight", IRIS_DT_BF16, 64, 130},
    {LP "self_attn.o_proj.weight", IRIS_DT_BF16, 130, 200},
    {LP "mlp.gate_proj.weight", IRIS_DT_BF16, 300, 130},
    {LP "mlp.up_proj.weight", IRIS_DT_F32, 300, 130},
    {LP "mlp.down_proj.weight", IRIS_DT_BF16, 130, 300},
    {LP "input_layernorm.weight", IRIS_DT_BF16, 1, 130},
    {LP "self_attn.q_norm.weight", IRIS_DT_F32, 1, 64},
    {"model.language_model.embed_tokens.weight", IRIS_DT_BF16, 50, 130},
    {"model.visual.blocks.0.attn.qkv.weight", IRIS_DT_BF16, 6, 4},
    {"lm_head.weight", IRIS_DT_BF16, 50, 130},
};
#define N_QT ((int)(sizeof g_tensors / sizeof *g_tensors))

static uint16_t bf16_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float f32_of_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The value of element (r, c) of tensor k: magnitudes vary by block, one zero block. */
static float value(int k, int64_t r, int64_t c) {
    uint64_t h = (uint64_t)(k * 1000003 + r * 7919 + c) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    double u = (double)(h >> 11) * 0x1.0p-53 - 0.5;
    double mag = ldexp(1.0, (int)((r / 128 + c / 128 + k) % 9) - 8);
    if (k == 0 && r >= 128 && c < 128) return 0.0f;
    return (float)(u * mag * (1 + (c % 13 == 0) * 3));
}

static void write_json(const char *dir, const char *name, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) fputs(text, f), fclose(f);
}

static int make_checkpoint(const char *dir, int n_layers) {
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"Qwen3VLForConditionalGeneration\"], \"model_type\": \"qwen3_vl\",\n"
             " \"text_config\": {\"num_hidden_layers\": %d, \"hidden_size\": 130}}\n", n_layers);
    write_json(dir, "config.json", cfg);
    write_json(dir, "tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}\n");
    write_json(dir, "generation_config.json", "{\"eos_token_id\": [151645, 151643]}\n");
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    iris_st_writer *w = NULL;
    iris_err err = {0};
    if (iris_st_writer_open(path, &w, &err)) return -1;
    for (int k = 0; k < N_QT; k++) {
        const qt *t = &g_tensors[k];
        int64_t shape[2] = {t->r, t->c};
        if (t->r == 1) shape[0] = t->c;
        if (iris_st_writer_add(w, t->name, t->dt, t->r == 1 ? 1 : 2, shape, &err) != k) return -1;
    }
    if (iris_st_writer_begin(w, &err)) return -1;
    for (int k; (k = iris_st_writer_next(w)) >= 0;) {
        const qt *t = &g_tensors[k];
        for (int64_t r = 0; r < t->r; r++)
            for (int64_t c = 0; c < t->c; c++) {
                float v = value(k, r, c);
                if (t->dt == IRIS_DT_BF16) {
                    uint16_t h = bf16_of(v);
                    iris_st_writer_write(w, &h, 2, &err);
                } else {
                    iris_st_writer_write(w, &v, 4, &err);
                }
            }
    }
    int rc = iris_st_writer_finish(w, &err);
    iris_st_writer_close(w);
    return rc;
}

static float input_value(const iris_st_tensor *t, int64_t i) {
    return t->dtype == IRIS_DT_F32 ? ((const float *)t->data)[i] : f32_of_bf16(((const uint16_t *)t->data)[i]);
}

IRIS_TEST(quantize_checkpoint) {
    char *in = tmpdir("qin"), *outp = tmpdir("qout");
    REQUIRE(in && outp);
    char out[300];
    snprintf(out, sizeof out, "%s/fp8", outp); /* created by quantize */
    REQUIRE(make_checkpoint(in, 1) == 0);
    iris_err err = {0};
    REQUIRE(iris_quantize_dir(in, out, &err) == 0);

    iris_st *a = NULL, *b = NULL;
    REQUIRE(iris_st_open(in, &a, &err) == 0);
    REQUIRE(iris_st_open(out, &b, &err) == 0);
    CHECK_EQ_INT(iris_st_count(b), N_QT + 7);
    double worst = 0;
    for (int k = 0; k < N_QT; k++) {
        const iris_st_tensor *ti = iris_st_find(a, g_tensors[k].name), *to = iris_st_find(b, g_tensors[k].name);
        REQUIRE(ti && to);
        if (!iris_quantize_is_target(ti->name)) {
            CHECK(to->dtype == ti->dtype && to->n_bytes == ti->n_bytes);
            CHECKF(!memcmp(to->data, ti->data, ti->n_bytes), "%s not byte-identical", ti->name);
            continue;
        }
        char sname[300];
        snprintf(sname, sizeof sname, "%s_scale_inv", ti->name);
        const iris_st_tensor *ts = iris_st_find(b, sname);
        REQUIRE(ts);
        int64_t R = ti->shape[0], C = ti->shape[1], rb = (R + 127) / 128, cb = (C + 127) / 128;
        CHECK(to->dtype == IRIS_DT_F8_E4M3 && to->shape[0] == R && to->shape[1] == C);
        CHECK(ts->dtype == IRIS_DT_F32 && ts->n_dims == 2 && ts->shape[0] == rb && ts->shape[1] == cb);
        const uint8_t *q = to->data;
        const float *si = ts->data;
        for (int64_t bi = 0; bi < rb; bi++)
            for (int64_t bj = 0; bj < cb; bj++) {
                float amax = 0;
                for (int64_t r = bi * 128; r < R && r < bi * 128 + 128; r++)
                    for (int64_t c = bj * 128; c < C && c < bj * 128 + 128; c++)
                        amax = fmaxf(amax, fabsf(input_value(ti, r * C + c)));
                /* transformers' 448.0 / amax, which torch rounds as reciprocal then multiply */
                float scale = amax > 0 ? (1.0f / amax) * 448.0f : 1.0f, inv = 1.0f / scale;
                CHECKF(si[bi * cb + bj] == inv, "%s block (%lld,%lld): scale_inv %g, want %g", ti->name,
                       (long long)bi, (long long)bj, si[bi * cb + bj], inv);
                if (k == 0 && bi == 1 && bj == 0) CHECK(si[bi * cb + bj] == 1.0f); /* the zero block */
                for (int64_t r = bi * 128; r < R && r < bi * 128 + 128; r++)
                    for (int64_t c = bj * 128; c < C && c < bj * 128 + 128; c++) {
                        float w = input_value(ti, r * C + c);
                        int want = ref_encode(fminf(fmaxf(w * scale, -448.0f), 448.0f));
                        if (q[r * C + c] != want) {
                            CHECKF(0, "%s[%lld,%lld]: code 0x%02x, want 0x%02x", ti->name, (long long)r,
                                   (long long)c, q[r * C + c], want);
                            return;
                        }
                        /* dequantization rule: q * scale_inv within half a step of w */
                        double deq = ref_decode(q[r * C + c]) * (double)si[bi * cb + bj];
                        double tol = fmax(fabs((double)w) / 16.0, ldexp(1.0, -10) * inv) * 1.0001;
                        if (fabs(deq - w) > worst / 1) worst = fmax(worst, fabs(deq - w) / tol);
                        CHECKF(fabs(deq - w) <= tol, "%s[%lld,%lld]: %g dequantizes to %g", ti->name, (long long)r,
                               (long long)c, w, deq);
                    }
            }
    }
    CHECK(worst <= 1.0);
    iris_st_close(a);
    iris_st_close(b);

    /* config.json: everything kept, quantization_config added */
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", out);
    json_error_t je;
    json_t *cfg = json_load_file(p, 0, &je);
    REQUIRE(cfg);
    json_t *want = json_loads("{\"quant_method\": \"fp8\", \"fmt\": \"e4m3\", \"activation_scheme\": \"dynamic\","
                              " \"weight_block_size\": [128, 128], \"modules_to_not_convert\": [\"lm_head\", "
                              "\"model.visual\"]}", 0, &je);
    CHECK(json_equal(json_object_get(cfg, "quantization_config"), want));
    CHECK_STR(json_string_value(json_object_get(cfg, "model_type")), "qwen3_vl");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(cfg, "text_config"), "num_hidden_layers")), 1);
    json_decref(want);
    json_decref(cfg);
    snprintf(p, sizeof p, "%s/tokenizer.json", out);
    FILE *f = fopen(p, "r");
    char buf[100] = {0};
    CHECK(f && fread(buf, 1, sizeof buf - 1, f) > 0);
    if (f) fclose(f);
    CHECK_STR(buf, "{\"model\": {\"type\": \"BPE\"}}\n");
    snprintf(p, sizeof p, "%s/generation_config.json", out);
    CHECK(access(p, R_OK) == 0);

    /* refusals: quantized input, same directory, a missing layer, a non-finite weight */
    char again[400];
    snprintf(again, sizeof again, "%s/again", outp);
    CHECK(iris_quantize_dir(out, again, &err) < 0);
    CHECK_CONTAINS(err.msg, "quantiz");
    CHECK(iris_quantize_dir(in, in, &err) < 0);
    CHECK_CONTAINS(err.msg, "is the input directory");
    REQUIRE(make_checkpoint(in, 2) == 0);
    CHECK(iris_quantize_dir(in, again, &err) < 0);
    CHECK_CONTAINS(err.msg, "found 7 decoder linear weights, expected 7 x 2 layers = 14");
    CHECK(iris_quantize_dir("/nonexistent-iris-dir", again, &err) < 0);
    CHECK_CONTAINS(err.msg, "/nonexistent-iris-dir");
    rm_rf(in);
    rm_rf(outp);
}
