// The trainer's flags on the command line (CLI11): a check of each number's whole text against its
// range, and every training setting's flag made from its row (setting_table.h).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "examples/imdb/settings.h"

namespace ember::imdb {

// Checks a flag's text before CLI11 converts it: a whole decimal integer in [min, max] (CLI11's own
// conversion would clamp "99999999999999999999").
// A number that passes is handed on as its decimal digits (a transform, not a check: CLI11 keeps the
// rewritten text only then); CLI11 would read "010" as octal (8).
CLI::Validator integer_in(int64_t min, int64_t max);
CLI::Validator unsigned_integer();
CLI::Validator real_in(double min, double max);

// Option helpers: each shows its default in --help.
template <typename T>
CLI::Option* integer_option(CLI::App& app, const std::string& name, T& value, int64_t min, int64_t max,
                            const std::string& help) {
  return app.add_option(name, value, help)->transform(integer_in(min, max))->capture_default_str();
}
CLI::Option* real_option(CLI::App& app, const std::string& name, double& value, double min, double max,
                         const std::string& help);

// Every training flag, for train, compare and flops: --preset (for --help; expand_preset reads it),
// then a flag per row of setting_table() that has one, bound to its member of c.
void add_training_flags(CLI::App& app, TrainConfig& c, const std::string& default_out);
// The flags of the rows with these keys only, in the table's order, for a command that reads part of a run's
// settings (imdb nbsvm: the data and the loop, no model). A key of no row with a flag is an ember::Error.
void add_setting_flags(CLI::App& app, TrainConfig& c, const std::vector<std::string>& keys);

}  // namespace ember::imdb
