/* dtype.c: element sizes and names of iris_dtype (dtype.h). */
#include "dtype.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} g_dtypes[IRIS_DT_COUNT] = {
    [IRIS_DT_F64] = {"F64", 8},         [IRIS_DT_F32] = {"F32", 4},   [IRIS_DT_F16] = {"F16", 2},
    [IRIS_DT_BF16] = {"BF16", 2},       [IRIS_DT_F8_E4M3] = {"F8_E4M3", 1},
    [IRIS_DT_F8_E5M2] = {"F8_E5M2", 1}, [IRIS_DT_I64] = {"I64", 8},   [IRIS_DT_I32] = {"I32", 4},
    [IRIS_DT_I16] = {"I16", 2},         [IRIS_DT_I8] = {"I8", 1},     [IRIS_DT_U8] = {"U8", 1},
    [IRIS_DT_BOOL] = {"BOOL", 1},
};

size_t iris_dtype_size(iris_dtype dt) { return (unsigned)dt < IRIS_DT_COUNT ? g_dtypes[dt].size : 0; }

const char *iris_dtype_name(iris_dtype dt) {
    return (unsigned)dt < IRIS_DT_COUNT ? g_dtypes[dt].name : dt == IRIS_DT_I4 ? "I4" : "?";
}

int iris_dtype_from_name(const char *name) {
    for (int i = 0; name && i < IRIS_DT_COUNT; i++)
        if (!strcmp(name, g_dtypes[i].name)) return i;
    return -1;
}

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

uint8_t iris_fp8_e4m3_encode(float x) {
    uint32_t u = f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | 0x7f;              /* NaN */
    if (u >= 0x43e00000u) return sign | 0x7e;             /* >= 448 (and inf): saturate */
    if (u < 0x3c800000u) {                                /* below 2^-6: subnormal, steps of 2^-9 */
        float a;
        memcpy(&a, &u, 4);
        return sign | (uint8_t)lrintf(a * 512.0f);        /* exact product; lrintf rounds half to even */
    }
    /* Normal: keep exponent + 3 mantissa bits, round the dropped 20 to nearest even;
     * a carry moves into the exponent, which is the right result. */
    uint32_t base = u >> 20, rem = u & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (base & 1))) base++;
    return sign | (uint8_t)(base - ((127 - 7) << 3));
}

float iris_fp8_e4m3_decode(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) v = ldexpf((float)m, -9);
    else v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return s ? -v : v;
}
