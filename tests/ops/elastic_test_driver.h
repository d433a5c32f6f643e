#pragma once

// The test plays tuttirun's elastic driver (docs/elastic.md): its own
// RendezvousServer, and a RendezvousClient that writes the driver's keys
// (members, latest, failed) and reads the workers' reports.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/settings.h"
#include "rendezvous/elastic_membership.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"

namespace tutti {
namespace test {

class ElasticTestDriver {
 public:
  ElasticTestDriver() {
    Status st = RendezvousServer::start("127.0.0.1", 0, secret_, &server_);
    EXPECT_TRUE(st.isOk()) << st.toString();
    st = RendezvousClient::connect("127.0.0.1", server_->port(), secret_,
                                   std::chrono::milliseconds(5000), &client_);
    EXPECT_TRUE(st.isOk()) << st.toString();
  }

  int port() const { return server_->port(); }
  const std::string& secret() const { return secret_; }
  RendezvousClient& client() { return *client_; }

  // Members of one host ("localhost"), in the order of `worker_ids`.
  static std::vector<ElasticMember> oneHost(const std::vector<int>& worker_ids) {
    std::vector<ElasticMember> members;
    const int n = static_cast<int>(worker_ids.size());
    for (int r = 0; r < n; ++r) {
      members.push_back(ElasticMember{worker_ids[r], r, n, r, n, 0, 1, "localhost"});
    }
    return members;
  }

  // Writes generation g's members, then elastic/latest = g (that order).
  void publish(int64_t g, const std::vector<ElasticMember>& members) {
    set(elastic_keys::members(g), formatMembers(members));
    set(elastic_keys::latest(), std::to_string(g));
  }
  void fail(const std::string& message) { set(elastic_keys::failed(), message); }

  void set(const std::string& key, const std::string& value) {
    Status st = client_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    ASSERT_TRUE(st.isOk()) << st.toString();
  }
  // The value of `key`, or "<unset>".
  std::string value(const std::string& key) {
    std::vector<uint8_t> v;
    bool found = false;
    Status st = client_->tryGet(key, &v, &found);
    EXPECT_TRUE(st.isOk()) << st.toString();
    return found ? std::string(v.begin(), v.end()) : std::string("<unset>");
  }

  // Settings of elastic worker `worker_id` against this driver's store.
  Settings workerSettings(int worker_id, double timeout_seconds = 10,
                          double elastic_timeout_seconds = 20) const {
    Settings s;
    Status st = loadSettings([](const std::string&) { return std::nullopt; }, &s);
    EXPECT_TRUE(st.isOk()) << st.toString();
    s.rendezvous_addr = "127.0.0.1";
    s.rendezvous_port = server_->port();
    s.rank0_hosts_rendezvous = false;
    s.secret = secret_;
    s.timeout_seconds = timeout_seconds;
    s.segment_bytes = 4096;
    s.elastic_worker_id = worker_id;
    s.elastic_timeout_seconds = elastic_timeout_seconds;
    return s;
  }

 private:
  std::string secret_ = "elastic-test-secret";
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<RendezvousClient> client_;
};

}  // namespace test
}  // namespace tutti
