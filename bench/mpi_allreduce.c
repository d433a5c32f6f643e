/* mpi_allreduce: Open MPI's own MPI_Allreduce (float32 sum, out of place),
 * the reference tutti-bench is compared with. Same flags and table as
 * tutti-bench (bench_util.h): per size, -w untimed and -n timed iterations
 * (capped by -m), time = median over iterations of the slowest rank, and with
 * -c 1 a check of one more result on a poisoned output.
 *
 *   mpirun -np 2 --mca btl self,vader mpi_allreduce -b 4 -e 256M -f 4
 *   mpirun -np 2 --mca btl self,tcp   mpi_allreduce -b 4 -e 256M -f 4 */

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  bench_sweep sweep = bench_default_sweep();
  if (bench_parse_sweep(argc, argv, NULL, NULL, NULL, &sweep) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
  if (rank == 0) bench_print_header("mpi_allreduce", ranks, "MPI_Allreduce float32 sum");
  int64_t total_wrong = 0;
  for (int64_t asked = sweep.min_bytes; asked <= sweep.max_bytes;
       asked = bench_next_size(&sweep, asked)) {
    const int64_t count = asked / 4 > 0 ? asked / 4 : 1;
    const int64_t bytes = count * 4;
    float* in = malloc((size_t)bytes);
    float* out = malloc((size_t)bytes);
    const int iterations = bench_iterations(&sweep, bytes);
    const int warmups = bench_warmups(&sweep, bytes);
    double* seconds = malloc(sizeof(double) * (size_t)iterations);
    if (!in || !out || !seconds || count > 0x7fffffff) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int64_t i = 0; i < count; ++i) in[i] = (float)(i % 7 + rank + 1);
    memset(out, 0, (size_t)bytes);
    for (int i = -warmups; i < iterations; ++i) {
      const double start = bench_now_seconds();
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      if (i >= 0) seconds[i] = bench_now_seconds() - start;
    }
    long long wrong = 0;
    if (sweep.check) {
      memset(out, 0xFF, (size_t)bytes);
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (int64_t i = 0; i < count; ++i) {
        wrong += out[i] != (float)(ranks * (i % 7 + 1) + ranks * (ranks - 1) / 2);
      }
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      total_wrong += wrong;
    }
    MPI_Allreduce(MPI_IN_PLACE, seconds, iterations, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
      bench_print_row(bytes, count, "float32", "sum", "allreduce", ranks,
                      bench_summarize(seconds, iterations).median, sweep.check ? wrong : -1);
    }
    free(seconds);
    free(in);
    free(out);
  }
  MPI_Finalize();
  return total_wrong != 0;
}
