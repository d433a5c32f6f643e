// Test helper for tuttirun's integration tests: a "rank" that reaches the
// rendezvous without the tutti runtime, and a store client for scripts that
// play elastic workers (tests/launcher/fake_elastic_worker.py). Connects with
// the TUTTI_* variables tuttirun set.
//   rendezvous_helper [SLEEP_SECONDS [EXIT_CODE]]
//       checks in as the runtime does (rendezvous/generation_store.h), prints
//       one line, sleeps, exits with EXIT_CODE (defaults 0 and 0).
//   rendezvous_helper get KEY [TIMEOUT_SECONDS]
//       prints KEY's value (waits up to TIMEOUT_SECONDS, default 10).
//   rendezvous_helper set KEY VALUE
//   rendezvous_helper join LAST_GENERATION [TIMEOUT_SECONDS]
//       the join of docs/elastic.md ("Worker side"): polls every 20 ms until
//       elastic/latest > LAST_GENERATION, then prints the generation on one
//       line and its members after it. elastic/failed set: prints
//       "failed: <message>" and exits 2. Timeout: exits 1.
//   rendezvous_helper meet GENERATION SIZE [TIMEOUT_SECONDS]
//       waits until every rank below SIZE of GENERATION published
//       elastic/gen/<g>/rank/<r>/addr (as the tcp transport does when it
//       joins): exits 0. A newer generation (superseded): exits 3;
//       elastic/failed: prints "failed: <message>", exits 2; timeout: exits 1.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "rendezvous/elastic_membership.h"
#include "rendezvous/generation_store.h"
#include "rendezvous/rendezvous_client.h"

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return std::string(v ? v : "");
}

std::string text(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}

// What the driver says: elastic/failed (prints "failed: <message>", returns
// 2), or the newest generation in *latest (-1: none yet; returns 0). 1: the
// store could not be read.
int driverState(tutti::RendezvousClient& client, int64_t* latest) {
  std::vector<uint8_t> value;
  bool found = false;
  if (!client.tryGet(tutti::elastic_keys::failed(), &value, &found).isOk()) return 1;
  if (found) {
    std::printf("failed: %s\n", text(value).c_str());
    return 2;
  }
  return tutti::latestGeneration(client, latest).isOk() ? 0 : 1;
}

int storeCommand(tutti::RendezvousClient& client, int argc, char** argv) {
  using std::chrono::milliseconds;
  std::string cmd = argv[1];
  if (cmd == "get" && argc >= 3) {
    double timeout = argc > 3 ? std::atof(argv[3]) : 10;
    std::vector<uint8_t> value;
    tutti::Status st =
        client.get(argv[2], milliseconds(static_cast<long long>(timeout * 1000)), &value);
    if (!st.isOk()) {
      std::fprintf(stderr, "get %s: %s\n", argv[2], st.toString().c_str());
      return 1;
    }
    std::printf("%s\n", text(value).c_str());
    return 0;
  }
  if (cmd == "set" && argc == 4) {
    std::string v = argv[3];
    tutti::Status st = client.set(argv[2], std::vector<uint8_t>(v.begin(), v.end()));
    if (!st.isOk()) std::fprintf(stderr, "set %s: %s\n", argv[2], st.toString().c_str());
    return st.isOk() ? 0 : 1;
  }
  if (cmd == "join" && argc >= 3) {
    long last = std::atol(argv[2]);
    double timeout = argc > 3 ? std::atof(argv[3]) : 60;
    auto deadline =
        std::chrono::steady_clock::now() + milliseconds(static_cast<long long>(timeout * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      int64_t latest = -1;
      if (int rc = driverState(client, &latest)) return rc;
      if (latest > last) {
        std::vector<uint8_t> members;
        tutti::Status st =
            client.get(tutti::elastic_keys::members(latest), milliseconds(1000), &members);
        if (!st.isOk()) {
          std::fprintf(stderr, "generation %lld without members: %s\n",
                       static_cast<long long>(latest), st.toString().c_str());
          return 1;
        }
        std::printf("%lld\n%s", static_cast<long long>(latest), text(members).c_str());
        return 0;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    std::fprintf(stderr, "join: no generation after %ld within %g s\n", last, timeout);
    return 1;
  }
  if (cmd == "meet" && argc >= 4) {
    long g = std::atol(argv[2]);
    int size = std::atoi(argv[3]);
    double timeout = argc > 4 ? std::atof(argv[4]) : 60;
    auto deadline =
        std::chrono::steady_clock::now() + milliseconds(static_cast<long long>(timeout * 1000));
    int arrived = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      int64_t latest = -1;
      if (int rc = driverState(client, &latest)) return rc;
      if (latest > g) return 3;
      std::vector<uint8_t> value;
      bool found = false;
      for (; arrived < size; ++arrived) {
        const std::string key = tutti::elastic_keys::rankAddress(g, arrived);
        if (!client.tryGet(key, &value, &found).isOk()) return 1;
        if (!found) break;
      }
      if (arrived == size) return 0;
      std::this_thread::sleep_for(milliseconds(20));
    }
    std::fprintf(stderr, "meet: rank %d of generation %ld did not arrive within %g s\n", arrived, g,
                 timeout);
    return 1;
  }
  std::fprintf(stderr,
               "usage: rendezvous_helper [SLEEP [CODE]] | get KEY [T] | set KEY VALUE | "
               "join LAST [T] | meet G SIZE [T]\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  std::string rank = env("TUTTI_RANK");
  std::unique_ptr<tutti::RendezvousClient> client;
  tutti::Status st = tutti::RendezvousClient::connect(
      env("TUTTI_RENDEZVOUS_ADDR"), std::atoi(env("TUTTI_RENDEZVOUS_PORT").c_str()),
      env("TUTTI_SECRET"), std::chrono::seconds(20), &client);
  if (st.isOk() && argc > 1 && std::string(argv[1]).find_first_not_of("0123456789.") == 0) {
    return storeCommand(*client, argc, argv);
  }
  if (st.isOk()) {
    int generation = 0;
    st = tutti::enterNextGeneration(*client, std::atoi(rank.c_str()), &generation);
  }
  if (!st.isOk()) {
    std::fprintf(stderr, "rank %s: rendezvous failed: %s\n", rank.c_str(), st.toString().c_str());
    return 1;
  }
  std::printf("rank %s reached the rendezvous\n", rank.c_str());
  std::fflush(stdout);
  double sleep_s = argc > 1 ? std::atof(argv[1]) : 0;
  std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
  return argc > 2 ? std::atoi(argv[2]) : 0;
}
