/* proc.h — a test suite's runs of the command under test as a child process:
 * its arguments, stdin from /dev/null, stdout and stderr captured, killed
 * after a time limit; and the expectations on what it did. The includer
 * defines `static const char *tool(void)`, the command's path, first. */
#ifndef XENT_TESTS_PROC_H
#define XENT_TESTS_PROC_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/files.h"

#define MAX_ARGS 64

typedef struct result {
    int code; /* exit status, or -1 when killed by a signal */
    int sig;  /* the signal, 0 if it exited */
    int timed_out;
    char *out, *err; /* NUL-terminated */
    size_t out_len, err_len;
    char cmd[1024]; /* the command line, for messages */
} result;

static void append(char **buf, size_t *len, size_t *cap, const char *data, size_t n) {
    if (*len + n + 1 > *cap) {
        while (*len + n + 1 > *cap) *cap *= 2;
        *buf = realloc(*buf, *cap);
        ck_assert_ptr_nonnull(*buf);
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = '\0';
}

/* What the next runs' children get besides the defaults: environment
 * settings ("NAME=VALUE", or "NAME" to unset) and a file for stdout instead
 * of the pipe. The fixture clears both before each test. */
static const char *child_env[4];
static const char *child_stdout;

static void child_setup(void) {
    for (size_t i = 0; i < sizeof child_env / sizeof child_env[0] && child_env[i]; i++) {
        char name[64];
        const char *eq = strchr(child_env[i], '=');
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - child_env[i]) : 63, child_env[i]);
        if (eq)
            setenv(name, eq + 1, 1);
        else
            unsetenv(name);
    }
    if (child_stdout) {
        int fd = open(child_stdout, O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            close(fd);
        }
    }
}

/* Runs the tool with args (NULL-terminated), stdin from /dev/null, stdout and
 * stderr captured; kills it after timeout_s. */
static result run_argv(int timeout_s, const char *const *args) {
    result r;
    memset(&r, 0, sizeof r);
    const char *argv[MAX_ARGS + 2];
    int argc = 0;
    size_t used = (size_t)snprintf(r.cmd, sizeof r.cmd, "%s", tool());
    argv[argc++] = tool();
    for (; args[argc - 1]; argc++) {
        ck_assert_int_lt(argc, MAX_ARGS);
        argv[argc] = args[argc - 1];
        if (used < sizeof r.cmd) used += (size_t)snprintf(r.cmd + used, sizeof r.cmd - used, " '%s'", argv[argc]);
    }
    argv[argc] = NULL;

    int po[2], pe[2];
    ck_assert_int_eq(pipe(po), 0);
    ck_assert_int_eq(pipe(pe), 0);
    char kcache[512], ucache[512];
    snprintf(kcache, sizeof kcache, "%s/kernels", tmpdir);
    snprintf(ucache, sizeof ucache, "%s/user-tune.db", tmpdir);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        if (in > 0) {
            dup2(in, 0);
            close(in);
        }
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
        setenv("XENT_KERNEL_CACHE", kcache, 1);
        setenv("XENT_TUNECACHE", ucache, 1);
        unsetenv("POSIXLY_CORRECT");
        child_setup();
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "check_cli: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);

    size_t ocap = 4096, ecap = 4096;
    r.out = malloc(ocap);
    r.err = malloc(ecap);
    ck_assert(r.out && r.err);
    r.out[0] = r.err[0] = '\0';
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2;
    double deadline = now_s() + timeout_s;
    char buf[65536];
    while (open_fds > 0) {
        double left = deadline - now_s();
        if (left <= 0) {
            r.timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        int n = poll(fds, 2, (int)(left * 1000) + 1);
        if (n < 0 && errno == EINTR) continue;
        ck_assert_int_ge(n, 0);
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t got = read(fds[i].fd, buf, sizeof buf);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
            } else if (i == 0) {
                append(&r.out, &r.out_len, &ocap, buf, (size_t)got);
            } else {
                append(&r.err, &r.err_len, &ecap, buf, (size_t)got);
            }
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0) close(fds[i].fd);
    int status;
    while (waitpid(pid, &status, 0) < 0) ck_assert_int_eq(errno, EINTR);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    ck_assert_msg(!r.timed_out, "%s ran longer than %d s", r.cmd, timeout_s);
    ck_assert_msg(r.code != 127, "%s: could not be run: %s", r.cmd, r.err);
    ck_assert_msg(r.sig == 0, "%s died of signal %d; stderr:\n%s", r.cmd, r.sig, r.err);
    return r;
}

#define RUN_T(timeout, ...) run_argv((timeout), (const char *const[]){__VA_ARGS__, NULL})

static void result_free(result *r) {
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

static void expect_code(const result *r, int code) {
    ck_assert_msg(r->code == code, "%s: exit %d, expected %d\nstdout:\n%s\nstderr:\n%s", r->cmd, r->code, code, r->out,
                  r->err);
}

static void expect_in(const char *what, const char *text, const char *needle, const result *r) {
    ck_assert_msg(strstr(text, needle) != NULL, "%s: %s lacks \"%s\":\n%s", r->cmd, what, needle, text);
}

/* A refusal: exit `code`, nothing on stdout, and on stderr a message that
 * starts as `prefix` says ("xent-tune: ..."). */
static void expect_failure(const result *r, int code, const char *prefix) {
    expect_code(r, code);
    ck_assert_msg(r->out_len == 0, "%s printed to stdout:\n%s", r->cmd, r->out);
    expect_in("stderr", r->err, prefix, r);
}

#endif
