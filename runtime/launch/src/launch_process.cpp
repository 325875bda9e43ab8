// Child processes for the launcher: fork + execve of a pre-resolved path, stdout/stderr through two
// pipes read with poll(), the child in its own process group so that a cancel reaches mpirun and
// every rank it started. Everything the child needs is prepared before fork(), so that only
// async-signal-safe calls run between fork and exec (the caller may be multi-threaded, e.g. the GUI).
#include "launch/launch_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/types.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace capplan::rt {
namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Splits a byte stream into lines; keeps the unfinished tail for the next chunk.
struct LineSplitter {
  std::string pending;
  void feed(const char* data, size_t n, OutputStream s, const OutputLineFn& fn) {
    pending.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (fn) fn(s, pending.substr(start, nl - start));
    }
    pending.erase(0, start);
  }
  void finish(OutputStream s, const OutputLineFn& fn) {
    if (!pending.empty() && fn) fn(s, pending);
    pending.clear();
  }
};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    case SIGINT: return "SIGINT";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGPIPE: return "SIGPIPE";
    case SIGHUP: return "SIGHUP";
    default: return "signal";
  }
}

}  // namespace

std::string ProcessResult::describe() const {
  if (!started) return "not started: " + error;
  std::string s;
  if (term_signal != 0) {
    s = "killed by signal " + std::to_string(term_signal) + " (" + signal_name(term_signal) + ")";
  } else {
    s = "exit status " + std::to_string(exit_code);
  }
  return cancelled ? "cancelled (" + s + ")" : s;
}

std::string find_executable(const std::string& name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? name : std::string();
  const char* path_env = std::getenv("PATH");
  std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string candidate =
        (end > start ? path.substr(start, end - start) : std::string(".")) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return {};
}

namespace {

// The executable and the working directory checked before anything is started; an error message,
// empty when both are fine.
std::string check_command(const std::vector<std::string>& argv, const ProcessOptions& options, std::string* exe) {
  if (argv.empty()) return "empty command";
  *exe = find_executable(argv[0]);
  if (exe->empty()) {
    return argv[0] + ": " + (argv[0].find('/') != std::string::npos ? "no such executable file" : "not found in PATH");
  }
  if (!options.working_dir.empty()) {
    struct stat st {};
    if (::stat(options.working_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return "working directory '" + options.working_dir + "' does not exist";
    }
  }
  return {};
}

// This process's environment with options.env's entries replacing (or adding to) it.
std::vector<std::string> child_environment(const ProcessOptions& options) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& o : options.env) {
      if (o.substr(0, o.find('=')) == key) replaced = true;
    }
    if (!replaced) env.push_back(std::move(entry));
  }
  for (const auto& o : options.env) env.push_back(o);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// stdout, stderr, and a pipe on which the child reports an exec failure (closed by a good exec).
struct Pipes {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, exec[2] = {-1, -1};
  void close_all() {
    for (int* fd : {&out[0], &out[1], &err[0], &err[1], &exec[0], &exec[1]}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }
};

std::string open_pipes(Pipes& p) {
  for (int* pair : {p.out, p.err, p.exec}) {
    if (::pipe2(pair, O_CLOEXEC) != 0) {
      const std::string why = std::string("pipe: ") + std::strerror(errno);
      p.close_all();
      return why;
    }
  }
  return {};
}

// The child's side after fork(): async-signal-safe calls only; never returns.
[[noreturn]] void exec_child(const Pipes& p, pid_t parent, const char* wd, const std::string& exe,
                             char* const* argv, char* const* envp) {
  ::setpgid(0, 0);
  // If this process dies without cancelling (killed, crashed), the child gets SIGTERM rather
  // than running on unwatched; mpirun forwards it to the ranks. The signal follows the forking
  // thread, which stays in run_process until the child is reaped.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(127);
  ::signal(SIGPIPE, SIG_DFL);
  ::dup2(p.out[1], STDOUT_FILENO);
  ::dup2(p.err[1], STDERR_FILENO);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
  int err = 0;
  if (wd && ::chdir(wd) != 0) err = errno;
  if (err == 0) {
    ::execve(exe.c_str(), argv, envp);
    err = errno;
  }
  ssize_t ignored = ::write(p.exec[1], &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

// The child's exec errno from the exec pipe, 0 when the exec succeeded (the pipe closed empty).
int exec_error(int exec_read_fd) {
  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(exec_read_fd, &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  ::close(exec_read_fd);
  return got == static_cast<ssize_t>(sizeof exec_errno) ? exec_errno : 0;
}

// A started child, watched until it has exited and its pipes are drained: output lines to
// `on_line`, the cancel flag turned into SIGTERM then SIGKILL for its process group, on_tick
// called every tick_s.
class ChildWatch {
 public:
  ChildWatch(pid_t pid, int out_fd, int err_fd, const ProcessOptions& options, const OutputLineFn& on_line,
             ProcessResult& result)
      : pid_(pid), fds_{out_fd, err_fd}, options_(options), on_line_(on_line), result_(result) {}

  void run(const std::atomic<bool>* cancel) {
    double last_tick = now_s();
    while (true) {
      signal_if_cancelled(cancel);
      reap_if_exited();
      if (!open_[0] && !open_[1] && exited_) break;
      // After the child has exited, give stragglers that still hold the pipes a short while.
      if (exited_ && now_s() - exited_at_ > 2.0) {
        ::kill(-pid_, SIGKILL);
        if (now_s() - exited_at_ > 4.0) break;
      }
      if (!read_output()) break;
      if (options_.on_tick && now_s() - last_tick >= options_.tick_s) {
        last_tick = now_s();
        options_.on_tick();
      }
    }
    finish();
  }

 private:
  void signal_if_cancelled(const std::atomic<bool>* cancel) {
    if (cancel && cancel->load() && !result_.cancelled) {
      result_.cancelled = true;
      ::kill(-pid_, SIGTERM);
      term_sent_at_ = now_s();
    }
    if (term_sent_at_ >= 0 && !kill_sent_ && !exited_ && now_s() - term_sent_at_ >= options_.kill_grace_s) {
      ::kill(-pid_, SIGKILL);
      kill_sent_ = true;
    }
  }

  void reap_if_exited() {
    if (exited_ || ::wait4(pid_, &status_, WNOHANG, &usage_) != pid_) return;
    exited_ = true;
    exited_at_ = now_s();
    // Ranks or helpers left behind in the group would keep the pipes open: end them.
    if (result_.cancelled) ::kill(-pid_, SIGKILL);
  }

  // One poll of the open pipes (50 ms at most); false when poll itself failed.
  bool read_output() {
    pollfd pfd[2];
    int n = 0, which[2];
    for (int i = 0; i < 2; ++i) {
      if (open_[i]) {
        pfd[n] = {fds_[i], POLLIN, 0};
        which[n++] = i;
      }
    }
    if (n == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return true;
    }
    const int rc = ::poll(pfd, n, 50);
    if (rc < 0 && errno != EINTR) return false;
    char buf[8192];
    for (int k = 0; rc > 0 && k < n; ++k) {
      if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const int i = which[k];
      const ssize_t r = ::read(fds_[i], buf, sizeof buf);
      if (r > 0) {
        split_[i].feed(buf, static_cast<size_t>(r), stream(i), on_line_);
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        split_[i].finish(stream(i), on_line_);
        open_[i] = false;
      }
    }
    return true;
  }

  // The last partial lines, the pipes closed, the child reaped, its status and peak RSS.
  void finish() {
    for (int i = 0; i < 2; ++i) {
      if (open_[i]) split_[i].finish(stream(i), on_line_);
      ::close(fds_[i]);
    }
    if (!exited_) {
      while (::wait4(pid_, &status_, 0, &usage_) < 0 && errno == EINTR) {
      }
    }
    result_.max_rss_bytes = double(usage_.ru_maxrss) * 1024.0;  // Linux reports kilobytes
    if (WIFEXITED(status_)) {
      result_.exit_code = WEXITSTATUS(status_);
    } else if (WIFSIGNALED(status_)) {
      result_.term_signal = WTERMSIG(status_);
    }
    if (options_.on_tick) options_.on_tick();
  }

  static OutputStream stream(int i) { return i == 0 ? OutputStream::Stdout : OutputStream::Stderr; }

  pid_t pid_;
  int fds_[2];
  const ProcessOptions& options_;
  const OutputLineFn& on_line_;
  ProcessResult& result_;
  LineSplitter split_[2];
  bool open_[2] = {true, true};
  bool exited_ = false;
  struct rusage usage_ {};
  int status_ = 0;
  double term_sent_at_ = -1, exited_at_ = -1;
  bool kill_sent_ = false;
};

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options,
                          const OutputLineFn& on_line, const std::atomic<bool>* cancel) {
  ProcessResult result;
  const double t0 = now_s();
  std::string exe;
  result.error = check_command(argv, options, &exe);
  if (!result.error.empty()) return result;

  // Everything the child touches, built before fork().
  std::vector<std::string> argv_strings = argv, env_strings = child_environment(options);
  const std::vector<char*> cargv = c_strings(argv_strings), cenv = c_strings(env_strings);
  Pipes pipes;
  result.error = open_pipes(pipes);
  if (!result.error.empty()) return result;
  const char* wd = options.working_dir.empty() ? nullptr : options.working_dir.c_str();

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    result.error = std::string("fork: ") + std::strerror(errno);
    pipes.close_all();
    return result;
  }
  if (pid == 0) exec_child(pipes, parent, wd, exe, cargv.data(), cenv.data());
  ::setpgid(pid, pid);  // also from the parent, so a cancel right away reaches the group
  for (int* fd : {&pipes.out[1], &pipes.err[1], &pipes.exec[1]}) {
    ::close(*fd);
    *fd = -1;
  }

  if (const int exec_errno = exec_error(pipes.exec[0]); exec_errno != 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ::close(pipes.out[0]);
    ::close(pipes.err[0]);
    result.error = exe + ": " + std::strerror(exec_errno);
    result.wall_time_s = now_s() - t0;
    return result;
  }
  result.started = true;
  ChildWatch(pid, pipes.out[0], pipes.err[0], options, on_line, result).run(cancel);
  result.wall_time_s = now_s() - t0;
  return result;
}

namespace {

char g_single_copy_probe[64] = "capplan: can a sibling process read this buffer?";

// Child A idles; child B reads A's copy of the probe buffer (same address: both are forks of
// this process), as one rank's single copy reads another's. Only async-signal-safe calls in the
// children.
bool try_single_copy() {
  const pid_t a = ::fork();
  if (a < 0) return false;
  if (a == 0) {
    for (;;) ::pause();
  }
  const pid_t b = ::fork();
  if (b == 0) {
    char buf[sizeof g_single_copy_probe] = {};
    struct iovec local = {buf, sizeof buf};
    struct iovec remote = {g_single_copy_probe, sizeof buf};
    const ssize_t n = ::process_vm_readv(a, &local, 1, &remote, 1, 0);
    ::_exit(n == ssize_t(sizeof buf) && std::memcmp(buf, g_single_copy_probe, sizeof buf) == 0 ? 0 : 1);
  }
  int status = 0;
  bool ok = false;
  if (b > 0) {
    while (::waitpid(b, &status, 0) < 0 && errno == EINTR) {
    }
    ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  ::kill(a, SIGKILL);
  while (::waitpid(a, nullptr, 0) < 0 && errno == EINTR) {
  }
  return ok;
}

}  // namespace

bool single_copy_works() {
  static const bool ok = try_single_copy();
  return ok;
}

std::vector<std::string> mpi_transport_env() {
  if (std::getenv("OMPI_MCA_btl_vader_single_copy_mechanism") || single_copy_works()) return {};
  return {"OMPI_MCA_btl_vader_single_copy_mechanism=none"};
}

}  // namespace capplan::rt
