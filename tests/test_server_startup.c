/* test_server_startup.c: `iris serve` while it starts: /health answers 503
 * while the model loads and 200 once it is ready, and SIGTERM at any moment
 * of start-up is an orderly exit 0 (it used to be 143 when the signal came
 * before main(): the CUDA and BLAS libraries' constructors take ~0.35 s on a
 * CUDA build, and the handler was installed only in iris_cmd_serve).
 *
 * Slow on purpose, honestly: the "slow" model is a real-format checkpoint
 * (`iris synth --like tiny`) with Qwen's real tokenizer (151,669 tokens and
 * their merges, fetched by scripts/setup into .cache/assets), whose parsing
 * is most of a real Qwen3-VL model's load on the CPU (~0.7 s on the 2-core
 * CI machine).  The server has no delay hook; these tests see its ordinary
 * start-up.  To stop the process inside the shared libraries' constructors,
 * deterministically, tests/preload/hold_ctor.c is loaded with LD_PRELOAD:
 * its constructor blocks until the test lets it go. */
#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_harness.h"
#include "test.h"

/* ---- the slow-loading model, synthesized once per test run ---- */

static char g_slow[64];

static void remove_slow(void) {
    if (!g_slow[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_slow);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_slow);
}

static const char *slow_model(void) {
    if (g_slow[0]) return g_slow;
    const char *tok = iris_test_asset("qwen3/tokenizer.json");
    CHECKF(tok, "the real Qwen tokenizer is missing from .cache/assets: run scripts/setup");
    if (!tok) return NULL;
    char dir[64] = "/tmp/iris-slow-model-XXXXXX";
    if (!mkdtemp(dir)) return NULL;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s synth --like tiny --tokenizer %s %s > %s/synth.log 2>&1", ts_bin(), tok, dir, dir);
    int rc = system(cmd);
    CHECKF(rc == 0, "%s failed", cmd);
    snprintf(g_slow, sizeof g_slow, "%s", dir);
    atexit(remove_slow);
    return rc == 0 ? g_slow : NULL;
}

/* ---- one `iris serve`, exec'd directly (no shell between us and it) ---- */

typedef struct proc {
    pid_t pid;
    char log[80];
    int held;          /* 1 while hold_ctor.so blocks it */
    int hold_release;  /* write end: a byte (or closing it) lets the constructor return */
} proc;

/* Returns once the exec has happened (the CLOEXEC pipe closes then), so a
 * signal sent afterwards reaches iris, not the forked test process.  With
 * `hold`: LD_PRELOAD hold_ctor.so, and return once its constructor runs. */
static int spawn_serve(proc *p, const char *model, int hold) {
    static int n;
    memset(p, 0, sizeof *p);
    p->hold_release = -1;
    signal(SIGPIPE, SIG_IGN);
    snprintf(p->log, sizeof p->log, "/tmp/iris-startup-%d-%d.log", (int)getpid(), n++);
    char so[512];
    const char *bin = ts_bin();
    snprintf(so, sizeof so, "%.*s/tests/preload/hold_ctor.so", (int)(strrchr(bin, '/') ? strrchr(bin, '/') - bin : 1),
             strrchr(bin, '/') ? bin : ".");
    if (hold && access(so, R_OK)) {
        fprintf(stderr, "  %s is missing: build it (make %s)\n", so, so);
        return -1;
    }
    int execp[2], held[2] = {-1, -1}, release[2] = {-1, -1};
    if (pipe2(execp, O_CLOEXEC)) return -1;
    if (hold && (pipe(held) || pipe(release))) return -1;
    p->pid = fork();
    if (p->pid == 0) {
        int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        dup2(fd, 1);
        if (hold) {
            char a[16], b[16];
            snprintf(a, sizeof a, "%d", held[1]);
            snprintf(b, sizeof b, "%d", release[0]);
            setenv("IRIS_HOLD_OUT", a, 1);
            setenv("IRIS_HOLD_IN", b, 1);
            setenv("LD_PRELOAD", so, 1);
            close(held[0]);
            close(release[1]);
        }
        execl(bin, bin, "serve", model, "--port", "0", "--device", "cpu", "--kv-cache-bytes", "64MiB",
              "--served-model-name", "tiny", (char *)NULL);
        _exit(127);
    }
    close(execp[1]);
    char c;
    while (read(execp[0], &c, 1) > 0) {}
    close(execp[0]);
    if (!hold) return 0;
    close(held[1]);
    close(release[0]);
    p->hold_release = release[1];
    struct pollfd pf = {held[0], POLLIN, 0};
    int ok = poll(&pf, 1, 20000) == 1 && read(held[0], &c, 1) == 1;
    close(held[0]);
    p->held = ok;
    return ok ? 0 : -1;
}

static void release_hold(proc *p) {
    if (p->hold_release < 0) return;
    (void)!write(p->hold_release, "g", 1);
    close(p->hold_release);
    p->hold_release = -1;
}

/* Whether the process catches SIGTERM now (SigCgt in /proc/PID/status). */
static int catches_sigterm(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    int yes = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "SigCgt:", 7)) yes = (strtoull(line + 7, NULL, 16) >> (SIGTERM - 1)) & 1;
    if (f) fclose(f);
    return yes;
}

/* The port from "listening on http://127.0.0.1:PORT" once logged (polled
 * every millisecond), or 0 after timeout_s or when the process ended. */
static int wait_listening(proc *p, double timeout_s) {
    static const char key[] = "listening on http://127.0.0.1:";
    double t0 = ts_now();
    while (ts_now() - t0 < timeout_s) {
        char *log = ts_slurp(p->log, NULL);
        const char *at = log ? strstr(log, key) : NULL;
        int port = at ? atoi(at + strlen(key)) : 0;
        free(log);
        if (port) return port;
        if (waitpid(p->pid, NULL, WNOHANG) == p->pid) return 0;
        ts_nap_ms(1);
    }
    return 0;
}

/* Wait for the exit (SIGKILL after timeout_s); the exit status or -1 after
 * a signal or the timeout.  *log (optional): its log, malloc'd. */
static int finish(proc *p, double timeout_s, char **log) {
    int rc = ts_wait_exit(p->pid, timeout_s);
    if (rc == -2) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        rc = -1;
    }
    release_hold(p);
    if (log) *log = ts_slurp(p->log, NULL);
    unlink(p->log);
    return rc;
}

static const char *phase_of(const char *log) {
    if (!log) return "before main";
    if (strstr(log, "ready in")) return "ready";
    if (strstr(log, "listening on")) return "loading";
    return "before listening";
}

/* ====================================================================== */

/* /health: 503 {"code": "loading"} from the moment the port listens until
 * the engine is open, then 200; generation routes say the same meanwhile. */
IRIS_TEST(server_health_503_while_loading) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *model = slow_model();
    REQUIRE(model);
    proc p;
    REQUIRE(spawn_serve(&p, model, 0) == 0);
    int port = wait_listening(&p, 30);
    CHECKF(port > 0, "no \"listening on\" in the log");
    if (!port) {
        kill(p.pid, SIGKILL);
        finish(&p, 5, NULL);
        return;
    }
    double t_listen = ts_now();
    char *out = NULL;
    long st = ts_http(port, "GET", "/health", NULL, 0, NULL, &out);
    int n503 = st == 503, other = 0;
    ts_check_error(st, out, 503, NULL, "/health while loading");
    json_t *j = ts_json(out);
    CHECK_STR(ts_jstr(j, "error.code"), "loading");
    json_decref(j);
    free(out);
    char *req = ts_chat_body(NULL, "Hi", "\"max_tokens\":4,\"seed\":1");
    st = ts_post(port, "/v1/chat/completions", req, &out);
    char *log = ts_slurp(p.log, NULL);
    int still_loading = log && !strstr(log, "ready in");
    free(log);
    if (still_loading) { /* not a 503 from a server that became ready in between */
        ts_check_error(st, out, 503, NULL, "a chat completion while loading");
        CHECK_CONTAINS(out, "\"code\":\"loading\"");
    }
    free(out);

    double t_ready = 0;
    while (ts_now() - t_listen < 60) {
        st = ts_http(port, "GET", "/health", NULL, 0, NULL, NULL);
        if (st == 200) {
            t_ready = ts_now();
            break;
        }
        if (st == 503) n503++;
        else other++;
        ts_nap_ms(5);
    }
    CHECKF(t_ready > 0, "/health never answered 200");
    CHECKF(other == 0, "%d answers other than 503 while loading", other);
    log = ts_slurp(p.log, NULL);
    CHECK_CONTAINS(log, "ready in");
    free(log);
    char *text = ts_chat_text(port, req, &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK(text != NULL);
    free(text);
    free(req);
    printf("    /health: 503 \"loading\" for %.2f s after the port opened (%d probes), then 200\n", t_ready - t_listen,
           n503);
    kill(p.pid, SIGTERM);
    CHECK_EQ_INT(finish(&p, 30, NULL), 0);
}

/* SIGTERM at each moment of start-up: exit 0 every time. */
IRIS_TEST(server_sigterm_at_any_moment) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char summary[1024] = "";
    size_t sn = 0;
    proc p;
    char *log = NULL;

    /* 1. Inside the shared libraries' constructors, before main(): held there
     * by hold_ctor.so.  The handler must already be installed (from
     * .preinit_array); the server exits 0 once the constructors return. */
    REQUIRE(spawn_serve(&p, TS_MODEL, 1) == 0);
    CHECKF(catches_sigterm(p.pid), "iris serve does not catch SIGTERM while the libraries' constructors run "
                                   "(the handler must be installed from .preinit_array, before them)");
    kill(p.pid, SIGTERM);
    ts_nap_ms(50);
    release_hold(&p);
    int rc = finish(&p, 30, &log);
    CHECKF(rc == 0, "SIGTERM inside the constructors: exit %d, want 0; log:\n%s", rc, log ? log : "");
    CHECK_CONTAINS(log, "SIGTERM before start-up: stopped");
    free(log);
    sn += (size_t)snprintf(summary + sn, sizeof summary - sn, "in the constructors: %d", rc);

    /* 2. The earliest moment it catches SIGTERM, then a little later each
     * time (on a CUDA build these fall in the constructors, main() and the
     * load; on a CPU build in the load and after). */
    static const int after_ms[] = {0, 30, 100, 300, 600};
    for (size_t i = 0; i < sizeof after_ms / sizeof *after_ms; i++) {
        REQUIRE(spawn_serve(&p, TS_MODEL, 0) == 0);
        double t0 = ts_now();
        while (!catches_sigterm(p.pid) && ts_now() - t0 < 20) {}
        if (after_ms[i]) ts_nap_ms(after_ms[i]);
        char *at = ts_slurp(p.log, NULL);
        kill(p.pid, SIGTERM);
        rc = finish(&p, 30, &log);
        CHECKF(rc == 0, "SIGTERM %d ms after the handler appeared (%s): exit %d, want 0; log:\n%s", after_ms[i],
               phase_of(at), rc, log ? log : "");
        sn += (size_t)snprintf(summary + sn, sizeof summary - sn, "; +%d ms (%s): %d", after_ms[i], phase_of(at), rc);
        free(at);
        free(log);
    }

    /* 3. While the model loads (the slow model, /health still 503): the load
     * completes, the server never becomes ready, exits 0. */
    const char *model = slow_model();
    REQUIRE(model);
    REQUIRE(spawn_serve(&p, model, 0) == 0);
    int port = wait_listening(&p, 30);
    CHECK(port > 0);
    long st = port ? ts_http(port, "GET", "/health", NULL, 0, NULL, NULL) : 0;
    CHECKF(st == 503, "/health before SIGTERM: %ld, want 503 (loading)", st);
    kill(p.pid, SIGTERM);
    rc = finish(&p, 30, &log);
    CHECKF(rc == 0, "SIGTERM while loading: exit %d, want 0; log:\n%s", rc, log ? log : "");
    CHECK(log && !strstr(log, "ready in"));
    CHECK_CONTAINS(log, "stopped");
    free(log);
    sn += (size_t)snprintf(summary + sn, sizeof summary - sn, "; while loading: %d", rc);
    printf("    exit status after SIGTERM %s\n", summary);
}
