// Test helper for tuttirun's integration tests: a "rank" that reaches the
// rendezvous without the tutti runtime. Connects with the TUTTI_* variables
// tuttirun set, checks in as the runtime does (ops/tcp/generation_store.h),
// prints one line, then sleeps for the
// given seconds (default 0) and exits with the given code (default 0).
//   rendezvous_helper [SLEEP_SECONDS [EXIT_CODE]]

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "ops/tcp/generation_store.h"
#include "ops/tcp/rendezvous_client.h"

int main(int argc, char** argv) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v ? v : "");
  };
  std::string rank = env("TUTTI_RANK");
  std::unique_ptr<tutti::RendezvousClient> client;
  tutti::Status st = tutti::RendezvousClient::connect(
      env("TUTTI_RENDEZVOUS_ADDR"), std::atoi(env("TUTTI_RENDEZVOUS_PORT").c_str()),
      env("TUTTI_SECRET"), std::chrono::seconds(20), &client);
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
