/* dtype.c: element sizes and names of iris_dtype (dtype.h). */
#include "dtype.h"

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

const char *iris_dtype_name(iris_dtype dt) { return (unsigned)dt < IRIS_DT_COUNT ? g_dtypes[dt].name : "?"; }

int iris_dtype_from_name(const char *name) {
    for (int i = 0; name && i < IRIS_DT_COUNT; i++)
        if (!strcmp(name, g_dtypes[i].name)) return i;
    return -1;
}
