#pragma once

// A gtest fixture for C API tests on a job of one rank in this process: the
// environment tutti_init() reads (rank 0 of 1, tcp, not elastic), and
// tutti_shutdown() after each test.

#include <gtest/gtest.h>

#include <cstdlib>

#include "tutti.h"

class SingleRankCApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("TUTTI_ELASTIC_WORKER_ID");
    setenv("TUTTI_RANK", "0", 1);
    setenv("TUTTI_SIZE", "1", 1);
    setenv("TUTTI_BACKEND", "tcp", 1);
  }
  void TearDown() override { tutti_shutdown(); }
};
