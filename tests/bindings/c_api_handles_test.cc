// tutti_poll() and the build/runtime queries of the C API (bindings/c/tutti.h)
// as built into libtutti, on a job of one rank in this process.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "single_rank_fixture.h"
#include "tutti.h"

namespace {

class CApiHandles : public SingleRankCApiTest {};

// A completed, then released, allreduce of one rank; returns its handle.
tutti_handle releasedAllreduce() {
  std::vector<float> x = {1.5f, -2.0f, 3.0f};
  std::vector<float> y(3, 0.0f);
  const int64_t shape[] = {3};
  tutti_tensor in{x.data(), TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_tensor out{y.data(), TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_handle h = 0;
  EXPECT_EQ(tutti_allreduce_async(&in, &out, "poll.x", TUTTI_SUM, 1.0, 1.0, &h), TUTTI_OK);
  EXPECT_EQ(tutti_wait(h, 30), TUTTI_OK);
  EXPECT_EQ(tutti_poll(h), 1);  // completed, not yet released
  EXPECT_EQ(y, x);
  EXPECT_EQ(tutti_release(h), TUTTI_OK);
  return h;
}

TEST_F(CApiHandles, PollOfAReleasedHandleIsNegative) {
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  const tutti_handle h = releasedAllreduce();
  ASSERT_GT(h, 0);
  EXPECT_EQ(tutti_poll(h), -TUTTI_ERR_INVALID_ARGUMENT);
  const std::string message = tutti_last_error();
  EXPECT_NE(message.find("unknown handle " + std::to_string(h)), std::string::npos) << message;
  // tutti_wait agrees: the handle is gone.
  EXPECT_EQ(tutti_wait(h, 0), TUTTI_ERR_INVALID_ARGUMENT);
}

TEST_F(CApiHandles, PollOfANeverIssuedHandleIsNegative) {
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  const tutti_handle issued = releasedAllreduce();
  for (tutti_handle h : {tutti_handle{0}, tutti_handle{-3}, issued + 1, issued + 1000}) {
    EXPECT_EQ(tutti_poll(h), -TUTTI_ERR_INVALID_ARGUMENT) << "handle " << h;
  }
}

TEST_F(CApiHandles, PollWithoutARuntimeIsNegative) {
  ASSERT_EQ(tutti_is_initialized(), 0);
  EXPECT_EQ(tutti_poll(1), -TUTTI_ERR_NOT_INITIALIZED);
  EXPECT_EQ(tutti_backend(), nullptr);
}

TEST_F(CApiHandles, BackendAndMpiThreadQueries) {
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  ASSERT_NE(tutti_backend(), nullptr);
  EXPECT_EQ(std::string(tutti_backend()), "tcp");
  EXPECT_EQ(tutti_mpi_threads_supported(), -1);  // this process never used MPI
  EXPECT_EQ(tutti_nccl_version() > 0, tutti_built_with("nccl") == 1);
}

// The unsigned wider dtypes (appended to the ABI): their sizes, and a scaled
// uint16 allreduce that saturates at the type's range (multi-rank sums of every
// dtype: tests/cases).
TEST_F(CApiHandles, WideUnsignedDtypesHaveTheirSizesAndReduce) {
  EXPECT_EQ(tutti_dtype_size(TUTTI_UINT16), 2u);
  EXPECT_EQ(tutti_dtype_size(TUTTI_UINT32), 4u);
  EXPECT_EQ(tutti_dtype_size(TUTTI_UINT64), 8u);
  EXPECT_EQ(tutti_dtype_size(TUTTI_UINT64 + 1), 0u);
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  std::vector<uint16_t> x = {1, 65535, 40000};
  std::vector<uint16_t> y(3, 0);
  const int64_t shape[] = {3};
  tutti_tensor in{x.data(), TUTTI_UINT16, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_tensor out{y.data(), TUTTI_UINT16, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_handle h = 0;
  ASSERT_EQ(tutti_allreduce_async(&in, &out, "u16.x", TUTTI_SUM, 2.0, 1.0, &h), TUTTI_OK);
  ASSERT_EQ(tutti_wait(h, 30), TUTTI_OK);
  EXPECT_EQ(tutti_release(h), TUTTI_OK);
  // prescale 2: integers scale in double and saturate to the type's range.
  EXPECT_EQ(y, (std::vector<uint16_t>{2, 65535, 65535}));
}

}  // namespace
