// Starting a child process from an argument vector (never a shell string), streaming its stdout and
// stderr line by line to a callback, cancelling it (SIGTERM to its process group, SIGKILL after a
// grace period) and collecting its exit status. Used by the launcher (launch.h) for mpirun; it
// takes any argv. POSIX only; no Qt, no MPI.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "planner/shell_quote.h"

namespace capplan::rt {

enum class OutputStream { Stdout, Stderr };

// Called on the thread that runs run_process, once per complete line (without the '\n'); a last
// line without '\n' is delivered when the stream closes.
using OutputLineFn = std::function<void(OutputStream stream, const std::string& line)>;

struct ProcessOptions {
  std::string working_dir;       // empty = inherit
  std::vector<std::string> env;  // "KEY=VALUE" entries added to (or replacing in) this environment
  double kill_grace_s = 3.0;     // after SIGTERM, wait this long before SIGKILL
  double tick_s = 0.2;           // on_tick period while the child runs
  std::function<void()> on_tick; // e.g. poll a metrics file; called on run_process's thread
};

// Open MPI's shared-memory transport between the ranks of one node: its single copy
// (btl_vader_single_copy_mechanism=cma: one rank reads the other's buffer with
// process_vm_readv) needs ptrace rights over a sibling process, which containers often withhold
// (Yama ptrace_scope 1, seccomp); without them every large message fails with "process_vm_readv:
// Operation not permitted". The copy-in/copy-out path always works but moves a large message only
// while its sender is inside an MPI call, so a pipeline stage's activations wait for the sender's
// next call, and collectives copy twice. single_copy_works() tries it between two forked
// siblings, as two ranks would (once per process, then cached); mpi_transport_env() is the
// environment to launch ranks with: nothing when it works or the user chose a mechanism
// (OMPI_MCA_btl_vader_single_copy_mechanism set), else the copy-in/copy-out setting.
bool single_copy_works();
std::vector<std::string> mpi_transport_env();

struct ProcessResult {
  bool started = false;   // false: the program could not be executed (see error)
  std::string error;      // why it did not start, e.g. "mpirun: not found"
  int exit_code = -1;     // exit status when it exited normally, else -1
  int term_signal = 0;    // signal that ended it, 0 when it exited normally
  bool cancelled = false; // the cancel flag was raised while it ran
  double wall_time_s = 0;
  double max_rss_bytes = 0;  // largest resident set of the child or any descendant it waited
                             // for (wait4's ru_maxrss): for mpirun, its biggest rank or itself

  bool succeeded() const { return started && exit_code == 0 && !cancelled; }
  // "exit status 3", "killed by signal 9 (SIGKILL)", "cancelled (...)", "not started: ..."
  std::string describe() const;
};

// Runs argv[0] (looked up in PATH when it has no '/') with argv, in its own process group, and
// blocks until it has exited and both output streams are closed. When *cancel becomes true, the
// whole process group gets SIGTERM, then SIGKILL after kill_grace_s (mpirun forwards SIGTERM to
// its ranks, which Open MPI keeps in process groups of their own). Should this process die first,
// the child gets SIGTERM (Linux parent-death signal). Thread-safe to call from several threads
// for different children.
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options,
                          const OutputLineFn& on_line, const std::atomic<bool>* cancel = nullptr);

// The path of an executable: `name` itself when it contains '/' and is executable, else the first
// match in PATH. Empty when there is none.
std::string find_executable(const std::string& name);

// One argument vector as a line a POSIX shell would read back to the same vector (for display
// and command.txt only; nothing here runs a shell): planner/shell_quote.h's.
using capplan::shell_quote;

}  // namespace capplan::rt
