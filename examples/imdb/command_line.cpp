// The imdb program's command line: the checks CLI11 leaves to a program (command_line.h).
#include "examples/imdb/command_line.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string>
#include <vector>

#include "core/attention_band.h"
#include "core/device.h"
#include "examples/imdb/truncation.h"

namespace ember::imdb {

void add_data_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--data", c.data, "reviews.json or an aclImdb folder (default: the download cache)");
  app.add_option("--data-dir", c.data_dir, "download cache (default: $EMBER_DATA or ./data)");
}

void check_training_config(const TrainConfig& c) {
  if (c.resume && c.overwrite)
    throw UsageError("--resume continues the run in --out and --overwrite replaces it: give one of them");
  if (c.model.dim % c.model.heads != 0)
    throw UsageError(fmt::format("--dim {} is not divisible by --heads {}", c.model.dim, c.model.heads));
  if (c.model.attention_window > c.model.max_len || c.model.attention_global > c.model.max_len)
    throw UsageError(fmt::format("--attention {}: the window and the global tokens must fit in --max-len {}",
                                 attention_band_text({c.model.attention_window, c.model.attention_global}), c.model.max_len));
  try {
    Device::parse(c.device);
  } catch (const Error& e) {
    throw UsageError(fmt::format("--device: {}", e.what()));
  }
}

void check_no_flag_values(const CLI::App& app) {
  static const std::vector<std::string> paths = {"--out", "--init", "--data", "--data-dir", "--run", "--compare", "--file"};
  for (const CLI::App* command : app.get_subcommands()) {
    for (const CLI::Option* option : command->get_options()) {
      if (option->get_type_size() == 0) continue;  // a switch
      for (const std::string& value : option->results()) {
        if (value.rfind("--", 0) == 0)
          throw UsageError(fmt::format("{} needs a value, got the flag '{}'", option->get_name(), value));
        if (value.empty() && std::find(paths.begin(), paths.end(), option->get_name()) != paths.end())
          throw UsageError(fmt::format("{} needs a path, got an empty one", option->get_name()));
      }
    }
  }
}

void check_words(const CLI::App& command, const std::vector<std::string>& args) {
  auto option_of = [&](const std::string& word) -> const CLI::Option* {
    if (word.rfind("--", 0) != 0) return nullptr;
    return command.get_option_no_throw(word.substr(0, word.find('=')));
  };
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") break;
    const CLI::Option* previous = i > 1 ? option_of(args[i - 1]) : nullptr;
    const bool is_value = previous != nullptr && previous->get_type_size() != 0 &&
                          args[i - 1].find('=') == std::string::npos;
    if (!is_value && word.size() > 2 && word[0] == '-' && std::isalpha(static_cast<unsigned char>(word[1]))) {
      const std::string name = word.substr(1, word.find('=') - 1);
      const bool known = command.get_option_no_throw("--" + name) != nullptr;
      throw UsageError(fmt::format("'{}' is not an option of imdb {}: long options take two dashes{}", word.substr(0, 40),
                                   args[0], known ? fmt::format(" (did you mean --{}?)", name) : std::string()));
    }
    // A list option's value: "--heads-list 2,4" or "--heads-list=2,4".
    const CLI::Option* list = option_of(word);
    if (list == nullptr || list->get_delimiter() == '\0') continue;
    std::string value;
    if (word.find('=') != std::string::npos) value = word.substr(word.find('=') + 1);
    else if (i + 1 < args.size()) value = args[i + 1];
    else continue;  // no value: CLI11 says so
    const std::string items = std::string(1, list->get_delimiter()) + value + std::string(1, list->get_delimiter());
    if (value.empty() || items.find(std::string(2, list->get_delimiter())) != std::string::npos)
      throw UsageError(fmt::format("{}: an empty item in '{}' (a comma-separated list has no empty items)",
                                   list->get_name(), value.substr(0, 40)));
  }
}

}  // namespace ember::imdb
