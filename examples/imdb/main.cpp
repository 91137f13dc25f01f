// imdb: train, evaluate, use and compare Transformer sentiment classifiers on IMDb.
//   imdb train [flags]       imdb eval --run DIR...    imdb predict --run DIR... (--text T | --file F)
//   imdb compare [flags]     imdb report (--run DIR | --compare DIR)     imdb check --run DIR
//   imdb flops [flags]       (the model FLOPs of a training step, and MFU for a throughput)
//   imdb pretrain [flags]    (masked-token pretraining of the encoder; then imdb train --init DIR)
//   imdb nbsvm [flags]       (NBSVM: a linear model over naive-Bayes-scaled word n-grams; examples/imdb/nbsvm.h)
//   (several --run: an ensemble, the mean of the runs' probabilities; examples/imdb/ensemble.h)
// Each command is a Command (command_line.h): its flags and its run, in train_commands.cpp (train, pretrain,
// compare, nbsvm) and run_commands.cpp (eval, predict, report, check, flops, batches). The flags are one table per command
// (CLI11, Debian's libcli11-dev): it parses them, checks each number in full against its range (settings.h), and
// writes --help. The training flags are made from the settings' rows (training_flags.h, setting_table.h).
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "examples/imdb/command_line.h"
#include "examples/imdb/presets.h"

using namespace ember;
using namespace ember::imdb;

namespace {

// The command line's words after the command's --preset is expanded, each checked where CLI11 would misread it.
std::vector<std::string> checked_words(int argc, char** argv, const CLI::App& app,
                                       const std::vector<std::unique_ptr<Command>>& commands) {
  auto is_command = [&](const std::string& name) {
    for (const CLI::App* command : app.get_subcommands({})) if (command->check_name(name)) return true;
    return false;
  };
  if (argc >= 2 && argv[1][0] == '-' && argv[1][1] != '-' && std::strlen(argv[1]) > 2)  // "imdb -help": not -h
    throw UsageError(fmt::format("'{}' is not an option: long options take two dashes", std::string(argv[1]).substr(0, 40)));
  if (argc >= 2 && argv[1][0] != '-' && !is_command(argv[1]))
    throw UsageError(
        fmt::format("unknown command '{}' (commands: train, pretrain, nbsvm, eval, predict, compare, report, check, flops)", argv[1]));
  // --preset NAME: its flags written right after the command, before the explicit ones (presets.h).
  std::vector<std::string> args(argv + 1, argv + argc);
  bool presets = false;
  for (const std::unique_ptr<Command>& command : commands)
    presets |= !args.empty() && command->is(args[0]) && command->takes_presets();
  if (presets) {
    try {
      args = expand_preset(args);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  if (!args.empty() && is_command(args[0])) check_words(*app.get_subcommand(args[0]), args);
  args.insert(args.begin(), argc > 0 ? argv[0] : "imdb");
  return args;
}

int run(int argc, char** argv) {
  CLI::App app{"imdb: train, evaluate, use and compare Transformer sentiment classifiers on IMDb"};
  app.require_subcommand(1);
  // A flag given twice keeps its last value (a script can append overrides to a command line).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(34);
  std::vector<std::unique_ptr<Command>> commands = training_commands();
  for (std::unique_ptr<Command>& command : run_commands()) commands.push_back(std::move(command));
  for (std::unique_ptr<Command>& command : commands) command->add(app);

  std::vector<std::string> args = checked_words(argc, argv, app, commands);
  std::vector<char*> arg_pointers;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  try {
    app.parse(int(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  check_no_flag_values(app);
  for (std::unique_ptr<Command>& command : commands)
    if (command->parsed()) return command->run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    fmt::print(stderr, "error: {}\nRun 'imdb --help' or 'imdb <command> --help' for the flags.\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "error: out of CPU memory (a C++ allocation failed; lower --batch-size or --limit, or free "
                       "memory)\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
