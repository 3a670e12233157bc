/* shared/problem.cuh — the defaults of the problem's defines, which
 * gen/render.c writes for every kernel of both families: XENT_LOGIT 0 fp32,
 * 1 fp16, 2 bf16; XENT_TARGET 0 int32, 1 int64; XENT_REDUCTION 0 none, 1 sum,
 * 2 mean; XENT_WEIGHTS, XENT_SMOOTHING, XENT_LSE 0/1. Inlined where a
 * template says #include "shared/problem.cuh" (tools/embed.sh). */
#ifndef XENT_LOGIT
#define XENT_LOGIT 0
#endif
#ifndef XENT_TARGET
#define XENT_TARGET 1
#endif
#ifndef XENT_REDUCTION
#define XENT_REDUCTION 2
#endif
#ifndef XENT_WEIGHTS
#define XENT_WEIGHTS 0
#endif
#ifndef XENT_SMOOTHING
#define XENT_SMOOTHING 0
#endif
#ifndef XENT_LSE
#define XENT_LSE 0
#endif
