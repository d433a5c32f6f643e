// TcpTransport: the public face of TcpMesh (ops/tcp/tcp_mesh.h).

#include "ops/tcp/tcp_transport.h"

#include "ops/tcp/tcp_mesh.h"

namespace tutti {

// ---- TcpTransport ---------------------------------------------------------

Status TcpTransport::connect(const Settings& settings, Store& store,
                             const std::string& advertise_host,
                             std::unique_ptr<TcpTransport>* out) {
  if (settings.size < 1 || settings.rank < 0 || settings.rank >= settings.size) {
    return Status::invalidArgument("rank " + std::to_string(settings.rank) +
                                   " is not in a job of size " + std::to_string(settings.size));
  }
  auto impl = std::make_unique<TcpMesh>(settings);
  if (settings.size > 1) TUTTI_RETURN_IF_ERROR(impl->connect(store, advertise_host));
  out->reset(new TcpTransport(std::move(impl)));
  return Status::ok();
}

TcpTransport::TcpTransport(std::unique_ptr<TcpMesh> impl) : impl_(std::move(impl)) {}
TcpTransport::~TcpTransport() = default;
int TcpTransport::rank() const {
  return impl_->rank();
}
int TcpTransport::size() const {
  return impl_->size();
}
Transport::OpId TcpTransport::postSend(int peer, const void* data, size_t bytes) {
  return impl_->post(true, peer, static_cast<uint8_t*>(const_cast<void*>(data)), bytes);
}
Transport::OpId TcpTransport::postRecv(int peer, void* data, size_t bytes) {
  return impl_->post(false, peer, static_cast<uint8_t*>(data), bytes);
}
Status TcpTransport::wait(OpId id) {
  return impl_->wait(id);
}
Status TcpTransport::waitAll() {
  return impl_->waitAll();
}
Status TcpTransport::sendControl(int peer, std::vector<uint8_t> bytes) {
  return impl_->sendControl(peer, std::move(bytes));
}
Status TcpTransport::pollControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  return impl_->pollControl(deadline, out);
}
Status TcpTransport::drainControl(Clock::time_point deadline, std::vector<ControlMessage>* out) {
  return impl_->drainControl(deadline, out);
}
void TcpTransport::wake() {
  impl_->wake();
}
void TcpTransport::cancel(const Status& status) {
  impl_->cancel(status);
}
void TcpTransport::setProgressTimeout(double seconds) {
  impl_->setProgressTimeout(seconds);
}
void TcpTransport::setSpin(std::chrono::microseconds spin) {
  impl_->setSpin(spin);
}
void TcpTransport::setControlUnused() {
  impl_->setControlUnused();
}
int TcpTransport::sharedMemoryPeers() const {
  return impl_->shmPeers();
}
TcpWireStats TcpTransport::wireStats() const {
  return impl_->wireStats();
}

}  // namespace tutti
