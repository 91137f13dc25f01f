// The imdb program's command line: each subcommand a Command (its flags, what it runs), the checks CLI11 leaves
// to a program (a value that looks like a flag, a one-dash long option, an empty list item), usage errors (exit
// status 2), and in_world (a command run in the job's process group: one process, or mpirun's ranks).
#pragma once
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/distributed/agreement.h"
#include "core/distributed/world.h"
#include "core/error.h"
#include "examples/imdb/settings.h"

namespace ember::imdb {

// A mistake in the command line: main prints it with the hint to --help and exits with status 2.
struct UsageError : Error {
  using Error::Error;
};

// One subcommand: add() puts its flags into the program's table (its own CLI::App, kept in `app`); run() does
// it once the line has been parsed into those flags, returning the exit status.
class Command {
 public:
  virtual ~Command() = default;
  virtual void add(CLI::App& program) = 0;
  virtual int run() = 0;
  bool parsed() const { return app != nullptr && app->parsed(); }
  bool is(const std::string& name) const { return app != nullptr && app->check_name(name); }
  // Whether a --preset's flags apply (presets.h): the commands that take the training flags.
  virtual bool takes_presets() const { return false; }

 protected:
  CLI::App* app = nullptr;
};

// The commands: train, pretrain, nbsvm, compare (train_commands.cpp); eval, predict, report, check, flops, batches
// (run_commands.cpp).
std::vector<std::unique_ptr<Command>> training_commands();
std::vector<std::unique_ptr<Command>> run_commands();

// Runs fn(world) in the group of every process of the job (one process, or mpirun's ranks). An
// error on one rank ends every rank at once (MPI_Abort): the others would wait for it for ever.
// An error every rank raised together (different settings, a bad checkpoint) is reported by rank 0.
template <typename Fn>
int in_world(double timeout_seconds, Fn&& fn) {
  std::unique_ptr<distributed::ProcessGroup> world = distributed::init_world(timeout_seconds);
  try {
    return fn(*world);
  } catch (const distributed::AgreedError&) {
    if (world->rank() == 0) throw;
    // Status 0, so that mpirun does not end the job (rank 0 with it) before rank 0 has reported the error; the
    // job's status is rank 0's, 1 (a rank returning 1 here first made mpirun kill rank 0 unreported, now and then).
    return 0;
  } catch (const std::exception& e) {
    if (world->size() > 1)
      world->abort_job(fmt::format("error (rank {} of {}): {}\nending every rank of the job", world->rank(),
                                   world->size(), e.what()), 1);
    throw;
  }
}

// --data and --data-dir for the commands that read the test reviews of a saved run.
void add_data_flags(CLI::App& app, TrainConfig& c);
// The settings' checks that are the command line's mistakes (a UsageError): --resume with --overwrite, a dim the
// heads do not divide, a window longer than --max-len, a --device that does not parse.
void check_training_config(const TrainConfig& c);
// An option's value may not look like a flag: `--out --resume` is a missing value, not a folder
// named "--resume". (CLI11 would take it.) Nor may a path be empty: `--init ""` (a variable that was not set)
// trained from scratch without a word, and `--run ""` read "/model.safetensors".
void check_no_flag_values(const CLI::App& app);
// Checks the words of a command line that CLI11 would misread, before it parses them. `args` is
// the command and its words (args[0] "train", ...), `command` its flag table.
// - A long option with one dash: CLI11 reads "-heads" as the switches -h -e -a ..., and -h is
//   --help (`imdb train -heads 4` printed the help and trained nothing). A word that is the value
//   of the option before it ("--text -awful-") is left alone; so are numbers ("-1").
// - An empty item in a comma-separated list ("--heads-list 2," was read as 2).
void check_words(const CLI::App& command, const std::vector<std::string>& args);

}  // namespace ember::imdb
