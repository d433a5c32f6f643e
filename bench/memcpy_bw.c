/* memcpy_bw: memcpy bandwidth of one core, the physical reference for the
 * collective benchmarks (an allreduce moves each byte through memory several
 * times). Same flags and table as the other programs (bench_util.h); algbw =
 * busbw = bytes copied per second.
 *
 *   memcpy_bw -b 4 -e 256M -f 4 -n 50 -w 5 -m 1G */

#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"

int main(int argc, char** argv) {
  bench_sweep sweep = bench_default_sweep();
  if (bench_parse_sweep(argc, argv, NULL, NULL, NULL, &sweep) != 0) return 2;
  bench_print_header("memcpy_bw", 1, "one thread, memcpy(dst, src, size)");
  for (int64_t bytes = sweep.min_bytes; bytes <= sweep.max_bytes;
       bytes = bench_next_size(&sweep, bytes)) {
    char* src = malloc((size_t)bytes);
    char* dst = malloc((size_t)bytes);
    if (!src || !dst) {
      fprintf(stderr, "memcpy_bw: cannot allocate 2 x %lld bytes\n", (long long)bytes);
      return 1;
    }
    memset(src, 1, (size_t)bytes);
    memset(dst, 0, (size_t)bytes);
    const int iterations = bench_iterations(&sweep, bytes);
    const int warmups = bench_warmups(&sweep, bytes);
    double* seconds = malloc(sizeof(double) * (size_t)iterations);
    for (int i = -warmups; i < iterations; ++i) {
      const double start = bench_now_seconds();
      memcpy(dst, src, (size_t)bytes);
      /* The copy is observable: the compiler may not merge or drop it. */
      __asm__ volatile("" : : "r"(dst) : "memory");
      if (i >= 0) seconds[i] = bench_now_seconds() - start;
    }
    const int64_t wrong = sweep.check ? memcmp(dst, src, (size_t)bytes) != 0 : -1;
    bench_print_row(bytes, bytes, "uint8", "none", "memcpy", 1,
                    bench_summarize(seconds, iterations).median, wrong);
    free(seconds);
    free(src);
    free(dst);
  }
  return 0;
}
