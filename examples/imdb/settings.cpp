// Settings: range checks, the metadata text form and its strict parsing, agreement with tensors.
#include "examples/imdb/settings.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "examples/imdb/setting_table.h"

namespace ember::imdb {

std::optional<int64_t> parse_integer(const std::string& text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value, 10);  // no '+', no spaces, no base prefix
  if (text.empty() || error != std::errc() || stop != end || value < min || value > max) return std::nullopt;
  return value;
}

std::optional<uint64_t> parse_unsigned(const std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  if (text.empty() || text[0] == '-') return std::nullopt;
  auto [stop, error] = std::from_chars(text.data(), end, value, 10);
  if (error != std::errc() || stop != end) return std::nullopt;
  return value;
}

namespace {

// The whole text as a double, as std::from_chars reads it: no '+', no spaces, no hexadecimal.
// NOTE: libc++ 16 (clang's standard library) has no std::from_chars of a double (no __cpp_lib_to_chars):
// there std::strtod reads it, refused where from_chars would refuse it.
bool read_double(const std::string& text, double& value) {
#if defined(__cpp_lib_to_chars)
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  return error == std::errc() && stop == end;
#else
  if (text.empty() || text[0] == '+' || std::isspace(static_cast<unsigned char>(text[0])) ||
      text.find_first_of("xX") != std::string::npos)
    return false;
  char* stop = nullptr;
  errno = 0;
  value = std::strtod(text.c_str(), &stop);
  return errno == 0 && stop == text.c_str() + text.size();
#endif
}

}  // namespace

std::optional<double> parse_real(const std::string& text, double min, double max) {
  double value = 0;
  // "nan" and "inf" read: refused below
  if (!read_double(text, value) || !std::isfinite(value) || value < min || value > max) return std::nullopt;
  return value;
}

void TrainConfig::validate() const {
  for (const Setting& row : setting_table()) check_setting(row, *this);
  // Rules between settings.
  EMBER_CHECK(model.dim % model.heads == 0, "setting dim = {} is not divisible by heads = {}", model.dim, model.heads);
  auto in = [](const char* name, int64_t value, int64_t min, int64_t max) {
    EMBER_CHECK(value >= min && value <= max, "setting {} = {} is out of range [{}, {}]", name, value, min, max);
  };
  in("attention window", model.attention_window, -1, model.max_len);
  in("attention global", model.attention_global, 0, model.max_len);
  EMBER_CHECK(model.attention_window >= 0 || model.attention_global == 0,
              "setting attention: global tokens ({}) need a window (window:W,global:G)", model.attention_global);
  EMBER_CHECK(!(resume && overwrite), "--resume continues the run in the output folder and --overwrite replaces it: "
              "give one of them");
}

bool TrainConfig::tests_every_epoch() const { return test == "epoch" || (test == "auto" && validation == 0); }

bool TrainConfig::uses_cuda_graph() const {
  return cuda_graph == "on" || (cuda_graph.empty() && device.rfind("cuda", 0) == 0);
}

std::map<std::string, std::string> TrainConfig::to_metadata() const {
  std::map<std::string, std::string> m;
  for (const Setting& row : setting_table())
    if (row.scope == SettingScope::checkpoint && (row.applies == nullptr || row.applies(*this)))
      m[row.key] = setting_text(row, *this);
  return m;
}

std::map<std::string, std::string> TrainConfig::shared_settings() const {
  std::map<std::string, std::string> m;
  for (const Setting& row : setting_table())
    if (row.scope != SettingScope::local) m[row.key] = setting_text(row, *this);
  return m;
}

TrainConfig TrainConfig::from_metadata(const std::map<std::string, std::string>& m) {
  TrainConfig c;
  for (const Setting& row : setting_table()) {
    if (row.scope != SettingScope::checkpoint) continue;
    const std::optional<std::string> text = recorded_setting(m, row.key);  // a file from before the row: its default
    EMBER_CHECK(text.has_value(), "checkpoint metadata has no '{}': not a checkpoint written by this trainer", row.key);
    read_setting_text(row, c, *text);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("checkpoint metadata: {}", e.what());
  }
  return c;
}

void check_settings_match_tensors(const nn::ClassifierConfig& model, const std::map<std::string, Tensor>& tensors,
                                  const std::string& path) {
  auto shape_of = [&](const std::string& name) -> const std::vector<int64_t>& {
    auto it = tensors.find(name);
    EMBER_CHECK(it != tensors.end(), "{}: the model has no tensor '{}'", path, name);
    return it->second.shape();
  };
  auto expect = [&](const std::string& name, const std::vector<int64_t>& shape, const char* what) {
    EMBER_CHECK(shape_of(name) == shape, "{}: tensor '{}' has shape {}, but the settings ({}) make it {}", path, name,
                shape_str(shape_of(name)), what, shape_str(shape));
  };
  expect("token_embedding.weight", {model.vocab_size, model.dim}, "vocab_size, dim");
  expect("position_embedding.weight", {model.max_len, model.dim}, "max_len, dim");
  expect("head.weight", {model.classes, model.dim}, "classes, dim");
  // The blocks present must be exactly blocks.0 .. blocks.<layers - 1>.
  std::set<int64_t> blocks;
  for (const auto& [name, t] : tensors) {
    if (name.rfind("blocks.", 0) != 0) continue;
    const std::string number = name.substr(7, name.find('.', 7) - 7);
    std::optional<int64_t> index = parse_integer(number, 0, limits::max_layers);
    EMBER_CHECK(index.has_value() && *index < model.layers, "{}: tensor '{}' is not a block of a {}-layer model", path,
                name, model.layers);
    blocks.insert(*index);
  }
  EMBER_CHECK(int64_t(blocks.size()) == model.layers, "{}: the settings say {} layers but the file has {} blocks",
              path, model.layers, blocks.size());
  for (int64_t b = 0; b < model.layers; ++b)
    expect("blocks." + std::to_string(b) + ".fc1.weight", {model.ffn_dim, model.dim}, "ffn_dim, dim");
}

}  // namespace ember::imdb
