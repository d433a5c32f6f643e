// completion.cc: the completer thread of the TensorFlow op library (completion.h).
#include "completion.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace tutti_tf {
namespace {

struct Group {
  std::vector<tutti_handle> handles;
  std::function<void(const Outcome&)> finish;
  std::atomic<int> remaining{0};
  std::atomic<tutti_handle> failed{0};  // the first handle that failed, 0 = none
  std::atomic<int> failed_status{TUTTI_OK};
  std::string registration_error;  // set before any callback can run
};

// The completer: a queue of finished groups and the thread that drains it.
// Never destroyed (TensorFlow never unloads op libraries, and a static
// destructor racing the thread at exit would be worse than the leak).
class Completer {
 public:
  static Completer& instance() {
    static Completer* completer = new Completer();
    return *completer;
  }

  void push(Group* group) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(group);
    }
    cv_.notify_one();
  }

 private:
  Completer() {
    std::thread([this] { run(); }).detach();
  }

  void run() {
    for (;;) {
      Group* group = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        group = queue_.front();
        queue_.pop_front();
      }
      finish(std::unique_ptr<Group>(group));
    }
  }

  static void finish(std::unique_ptr<Group> group) {
    Outcome outcome;
    tutti_handle failed = group->failed.load();
    if (failed != 0) {
      int status = TUTTI_OK;
      char buf[2048];
      tutti_handle_message(failed, &status, buf, sizeof(buf));
      outcome.status = group->failed_status.load();
      outcome.message = buf;
    } else if (!group->registration_error.empty()) {
      outcome.status = TUTTI_ERR_SHUTDOWN;
      outcome.message = group->registration_error;
    }
    if (outcome.status != TUTTI_OK && outcome.message.empty()) {
      outcome.message = std::string("tutti op failed: ") + tutti_status_name(outcome.status);
    }
    group->finish(outcome);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Group*> queue_;
};

// Runs on tutti's background thread (or the registering one): no blocking,
// no tutti calls.
void OnHandleComplete(tutti_handle handle, int status, void* user_data) {
  auto* group = static_cast<Group*>(user_data);
  if (status != TUTTI_OK) {
    tutti_handle expected = 0;
    if (group->failed.compare_exchange_strong(expected, handle)) {
      group->failed_status.store(status);
    }
  }
  if (group->remaining.fetch_sub(1) == 1) Completer::instance().push(group);
}

}  // namespace

void Watch(const std::vector<tutti_handle>& handles, std::function<void(const Outcome&)> finish) {
  Completer::instance();  // started before the first callback can need it
  auto* group = new Group();
  group->handles = handles;
  group->finish = std::move(finish);
  // One extra count held by this function, so that the group is queued only
  // after every callback was registered (or failed to be).
  group->remaining.store(static_cast<int>(handles.size()) + 1);
  int unregistered = 0;
  for (tutti_handle h : handles) {
    if (tutti_handle_on_complete(h, &OnHandleComplete, group) != TUTTI_OK) {
      if (group->registration_error.empty()) group->registration_error = tutti_last_error();
      ++unregistered;
    }
  }
  if (group->remaining.fetch_sub(1 + unregistered) == 1 + unregistered) {
    Completer::instance().push(group);
  }
}

void ReleaseAll(const std::vector<tutti_handle>& handles) {
  for (tutti_handle h : handles) tutti_release(h);
}

}  // namespace tutti_tf
