/*
 * allreduce.c: tutti's C API from plain C.
 *
 * Every rank allreduces (sum) a float32 tensor whose value on rank r is r + 1
 * (expects size (size + 1) / 2 everywhere) and allgathers an int32 tensor of
 * r + 1 rows filled with r (expects size (size + 1) / 2 rows, rank order).
 * Prints "OK" and exits 0 when every value is right, else names the first
 * wrong value and exits 1.
 *
 *   tuttirun -np 3 ./build/examples/c_allreduce
 */
#include <stdio.h>
#include <stdlib.h>

#include "tutti.h"

#define CHECK(call)                                                                              \
  do {                                                                                           \
    int rc_ = (call);                                                                            \
    if (rc_ != TUTTI_OK) {                                                                       \
      fprintf(stderr, "%s failed: %s: %s\n", #call, tutti_status_name(rc_), tutti_last_error()); \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

static int run(void) {
  const int rank = tutti_rank();
  const int size = tutti_size();
  const int64_t expected_sum = (int64_t)size * (size + 1) / 2;

  /* Allreduce 1000 float32 values: r + 1 on rank r. */
  enum { kCount = 1000 };
  static float values[kCount];
  for (int i = 0; i < kCount; ++i) values[i] = (float)(rank + 1);
  int64_t shape[1] = {kCount};
  tutti_tensor tensor = {values, TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_handle handle = 0;
  CHECK(
      tutti_allreduce_async(&tensor, &tensor, "c_example.allreduce", TUTTI_SUM, 1.0, 1.0, &handle));
  CHECK(tutti_wait(handle, -1.0));
  CHECK(tutti_release(handle));
  for (int i = 0; i < kCount; ++i) {
    if (values[i] != (float)expected_sum) {
      fprintf(stderr, "rank %d: allreduce[%d] = %g, expected %lld\n", rank, i, values[i],
              (long long)expected_sum);
      return 1;
    }
  }

  /* Allgather rank + 1 rows of 3 int32 values filled with the rank. */
  int64_t rows = rank + 1;
  int32_t* mine = malloc(sizeof(int32_t) * (size_t)(rows * 3));
  if (mine == NULL) return 1;
  for (int64_t i = 0; i < rows * 3; ++i) mine[i] = rank;
  int64_t gshape[2] = {rows, 3};
  tutti_tensor gin = {mine, TUTTI_INT32, 2, gshape, TUTTI_DEVICE_CPU, -1};
  CHECK(tutti_allgather_async(&gin, "c_example.allgather", &handle));
  CHECK(tutti_wait(handle, 60.0));
  tutti_tensor out;
  CHECK(tutti_handle_output(handle, &out));
  int bad = out.dtype != TUTTI_INT32 || out.ndim != 2 || out.shape[0] != expected_sum ||
            out.shape[1] != 3;
  if (bad) {
    fprintf(stderr, "rank %d: allgather output has dtype %d ndim %d, expected int32 [%lld, 3]\n",
            rank, out.dtype, out.ndim, (long long)expected_sum);
  }
  const int32_t* gathered = (const int32_t*)out.data;
  int64_t row = 0;
  for (int r = 0; r < size && !bad; ++r) {
    for (int64_t k = 0; k < r + 1 && !bad; ++k, ++row) {
      for (int c = 0; c < 3; ++c) {
        if (gathered[row * 3 + c] != r) {
          fprintf(stderr, "rank %d: allgather row %lld = %d, expected %d\n", rank, (long long)row,
                  gathered[row * 3 + c], r);
          bad = 1;
          break;
        }
      }
    }
  }
  CHECK(tutti_release(handle));
  free(mine);
  if (bad) return 1;
  printf("rank %d/%d: OK (tutti %s)\n", rank, size, tutti_version(NULL, NULL, NULL));
  return 0;
}

int main(void) {
  CHECK(tutti_init());
  int result = run();
  CHECK(tutti_shutdown());
  return result;
}
