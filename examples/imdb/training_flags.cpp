// The trainer's flags from the rows of setting_table(), and the checks of a flag's number.
#include "examples/imdb/training_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/distributed/world.h"
#include "core/error.h"
#include "examples/imdb/presets.h"
#include "examples/imdb/setting_table.h"

namespace ember::imdb {

CLI::Validator integer_in(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        // Rewritten to its decimal digits: CLI11 would read "010" as octal 8.
        if (std::optional<int64_t> value = parse_integer(text, min, max)) {
          text = std::to_string(*value);
          return "";
        }
        return fmt::format("expects an integer in [{}, {}], got '{}'", min, max, text);
      },
      fmt::format("[{}, {}]", min, max));
}
CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (std::optional<uint64_t> value = parse_unsigned(text)) {
          text = std::to_string(*value);
          return "";
        }
        return fmt::format("expects an integer in [0, {}], got '{}'", std::numeric_limits<uint64_t>::max(), text);
      },
      "[0, 2^64)");
}
CLI::Validator real_in(double min, double max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        if (parse_real(text, min, max)) return "";
        return fmt::format("expects a number in [{}, {}], got '{}'", min, max, text);
      },
      fmt::format("[{}, {}]", min, max));
}

CLI::Option* real_option(CLI::App& app, const std::string& name, double& value, double min, double max,
                         const std::string& help) {
  return app.add_option(name, value, help)->check(real_in(min, max))->capture_default_str();
}

namespace {

// The flag of one row, bound to its member of c.
void add_setting_flag(CLI::App& app, const Setting& row, TrainConfig& c) {
  CLI::Option* option = nullptr;
  switch (row.kind) {
    case SettingKind::integer:
      std::visit(
          [&](auto get) {
            auto& member = get(c);
            using T = std::decay_t<decltype(member)>;
            if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
              option = integer_option(app, row.flag, member, row.min, row.max, row.help);
          },
          row.member);
      break;
    case SettingKind::real:
      option = real_option(app, row.flag, std::get<double& (*)(TrainConfig&)>(row.member)(c), row.real_min,
                           row.real_max, row.help);
      break;
    case SettingKind::unsigned_integer:
      option = app.add_option(row.flag, std::get<uint64_t& (*)(TrainConfig&)>(row.member)(c), row.help)
                   ->transform(unsigned_integer());
      break;
    case SettingKind::choice:
      option = app.add_option(row.flag, std::get<std::string& (*)(TrainConfig&)>(row.member)(c), row.help)
                   ->check(CLI::IsMember(row.choices));
      break;
    case SettingKind::text:
      option = app.add_option(row.flag, std::get<std::string& (*)(TrainConfig&)>(row.member)(c), row.help);
      break;
    case SettingKind::on_off:
      app.add_flag(row.flag, std::get<bool& (*)(TrainConfig&)>(row.member)(c), row.help);
      return;  // a switch shows no default
    case SettingKind::custom: {
      auto read = row.read;
      const std::string expected = row.flag_expected;
      option = app.add_option_function<std::string>(
                      row.flag, [&c, read](const std::string& text) { read(c, text); },  // the check below has passed
                      row.help)
                   ->check(CLI::Validator(
                       [read, expected](std::string& text) -> std::string {
                         TrainConfig scratch;
                         if (read(scratch, text)) return "";
                         return fmt::format("expects {}, got '{}'", expected, text);
                       },
                       row.flag_check_name));
      if (row.help_shows_default) option->default_str(setting_text(row, c));
      return;
    }
  }
  if (option && row.help_shows_default) option->capture_default_str();
}

}  // namespace

void add_training_flags(CLI::App& app, TrainConfig& c, const std::string& default_out) {
  c.out = default_out;
  c.dist_timeout = distributed::default_timeout_seconds();  // shown in --help as the default
  // Taken out of the command line before CLI11 reads it (expand_preset): here for --help only.
  std::string preset_help = "named settings, written before the other flags (which override them):";
  for (const Preset& p : presets()) preset_help += fmt::format("\n  {}: {}\n    = {}", p.name, p.why, fmt::join(p.flags, " "));
  app.add_option("--preset")->description(preset_help)->type_name("NAME");
  for (const Setting& row : setting_table())
    if (!row.flag.empty()) add_setting_flag(app, row, c);
}

void add_setting_flags(CLI::App& app, TrainConfig& c, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    const auto& table = setting_table();
    const bool known = std::any_of(table.begin(), table.end(),
                                   [&](const Setting& row) { return row.key == key && !row.flag.empty(); });
    EMBER_CHECK(known, "add_setting_flags: no setting '{}' with a flag", key);
  }
  for (const Setting& row : setting_table())
    if (std::find(keys.begin(), keys.end(), row.key) != keys.end()) add_setting_flag(app, row, c);
}

}  // namespace ember::imdb
