/* test_safetensors.c: the safetensors loader on valid files (every dtype, read
 * back; sharded checkpoints) and on every malformed case, each its own test
 * checking the error code and that the message names the file, the tensor and
 * the numbers.  Files are written at test time into a mkdtemp directory; the
 * reference files under tests/fixtures/loader/ were written by the Python
 * `safetensors` package and transformers' save_pretrained (tools/ref_loader.py). */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "test.h"

/* ---- helpers ---- */

static char *tmp_dir(void) {
    static char buf[64];
    snprintf(buf, sizeof buf, "/tmp/iris-st-XXXXXX");
    return mkdtemp(buf);
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

/* Write [len8][header][data] to dir/name; `hlen_override` (if nonzero) replaces
 * the length field, `truncate_to` (if nonzero) cuts the file. Returns the path. */
static const char *write_raw(const char *dir, const char *name, const char *header, const void *data, size_t data_len,
                             uint64_t hlen_override, size_t truncate_to) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t hl = strlen(header), total = 8 + hl + data_len;
    uint8_t *buf = malloc(total);
    uint64_t n = hlen_override ? hlen_override : hl;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (data_len) memcpy(buf + 8 + hl, data, data_len);
    if (truncate_to && truncate_to < total) total = truncate_to;
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(buf, 1, total, f);
        fclose(f);
    }
    free(buf);
    return path;
}

static const char *write_st(const char *dir, const char *name, const char *header, size_t data_len) {
    uint8_t *data = calloc(1, data_len + 1);
    for (size_t i = 0; i < data_len; i++) data[i] = (uint8_t)i;
    const char *p = write_raw(dir, name, header, data, data_len, 0, 0);
    free(data);
    return p;
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Open `path` expecting failure with `code`; returns the message. */
static const char *open_fails(const char *path, int code) {
    static iris_err err;
    iris_st *st = NULL;
    memset(&err, 0, sizeof err);
    int rc = iris_st_open(path, &st, &err);
    CHECK_EQ_INT(rc, code);
    CHECK(st == NULL);
    iris_st_close(st);
    return err.msg;
}

/* Minifloat decode (sign, e exponent bits, m mantissa bits, IEEE-style bias). */
static double minifloat(uint32_t bits, int e, int m) {
    int bias = (1 << (e - 1)) - 1;
    uint32_t s = bits >> (e + m) & 1, ex = bits >> m & ((1u << e) - 1), man = bits & ((1u << m) - 1);
    double v = ex ? ldexp(1.0 + man / (double)(1 << m), (int)ex - bias) : ldexp(man / (double)(1 << m), 1 - bias);
    return s ? -v : v;
}

static double elem(const iris_st_tensor *t, uint64_t i) {
    const uint8_t *p = (const uint8_t *)t->data + i * iris_dtype_size(t->dtype);
    union {
        double d;
        float f;
        int64_t i64;
        int32_t i32;
        int16_t i16;
        uint32_t u32;
        uint16_t u16;
    } u;
    memset(&u, 0, sizeof u);
    memcpy(&u, p, iris_dtype_size(t->dtype));
    switch (t->dtype) {
    case IRIS_DT_F64: return u.d;
    case IRIS_DT_F32: return u.f;
    case IRIS_DT_F16: return minifloat(u.u16, 5, 10);
    case IRIS_DT_BF16: { uint32_t b = (uint32_t)u.u16 << 16; float f; memcpy(&f, &b, 4); return f; }
    case IRIS_DT_F8_E4M3: return minifloat(p[0], 4, 3);
    case IRIS_DT_F8_E5M2: return minifloat(p[0], 5, 2);
    case IRIS_DT_I64: return (double)u.i64;
    case IRIS_DT_I32: return u.i32;
    case IRIS_DT_I16: return u.i16;
    case IRIS_DT_I8: return (int8_t)p[0];
    case IRIS_DT_U8: return p[0];
    case IRIS_DT_BOOL: return p[0];
    default: return NAN;
    }
}

/* ---- valid files ---- */

IRIS_TEST(safetensors_dtype_table) {
    CHECK_EQ_INT(iris_dtype_size(IRIS_DT_F64), 8);
    CHECK_EQ_INT(iris_dtype_size(IRIS_DT_BF16), 2);
    CHECK_EQ_INT(iris_dtype_size(IRIS_DT_F8_E5M2), 1);
    CHECK_EQ_INT(iris_dtype_size(IRIS_DT_BOOL), 1);
    for (int i = 0; i < IRIS_DT_COUNT; i++) CHECK_EQ_INT(iris_dtype_from_name(iris_dtype_name((iris_dtype)i)), i);
    CHECK_EQ_INT(iris_dtype_from_name("F4"), -1);
    CHECK_EQ_INT(iris_dtype_from_name("bf16"), -1);
}

/* One tensor of every dtype, written here, read back value by value. */
IRIS_TEST(safetensors_every_dtype_roundtrip) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    uint8_t data[256] = {0};
    size_t o = 0;
    double f64[2] = {1.0 / 3.0, -1e300};
    float f32[2] = {2.5f, -0.125f};
    uint16_t f16[2] = {0x3c00, 0xc000};   /* 1, -2 */
    uint16_t bf16[2] = {0x3f80, 0xc049};  /* 1, -3.140625 */
    uint8_t e4m3[2] = {0x7e, 0x01};       /* 448, 2^-9 */
    uint8_t e5m2[2] = {0x7b, 0x81};       /* 57344, -2^-16 */
    int64_t i64[2] = {-(1ll << 62), 42};
    int32_t i32[2] = {INT32_MIN, 7};
    int16_t i16[2] = {-32768, 32767};
    int8_t i8[2] = {-128, 127};
    uint8_t u8[2] = {0, 255};
    uint8_t bl[2] = {1, 0};
    const void *src[12] = {f64, f32, f16, bf16, e4m3, e5m2, i64, i32, i16, i8, u8, bl};
    double want[12][2] = {{1.0 / 3.0, -1e300}, {2.5, -0.125}, {1, -2},       {1, -3.140625}, {448, 0.001953125},
                          {57344, -1.52587890625e-05}, {-(double)(1ll << 62), 42}, {INT32_MIN, 7}, {-32768, 32767},
                          {-128, 127}, {0, 255}, {1, 0}};
    char header[2048];
    size_t h = (size_t)snprintf(header, sizeof header, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int dt = 0; dt < IRIS_DT_COUNT; dt++) {
        size_t sz = iris_dtype_size((iris_dtype)dt) * 2;
        memcpy(data + o, src[dt], sz);
        h += (size_t)snprintf(header + h, sizeof header - h, ",\"t_%s\":{\"dtype\":\"%s\",\"shape\":[2,1],\"data_offsets\":[%zu,%zu]}",
                              iris_dtype_name((iris_dtype)dt), iris_dtype_name((iris_dtype)dt), o, o + sz);
        o += sz;
    }
    snprintf(header + h, sizeof header - h, "}");
    const char *path = write_raw(dir, "all.safetensors", header, data, o, 0, 0);
    iris_st *st = NULL;
    iris_err err = {0};
    int rc = iris_st_open(path, &st, &err);
    CHECKF(rc == 0, "open: %s", err.msg);
    if (!rc) {
        CHECK_EQ_INT(iris_st_count(st), IRIS_DT_COUNT);
        CHECK_STR(iris_st_metadata(st, "format"), "pt");
        CHECK(iris_st_metadata(st, "nope") == NULL);
        for (int dt = 0; dt < IRIS_DT_COUNT; dt++) {
            char name[32];
            snprintf(name, sizeof name, "t_%s", iris_dtype_name((iris_dtype)dt));
            const iris_st_tensor *t = iris_st_find(st, name);
            CHECKF(t != NULL, "missing %s", name);
            if (!t) continue;
            CHECK_EQ_INT(t->dtype, dt);
            CHECK_EQ_INT(t->n_dims, 2);
            CHECK_EQ_INT(t->shape[0], 2);
            CHECK_EQ_INT(t->n_elems, 2);
            CHECK_EQ_INT(t->n_bytes, iris_dtype_size((iris_dtype)dt) * 2);
            for (int k = 0; k < 2; k++)
                CHECKF(elem(t, (uint64_t)k) == (dt == IRIS_DT_F8_E4M3 && k == 1 ? 0.001953125 : want[dt][k]),
                       "%s[%d] = %g, want %g", name, k, elem(t, (uint64_t)k), want[dt][k]);
        }
        CHECK_EQ_INT(iris_st_total_bytes(st), o);
    }
    iris_st_close(st);
    /* Headers only: same table, no data. */
    rc = iris_st_open_headers(path, &st, &err);
    CHECKF(rc == 0, "open_headers: %s", err.msg);
    if (!rc) {
        CHECK_EQ_INT(iris_st_count(st), IRIS_DT_COUNT);
        const iris_st_tensor *t = iris_st_find(st, "t_I64");
        CHECK(t && t->data == NULL && t->n_bytes == 16);
    }
    iris_st_close(st);
    rm_dir(dir);
}

/* The file written by the Python `safetensors` package (every dtype, a scalar,
 * an empty tensor, metadata, its 8-byte header padding) against the values
 * torch held. */
IRIS_TEST(safetensors_reference_writer_every_dtype) {
    json_error_t jerr;
    json_t *want = json_load_file("tests/fixtures/loader/every_dtype.json", 0, &jerr);
    REQUIRE(want);
    iris_st *st = NULL;
    iris_err err = {0};
    int rc = iris_st_open("tests/fixtures/loader/every_dtype.safetensors", &st, &err);
    CHECKF(rc == 0, "open: %s", err.msg);
    if (!rc) {
        CHECK_EQ_INT(iris_st_count(st), json_object_size(want));
        CHECK_STR(iris_st_metadata(st, "note"), "iris loader fixture");
        const char *name;
        json_t *w;
        json_object_foreach(want, name, w) {
            const iris_st_tensor *t = iris_st_find(st, name);
            CHECKF(t != NULL, "missing %s", name);
            if (!t) continue;
            json_t *shape = json_object_get(w, "shape"), *vals = json_object_get(w, "values");
            CHECK_EQ_INT(t->n_dims, json_array_size(shape));
            for (int d = 0; d < t->n_dims; d++) CHECK_EQ_INT(t->shape[d], json_integer_value(json_array_get(shape, d)));
            CHECK_EQ_INT(t->n_elems, json_array_size(vals));
            for (size_t k = 0; k < json_array_size(vals) && k < t->n_elems; k++) {
                json_t *v = json_array_get(vals, k);
                if (t->dtype == IRIS_DT_I64) {
                    int64_t got;
                    memcpy(&got, (const uint8_t *)t->data + 8 * k, 8);
                    CHECKF(got == json_integer_value(v), "%s[%zu]", name, k);
                } else {
                    CHECKF(elem(t, k) == json_number_value(v), "%s[%zu] = %.17g, want %.17g", name, k, elem(t, k),
                           json_number_value(v));
                }
            }
        }
        const iris_st_tensor *s = iris_st_find(st, "scalar_f32");
        CHECK(s && s->n_dims == 0 && s->n_elems == 1);
        const iris_st_tensor *e = iris_st_find(st, "empty_bf16");
        CHECK(e && e->n_elems == 0 && e->n_bytes == 0);
    }
    iris_st_close(st);
    json_decref(want);
}

/* A sharded checkpoint written here: open by directory and by index path. */
IRIS_TEST(safetensors_sharded_index) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    write_st(dir, "a.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                   "\"y\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]}}", 14);
    write_st(dir, "b.safetensors", "{\"z\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4);
    write_text(dir, "model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":18},\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\","
               "\"z\":\"b.safetensors\"}}");
    char idx[512];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    const char *paths[2] = {dir, idx};
    for (int k = 0; k < 2; k++) {
        iris_st *st = NULL;
        iris_err err = {0};
        int rc = iris_st_open(paths[k], &st, &err);
        CHECKF(rc == 0, "open %s: %s", paths[k], err.msg);
        if (rc) continue;
        CHECK_EQ_INT(iris_st_count(st), 3);
        CHECK_EQ_INT(iris_st_n_files(st), 2);
        const iris_st_tensor *z = iris_st_find(st, "z");
        CHECK(z && z->file == 1);
        CHECK_CONTAINS(iris_st_file_path(st, z ? z->file : 0), "b.safetensors");
        CHECK(z && ((const int8_t *)z->data)[3] == 3);
        CHECK(z && z->file_offset == 8 + strlen("{\"z\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}"));
        CHECK(iris_st_find(st, "nope") == NULL);
        CHECK_EQ_INT(iris_st_total_bytes(st), 18);
        iris_st_close(st);
    }
    rm_dir(dir);
}

/* transformers' save_pretrained output (4 shards + index) of a tiny
 * Qwen3VLForConditionalGeneration, against the listing the safetensors
 * package gave for it. */
IRIS_TEST(safetensors_reference_sharded_checkpoint) {
    json_error_t jerr;
    json_t *ref = json_load_file("tests/fixtures/loader/tiny_sharded.json", 0, &jerr);
    REQUIRE(ref);
    json_t *tensors = json_object_get(ref, "tensors");
    for (int headers = 0; headers < 2; headers++) {
        iris_st *st = NULL;
        iris_err err = {0};
        int rc = headers ? iris_st_open_headers("tests/fixtures/loader/tiny_sharded", &st, &err)
                         : iris_st_open("tests/fixtures/loader/tiny_sharded", &st, &err);
        CHECKF(rc == 0, "open: %s", err.msg);
        if (rc) continue;
        CHECK_EQ_INT(iris_st_n_files(st), json_array_size(json_object_get(ref, "files")));
        CHECK_EQ_INT(iris_st_count(st), json_object_size(tensors));
        const char *name;
        json_t *w;
        json_object_foreach(tensors, name, w) {
            const iris_st_tensor *t = iris_st_find(st, name);
            CHECKF(t != NULL, "missing %s", name);
            if (!t) continue;
            CHECK_STR(iris_dtype_name(t->dtype), json_string_value(json_object_get(w, "dtype")));
            json_t *shape = json_object_get(w, "shape");
            CHECK_EQ_INT(t->n_dims, json_array_size(shape));
            for (int d = 0; d < t->n_dims; d++) CHECK_EQ_INT(t->shape[d], json_integer_value(json_array_get(shape, d)));
            CHECK_CONTAINS(iris_st_file_path(st, t->file), json_string_value(json_object_get(w, "file")));
            CHECK(headers ? t->data == NULL : t->data != NULL);
        }
        /* The index's metadata says total_size 509504: the sum of the tensors. */
        CHECK_EQ_INT(iris_st_total_bytes(st), 509504);
        iris_st_close(st);
    }
    json_decref(ref);
}

IRIS_TEST(safetensors_fp8_linear_rule) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors",
                             "{\"l.q_proj.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,4]},"
                             "\"l.q_proj.weight_scale_inv\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[4,8]},"
                             "\"l.k_proj.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[8,12]},"
                             "\"l.v_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]},"
                             "\"l.v_proj.weight_scale_inv\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}",
                             20);
    iris_st *st = NULL;
    iris_err err = {0};
    REQUIRE(iris_st_open(p, &st, &err) == 0);
    CHECK_EQ_INT(iris_st_is_fp8_linear(st, "l.q_proj"), 1);
    CHECK_EQ_INT(iris_st_is_fp8_linear(st, "l.k_proj"), 0); /* no scale */
    CHECK_EQ_INT(iris_st_is_fp8_linear(st, "l.v_proj"), 0); /* not F8 */
    CHECK_EQ_INT(iris_st_is_fp8_linear(st, "l.o_proj"), 0); /* absent */
    iris_st_close(st);
    rm_dir(dir);
}

IRIS_TEST(safetensors_parse_buffer) {
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}  ";
    uint8_t buf[128] = {0};
    size_t hl = strlen(h);
    buf[0] = (uint8_t)hl;
    memcpy(buf + 8, h, hl);
    buf[8 + hl] = 7;
    buf[8 + hl + 2] = 9;
    iris_st *st = NULL;
    iris_err err = {0};
    int rc = iris_st_parse_buffer(buf, 8 + hl + 3, "buf", &st, &err);
    CHECKF(rc == 0, "%s", err.msg);
    const iris_st_tensor *t = iris_st_find(st, "a");
    CHECK(t && t->data == buf + 8 + hl && ((const uint8_t *)t->data)[2] == 9);
    iris_st_close(st);
    rc = iris_st_parse_buffer(buf, 8 + hl + 2, "buf", &st, &err);
    CHECK_EQ_INT(rc, IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "buf: tensor \"a\": data ends at byte 3, past the end of the file's data (2 bytes)");
}

/* ---- malformed files: one test each ---- */

#define ONE_F32 "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}"

IRIS_TEST(safetensors_bad_truncated_data) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    uint8_t data[24] = {0};
    const char *p = write_raw(dir, "model.safetensors", ONE_F32, data, 24, 0, 8 + strlen(ONE_F32) + 20);
    const char *msg = open_fails(p, IRIS_EFORMAT);
    CHECK_CONTAINS(msg, "model.safetensors: tensor \"w\": data ends at byte 24, past the end of the file's data (20 bytes)");
    CHECK_CONTAINS(msg, "truncated");
    /* The headers-only open sees the truncation too. */
    iris_st *st = NULL;
    iris_err err = {0};
    CHECK_EQ_INT(iris_st_open_headers(p, &st, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "data ends at byte 24, past the end of the file's data (20 bytes)");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_shorter_than_length_field) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_raw(dir, "tiny.safetensors", ONE_F32, NULL, 0, 0, 5);
    const char *msg = open_fails(p, IRIS_EFORMAT);
    CHECK_CONTAINS(msg, "tiny.safetensors: the file is 5 bytes, too short for the 8-byte header length");
    p = write_raw(dir, "empty.safetensors", "", NULL, 0, 0, 0);
    truncate(p, 0);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "the file is 0 bytes");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_header_length_past_end) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    uint8_t data[24] = {0};
    const char *p = write_raw(dir, "m.safetensors", ONE_F32, data, 24, 5000, 0);
    char want[128];
    snprintf(want, sizeof want, "m.safetensors: header length 5000 runs past the end of the file (%zu bytes)",
             8 + strlen(ONE_F32) + 24);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), want);
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_header_length_over_limit) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_raw(dir, "m.safetensors", ONE_F32, NULL, 0, 0xffffffffffffull, 0);
    CHECK_CONTAINS(open_fails(p, IRIS_ELIMIT), "m.safetensors: header length 281474976710655 is over the 104857600-byte limit");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_offsets_out_of_range) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors",
                             "{\"model.visual.blocks.3.attn.qkv.weight\":{\"dtype\":\"BF16\",\"shape\":[500],"
                             "\"data_offsets\":[91234,92234]}}", 90000);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT),
                   "m.safetensors: tensor \"model.visual.blocks.3.attn.qkv.weight\": data ends at byte 92234, past the "
                   "end of the file's data (90000 bytes)");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_offsets_reversed) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[16,8]}}", 24);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "m.safetensors: tensor \"w\": data_offsets [16, 8] begin after they end");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_offsets_negative_or_not_integers) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 4);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "m.safetensors: tensor \"w\": \"data_offsets\" must be two non-negative integers");
    p = write_st(dir, "n.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 4);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "n.safetensors: tensor \"w\": \"data_offsets\" is missing");
    p = write_st(dir, "o.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 4);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "o.safetensors: tensor \"w\": shape entry 0 is not a non-negative integer");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_overlap) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors",
                             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]}}", 28);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT),
                   "m.safetensors: tensor \"b\" (bytes 12..28) overlaps tensor \"a\" (bytes 0..16)");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_unknown_dtype) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors", "{\"w\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1);
    const char *msg = open_fails(p, IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(msg, "m.safetensors: tensor \"w\": unknown dtype \"F4\"");
    CHECK_CONTAINS(msg, "BF16");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_shape_size_mismatch) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT),
                   "m.safetensors: tensor \"w\": shape [2, 3] of F32 needs 24 bytes but data_offsets [0, 20] hold 20");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_shape_overflow) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors",
                             "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 4);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "m.safetensors: tensor \"w\": the element count of its shape overflows");
    p = write_st(dir, "n.safetensors",
                 "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,0]}}", 4);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "n.safetensors: tensor \"w\": 4611686018427387904 elements of F64 overflow");
    p = write_st(dir, "o.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4);
    CHECK_CONTAINS(open_fails(p, IRIS_ELIMIT), "o.safetensors: tensor \"w\": 9 dimensions, at most 8");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_invalid_json) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors", "{\"w\":{\"dtype\":\"F32\",", 4);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "m.safetensors: the header is not valid JSON");
    p = write_st(dir, "n.safetensors", "[1, 2]", 4);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "n.safetensors: the header is not a JSON object");
    p = write_st(dir, "o.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\x01", 4);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "o.safetensors: the header is not valid JSON");
    p = write_st(dir, "q.safetensors", "{\"__metadata__\":{\"n\":3}}", 0);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "q.safetensors: \"__metadata__\" value \"n\" is not a string");
    p = write_st(dir, "r.safetensors", "{\"w\":[1]}", 0);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "r.safetensors: tensor \"w\": its header entry is not a JSON object");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_duplicate_names) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    const char *p = write_st(dir, "m.safetensors",
                             "{\"lm.norm.weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                             "\"lm.norm.weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2);
    CHECK_CONTAINS(open_fails(p, IRIS_EFORMAT), "m.safetensors: the header names \"lm.norm.weight\" twice");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_duplicate_across_shards) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    write_st(dir, "a.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    write_st(dir, "b.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    /* Without an index every *.safetensors is read. */
    const char *msg = open_fails(dir, IRIS_EFORMAT);
    CHECK_CONTAINS(msg, "tensor \"x\" is stored twice: in ");
    CHECK_CONTAINS(msg, "a.safetensors and in ");
    CHECK_CONTAINS(msg, "b.safetensors");
    /* With an index naming both. */
    write_st(dir, "c.safetensors", "{\"y\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}");
    CHECK_CONTAINS(open_fails(dir, IRIS_EFORMAT), "tensor \"x\" is stored twice");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_index_missing_shard) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    write_st(dir, "a.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"model-00002-of-00002.safetensors\"}}");
    CHECK_CONTAINS(open_fails(dir, IRIS_ENOTFOUND),
                   "model.safetensors.index.json: shard \"model-00002-of-00002.safetensors\" named by the index is missing");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_index_wrong_shard) {
    char *dir = tmp_dir();
    REQUIRE(dir);
    write_st(dir, "a.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    write_st(dir, "b.safetensors", "{\"y\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"x\":\"b.safetensors\",\"y\":\"b.safetensors\",\"z\":\"a.safetensors\"}}");
    const char *msg = open_fails(dir, IRIS_EFORMAT);
    CHECK_CONTAINS(msg, "tensor \"x\" is in shard ");
    CHECK_CONTAINS(msg, "a.safetensors but the index puts it in \"b.safetensors\"");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\",\"z\":\"a.safetensors\"}}");
    CHECK_CONTAINS(open_fails(dir, IRIS_EFORMAT), "tensor \"z\" is not in shard \"a.safetensors\" where the index puts it");
    write_st(dir, "a.safetensors", "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                   "\"extra\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2);
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}");
    CHECK_CONTAINS(open_fails(dir, IRIS_EFORMAT), "tensor \"extra\" of shard ");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"x\":\"../a.safetensors\"}}");
    CHECK_CONTAINS(open_fails(dir, IRIS_EFORMAT), "outside the checkpoint's directory");
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"x\":\"a.safetensors\",\"x\":\"a.safetensors\"}}");
    CHECK_CONTAINS(open_fails(dir, IRIS_EFORMAT), "model.safetensors.index.json: not valid JSON");
    rm_dir(dir);
}

IRIS_TEST(safetensors_bad_paths) {
    CHECK_CONTAINS(open_fails("/nonexistent/x.safetensors", IRIS_ENOTFOUND), "/nonexistent/x.safetensors: cannot open");
    char *dir = tmp_dir();
    REQUIRE(dir);
    CHECK_CONTAINS(open_fails(dir, IRIS_ENOTFOUND), "no model.safetensors.index.json, model.safetensors");
    rm_dir(dir);
}
