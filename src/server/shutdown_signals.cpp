#include "server/shutdown_signals.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "base/check.h"

namespace specstack {
namespace {

// The write end of the live instance's pipe, or -1. The one static in the
// server: a signal handler has no other way to reach its state, and the
// disposition it serves is per process anyway. Lock-free, so async-signal-safe.
std::atomic<int> signal_pipe_write_fd{-1};

void on_shutdown_signal(int signo) {
  const int saved_errno = errno;
  const int fd = signal_pipe_write_fd.load();
  if (fd >= 0) {
    const auto byte = static_cast<unsigned char>(signo);
    [[maybe_unused]] const ssize_t n = ::write(fd, &byte, 1);  // a full pipe drops it: fine
  }
  errno = saved_errno;
}

}  // namespace

ShutdownSignals::ShutdownSignals() {
  int fds[2];
  SS_CHECK_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
  pipe_read_ = fds[0];
  pipe_write_ = fds[1];
  int expected = -1;
  SS_CHECK_MSG(signal_pipe_write_fd.compare_exchange_strong(expected, pipe_write_),
               "only one ShutdownSignals may exist at a time");
  struct sigaction action {};
  action.sa_handler = on_shutdown_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // other threads' blocking calls resume instead of failing
  SS_CHECK_EQ(::sigaction(SIGINT, &action, &previous_int_), 0);
  SS_CHECK_EQ(::sigaction(SIGTERM, &action, &previous_term_), 0);
}

ShutdownSignals::~ShutdownSignals() {
  stop();
  ::sigaction(SIGINT, &previous_int_, nullptr);
  ::sigaction(SIGTERM, &previous_term_, nullptr);
  signal_pipe_write_fd.store(-1);
  ::close(pipe_read_);
  ::close(pipe_write_);
}

void ShutdownSignals::stop() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
}

void ShutdownSignals::watch(std::function<void(int)> on_signal, std::function<void()> on_tick,
                            std::chrono::milliseconds tick) {
  SS_CHECK(!watcher_.joinable());
  watcher_ =
      std::thread([this, on_signal = std::move(on_signal), on_tick = std::move(on_tick), tick] {
        while (!stopping_) {
          pollfd readable{pipe_read_, POLLIN, 0};
          if (::poll(&readable, 1, static_cast<int>(tick.count())) > 0) {
            unsigned char signals[16];
            const ssize_t n = ::read(pipe_read_, signals, sizeof(signals));
            for (ssize_t i = 0; i < n; ++i) {
              if (on_signal) on_signal(signals[i]);
            }
          }
          if (on_tick) on_tick();
        }
      });
}

}  // namespace specstack
