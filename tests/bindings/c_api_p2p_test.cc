// tutti_send_async() and tutti_recv_async() (bindings/c/tutti_p2p.h) as built
// into libtutti: argument errors on one rank in the test process; a message
// and a mismatch between two forked ranks (the C API has one runtime per
// process), rank 0 serving the rendezvous.

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "forked_ranks.h"
#include "single_rank_fixture.h"
#include "tutti.h"

namespace {

class CApiPointToPoint : public SingleRankCApiTest {};

TEST_F(CApiPointToPoint, BadArgumentsFailAtOnce) {
  ASSERT_EQ(tutti_init(), TUTTI_OK);
  std::vector<float> x(4, 1.0f);
  int64_t shape[1] = {4};
  tutti_tensor t{x.data(), TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_handle h = 0;
  EXPECT_EQ(tutti_send_async(&t, 0, 0, nullptr, nullptr), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tutti_send_async(nullptr, 0, 0, nullptr, &h), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tutti_send_async(&t, 0, 0, nullptr, &h), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tutti_last_error()).find("cannot send a message to itself"),
            std::string::npos)
      << tutti_last_error();
  EXPECT_EQ(tutti_recv_async(&t, 1, 0, nullptr, &h), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tutti_last_error()).find("rank 1 is not in process set 0"),
            std::string::npos)
      << tutti_last_error();
  tutti_op_options opts;
  tutti_op_options_init(&opts);
  opts.process_set_id = 7;
  EXPECT_EQ(tutti_recv_async(&t, 0, 0, &opts, &h), TUTTI_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(h, 0) << "the handle was written on failure";
}

TEST(CApiPointToPointUninitialized, NotInitialized) {
  float x = 0;
  int64_t shape[1] = {1};
  tutti_tensor t{&x, TUTTI_FLOAT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_handle h = 0;
  EXPECT_EQ(tutti_recv_async(&t, 1, 0, nullptr, &h), TUTTI_ERR_NOT_INITIALIZED);
}

// Rank 0 sends 1000 float64 values with tag 3 and receives their doubles
// back with tag 4; then a message whose receiver expects int32 fails on
// both ranks with TUTTI_ERR_MISMATCH naming both dtypes.
void childRank(int rank, int port) {
  setForkedRankEnv(rank, 2, port, "c-api-p2p-test");
  CHILD_CHECK(tutti_init() == TUTTI_OK);
  std::vector<double> x(1000), y(1000, -1.0);
  int64_t shape[1] = {1000};
  tutti_tensor tx{x.data(), TUTTI_FLOAT64, 1, shape, TUTTI_DEVICE_CPU, -1};
  tutti_tensor ty{y.data(), TUTTI_FLOAT64, 1, shape, TUTTI_DEVICE_CPU, -1};
  const int peer = 1 - rank;
  tutti_handle h = 0;
  if (rank == 0) {
    for (int i = 0; i < 1000; ++i) x[i] = 0.5 * i;
    CHILD_CHECK(tutti_send_async(&tx, peer, 3, nullptr, &h) == TUTTI_OK);
    CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK && tutti_release(h) == TUTTI_OK);
    CHILD_CHECK(tutti_recv_async(&ty, peer, 4, nullptr, &h) == TUTTI_OK);
    CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK && tutti_release(h) == TUTTI_OK);
    for (int i = 0; i < 1000; ++i) CHILD_CHECK(y[i] == 1.0 * i);
  } else {
    CHILD_CHECK(tutti_recv_async(&ty, peer, 3, nullptr, &h) == TUTTI_OK);
    CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK && tutti_release(h) == TUTTI_OK);
    for (int i = 0; i < 1000; ++i) CHILD_CHECK(y[i] == 0.5 * i);
    for (int i = 0; i < 1000; ++i) x[i] = 2 * y[i];
    CHILD_CHECK(tutti_send_async(&tx, peer, 4, nullptr, &h) == TUTTI_OK);
    CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK && tutti_release(h) == TUTTI_OK);
  }
  std::vector<int32_t> ints(1000);
  tutti_tensor ti{ints.data(), TUTTI_INT32, 1, shape, TUTTI_DEVICE_CPU, -1};
  CHILD_CHECK((rank == 0 ? tutti_send_async(&tx, peer, 5, nullptr, &h)
                         : tutti_recv_async(&ti, peer, 5, nullptr, &h)) == TUTTI_OK);
  CHILD_CHECK(tutti_wait(h, 30) == TUTTI_ERR_MISMATCH);
  const std::string message = handleMessage(h);
  CHILD_CHECK(message.find("p2p 0->1 tag 5 #0") != std::string::npos);
  CHILD_CHECK(message.find("float64") != std::string::npos);
  CHILD_CHECK(message.find("int32") != std::string::npos);
  CHILD_CHECK(tutti_release(h) == TUTTI_OK);
  CHILD_CHECK(tutti_barrier_async(&h) == TUTTI_OK);  // both past the mismatch
  CHILD_CHECK(tutti_wait(h, 30) == TUTTI_OK);
  CHILD_CHECK(tutti_shutdown() == TUTTI_OK);
  _exit(0);
}

TEST(CApiPointToPointTwoRanks, MessagesBothWaysThenAMismatchOnBothRanks) {
  EXPECT_EQ(runForkedRanks(2, childRank), (std::vector<int>{0, 0})) << "exit codes of ranks 0, 1";
}

}  // namespace
