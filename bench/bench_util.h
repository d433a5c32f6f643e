#pragma once

/* Timing, statistics, size sweeps and the result table shared by every
 * benchmark program in bench/ (C and C++: tutti-bench, the MPI and Gloo
 * programs, memcpy_bw). One definition of each figure, so that the columns of
 * every program mean the same thing:
 *
 *   time   median over the timed iterations of the slowest rank's time of
 *          that iteration (each program reduces its per-iteration times with
 *          MAX across ranks before calling bench_summarize)
 *   algbw  size / time (GB/s, 1e9 bytes)
 *   busbw  algbw * bench_busbw_factor(op, ranks) (nccl-tests' definitions)
 *
 * `bench/compare` parses the table rows (lines not starting with '#'). */

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Monotonic clock in seconds. */
double bench_now_seconds(void);

typedef struct {
  double median;
  double min;
  double max;
} bench_stats;

/* Median, min and max of values[0..n); sorts `values` in place. n >= 1. */
bench_stats bench_summarize(double* values, int n);

/* "4", "64K", "1M", "2G" (binary: K = 1024); 0 on success, -1 when malformed. */
int bench_parse_size(const char* text, int64_t* bytes);

/* nccl-tests' bus bandwidth factor for `op` over `ranks` ranks: allreduce
 * 2(n-1)/n; allgather, reducescatter, alltoall (n-1)/n; broadcast and memcpy 1.
 * Returns 0 for an unknown op. */
double bench_busbw_factor(const char* op, int ranks);

/* Parameters of a size sweep, the same flags in every program:
 *   -b min bytes, -e max bytes, -f multiplication factor,
 *   -n iterations, -w warm-up iterations, -c check (0/1),
 *   -m bytes per point: caps the iterations of big sizes at
 *      max(kBenchMinIterations, m / size) (0 = no cap). */
typedef struct {
  int64_t min_bytes;
  int64_t max_bytes;
  int64_t factor;
  int iterations;
  int warmups;
  int check;
  int64_t bytes_per_point;
} bench_sweep;

enum { kBenchMinIterations = 5 };

bench_sweep bench_default_sweep(void);
/* getopt parsing of the flags above for the programs without CLI11; extra
 * single-letter flags with an argument listed in `extra` (e.g. "a:") are
 * passed to on_extra(flag, optarg, ctx). Prints the error and returns -1 on a
 * bad flag or value. */
int bench_parse_sweep(int argc, char** argv, const char* extra,
                      int (*on_extra)(int flag, const char* value, void* ctx), void* ctx,
                      bench_sweep* sweep);
/* Checks ranges (min <= max, factor >= 2, iterations >= 1); -1 with a message. */
int bench_check_sweep(const bench_sweep* sweep);
/* The size after `bytes` in the sweep; larger than max_bytes at the end (no overflow):
 *   for (b = s.min_bytes; b <= s.max_bytes; b = bench_next_size(&s, b)) */
int64_t bench_next_size(const bench_sweep* sweep, int64_t bytes);
/* Timed iterations and warm-ups for a point of `bytes` bytes. */
int bench_iterations(const bench_sweep* sweep, int64_t bytes);
int bench_warmups(const bench_sweep* sweep, int64_t bytes);

/* Result table (stdout). */
void bench_print_header(const char* program, int ranks, const char* details);
void bench_print_row(int64_t bytes, int64_t count, const char* dtype, const char* redop,
                     const char* op, int ranks, double seconds, int64_t wrong);

/* Gradient-set rows: "gradset <strategy> <tensors> <bytes> <median ms> <min ms> <max ms>". */
void bench_print_step_header(const char* program, int ranks, const char* details);
void bench_print_step(const char* strategy, int tensors, int64_t bytes, bench_stats step_seconds);

#ifdef __cplusplus
}
#endif
