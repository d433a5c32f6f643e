#include "ops/backend_registry.h"

#include <chrono>

#include "core/logging.h"
#include "ops/tcp/rendezvous_client.h"
#include "ops/tcp/rendezvous_server.h"
#include "ops/tcp/tcp_backend.h"
#include "ops/tcp/tcp_transport.h"

namespace tutti {
namespace {

// Backends this build registers, for error messages.
constexpr const char* kBackends = "tcp";

// Keeps rank 0's rendezvous server and the store client alive as long as the
// bundle (the client is not needed after connecting, but costs nothing).
struct TcpKeepalive {
  std::unique_ptr<RendezvousServer> server;
  std::unique_ptr<RendezvousClient> client;
};

}  // namespace

Status connectBackend(const Settings& settings, BackendBundle* out) {
  if (settings.backend != "tcp") {
    return Status::invalidArgument("TUTTI_BACKEND=" + settings.backend +
                                   ": this build has the backends: " + kBackends);
  }
  auto keep = std::make_shared<TcpKeepalive>();
  std::unique_ptr<TcpTransport> transport;
  if (settings.size > 1) {
    if (settings.rank == 0 && settings.rank0_hosts_rendezvous) {
      TUTTI_RETURN_IF_ERROR(RendezvousServer::start("0.0.0.0", settings.rendezvous_port,
                                                    settings.secret, &keep->server));
    }
    const auto timeout =
        std::chrono::milliseconds(static_cast<int64_t>(settings.timeout_seconds * 1000.0));
    TUTTI_RETURN_IF_ERROR(RendezvousClient::connect(settings.rendezvous_addr,
                                                    settings.rendezvous_port, settings.secret,
                                                    timeout, &keep->client));
    TUTTI_RETURN_IF_ERROR(
        TcpTransport::connect(settings, *keep->client, keep->client->localAddress(), &transport));
  } else {
    struct NoStore : Store {
      Status set(const std::string&, const std::vector<uint8_t>&) override { return Status::ok(); }
      Status get(const std::string& key, std::chrono::milliseconds,
                 std::vector<uint8_t>*) override {
        return Status::internal("a job of one rank has no store (key '" + key + "')");
      }
    } none;
    TUTTI_RETURN_IF_ERROR(TcpTransport::connect(settings, none, "", &transport));
  }
  out->backend =
      std::make_unique<TcpBackend>(*transport, static_cast<size_t>(settings.segment_bytes));
  out->transport = std::move(transport);
  out->keepalive = std::move(keep);
  return Status::ok();
}

}  // namespace tutti
