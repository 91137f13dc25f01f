// The training settings' table (examples/imdb/setting_table.h) walked row by row: each flag is in
// `imdb train --help`, each checkpoint setting round-trips through to_metadata / from_metadata, and
// a value out of range is refused by the flag and by the metadata (or validate) with the same range.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/error.h"
#include "examples/imdb/setting_table.h"
#include "examples/imdb/settings.h"
#include "examples/imdb/training_flags.h"
#include "tests/helpers.h"

using namespace ember;
using namespace ember::imdb;
using ember::testing::check_error;

namespace {

// The flag as typed: "--no-overlap{false}" is typed --no-overlap.
std::string typed_flag(const Setting& row) { return row.flag.substr(0, row.flag.find('{')); }

// The CLI's error for `<flag> <value>` on a train command's flags, or nullopt if it is accepted.
std::optional<std::string> flag_error(const Setting& row, const std::string& value) {
  CLI::App app;
  TrainConfig c;
  add_training_flags(app, c, "runs/test");
  std::vector<std::string> args{value, typed_flag(row)};  // CLI11 takes the arguments last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// from_metadata's error for a checkpoint whose `row.key` is `text`, or nullopt if it loads.
std::optional<std::string> metadata_error(const Setting& row, const std::string& text) {
  std::map<std::string, std::string> meta = TrainConfig().to_metadata();
  meta[row.key] = text;
  try {
    TrainConfig::from_metadata(meta);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// validate()'s error for the row's member set to `value`, or nullopt if it passes (a setting not
// in the metadata is checked there).
std::optional<std::string> validate_error(const Setting& row, double value) {
  TrainConfig c;
  std::visit(
      [&](auto get) {
        auto& member = get(c);
        using T = std::decay_t<decltype(member)>;
        if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) member = static_cast<T>(value);
      },
      row.member);
  try {
    c.validate();
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// Texts of the row's kind that are valid and, but for a row with one value, not the default's.
std::vector<std::string> other_values(const Setting& row) {
  switch (row.kind) {
    case SettingKind::integer:
      if (row.min == row.max) return {std::to_string(row.min)};
      return {std::to_string(row.min), std::to_string(row.max), std::to_string(row.min + 1)};
    case SettingKind::real: return {fmt::format("{}", row.real_min), fmt::format("{}", row.real_max)};
    case SettingKind::unsigned_integer: return {std::to_string(std::numeric_limits<uint64_t>::max())};
    case SettingKind::choice: return row.choices;
    case SettingKind::text: return {"some/other/text"};
    case SettingKind::on_off: return row.choices;
    case SettingKind::custom: return row.key == "bigram_hash" ? std::vector<std::string>{"pair", "ngram"}
                                                                : std::vector<std::string>{"window:8,global:1"};
  }
  return {};
}

// Settings where the row applies (is recorded in a checkpoint): the defaults, with bigrams for their hash's row.
TrainConfig applying(const Setting& row) {
  TrainConfig c;
  if (row.key == "bigram_hash") c.model.bigram_buckets = 8;
  REQUIRE((row.applies == nullptr || row.applies(c)));
  return c;
}

}  // namespace

TEST_CASE("setting table: keys and flags are unique, every row is complete") {
  std::map<std::string, int> keys, flags;
  for (const Setting& row : setting_table()) {
    INFO("setting " << row.key);
    CHECK(++keys[row.key] == 1);
    if (!row.flag.empty()) {
      CHECK(++flags[row.flag] == 1);
      CHECK(row.flag.rfind("--", 0) == 0);
      CHECK_FALSE(row.help.empty());
    } else {
      CHECK(row.scope == SettingScope::checkpoint);  // a setting without a flag comes from a file
    }
    if (row.kind == SettingKind::integer) CHECK(row.min <= row.max);
    if (row.kind == SettingKind::real) CHECK(row.real_min <= row.real_max);
    if (row.kind == SettingKind::choice) CHECK(row.choices.size() >= 2);
    if (row.kind == SettingKind::on_off) CHECK(row.choices.size() == 2);
    if (row.kind == SettingKind::custom) CHECK((row.read && row.write && !row.expected.empty()));
    if (row.before) CHECK(row.scope == SettingScope::checkpoint);
  }
  // What a checkpoint holds and what the ranks share: the rows of those scopes, and nothing else.
  const std::map<std::string, std::string> meta = TrainConfig().to_metadata(), shared = TrainConfig().shared_settings();
  size_t in_checkpoint = 0, not_local = 0;
  for (const Setting& row : setting_table()) {
    const bool recorded = row.scope == SettingScope::checkpoint && (row.applies == nullptr || row.applies(TrainConfig()));
    in_checkpoint += recorded;
    not_local += row.scope != SettingScope::local;
    CHECK(meta.count(row.key) == (recorded ? 1 : 0));
    if (row.applies != nullptr) CHECK(applying(row).to_metadata().count(row.key) == 1);  // where it applies
    CHECK(shared.count(row.key) == (row.scope != SettingScope::local ? 1 : 0));
  }
  CHECK(meta.size() == in_checkpoint);
  CHECK(shared.size() == not_local);
  CHECK(shared.count("threads") == 0);
  CHECK(shared.count("quiet") == 0);
  CHECK(meta.count("ffn_dim") == 1);
}

TEST_CASE("setting table: every row's flag is in imdb train --help, with its help and default") {
  CLI::App app;
  TrainConfig c;
  add_training_flags(app, c, "runs/imdb");
  const std::string help = app.help();
  int with_flag = 0;
  for (const Setting& row : setting_table()) {
    if (row.flag.empty()) continue;
    ++with_flag;
    INFO("flag " << row.flag);
    CHECK(help.find("  " + row.flag + " ") != std::string::npos);  // as declared: --help shows --no-overlap{false}
    CHECK(help.find(row.help) != std::string::npos);
    if (row.kind == SettingKind::integer) CHECK(help.find(fmt::format("[{}, {}]", row.min, row.max)) != std::string::npos);
  }
  CHECK(with_flag > 30);
  // The default shown after the type, in whatever layout the CLI11 version prints it (2.3: "INT:[1, 1024]=4",
  // 2.4: "INT:[1, 1024] [4]"): the option's recorded default, and the help line that shows it.
  struct Shown {
    std::string flag, type, default_value;
  };
  for (const Shown& shown : {Shown{"--heads", "INT:[1, 1024]", "4"},
                             Shown{"--attention", "TEXT:full|window:W[,global:G]", "full"}}) {
    INFO("flag " << shown.flag);
    const CLI::Option* option = app.get_option(shown.flag);
    CHECK(option->get_type_name() == shown.type);
    CHECK(option->get_default_str() == shown.default_value);
    const std::string declared = "  " + shown.flag + " " + shown.type;
    const size_t at = help.find(declared);
    REQUIRE(at != std::string::npos);
    const size_t rest = at + declared.size();
    CHECK(help.substr(rest, help.find('\n', rest) - rest).find(shown.default_value) != std::string::npos);
  }
  CHECK(help.find("--preset NAME") != std::string::npos);
}

TEST_CASE("setting table: each checkpoint setting round-trips through to_metadata and from_metadata") {
  for (const Setting& row : setting_table()) {
    if (row.scope != SettingScope::checkpoint) continue;
    INFO("setting " << row.key);
    const std::map<std::string, std::string> defaults = applying(row).to_metadata();
    int changed = 0;
    for (const std::string& text : other_values(row)) {
      INFO("text " << text);
      TrainConfig c = applying(row);
      read_setting_text(row, c, text);
      if (row.key == "dim") c.model.heads = 1;  // any width divides into 1 head
      try {
        c.validate();
      } catch (const Error&) {
        continue;  // e.g. a window longer than max_len: not a value to round-trip alone
      }
      const std::map<std::string, std::string> meta = c.to_metadata();
      CHECK(meta.at(row.key) == text);
      CHECK(TrainConfig::from_metadata(meta).to_metadata() == meta);
      changed += text != defaults.at(row.key);
    }
    if (row.key != "classes") CHECK(changed > 0);  // classes has one value, 2
    if (row.before) {  // a file written before the row existed: the row's default
      std::map<std::string, std::string> old = defaults;
      old.erase(row.key);
      CHECK(TrainConfig::from_metadata(old).to_metadata().at(row.key) == *row.before);
    } else {
      std::map<std::string, std::string> broken = defaults;
      broken.erase(row.key);
      check_error([&] { TrainConfig::from_metadata(broken); }, "checkpoint metadata has no '" + row.key + "'");
    }
  }
}

TEST_CASE("setting table: recorded_setting reads a file's entry, else what a file from before the row means") {
  const std::map<std::string, std::string> meta = {{"truncate", "tail"}, {"lr", "0.002"}, {"mask_rates", "x"}};
  CHECK(recorded_setting(meta, "truncate") == std::optional<std::string>("tail"));  // recorded: as written
  CHECK(recorded_setting(meta, "lr") == std::optional<std::string>("0.002"));
  CHECK(recorded_setting(meta, "mask_rates") == std::optional<std::string>("x"));  // a key of no row, recorded
  CHECK(recorded_setting({}, "bigram_buckets") == std::optional<std::string>("0"));  // added later: its before
  CHECK(recorded_setting({}, "encoder_lr_scale") == std::optional<std::string>("1"));
  CHECK(recorded_setting({}, "truncate") == std::optional<std::string>("head"));
  CHECK_FALSE(recorded_setting({}, "lr").has_value());          // every file records it
  CHECK_FALSE(recorded_setting({}, "mask_rates").has_value());  // no row: nothing to fall back on
}

TEST_CASE("setting table: a value out of range is refused by the flag and by the metadata, with the same range") {
  for (const Setting& row : setting_table()) {
    INFO("setting " << row.key);
    std::vector<std::string> bad;
    std::string range;  // in both messages
    switch (row.kind) {
      case SettingKind::integer:
        range = fmt::format("[{}, {}]", row.min, row.max);
        bad = {std::to_string(row.min - 1), std::to_string(row.max + 1), "1e3", "12abc", "3.5", ""};
        break;
      case SettingKind::real:
        range = fmt::format("[{}, {}]", row.real_min, row.real_max);
        bad = {fmt::format("{}", row.real_min - 1), fmt::format("{}", row.real_max * 2 + 1), "nan", "inf", "1x"};
        break;
      case SettingKind::unsigned_integer: bad = {"-1", "18446744073709551616", "+1"}; break;
      case SettingKind::choice: bad = {"bogus"}; break;
      case SettingKind::on_off: bad = {"maybe"}; break;
      case SettingKind::custom: bad = {"window:x", "sometimes"}; break;
      case SettingKind::text: continue;  // any text (a path; --device is checked where it is used)
    }
    for (const std::string& text : bad) {
      INFO("text '" << text << "'");
      if (!row.flag.empty() && row.kind != SettingKind::on_off && !text.empty()) {
        std::optional<std::string> error = flag_error(row, text);
        REQUIRE(error.has_value());
        CHECK(error->find(typed_flag(row)) != std::string::npos);
        CHECK(error->find(range) != std::string::npos);
      }
      if (row.scope != SettingScope::checkpoint) continue;  // below: validate()
      std::optional<std::string> error = metadata_error(row, text);
      REQUIRE(error.has_value());
      CHECK(error->find(row.key) != std::string::npos);
      CHECK(error->find(range) != std::string::npos);
    }
    // validate() refuses the number out of range in a TrainConfig made in code (and from a file).
    if (row.kind == SettingKind::integer || row.kind == SettingKind::real) {
      const double low = row.kind == SettingKind::integer ? double(row.min) : row.real_min;
      const double high = row.kind == SettingKind::integer ? double(row.max) : row.real_max;
      for (double value : {low - 1, high * 2 + 1}) {
        INFO("value " << value);
        std::optional<std::string> error = validate_error(row, value);
        REQUIRE(error.has_value());
        CHECK(error->find("setting " + row.key + " = ") != std::string::npos);
        CHECK(error->find("out of range " + range) != std::string::npos);
      }
    }
  }
}

TEST_CASE("setting table: the flags set the members of their rows") {
  CLI::App app;
  TrainConfig c;
  add_training_flags(app, c, "runs/imdb");
  app.parse("--heads 8 --ffn 64 --attention window:16,global:2 --checkpoint --no-overlap --seed 9 --dropout 0.25 "
            "--truncate tail --cuda-graph on --threads 3 --quiet",
            false);
  CHECK(c.model.heads == 8);
  CHECK(c.model.ffn_dim == 64);
  CHECK(c.model.attention_window == 16);
  CHECK(c.model.attention_global == 2);
  CHECK(c.model.checkpoint);
  CHECK_FALSE(c.overlap);
  CHECK(c.seed == 9);
  CHECK(c.model.dropout == 0.25);
  CHECK(c.truncate == "tail");
  CHECK(c.cuda_graph == "on");
  CHECK(c.threads == 3);
  CHECK(c.quiet);
  CHECK(c.out == "runs/imdb");
}

TEST_CASE("setting table: a number with leading zeros is decimal, as the range check read it") {
  CLI::App app;
  TrainConfig c;
  add_training_flags(app, c, "runs/imdb");
  // CLI11 alone converts "010" as octal (8), after the range check accepted it as 10.
  app.parse("--heads 010 --layers 07 --seed 0010", false);
  CHECK(c.model.heads == 10);
  CHECK(c.model.layers == 7);
  CHECK(c.seed == 10);
}
