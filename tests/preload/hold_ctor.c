/* hold_ctor.c: a shared library that test_server_startup.c loads into
 * `iris serve` with LD_PRELOAD, to hold the process inside the shared
 * libraries' constructors (before main()) for as long as the test wants.
 *
 * Its constructor writes one byte to the file descriptor named by
 * $IRIS_HOLD_OUT ("I am in the constructors"), then blocks until the
 * descriptor named by $IRIS_HOLD_IN gives a byte or ends.  Without both
 * variables it does nothing.  Built by the Makefile as
 * $(BUILD)/tests/preload/hold_ctor.so; never linked into anything. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void hold(void) {
    const char *o = getenv("IRIS_HOLD_OUT"), *i = getenv("IRIS_HOLD_IN");
    if (!o || !i) return;
    int fo = atoi(o), fi = atoi(i);
    while (write(fo, "h", 1) < 0 && errno == EINTR) {}
    close(fo);
    char c;
    while (read(fi, &c, 1) < 0 && errno == EINTR) {}
    close(fi);
}
