// The training settings as one table: a row per setting holds its metadata key, its flag, its help,
// its kind and range, how to reach its TrainConfig member, and where it goes (a checkpoint's
// metadata, the settings every rank shares). The flags (training_flags.cpp), TrainConfig::validate,
// to_metadata, from_metadata and shared_settings all loop over the rows: a new setting is its
// member in TrainConfig and one row in setting_table.cpp.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "examples/imdb/settings.h"

namespace ember::imdb {

enum class SettingKind {
  integer,           // a decimal integer in [min, max] (an int64_t or int member)
  real,              // a finite number in [real_min, real_max] (a double member)
  unsigned_integer,  // any uint64_t (--seed)
  choice,            // one of `choices` (a std::string member)
  text,              // any text (paths, --device: checked where they are used)
  on_off,            // a bool: the flag given or not; its text is choices[1] (true) or choices[0] (false)
  custom,            // read by `read` and written by `write` (--attention: window:W[,global:G])
};

enum class SettingScope {
  checkpoint,  // in a checkpoint's metadata (what --resume must match), and shared by the ranks
  shared,      // not in the checkpoint, but every rank of a job must have the same (checked at start-up)
  local,       // this process's own (--threads, --quiet)
};

// How a row reaches its member: a function returning a reference to it (model.* members included).
using SettingMember = std::variant<int64_t& (*)(TrainConfig&), int& (*)(TrainConfig&), uint64_t& (*)(TrainConfig&),
                                   double& (*)(TrainConfig&), std::string& (*)(TrainConfig&), bool& (*)(TrainConfig&)>;

struct Setting {
  std::string key;   // the metadata and shared-settings key, and the name in validate()'s errors
  std::string flag;  // the command-line flag (CLI11's form: "--no-overlap{false}"); empty: none
  std::string help;  // the flag's --help text
  SettingKind kind = SettingKind::text;
  SettingScope scope = SettingScope::checkpoint;
  SettingMember member;               // unused by custom rows (read, write)
  int64_t min = 0, max = 0;           // integer
  double real_min = 0, real_max = 0;  // real
  std::vector<std::string> choices;   // choice: the values; on_off: {text of false, text of true}
  bool may_be_empty = false;          // choice: the empty text too (--cuda-graph unset: decided by --device)
  bool help_shows_default = true;     // --help shows the default (for a custom row: write's text)
  // A checkpoint row added after files were written: the text such a file means (nullopt: every file has it).
  std::optional<std::string> before;
  // A checkpoint row recorded only where it applies (a file without it reads `before`); nullptr: in every file.
  bool (*applies)(const TrainConfig&) = nullptr;
  // custom (write also for a row whose metadata text is not its member's: --cuda-graph as it applies).
  std::string (*write)(const TrainConfig&) = nullptr;
  bool (*read)(TrainConfig&, const std::string&) = nullptr;  // false: not valid text
  std::string expected;       // custom: valid text, for the metadata's error ("full or window:W[,global:G]")
  std::string flag_expected;  // custom: the same, for the flag's error (with the ranges)
  std::string flag_check_name;  // custom: the validator's name in --help ("full|window:W[,global:G]")
};

// Every row, in the order of the flags in --help.
const std::vector<Setting>& setting_table();

// The row's value as text (in metadata and shared settings).
std::string setting_text(const Setting& row, const TrainConfig& c);
// Reads `text` (the metadata's) into c's member, checking what the kind checks at once (integer,
// real and unsigned ranges, on_off, custom); choice and text are stored as given (validate checks a
// choice). Throws ember::Error naming the key, the text and the range.
void read_setting_text(const Setting& row, TrainConfig& c, const std::string& text);
// A setting's text as a file records it: the metadata's entry, or for a row added after the file was written,
// the text such a file means (`before`); nullopt when the file lacks a row every file has (or no row is `key`).
std::optional<std::string> recorded_setting(const std::map<std::string, std::string>& metadata, const std::string& key);
// validate()'s check of one row (integer and real ranges, choices): throws ember::Error "setting
// <key> = <value> ...".
void check_setting(const Setting& row, const TrainConfig& c);

}  // namespace ember::imdb
