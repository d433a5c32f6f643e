/* mpi_gradient_set: ResNet-50's gradients (bench/resnet50_shapes.h: 161
 * float32 tensors, 25,557,032 parameters) allreduced per step with Open MPI's
 * two strategies, beside tutti-bench --gradient-set:
 *   mpi-one-buffer   one in-place MPI_Allreduce of a single buffer of the total size
 *   mpi-per-tensor   one in-place MPI_Allreduce per tensor, in backward order
 * Per step, untimed: every rank refills its gradients with rank + 1, a
 * barrier, and with -c 1 a check that every element is size (size + 1) / 2.
 * Flags -n steps, -w warm-up steps, -c check (bench_util.h).
 *
 *   mpirun -np 2 --mca btl self,tcp mpi_gradient_set -n 10 -w 2 */

#include <mpi.h>
#include <stdlib.h>

#include "bench/bench_util.h"
#include "bench/resnet50_shapes.h"

/* Runs one strategy; returns the wrong elements over all ranks. */
static long long run_strategy(int per_tensor, const bench_sweep* sweep, int rank, int ranks) {
  float* buffers[RESNET50_NUM_PARAMS];
  long long counts[RESNET50_NUM_PARAMS];
  const int parts = per_tensor ? RESNET50_NUM_PARAMS : 1;
  for (int i = 0; i < parts; ++i) {
    counts[i] = per_tensor ? resnet50_param_elements(i) : RESNET50_TOTAL_ELEMENTS;
    buffers[i] = malloc(sizeof(float) * (size_t)counts[i]);
    if (!buffers[i]) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const float expected = (float)ranks * (float)(ranks + 1) / 2;
  double* seconds = malloc(sizeof(double) * (size_t)sweep->iterations);
  long long wrong = 0;
  for (int step = -sweep->warmups; step < sweep->iterations; ++step) {
    for (int i = 0; i < parts; ++i) {
      for (long long j = 0; j < counts[i]; ++j) buffers[i][j] = (float)(rank + 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = bench_now_seconds();
    for (int i = parts - 1; i >= 0; --i) { /* backward order */
      MPI_Allreduce(MPI_IN_PLACE, buffers[i], (int)counts[i], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    if (step >= 0) seconds[step] = bench_now_seconds() - start;
    if (sweep->check) {
      for (int i = 0; i < parts; ++i) {
        for (long long j = 0; j < counts[i]; ++j) wrong += buffers[i][j] != expected;
      }
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, seconds, sweep->iterations, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    bench_print_step(per_tensor ? "mpi-per-tensor" : "mpi-one-buffer", parts,
                     RESNET50_TOTAL_ELEMENTS * 4, bench_summarize(seconds, sweep->iterations));
    if (wrong) fprintf(stderr, "mpi_gradient_set: %lld wrong elements\n", wrong);
  }
  free(seconds);
  for (int i = 0; i < parts; ++i) free(buffers[i]);
  return wrong;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  bench_sweep sweep = bench_default_sweep();
  sweep.iterations = 10;
  sweep.warmups = 2;
  if (bench_parse_sweep(argc, argv, NULL, NULL, NULL, &sweep) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
  if (rank == 0) bench_print_step_header("mpi_gradient_set", ranks, "MPI_Allreduce float32 sum");
  long long wrong = run_strategy(0, &sweep, rank, ranks);
  wrong += run_strategy(1, &sweep, rank, ranks);
  MPI_Finalize();
  return wrong != 0;
}
