// tuttirun: start N ranks of a tutti program on this node, the equivalent of
// `torchrun --nproc-per-node=N`. Linux only; needs nothing beyond libc and the standard library.
// The parts: options.hpp (the command line), job.hpp (the job's identity and the ranks'
// environment), spawn.hpp (starting a rank), output.hpp (its output), launcher.hpp (the poll loop
// and restarts), rendezvous.hpp and rendezvous_codec.hpp (restarts and reports across nodes),
// hang_report.hpp and dump.hpp (the hang report), trace.hpp (the ranks' timeline trace,
// TUTTI_TRACE).

#include <signal.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common.hpp"
#include "dump.hpp"
#include "job.hpp"
#include "launcher.hpp"
#include "options.hpp"
#include "rendezvous.hpp"
#include "spawn.hpp"
#include "trace.hpp"

using namespace tuttirun;

int main(int argc, char** argv) {
  command_line cmd;
  try {
    cmd = parse_args(argc, argv);
  } catch (const usage_error& e) {
    say(e.what());
    write_all(STDERR_FILENO, "Try 'tuttirun --help' for more information.\n");
    return exit_usage;
  }
  if (cmd.what == command_line::action::dump) return dump_job(cmd.opts.dump_dir);
  if (cmd.what != command_line::action::run) {
    write_all(STDOUT_FILENO, cmd.what == command_line::action::help ? help_text : version_text);
    return 0;
  }
  options& opts = cmd.opts;
  try {
    sigset_t child_mask;
    struct sigaction child_sigpipe{};
    int sigfd = setup_signals(child_mask, child_sigpipe);
    adopt_orphans();
    // TUTTI_TRACE: the ranks inherit it and write their files there; this run's files only.
    const std::optional<std::string> trace_dir = trace_dir_from_env();
    const bool node0 = opts.node_rank == 0;
    if (trace_dir) prepare_trace_dir(*trace_dir, node0);
    job_identity job = make_identity(opts);
    std::unique_ptr<rendezvous> rdzv = make_rendezvous(opts, job);
    const int code = launcher(std::move(opts), std::move(job), sigfd, child_mask, child_sigpipe, std::move(rdzv)).run();
    // The ranks are gone, whether the job succeeded or not: node 0 merges their files.
    if (trace_dir && node0) write_merged_trace(*trace_dir);
    return code;
  } catch (const launcher_error& e) {
    say(e.what());
    return exit_launcher_error;
  }
}
