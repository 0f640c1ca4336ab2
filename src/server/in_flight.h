// The requests the HTTP server is working on, for a graceful drain: how many
// there are (the server stops listening only once none is left, or streams
// would be cut mid-response) and a way to end them all early.
//
// A request is counted from the moment its handler starts (before parsing,
// so a drain cannot begin between the "still admitting?" check and the
// submit) until its response is completely written: the ticket travels with
// the response's content provider and is dropped with it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>

#include "server/completion_session.h"

namespace specstack {

class InFlightRequests {
 public:
  class Ticket {
   public:
    ~Ticket();  // the request is no longer in flight
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    // The request's session, for interrupt_all(); set once it was submitted.
    void attach(const std::shared_ptr<CompletionSession>& session);

   private:
    friend class InFlightRequests;
    Ticket(InFlightRequests& owner) : owner_(owner) {}
    InFlightRequests& owner_;
    std::list<Ticket*>::iterator position_;
    std::weak_ptr<CompletionSession> session_;  // guarded by owner_.mutex_
    bool shutdown_requested_ = false;           // guarded by owner_.mutex_
  };

  InFlightRequests() = default;
  ~InFlightRequests();  // every ticket must be gone
  InFlightRequests(const InFlightRequests&) = delete;
  InFlightRequests& operator=(const InFlightRequests&) = delete;

  // Thread-safe. The ticket must not outlive this registry.
  std::shared_ptr<Ticket> enter();
  int64_t count() const;
  // Asks every request in flight to end with kFinishShutdown at its next
  // poll (CompletionSession::request_shutdown): attached sessions now, ones
  // submitted but not yet attached when they attach; returns how many.
  int64_t shutdown_all();

 private:
  mutable std::mutex mutex_;
  std::list<Ticket*> tickets_;
};

}  // namespace specstack
