/* test_base.c: errors and logging. */
#include "test.h"

#include "err.h"

IRIS_TEST(err_set_and_prefix) {
    iris_err err = {0};
    CHECK_EQ_INT(iris_err_set(&err, IRIS_EFORMAT, "tensor \"%s\": bad", "x"), IRIS_EFORMAT);
    CHECK_STR(err.msg, "tensor \"x\": bad");
    iris_err_prefix(&err, "file %s", "a.safetensors");
    CHECK_STR(err.msg, "file a.safetensors: tensor \"x\": bad");
    CHECK_EQ_INT(err.code, IRIS_EFORMAT);
    CHECK_EQ_INT(iris_err_set(NULL, IRIS_EIO, "dropped"), IRIS_EIO);
}
