// Shared-memory setup of TcpMesh, after every TCP connection is up (the
// channel and ring protocol: shm_channel.h; moving data: shm_link.h).
//
// Each rank has published its host identity under "rank/<r>/host" ("" with
// TUTTI_SHM=off). A pair whose two identities are equal and non-empty tries
// shared memory; both ranks decide that from the same two store entries. The
// lower rank creates the segment and sends an offer on the pair's data
// connection (peer_records.h: ok flag, ring size, name); the higher rank
// opens it and answers one byte, ok or not. Both use shared memory exactly
// when the offer and the answer said ok; otherwise the pair stays on TCP (a
// warning says why).
//
// The steps run one after the other, each to its end or the setup deadline:
//   1. send an offer to every higher same-host peer;
//   2. in rank order, read every lower same-host peer's offer, open the
//      segment, answer;
//   3. read every higher peer's answer.
// No rank waits in a cycle: the offers read in step 2 were written in the
// peers' step 1, which waits for nothing, and the answers read in step 3 are
// written in step 2, which waits only for step-1 offers.

#include <sstream>

#include "core/logging.h"
#include "ops/tcp/tcp_mesh.h"
#include "rendezvous/asio_util.h"

namespace tutti {

using boost::system::error_code;

namespace {

std::string hostKey(int rank) {
  return "rank/" + std::to_string(rank) + "/host";
}

}  // namespace

// One same-host peer's negotiation.
struct TcpMesh::ShmPair {
  int peer = -1;
  std::unique_ptr<ShmChannel> channel;
  std::string name;  // lower rank: to unlink
  std::array<uint8_t, kShmOfferBytes> offer{};
  std::array<uint8_t, 1> answer{};
  std::string why;  // why not shared memory, for the warning
};

std::vector<int> TcpMesh::sameHostPeers(Store& store) {
  std::vector<int> peers;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    std::vector<uint8_t> v;
    // Every rank publishes this key before its address, and r has connected
    // to us, so the key is there: wait for the store as long as setup may
    // take. Both ranks of a pair must decide alike; a short wait that a
    // loaded store misses would leave one of them waiting for an offer or
    // an answer that never comes.
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(setup_deadline_ - Clock::now());
    if (left < std::chrono::milliseconds(200)) left = std::chrono::milliseconds(200);
    if (!store.get(hostKey(r), left, &v).isOk()) continue;
    if (std::string(v.begin(), v.end()) == shm_identity_) peers.push_back(r);
  }
  return peers;
}

error_code TcpMesh::transfer(tcp::socket& sock, bool write, asio::mutable_buffer buffer) {
  bool done = false;
  error_code result;
  auto handler = [&](const error_code& ec, size_t) {
    result = ec;
    done = true;
  };
  if (write) {
    asio::async_write(sock, asio::buffer(buffer), handler);
  } else {
    asio::async_read(sock, asio::buffer(buffer), handler);
  }
  if (!tcp_util::driveUntil(
          io_, [&] { return done; }, setup_deadline_)) {
    // The handler refers to locals: closing aborts it, and it runs now.
    tcp_util::closeQuietly(sock);
    tcp_util::driveUntil(
        io_, [&] { return done; }, Clock::now() + std::chrono::seconds(1));
    return asio::error::timed_out;
  }
  return result;
}

Status TcpMesh::shmStep(const ShmPair& pair, const char* what, const error_code& ec) {
  if (!ec) return Status::ok();
  if (ec == asio::error::timed_out) {
    std::ostringstream msg;
    msg << "rank " << rank_ << ": shared-memory setup with its peers timed out after " << timeout_s_
        << " s";
    return Status::timeout(msg.str());
  }
  return Status::ioError("rank " + std::to_string(rank_) + ": rank " + std::to_string(pair.peer) +
                         " shared-memory " + what + ": " + ec.message());
}

Status TcpMesh::offerShm(ShmPair& p) {
  Status st = ShmChannel::create(kShmRingBytes, &p.name, &p.channel);
  if (!st.isOk()) p.why = st.message();
  p.offer = encodeShmOffer({st.isOk(), static_cast<uint32_t>(kShmRingBytes), p.name});
  return shmStep(p, "offer", transfer(*data_[p.peer], true, asio::buffer(p.offer)));
}

Status TcpMesh::answerShm(ShmPair& p) {
  TUTTI_RETURN_IF_ERROR(
      shmStep(p, "offer", transfer(*data_[p.peer], false, asio::buffer(p.offer))));
  const ShmOffer offer = decodeShmOffer(p.offer);
  if (offer.ok) {
    Status st = ShmChannel::open(offer.name, offer.ring_bytes, &p.channel);
    if (!st.isOk()) p.why = st.message();
  } else {
    p.why = "rank " + std::to_string(p.peer) + " could not create a segment";
  }
  p.answer[0] = p.channel ? 1 : 0;
  return shmStep(p, "answer", transfer(*data_[p.peer], true, asio::buffer(p.answer)));
}

Status TcpMesh::takeShmAnswer(ShmPair& p) {
  TUTTI_RETURN_IF_ERROR(
      shmStep(p, "answer", transfer(*data_[p.peer], false, asio::buffer(p.answer))));
  if (p.answer[0] != 1) {
    if (p.why.empty()) p.why = "rank " + std::to_string(p.peer) + " could not open the segment";
    p.channel.reset();
  }
  return Status::ok();
}

Status TcpMesh::setupShm(Store& store, std::vector<std::unique_ptr<ShmChannel>>* channels) {
  if (shm_identity_.empty()) return Status::ok();
  std::vector<ShmPair> pairs;
  for (int r : sameHostPeers(store)) {
    pairs.emplace_back();
    pairs.back().peer = r;
  }
  Status error;
  for (auto& p : pairs) {  // 1. offers to higher peers
    if (p.peer > rank_ && error.isOk()) error = offerShm(p);
  }
  for (auto& p : pairs) {  // 2. lower peers' offers, answered, in rank order
    if (p.peer < rank_ && error.isOk()) error = answerShm(p);
  }
  for (auto& p : pairs) {  // 3. higher peers' answers
    if (p.peer > rank_ && error.isOk()) error = takeShmAnswer(p);
  }
  for (auto& p : pairs) {
    if (!p.name.empty()) ShmChannel::unlinkName(p.name);
    if (!error.isOk()) continue;
    if (p.channel) {
      (*channels)[p.peer] = std::move(p.channel);
    } else {
      TUTTI_LOG(kWarning) << "rank " << rank_ << ": no shared memory with rank " << p.peer
                          << " on the same host (" << p.why << "); using TCP";
    }
  }
  return error;
}

}  // namespace tutti
