/* test_npy.c: the .npy float32 writer and reader (src/base/npy.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy.h"
#include "test.h"

IRIS_TEST(npy_roundtrip) {
    const char *path = "/tmp/iris_test_npy_roundtrip.npy";
    float data[2 * 3 * 5];
    for (int i = 0; i < 30; i++) data[i] = (float)i * 0.25f - 3.0f;
    int64_t shape[3] = {2, 3, 5};
    iris_err err = {0};
    REQUIRE(iris_npy_write_f32(path, data, shape, 3, &err) == 0);
    /* the header is what numpy writes: 64-byte aligned, the shape spelled out */
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    char head[128] = {0};
    size_t got = fread(head, 1, 127, f);
    fclose(f);
    CHECK(got == 127);
    CHECK(memcmp(head, "\x93NUMPY\x01\x00", 8) == 0);
    int hlen = (unsigned char)head[8] | (unsigned char)head[9] << 8;
    CHECK_EQ_INT((10 + hlen) % 64, 0);
    CHECK_CONTAINS(head + 10, "'shape': (2, 3, 5)");
    CHECK_CONTAINS(head + 10, "'descr': '<f4'");
    float *back;
    int64_t bs[IRIS_NPY_MAX_DIMS];
    int nd;
    REQUIRE(iris_npy_read_f32(path, &back, bs, &nd, &err) == 0);
    CHECK_EQ_INT(nd, 3);
    CHECK(bs[0] == 2 && bs[1] == 3 && bs[2] == 5);
    CHECK(memcmp(back, data, sizeof data) == 0);
    free(back);
    /* one dimension is written "(7,)" */
    int64_t s1[1] = {7};
    REQUIRE(iris_npy_write_f32(path, data, s1, 1, &err) == 0);
    REQUIRE(iris_npy_read_f32(path, &back, bs, &nd, &err) == 0);
    CHECK(nd == 1 && bs[0] == 7);
    free(back);
    remove(path);
}

IRIS_TEST(npy_bad_files) {
    const char *path = "/tmp/iris_test_npy_bad.npy";
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    iris_err err = {0};
    REQUIRE(iris_npy_write_f32(path, data, shape, 2, &err) == 0);
    /* truncated data */
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    REQUIRE(truncate(path, size - 4) == 0);
    float *back = NULL;
    int64_t bs[IRIS_NPY_MAX_DIMS];
    int nd;
    CHECK_EQ_INT(iris_npy_read_f32(path, &back, bs, &nd, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, path);
    CHECK(back == NULL);
    /* not an npy file */
    f = fopen(path, "wb");
    fputs("hello", f);
    fclose(f);
    CHECK_EQ_INT(iris_npy_read_f32(path, &back, bs, &nd, &err), IRIS_EFORMAT);
    CHECK_CONTAINS(err.msg, "magic");
    /* another dtype */
    f = fopen(path, "wb");
    const char hdr[] = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }";
    char pre[10] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, (char)(sizeof hdr - 1), 0};
    fwrite(pre, 1, 10, f);
    fwrite(hdr, 1, sizeof hdr - 1, f);
    double one = 1.0;
    fwrite(&one, 8, 1, f);
    fclose(f);
    CHECK_EQ_INT(iris_npy_read_f32(path, &back, bs, &nd, &err), IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "float32");
    CHECK(iris_npy_read_f32("/nonexistent/x.npy", &back, bs, &nd, &err) != 0);
    remove(path);
}
