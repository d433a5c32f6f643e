#include "bench/bench_util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double bench_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void* a, const void* b) {
  const double x = *(const double*)a;
  const double y = *(const double*)b;
  return (x > y) - (x < y);
}

bench_stats bench_summarize(double* values, int n) {
  bench_stats stats = {0, 0, 0};
  if (n <= 0) return stats;
  qsort(values, (size_t)n, sizeof(double), compare_doubles);
  stats.min = values[0];
  stats.max = values[n - 1];
  stats.median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return stats;
}

int bench_parse_size(const char* text, int64_t* bytes) {
  char* end = NULL;
  const long long value = strtoll(text, &end, 10);
  if (end == text || value < 0) return -1;
  int64_t scale = 1;
  switch (*end) {
    case '\0':
      break;
    case 'k':
    case 'K':
      scale = 1LL << 10;
      break;
    case 'm':
    case 'M':
      scale = 1LL << 20;
      break;
    case 'g':
    case 'G':
      scale = 1LL << 30;
      break;
    default:
      return -1;
  }
  if (*end != '\0' && end[1] != '\0' && strcmp(end + 1, "B") != 0 && strcmp(end + 1, "iB") != 0) {
    return -1;
  }
  *bytes = (int64_t)value * scale;
  return 0;
}

double bench_busbw_factor(const char* op, int ranks) {
  const double n = ranks;
  if (strcmp(op, "allreduce") == 0) return ranks > 0 ? 2.0 * (n - 1) / n : 0;
  if (strcmp(op, "allgather") == 0 || strcmp(op, "reducescatter") == 0 ||
      strcmp(op, "alltoall") == 0) {
    return ranks > 0 ? (n - 1) / n : 0;
  }
  if (strcmp(op, "broadcast") == 0 || strcmp(op, "memcpy") == 0) return 1;
  return 0;
}

bench_sweep bench_default_sweep(void) {
  bench_sweep sweep;
  sweep.min_bytes = 32LL << 20;
  sweep.max_bytes = 32LL << 20;
  sweep.factor = 2;
  sweep.iterations = 20;
  sweep.warmups = 5;
  sweep.check = 1;
  sweep.bytes_per_point = 0;
  return sweep;
}

static int parse_int(const char* flag, const char* text, int64_t min, int64_t* out) {
  char* end = NULL;
  const long long value = strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < min) {
    fprintf(stderr, "-%s %s: expected an integer >= %lld\n", flag, text, (long long)min);
    return -1;
  }
  *out = value;
  return 0;
}

static int parse_size_flag(const char* flag, const char* text, int64_t* out) {
  if (bench_parse_size(text, out) == 0) return 0;
  fprintf(stderr, "-%s %s: expected a size in bytes with an optional K/M/G suffix\n", flag, text);
  return -1;
}

int bench_parse_sweep(int argc, char** argv, const char* extra,
                      int (*on_extra)(int flag, const char* value, void* ctx), void* ctx,
                      bench_sweep* sweep) {
  char spec[64] = "b:e:f:n:w:c:m:";
  if (extra) strncat(spec, extra, sizeof(spec) - strlen(spec) - 1);
  int flag;
  int64_t v = 0;
  while ((flag = getopt(argc, argv, spec)) != -1) {
    int rc = 0;
    switch (flag) {
      case 'b':
        rc = parse_size_flag("b", optarg, &sweep->min_bytes);
        break;
      case 'e':
        rc = parse_size_flag("e", optarg, &sweep->max_bytes);
        break;
      case 'm':
        rc = parse_size_flag("m", optarg, &sweep->bytes_per_point);
        break;
      case 'f':
        rc = parse_int("f", optarg, 2, &sweep->factor);
        break;
      case 'n':
        rc = parse_int("n", optarg, 1, &v);
        sweep->iterations = (int)v;
        break;
      case 'w':
        rc = parse_int("w", optarg, 0, &v);
        sweep->warmups = (int)v;
        break;
      case 'c':
        rc = parse_int("c", optarg, 0, &v);
        sweep->check = v != 0;
        break;
      case '?':
        return -1;
      default:
        rc = on_extra ? on_extra(flag, optarg, ctx) : -1;
    }
    if (rc != 0) return -1;
  }
  return bench_check_sweep(sweep);
}

int bench_check_sweep(const bench_sweep* sweep) {
  if (sweep->min_bytes < 1) {
    fprintf(stderr, "-b %lld: expected at least 1 byte\n", (long long)sweep->min_bytes);
    return -1;
  }
  if (sweep->min_bytes > sweep->max_bytes) {
    fprintf(stderr, "-b %lld is larger than -e %lld\n", (long long)sweep->min_bytes,
            (long long)sweep->max_bytes);
    return -1;
  }
  if (sweep->factor < 2 || sweep->iterations < 1 || sweep->warmups < 0) {
    fprintf(stderr, "expected -f >= 2, -n >= 1, -w >= 0\n");
    return -1;
  }
  return 0;
}

int64_t bench_next_size(const bench_sweep* sweep, int64_t bytes) {
  return bytes > sweep->max_bytes / sweep->factor ? sweep->max_bytes + 1 : bytes * sweep->factor;
}

static int64_t capped(const bench_sweep* sweep, int64_t bytes, int64_t wanted, int64_t floor) {
  if (sweep->bytes_per_point <= 0 || bytes <= 0) return wanted;
  int64_t fit = sweep->bytes_per_point / bytes;
  if (fit < floor) fit = floor;
  return wanted < fit ? wanted : fit;
}

int bench_iterations(const bench_sweep* sweep, int64_t bytes) {
  const int64_t floor =
      sweep->iterations < kBenchMinIterations ? sweep->iterations : kBenchMinIterations;
  return (int)capped(sweep, bytes, sweep->iterations, floor);
}

int bench_warmups(const bench_sweep* sweep, int64_t bytes) {
  const int64_t floor = sweep->warmups < 1 ? sweep->warmups : 1;
  return (int)capped(sweep, bytes, sweep->warmups, floor);
}

void bench_print_header(const char* program, int ranks, const char* details) {
  printf("# %s: %d ranks%s%s\n", program, ranks, details && *details ? ", " : "",
         details ? details : "");
  printf("# time: median over iterations of the slowest rank; busbw: nccl-tests definitions\n");
  printf("#%13s %12s %9s %8s %14s %12s %12s %12s %8s\n", "size(B)", "count", "dtype", "redop", "op",
         "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  fflush(stdout);
}

void bench_print_row(int64_t bytes, int64_t count, const char* dtype, const char* redop,
                     const char* op, int ranks, double seconds, int64_t wrong) {
  const double algbw = seconds > 0 ? (double)bytes / seconds / 1e9 : 0;
  const double busbw = algbw * bench_busbw_factor(op, ranks);
  printf("%14lld %12lld %9s %8s %14s %12.2f %12.4f %12.4f %8lld\n", (long long)bytes,
         (long long)count, dtype, redop, op, seconds * 1e6, algbw, busbw, (long long)wrong);
  fflush(stdout);
}

void bench_print_step_header(const char* program, int ranks, const char* details) {
  printf("# %s: %d ranks%s%s\n", program, ranks, details && *details ? ", " : "",
         details ? details : "");
  printf("# step: one step's gradients allreduced; slowest rank; median/min/max over steps\n");
  printf("#%6s %24s %8s %12s %12s %12s %12s\n", "", "strategy", "tensors", "bytes", "median(ms)",
         "min(ms)", "max(ms)");
  fflush(stdout);
}

void bench_print_step(const char* strategy, int tensors, int64_t bytes, bench_stats step_seconds) {
  printf("gradset %24s %8d %12lld %12.3f %12.3f %12.3f\n", strategy, tensors, (long long)bytes,
         step_seconds.median * 1e3, step_seconds.min * 1e3, step_seconds.max * 1e3);
  fflush(stdout);
}
