/* dtype.h: the element types of tensors, as the safetensors format names them.
 *
 * Shared by the file formats (safetensors), the model and the backends, so that
 * a backend sees dtypes without including any file format. */
#ifndef IRIS_DTYPE_H
#define IRIS_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum iris_dtype {
    IRIS_DT_F64, IRIS_DT_F32, IRIS_DT_F16, IRIS_DT_BF16, IRIS_DT_F8_E4M3, IRIS_DT_F8_E5M2,
    IRIS_DT_I64, IRIS_DT_I32, IRIS_DT_I16, IRIS_DT_I8, IRIS_DT_U8, IRIS_DT_BOOL,
    IRIS_DT_COUNT,              /* the stored (safetensors) dtypes are those above */
    IRIS_DT_I4 = IRIS_DT_COUNT  /* a weight view, never stored: 4-bit codes packed 8 to an int32 word
                                   (compressed-tensors pack-quantized; backend.h); name "I4", size 0 */
} iris_dtype;

/* Size in bytes of one element (0 if unknown); the format's name ("BF16"; "?" if unknown);
 * a name parsed (-1 if unknown). */
size_t iris_dtype_size(iris_dtype dt);
const char *iris_dtype_name(iris_dtype dt);
int iris_dtype_from_name(const char *name);

/* fp32 -> float8_e4m3fn, round to nearest even, saturating to +-448 (NaN -> 0x7F). */
uint8_t iris_fp8_e4m3_encode(float x);
/* float8_e4m3fn -> fp32 (exact). */
float iris_fp8_e4m3_decode(uint8_t b);

#endif
