/* check_api — argument validation of every public function, status texts,
 * and behaviour without a driver (CI has no GPU and no libcuda.so.1). */
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"
#include "tests/run_suite.h"

static int driver_present(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
    return h != NULL;
}

START_TEST(every_status_has_text) {
    static const int codes[] = {XENT_OK,       XENT_EINVAL, XENT_ENODRIVER, XENT_ENODEVICE,  XENT_ECUDA,
                                XENT_ECOMPILE, XENT_ENOMEM, XENT_ECACHE,    XENT_EBADTARGET, XENT_ENOTFOUND};
    int n = (int)(sizeof codes / sizeof codes[0]);
    for (int i = 0; i < n; i++) {
        ck_assert_str_ne(xent_errstr(codes[i]), "unknown status");
        for (int other = 0; other < i; other++) ck_assert_str_ne(xent_errstr(codes[i]), xent_errstr(codes[other]));
    }
    /* the codes the library never returns have no text of their own */
    ck_assert_str_eq(xent_errstr(9), "unknown status");
    ck_assert_str_eq(xent_errstr(11), "unknown status");
    ck_assert_str_eq(xent_errstr(-1), "unknown status");
    ck_assert_str_eq(xent_errstr(1000), "unknown status");
}
END_TEST

START_TEST(problem_defaults_are_pytorchs) {
    xent_problem p;
    memset(&p, 0x5a, sizeof p);
    xent_problem_init(&p, 32768, 4096);
    ck_assert_int_eq(p.n, 32768);
    ck_assert_int_eq(p.c, 4096);
    ck_assert_int_eq(p.row_stride, 4096);
    ck_assert_int_eq(p.logits, XENT_F32);
    ck_assert_int_eq(p.targets, XENT_I64);
    ck_assert_int_eq(p.reduction, XENT_REDUCE_MEAN);
    ck_assert_int_eq(p.ignore_index, -100);
    ck_assert(p.label_smoothing == 0.0f);
    ck_assert_int_eq(p.has_weights, 0);
    ck_assert_int_eq(p.write_lse, 0);
    ck_assert_int_eq(xent_problem_check(&p, NULL, 0), XENT_OK);
    xent_problem_init(NULL, 1, 1); /* must not crash */
}
END_TEST

static void expect_bad(const xent_problem *p, const char *fragment) {
    char why[256] = "";
    ck_assert_int_eq(xent_problem_check(p, why, sizeof why), XENT_EINVAL);
    ck_assert_msg(strstr(why, fragment), "reason '%s' lacks '%s'", why, fragment);
}

START_TEST(problem_check_names_each_bad_field) {
    xent_problem p;
    xent_problem_init(&p, 0, 10);
    expect_bad(&p, "n must");
    xent_problem_init(&p, 5, 0);
    expect_bad(&p, "c must");
    xent_problem_init(&p, 5, 1LL << 31);
    expect_bad(&p, "c must");
    xent_problem_init(&p, 5, 10);
    p.row_stride = 9;
    expect_bad(&p, "row_stride");
    xent_problem_init(&p, 5, 10);
    p.logits = (xent_dtype)7;
    expect_bad(&p, "logits");
    xent_problem_init(&p, 5, 10);
    p.targets = (xent_index)-1;
    expect_bad(&p, "targets");
    xent_problem_init(&p, 5, 10);
    p.reduction = (xent_reduction)3;
    expect_bad(&p, "reduction");
    xent_problem_init(&p, 5, 10);
    p.label_smoothing = 1.5f;
    expect_bad(&p, "label_smoothing");
    xent_problem_init(&p, 5, 10);
    p.label_smoothing = -0.1f;
    expect_bad(&p, "label_smoothing");
    xent_problem_init(&p, 5, 10);
    p.label_smoothing = 0.0f / 0.0f;
    expect_bad(&p, "label_smoothing");
    xent_problem_init(&p, 1LL << 60, 1LL << 20);
    expect_bad(&p, "too large");
    ck_assert_int_eq(xent_problem_check(NULL, NULL, 0), XENT_EINVAL);
    xent_problem_init(&p, 5, 10);
    p.row_stride = 0; /* 0 means c */
    ck_assert_int_eq(xent_problem_check(&p, NULL, 0), XENT_OK);
}
END_TEST

START_TEST(null_arguments_are_refused) {
    xent_problem p;
    xent_problem_init(&p, 4, 4);
    xent_args a;
    memset(&a, 0, sizeof a);
    xent_device_info info;
    char buf[64];
    ck_assert_int_eq(xent_context_create(NULL, 0), XENT_EINVAL);
    ck_assert_int_eq(xent_device_get_info(NULL, &info), XENT_EINVAL);
    ck_assert_int_eq(xent_plan_get(NULL, &p, NULL), XENT_EINVAL);
    ck_assert_int_eq(xent_plan_launch(NULL, NULL, &a), XENT_EINVAL);
    ck_assert_int_eq(xent_forward(NULL, &p, &a, NULL), XENT_EINVAL);
    ck_assert_int_eq(xent_check_targets(NULL, NULL), XENT_EINVAL);
    ck_assert_int_eq(xent_plan_describe(NULL, buf, sizeof buf), XENT_EINVAL);
    ck_assert_int_eq(xent_plan_source(NULL), XENT_SOURCE_HEURISTIC);
    ck_assert_uint_eq(xent_workspace_size(NULL), 0);
    ck_assert_str_eq(xent_errmsg(NULL), "");
    xent_context_destroy(NULL);
}
END_TEST

START_TEST(no_driver_is_a_clear_status) {
    xent_context *ctx = NULL;
    int rc = xent_context_create(&ctx, 0);
    ck_assert_ptr_nonnull(ctx); /* kept so the message can be read */
    if (driver_present()) {
        ck_assert_int_ne(rc, XENT_ENODRIVER);
    } else {
        ck_assert_int_eq(rc, XENT_ENODRIVER);
        ck_assert_ptr_nonnull(strstr(xent_errmsg(ctx), "libcuda.so.1"));
        /* every call on such a context says there is no device, none crashes */
        xent_problem p;
        xent_problem_init(&p, 4, 4);
        xent_plan *plan = (xent_plan *)0x1;
        xent_device_info info;
        ck_assert_int_eq(xent_plan_get(ctx, &p, &plan), XENT_ENODEVICE);
        ck_assert_ptr_null(plan);
        ck_assert_int_eq(xent_device_get_info(ctx, &info), XENT_ENODEVICE);
        ck_assert_int_eq(xent_check_targets(ctx, NULL), XENT_ENODEVICE);
        xent_args a = {.logits = (void *)16, .targets = (void *)16, .loss = (float *)16};
        ck_assert_int_eq(xent_forward(ctx, &p, &a, NULL), XENT_ENODEVICE);
        /* a bad problem is reported as such even without a device */
        p.c = 0;
        ck_assert_int_eq(xent_plan_get(ctx, &p, &plan), XENT_EINVAL);
        ck_assert_ptr_nonnull(strstr(xent_errmsg(ctx), "c must"));
    }
    xent_context_destroy(ctx);
}
END_TEST

/* A plan that never reaches the driver: launch validates arguments first. */
static xent_context fake_ctx;
static xent_plan fake_plan;

static void make_fake(int weights, int lse, xent_dtype d) {
    memset(&fake_ctx, 0, sizeof fake_ctx);
    memset(&fake_plan, 0, sizeof fake_plan);
    fake_plan.ctx = &fake_ctx;
    xent_problem_init(&fake_plan.problem, 8, 8);
    fake_plan.problem.has_weights = weights;
    fake_plan.problem.write_lse = lse;
    fake_plan.problem.logits = d;
}

static void expect_launch_refused(const xent_args *a, const char *fragment) {
    ck_assert_int_eq(xent_plan_launch(&fake_plan, NULL, a), XENT_EINVAL);
    ck_assert_msg(strstr(fake_ctx.errmsg, fragment), "'%s' lacks '%s'", fake_ctx.errmsg, fragment);
}

START_TEST(launch_checks_its_arguments) {
    float *dev = (float *)(uintptr_t)0x10000;
    xent_args good = {.logits = dev, .targets = dev, .loss = dev}, a;
    make_fake(0, 0, XENT_F32);
    expect_launch_refused(NULL, "xent_args");
    a = good;
    a.logits = NULL;
    expect_launch_refused(&a, "logits, targets and loss");
    a = good;
    a.targets = NULL;
    expect_launch_refused(&a, "logits, targets and loss");
    a = good;
    a.loss = NULL;
    expect_launch_refused(&a, "logits, targets and loss");
    a = good;
    a.weights = dev;
    expect_launch_refused(&a, "weights");
    a = good;
    a.lse = dev;
    expect_launch_refused(&a, "lse");
    a = good;
    a.logits = (char *)dev + 2;
    expect_launch_refused(&a, "logits are not aligned");
    a = good;
    a.targets = (char *)dev + 4;
    expect_launch_refused(&a, "targets are not aligned");
    make_fake(1, 1, XENT_BF16);
    a = good;
    expect_launch_refused(&a, "weights");
    a = good;
    a.weights = dev;
    expect_launch_refused(&a, "lse");
    a.lse = dev;
    a.logits = (char *)dev + 1;
    expect_launch_refused(&a, "logits are not aligned");
}
END_TEST

START_TEST(gpu_keys_from_device_names) {
    const char *cases[][2] = {{"NVIDIA H200", "h200"},           {"NVIDIA H100 80GB HBM3", "h100"},
                              {"NVIDIA A100-SXM4-80GB", "a100"}, {"NVIDIA GeForce RTX 4090", "rtx4090"},
                              {"NVIDIA L40S", "l40s"},           {"Tesla V100-SXM2-16GB", "v100"},
                              {"NVIDIA GH200 480GB", "gh200"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char key[32];
        xent_gpu_key(cases[i][0], key, sizeof key);
        ck_assert_str_eq(key, cases[i][1]);
    }
    char tiny[3];
    xent_gpu_key("NVIDIA H200", tiny, sizeof tiny);
    ck_assert_str_eq(tiny, "h2");
}
END_TEST

START_TEST(normalized_problems_compare_by_value) {
    xent_problem a, b, na, nb;
    xent_problem_init(&a, 3, 5);
    memset(&b, 0x77, sizeof b); /* padding full of junk */
    xent_problem_init(&b, 3, 5);
    b.row_stride = 0;
    xent_problem_normalize(&a, &na);
    xent_problem_normalize(&b, &nb);
    ck_assert_mem_eq(&na, &nb, sizeof na);
    b.ignore_index = 7;
    xent_problem_normalize(&b, &nb);
    ck_assert(memcmp(&na, &nb, sizeof na) != 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("api");
    tcase_add_test(tc, every_status_has_text);
    tcase_add_test(tc, problem_defaults_are_pytorchs);
    tcase_add_test(tc, problem_check_names_each_bad_field);
    tcase_add_test(tc, null_arguments_are_refused);
    tcase_add_test(tc, no_driver_is_a_clear_status);
    tcase_add_test(tc, launch_checks_its_arguments);
    tcase_add_test(tc, gpu_keys_from_device_names);
    tcase_add_test(tc, normalized_problems_compare_by_value);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
