/* old_driver.c: a shared library that test_device_pick.c loads into a CUDA build of `iris` with
 * LD_PRELOAD, to play an NVIDIA driver older than the CUDA runtime iris was built with (a WSL2
 * machine whose Windows driver predates CUDA 13): the runtime's device count fails with
 * cudaErrorInsufficientDriver (35) and the driver says it supports CUDA 12.4.  Built by the
 * Makefile as $(BUILD)/tests/preload/old_driver.so; never linked into anything. */
int cudaGetDeviceCount(int *count) {
    if (count) *count = 0;
    return 35;
}

int cudaDriverGetVersion(int *version) {
    if (version) *version = 12040;
    return 0;
}
