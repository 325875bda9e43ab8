// Child processes for the launcher: fork + execve of a pre-resolved path, stdout/stderr through two
// pipes read with poll(), the child in its own process group so that a cancel reaches mpirun and
// every rank it started. Everything the child needs is prepared before fork(), so that only
// async-signal-safe calls run between fork and exec (the caller may be multi-threaded, e.g. the GUI).
#include "launch/launch_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
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

std::string shell_quote(const std::vector<std::string>& argv) {
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i) out += ' ';
    const std::string& a = argv[i];
    bool plain = !a.empty();
    for (char c : a) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("@%_+=:,./-", c))) plain = false;
    }
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) {
      if (c == '\'') out += "'\\''";
      else out += c;
    }
    out += '\'';
  }
  return out;
}

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options,
                          const OutputLineFn& on_line, const std::atomic<bool>* cancel) {
  ProcessResult result;
  const double t0 = now_s();
  if (argv.empty()) {
    result.error = "empty command";
    return result;
  }
  const std::string exe = find_executable(argv[0]);
  if (exe.empty()) {
    result.error = argv[0] + ": " +
                   (argv[0].find('/') != std::string::npos ? "no such executable file"
                                                            : "not found in PATH");
    return result;
  }
  if (!options.working_dir.empty()) {
    struct stat st {};
    if (::stat(options.working_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      result.error = "working directory '" + options.working_dir + "' does not exist";
      return result;
    }
  }

  // Everything the child touches, built before fork().
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& o : options.env) {
      if (o.substr(0, o.find('=')) == key) replaced = true;
    }
    if (!replaced) env_strings.push_back(std::move(entry));
  }
  for (const auto& o : options.env) env_strings.push_back(o);
  std::vector<char*> cenv;
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);

  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + std::strerror(errno);
    ::close(out_pipe[0]), ::close(out_pipe[1]);
    return result;
  }
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {  // reports an exec failure: closed by a good exec
    result.error = std::string("pipe: ") + std::strerror(errno);
    ::close(out_pipe[0]), ::close(out_pipe[1]), ::close(err_pipe[0]), ::close(err_pipe[1]);
    return result;
  }
  const char* wd = options.working_dir.empty() ? nullptr : options.working_dir.c_str();

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    result.error = std::string("fork: ") + std::strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], exec_pipe[0], exec_pipe[1]}) {
      ::close(fd);
    }
    return result;
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    ::setpgid(0, 0);
    // If this process dies without cancelling (killed, crashed), the child gets SIGTERM rather
    // than running on unwatched; mpirun forwards it to the ranks. The signal follows the forking
    // thread, which stays in run_process until the child is reaped.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    int err = 0;
    if (wd && ::chdir(wd) != 0) err = errno;
    if (err == 0) {
      ::execve(exe.c_str(), cargv.data(), cenv.data());
      err = errno;
    }
    ssize_t ignored = ::write(exec_pipe[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also from the parent, so a cancel right away reaches the group
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::close(exec_pipe[1]);

  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  ::close(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    result.error = exe + ": " + std::strerror(exec_errno);
    result.wall_time_s = now_s() - t0;
    return result;
  }
  result.started = true;

  LineSplitter split_out, split_err;
  int fds[2] = {out_pipe[0], err_pipe[0]};
  bool open_fd[2] = {true, true};
  bool exited = false;
  struct rusage usage {};
  int status = 0;
  double term_sent_at = -1;
  bool kill_sent = false;
  double last_tick = now_s();
  double exited_at = -1;
  char buf[8192];

  while (true) {
    if (cancel && cancel->load() && !result.cancelled) {
      result.cancelled = true;
      ::kill(-pid, SIGTERM);
      term_sent_at = now_s();
    }
    if (term_sent_at >= 0 && !kill_sent && !exited && now_s() - term_sent_at >= options.kill_grace_s) {
      ::kill(-pid, SIGKILL);
      kill_sent = true;
    }
    if (!exited) {
      const pid_t w = ::wait4(pid, &status, WNOHANG, &usage);
      if (w == pid) {
        exited = true;
        exited_at = now_s();
        // Ranks or helpers left behind in the group would keep the pipes open: end them.
        if (result.cancelled) ::kill(-pid, SIGKILL);
      }
    }
    if (!open_fd[0] && !open_fd[1] && exited) break;
    // After the child has exited, give stragglers that still hold the pipes a short while.
    if (exited && now_s() - exited_at > 2.0) {
      ::kill(-pid, SIGKILL);
      if (now_s() - exited_at > 4.0) break;
    }

    pollfd pfd[2];
    int n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (open_fd[i]) {
        pfd[n] = {fds[i], POLLIN, 0};
        which[n++] = i;
      }
    }
    if (n == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } else {
      const int rc = ::poll(pfd, n, 50);
      if (rc < 0 && errno != EINTR) break;
      for (int k = 0; rc > 0 && k < n; ++k) {
        if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int i = which[k];
        const ssize_t r = ::read(fds[i], buf, sizeof buf);
        const OutputStream s = i == 0 ? OutputStream::Stdout : OutputStream::Stderr;
        LineSplitter& sp = i == 0 ? split_out : split_err;
        if (r > 0) {
          sp.feed(buf, static_cast<size_t>(r), s, on_line);
        } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
          sp.finish(s, on_line);
          open_fd[i] = false;
        }
      }
    }
    if (options.on_tick && now_s() - last_tick >= options.tick_s) {
      last_tick = now_s();
      options.on_tick();
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (open_fd[i]) {
      (i == 0 ? split_out : split_err).finish(i == 0 ? OutputStream::Stdout : OutputStream::Stderr,
                                              on_line);
    }
    ::close(fds[i]);
  }
  if (!exited) {
    while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
    }
  }
  result.max_rss_bytes = double(usage.ru_maxrss) * 1024.0;  // Linux reports kilobytes
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
  }
  if (options.on_tick) options.on_tick();
  result.wall_time_s = now_s() - t0;
  return result;
}

}  // namespace capplan::rt
