/*
 * tune — search the configuration space on the GPU for one problem.
 *
 * Every candidate is compiled (in parallel threads, through the kernel
 * cache), checked against the float64 CPU reference on fresh random inputs,
 * then timed with CUDA events: warm-up, back-to-back batches over rotated
 * input copies (so that small problems are not timed from L2), median of the
 * repeats. A candidate that fails to compile or is wrong is skipped with its
 * reason; one far slower than the best so far is dropped after one repeat.
 */
#ifndef XENT_TUNE_H
#define XENT_TUNE_H

#include "gen/gen.h"
#include "runtime/runtime.h"

typedef enum trial_status {
    TRIAL_OK = 0,
    TRIAL_COMPILE_ERROR,
    TRIAL_WRONG,
    TRIAL_LAUNCH_ERROR,
    TRIAL_PRUNED
} trial_status;

typedef struct xent_trial {
    xent_config config;
    trial_status status;
    double us; /* median µs per call, back to back */
    double gbps;
    double rel_err;
    int registers;
    unsigned grid; /* blocks of its launch (0: never built) */
    char reason[160];
} xent_trial;

typedef void (*xent_tune_progress)(void *arg, int done, int total, double best_us, const char *stage);

typedef struct xent_tune_opts {
    double budget_s; /* wall-clock budget: stops the variants stage (default 30) */
    int exhaustive;  /* time every relevant candidate, not the staged search */
    int threads;     /* compile threads (default: online CPUs) */
    int reps;        /* timed repeats per candidate (default 15) */
    xent_tune_progress progress;
    void *progress_arg;
    const xent_config *only; /* when non-NULL, time these nonly configs, not the space's; */
    int nonly;               /* the winner is then reported but not stored, */
    int store_only;          /* unless this is set (a re-timing of configs a search found) */
    tc_db *db;               /* winner and trials are stored here when non-NULL */
    const char *settings;    /* stored with the winner */
} xent_tune_opts;

typedef struct xent_tune_result {
    xent_trial best;
    xent_trial heuristic;
    double floor_us; /* a streaming read of the same bytes, same protocol */
    double bytes;    /* bytes a call must move */
    int candidates;  /* configs considered */
    int timed;       /* configs timed to the end */
    int failed;      /* compile errors or wrong results */
    int unreached;   /* variants the budget stopped before they were timed */
    double wall_s;
    xent_trial *trials; /* every candidate, fastest first (malloc'd) */
    int ntrials;
} xent_tune_result;

void xent_tune_opts_init(xent_tune_opts *o);
/* XENT_ECACHE, with r filled, when the winner was found but opts->db did not
 * take it (a full disk): the caller may still show the result. */
int xent_tune(xent_context *ctx, const xent_problem *p, const xent_tune_opts *o, xent_tune_result *r);
void xent_tune_result_free(xent_tune_result *r);

/* Bytes a forward pass must move: every logit and target read once, the loss written. */
double xent_problem_bytes(const xent_problem *p);

/* Compile candidates in parallel through the kernel cache (no GPU needed),
 * each for probs[0] (nprobs 1) or for its own probs[i] (nprobs n), on
 * `threads` threads (< 1: the online CPUs; tune_parallel). Candidates that share a kernel
 * (launch knobs apart) compile it once: the first of each, then the others from the cache.
 * status[i] gets XENT_OK or the failure; reports land in bins (may be NULL). */
void xent_compile_many(const xent_config *cfgs, int n, const xent_problem *probs, int nprobs, int arch, int threads,
                       int *status, xent_cubin *bins, char (*errs)[512]);

#endif
