#include "ops/peer_liveness.h"

#include <algorithm>
#include <sstream>

#include "ops/poll_deadline.h"

namespace tutti {

PeerLiveness::PeerLiveness(int rank, int size, double timeout_seconds, double first_timeout_seconds)
    : rank_(rank),
      timeout_seconds_(timeout_seconds),
      timeout_(secondsToDuration(timeout_seconds)),
      first_timeout_(std::max(timeout_, secondsToDuration(first_timeout_seconds))),
      interval_(timeout_ / 4),
      sent_at_(static_cast<size_t>(size > 0 ? size : 1)),
      heard_at_(sent_at_.size()),
      heard_any_(sent_at_.size(), false) {}

void PeerLiveness::start(Clock::time_point now) {
  std::fill(sent_at_.begin(), sent_at_.end(), now);
  std::fill(heard_at_.begin(), heard_at_.end(), now);
  std::fill(heard_any_.begin(), heard_any_.end(), false);
  last_wait_ = now;
  resumed_at_ = now;
}

bool PeerLiveness::isControlPeer(int peer) const {
  return peer >= 0 && peer < static_cast<int>(sent_at_.size()) && peer != rank_ &&
         (rank_ == 0 || peer == 0);
}

void PeerLiveness::sent(int peer, Clock::time_point now) {
  sent_at_[static_cast<size_t>(peer)] = now;
}

void PeerLiveness::heard(int peer, Clock::time_point now) {
  heard_at_[static_cast<size_t>(peer)] = now;
  heard_any_[static_cast<size_t>(peer)] = true;
}

std::vector<int> PeerLiveness::heartbeatsDue(Clock::time_point now, const IsOpen& open) const {
  std::vector<int> due;
  for (int peer = 0; peer < static_cast<int>(sent_at_.size()); ++peer) {
    if (!isControlPeer(peer) || !open(peer)) continue;
    if (now - sent_at_[static_cast<size_t>(peer)] >= interval_) due.push_back(peer);
  }
  return due;
}

PeerLiveness::Clock::time_point PeerLiveness::nextHeartbeat(const IsOpen& open) const {
  auto next = Clock::time_point::max();
  for (int peer = 0; peer < static_cast<int>(sent_at_.size()); ++peer) {
    if (isControlPeer(peer) && open(peer)) {
      next = std::min(next, sent_at_[static_cast<size_t>(peer)] + interval_);
    }
  }
  return next;
}

void PeerLiveness::enterWait(Clock::time_point now) {
  if (now - last_wait_ > interval_ / 2) resumed_at_ = now;
  last_wait_ = now;
}

int PeerLiveness::silentPeer(Clock::time_point now, const IsOpen& open,
                             Clock::time_point* until) const {
  *until = Clock::time_point::max();
  for (int peer = 0; peer < static_cast<int>(heard_at_.size()); ++peer) {
    if (!isControlPeer(peer) || !open(peer)) continue;
    const auto p = static_cast<size_t>(peer);
    const auto at =
        std::max(heard_at_[p], resumed_at_) + (heard_any_[p] ? timeout_ : first_timeout_);
    if (now >= at) return peer;
    *until = std::min(*until, at);
  }
  return -1;
}

std::string PeerLiveness::silenceMessage(int peer) const {
  std::ostringstream msg;
  msg << "rank " << peer << ": nothing heard for " << timeout_seconds_
      << " s (TUTTI_TIMEOUT_SECONDS) while rank " << rank_
      << " waited in the negotiation; its process is stopped or hung, or the link to it is cut";
  return msg.str();
}

}  // namespace tutti
