// Helpers shared by the CLI tests: a `specstack serve` child process whose
// stderr is collected, and a scratch directory removed at scope end.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"
#include "test_util.h"

namespace specstack::testing {

// A `specstack serve --port 0 --threads 2 ARGS...` child whose stderr is collected.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& extra_args) {
    int fds[2];
    SS_CHECK(::pipe(fds) == 0);
    std::vector<std::string> args = {specstack_binary(), "serve", "--port", "0", "--threads", "2"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    reader_ = std::thread([this, fd = fds[0]] {
      char buffer[4096];
      ssize_t n;
      while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        err_.append(buffer, static_cast<size_t>(n));
      }
      ::close(fd);
    });
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  ~ServeProcess() {
    if (pid_ > 0 && exit_status_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
  }

  // The port from "listening on http://127.0.0.1:PORT", or 0 if it exited or 60 s passed.
  int wait_for_port() {
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    for (int i = 0; i < 6000; ++i) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        std::smatch match;
        if (std::regex_search(err_, match, listening)) return std::stoi(match[1]);
      }
      if (exited()) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }

  // Sends `signo` and returns the exit code (-1: killed by a signal or hung).
  int stop(int signo = SIGTERM) {
    ::kill(pid_, signo);
    for (int i = 0; i < 3000 && !exited(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (reader_.joinable()) reader_.join();
    return exit_status_ >= 0 && WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : -1;
  }

  std::string err() {
    std::lock_guard<std::mutex> lock(mutex_);
    return err_;
  }

 private:
  bool exited() {
    if (exit_status_ >= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) exit_status_ = status;
    return exit_status_ >= 0;
  }

  pid_t pid_ = -1;
  int exit_status_ = -1;
  std::thread reader_;
  std::mutex mutex_;
  std::string err_;
};

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "specstack_test_") {
    path_ = std::filesystem::temp_directory_path() /
            (prefix + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  static inline int counter_ = 0;
};

// A failed command that printed exactly one line, "specstack: error: ...",
// containing `needle`.
inline void expect_clean_error(const CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("specstack: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

}  // namespace specstack::testing
