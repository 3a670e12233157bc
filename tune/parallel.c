/* tune/parallel.c — fixed chunks of work spread over threads (parallel.h). */
#include "tune/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct par_job {
    int64_t nchunks;
    tune_chunk_fn fn;
    void *arg;
    atomic_llong next; /* the next chunk to take */
} par_job;

typedef struct par_worker {
    par_job *job;
    int thread;
} par_worker;

static void *par_main(void *arg) {
    par_worker *w = arg;
    for (;;) {
        const int64_t k = atomic_fetch_add(&w->job->next, 1);
        if (k >= w->job->nchunks) return NULL;
        w->job->fn(w->job->arg, k, w->thread);
    }
}

int tune_thread_count(int threads, int64_t nchunks) {
    if (threads < 1) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus > 0 ? (int)cpus : 1;
    }
    if (threads > TUNE_MAX_THREADS) threads = TUNE_MAX_THREADS;
    if (nchunks < threads) threads = nchunks > 0 ? (int)nchunks : 1;
    return threads;
}

int tune_work_threads(int64_t elems, int64_t nchunks) {
    const int64_t by_work = elems / TUNE_THREAD_ELEMS + 1;
    const int t = tune_thread_count(0, nchunks);
    return by_work < t ? (int)by_work : t;
}

double *tune_alloc_scratch(int64_t per_thread, int *threads) {
    for (; *threads >= 1; *threads /= 2) {
        double *s = malloc((size_t)*threads * (size_t)per_thread * sizeof(double));
        if (s) return s;
    }
    return NULL;
}

void tune_parallel(int64_t nchunks, int threads, tune_chunk_fn fn, void *arg) {
    const int n = tune_thread_count(threads, nchunks);
    par_job job;
    job.nchunks = nchunks, job.fn = fn, job.arg = arg;
    atomic_init(&job.next, 0);
    par_worker w[TUNE_MAX_THREADS];
    pthread_t tid[TUNE_MAX_THREADS];
    int started[TUNE_MAX_THREADS] = {0};
    for (int t = 0; t < n; t++) w[t] = (par_worker){&job, t};
    for (int t = 1; t < n; t++) started[t] = pthread_create(&tid[t], NULL, par_main, &w[t]) == 0;
    par_main(&w[0]);
    for (int t = 1; t < n; t++)
        if (started[t]) pthread_join(tid[t], NULL);
}
