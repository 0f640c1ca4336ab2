#include "server/in_flight.h"

#include "base/check.h"

namespace specstack {

InFlightRequests::Ticket::~Ticket() {
  std::lock_guard<std::mutex> lock(owner_.mutex_);
  owner_.tickets_.erase(position_);
}

void InFlightRequests::Ticket::attach(const std::shared_ptr<CompletionSession>& session) {
  bool shut_down = false;
  {
    std::lock_guard<std::mutex> lock(owner_.mutex_);
    session_ = session;
    shut_down = shutdown_requested_;
  }
  // A shutdown_all() that came between the submit and this attach asked it
  // too (it was counted): it ends at its first poll.
  if (shut_down) session->request_shutdown();
}

InFlightRequests::~InFlightRequests() {
  std::lock_guard<std::mutex> lock(mutex_);
  SS_CHECK_MSG(tickets_.empty(), "a request outlived the HTTP server");
}

std::shared_ptr<InFlightRequests::Ticket> InFlightRequests::enter() {
  std::shared_ptr<Ticket> ticket(new Ticket(*this));  // the constructor is private
  std::lock_guard<std::mutex> lock(mutex_);
  ticket->position_ = tickets_.insert(tickets_.end(), ticket.get());
  return ticket;
}

int64_t InFlightRequests::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(tickets_.size());
}

int64_t InFlightRequests::shutdown_all() {
  // Collected first, so no session is called, or destroyed with the last
  // reference, while the lock every ticket's destructor takes is held.
  std::vector<std::shared_ptr<CompletionSession>> sessions;
  int64_t asked = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Ticket* ticket : tickets_) {
      ticket->shutdown_requested_ = true;  // one not yet attached ends when it is
      if (auto session = ticket->session_.lock()) sessions.push_back(std::move(session));
    }
    asked = static_cast<int64_t>(tickets_.size());
  }
  for (const auto& session : sessions) session->request_shutdown();
  return asked;
}

}  // namespace specstack
