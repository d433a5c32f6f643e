// completion.h: finishing TensorFlow async kernels when tutti's ops complete.
//
// tutti's completion callbacks (tutti_completion.h) run on tutti's background
// thread and must neither block nor call tutti. The op library therefore has
// one thread of its own, the completer: a callback only counts the group's
// remaining handles down and, for the last one, queues the group; the
// completer then runs the group's finish function, which may call tutti (read
// outputs, release handles), allocate TensorFlow outputs and call the
// kernel's DoneCallback.
//
// Thread-safety: Watch() may be called from any thread (TensorFlow's
// inter-op threads). Finish functions run one at a time on the completer.
#ifndef TUTTI_BINDINGS_TENSORFLOW_COMPLETION_H_
#define TUTTI_BINDINGS_TENSORFLOW_COMPLETION_H_

#include <functional>
#include <string>
#include <vector>

#include "tutti.h"

namespace tutti_tf {

// The outcome of a group of handles: TUTTI_OK, or the first failed handle's
// status and message (tutti_handle_message).
struct Outcome {
  int status = TUTTI_OK;
  std::string message;
};

// Runs finish(outcome) on the completer thread once every handle of `handles`
// (non-empty, each from a successful *_async call) completed. finish must
// release the handles (ReleaseAll). A handle whose callback cannot be
// registered (the runtime was shut down meanwhile) counts as completed with
// that error.
void Watch(const std::vector<tutti_handle>& handles, std::function<void(const Outcome&)> finish);

// tutti_release() on every handle (errors ignored: a handle is released once).
void ReleaseAll(const std::vector<tutti_handle>& handles);

}  // namespace tutti_tf

#endif  // TUTTI_BINDINGS_TENSORFLOW_COMPLETION_H_
