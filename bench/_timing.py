"""The benches' back-to-back timer: CUDA events around rounds of back-to-back calls.

Used by bench_train.py, host_profile.py, vocab_parallel.py and few_rows_probe.py (bench.py interleaves
implementations and sleeps the GPU ahead of its calls, and keeps its own).
"""
import statistics


def back_to_back_us(torch, fn, iters, rounds=5, before_round=None):
    """Median µs a call of fn over `rounds` rounds of `iters` back-to-back calls, CUDA events around
    each round; before_round(), if given, runs ahead of each round (a barrier across ranks, say)."""
    times = []
    for _ in range(rounds):
        if before_round is not None:
            before_round()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(iters):
            fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / iters)
    return statistics.median(times)
