// tutti_op_options.ordered (bindings/c/tutti.h) as built into libtutti: the
// field's checks on one rank; between two forked ranks (one runtime per
// process), ordered allreduces and a barrier, a mismatch reported on both
// ranks with the op's number, and an older caller's smaller options struct.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <vector>

#include "forked_ranks.h"
#include "single_rank_fixture.h"
#include "tutti.h"

namespace {

class CApiOrdered : public SingleRankCApiTest {};

TEST_F(CApiOrdered, DefaultIsNegotiatedAndOtherValuesAreRefused) {
  tutti_op_options opts;
  tutti_op_options_init(&opts);
  EXPECT_EQ(opts.ordered, 0);
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  float x = 2.0f;
  int64_t shape[1] = {1};
  tutti_tensor t{&x, TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_handle h = 0;
  opts.ordered = 2;
  EXPECT_EQ(tutti_allreduce_async_opts(&t, &t, nullptr, TUTTI_SUM, 1.0, 1.0, &opts, &h),
            TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tutti_last_error()).find("options->ordered = 2"), std::string::npos)
      << tutti_last_error();
  opts.ordered = 1;  // one rank: the op completes on this thread in tutti_wait
  ASSERT_EQ(tutti_allreduce_async_opts(&t, &t, nullptr, TUTTI_SUM, 1.0, 1.0, &opts, &h), TUTTI_OK);
  EXPECT_EQ(tutti_wait(h, 30), TUTTI_OK);
  EXPECT_EQ(x, 2.0f);
  EXPECT_EQ(tutti_release(h), TUTTI_OK);
}

// 100 ordered sums of [r + i] (the last rank's 7 elements inline, 70000 not),
// a barrier, then rank 0's 5 elements against rank 1's 6: TUTTI_ERR_MISMATCH
// on both naming op #102; then an options struct of the size before
// `ordered` existed is still accepted (negotiated).
void childRank(int rank, int port) {
  setForkedRankEnv(rank, 2, port, "c-api-ordered-test");
  CHILD_CHECK(tutti_init() == TUTTI_OK);
  tutti_op_options opts;
  tutti_op_options_init(&opts);
  opts.ordered = 1;
  tutti_handle h = 0;
  for (int k = 0; k < 100; ++k) {
    const int64_t n = k % 10 == 9 ? 70000 : 7;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(rank + i);
    int64_t shape[1] = {n};
    tutti_tensor t{x.data(), TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
    CHILD_CHECK(tutti_allreduce_async_opts(&t, &t, nullptr, TUTTI_SUM, 1.0, 1.0, &opts, &h) ==
                TUTTI_OK);
    CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK && tutti_release(h) == TUTTI_OK);
    for (int64_t i = 0; i < n; ++i) CHILD_CHECK(x[static_cast<size_t>(i)] == 1.0f + 2.0f * i);
  }
  CHILD_CHECK(tutti_barrier_async_opts(&opts, &h) == TUTTI_OK);
  CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK && tutti_release(h) == TUTTI_OK);
  std::vector<int32_t> y(static_cast<size_t>(5 + rank));
  int64_t shape[1] = {5 + rank};
  tutti_tensor ty{y.data(), TUTTI_INT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  CHILD_CHECK(tutti_allreduce_async_opts(&ty, &ty, nullptr, TUTTI_SUM, 1.0, 1.0, &opts, &h) ==
              TUTTI_OK);
  CHILD_CHECK(tutti_wait(h, 30) == TUTTI_ERR_MISMATCH);
  const std::string message = handleMessage(h);
  CHILD_CHECK(message.find("ordered collective #102") != std::string::npos);
  CHILD_CHECK(message.find("[5]") != std::string::npos && message.find("[6]") != std::string::npos);
  CHILD_CHECK(tutti_release(h) == TUTTI_OK);
  tutti_op_options old = opts;
  old.struct_size = offsetof(tutti_op_options, ordered);  // a caller built before the field
  CHILD_CHECK(tutti_barrier_async_opts(&old, &h) == TUTTI_OK);
  CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK && tutti_release(h) == TUTTI_OK);
  CHILD_CHECK(tutti_shutdown() == TUTTI_OK);
  _exit(0);
}

TEST(CApiOrderedTwoRanks, AllreducesThenAMismatchOnBothRanks) {
  EXPECT_EQ(runForkedRanks(2, childRank), (std::vector<int>{0, 0})) << "exit codes of ranks 0, 1";
}

}  // namespace
