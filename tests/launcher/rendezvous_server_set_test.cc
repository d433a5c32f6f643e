// RendezvousServer::set/get from tuttirun's own thread (the elastic driver
// publishes generations that way): a client blocked in GET is answered, and
// sets from one thread are seen in order.

#include <gtest/gtest.h>

#include <thread>

#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"

namespace tutti {
namespace {

using namespace std::chrono_literals;

TEST(RendezvousServerSet, WakesABlockedGetAndIsReadable) {
  std::unique_ptr<RendezvousServer> server;
  ASSERT_TRUE(RendezvousServer::start("127.0.0.1", 0, "sekrit", &server).isOk());
  std::unique_ptr<RendezvousClient> client;
  ASSERT_TRUE(
      RendezvousClient::connect("127.0.0.1", server->port(), "sekrit", 5000ms, &client).isOk());
  std::string got;
  Status st;
  auto t0 = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    std::vector<uint8_t> value;
    st = client->get("elastic/latest", 5000ms, &value);
    got.assign(value.begin(), value.end());
  });
  std::this_thread::sleep_for(200ms);  // the GET is waiting at the server by now
  std::string value;
  EXPECT_FALSE(server->get("elastic/latest", &value));
  server->set("elastic/gen/0/members", "0 0 1 0 1 0 1 h1\n");
  server->set("elastic/latest", "0");
  waiter.join();
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(got, "0");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  ASSERT_TRUE(server->get("elastic/gen/0/members", &value));
  EXPECT_EQ(value, "0 0 1 0 1 0 1 h1\n");
  EXPECT_EQ(server->keys("elastic/"),
            (std::vector<std::string>{"elastic/gen/0/members", "elastic/latest"}));
  // A client reads what the driver set, and the driver what a client set.
  std::vector<uint8_t> members;
  ASSERT_TRUE(client->get("elastic/gen/0/members", 1000ms, &members).isOk());
  EXPECT_EQ(std::string(members.begin(), members.end()), "0 0 1 0 1 0 1 h1\n");
  std::string report = "3";
  ASSERT_TRUE(
      client->set("elastic/report/0/1", std::vector<uint8_t>(report.begin(), report.end())).isOk());
  ASSERT_TRUE(server->get("elastic/report/0/1", &value));
  EXPECT_EQ(value, "3");
  server->stop();
  server->set("late", "x");  // after stop: stored, nobody to wake, no crash
}

}  // namespace
}  // namespace tutti
