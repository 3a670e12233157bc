/* tune/parallel — fixed chunks of work spread over threads. What a chunk
 * computes never depends on the thread that runs it, so results are the same
 * for any thread count (the references add their chunks' partials in chunk
 * order; the tuner's random logits take a generator a chunk). */
#ifndef XENT_TUNE_PARALLEL_H
#define XENT_TUNE_PARALLEL_H

#include <stdint.h>

#define TUNE_MAX_THREADS 64

/* Rows of c elements a chunk of the references: about 64K elements, fixed,
 * so that their sums never depend on the thread count. */
static inline int64_t tune_rows_per_chunk(int64_t c) { return c >= (1 << 16) ? 1 : (1 << 16) / c; }

/* One chunk's work; thread (0 .. threads-1) indexes per-thread scratch. */
typedef void (*tune_chunk_fn)(void *arg, int64_t chunk, int thread);

/* The threads to plan for: threads (< 1: the online CPUs), at most one a chunk
 * and TUNE_MAX_THREADS. */
int tune_thread_count(int threads, int64_t nchunks);

/* The threads for elems elements of work in nchunks chunks: one for each
 * TUNE_THREAD_ELEMS at most, so that small work starts no threads. */
#define TUNE_THREAD_ELEMS ((int64_t)1 << 20)
int tune_work_threads(int64_t elems, int64_t nchunks);

/* per_thread doubles for each of *threads threads, halving *threads until the
 * allocation succeeds; NULL when not even one thread's fits. */
double *tune_alloc_scratch(int64_t per_thread, int *threads);

/* fn for every chunk of [0, nchunks), taken in turn by tune_thread_count(threads,
 * nchunks) threads, the caller one of them; a thread that cannot be created
 * leaves its chunks to the others. */
void tune_parallel(int64_t nchunks, int threads, tune_chunk_fn fn, void *arg);

#endif
