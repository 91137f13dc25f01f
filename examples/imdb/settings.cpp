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
#include "examples/imdb/truncation.h"

namespace ember::imdb {

namespace {

// Numbers in metadata: the shortest text that reads back as the same double.
std::string exact(double v) { return fmt::format("{}", v); }

}  // namespace

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
  auto in = [](const char* name, int64_t value, int64_t min, int64_t max) {
    EMBER_CHECK(value >= min && value <= max, "setting {} = {} is out of range [{}, {}]", name, value, min, max);
  };
  auto real_in = [](const char* name, double value, double min, double max) {
    EMBER_CHECK(value >= min && value <= max, "setting {} = {} is out of range [{}, {}]", name, value, min, max);
  };
  in("heads", model.heads, 1, limits::max_heads);
  in("layers", model.layers, 0, limits::max_layers);
  in("dim", model.dim, 1, limits::max_dim);
  in("ffn", model.ffn_dim, 1, limits::max_ffn);
  in("max_len", model.max_len, 1, limits::max_len);
  in("vocab_size", model.vocab_size, 2, limits::max_vocab_words + 2);
  in("classes", model.classes, 2, 2);  // the trainer's models tell negative from positive
  real_in("dropout", model.dropout, 0.0, 0.99);
  in("vocab_words", vocab_words, 1, limits::max_vocab_words);
  in("batch_size", batch_size, 1, limits::max_batch_size);
  in("epochs", epochs, 1, limits::max_epochs);
  real_in("lr", lr, 0.0, 10.0);
  real_in("weight_decay", weight_decay, 0.0, 10.0);
  real_in("warmup", warmup, 0.0, 1.0);
  real_in("clip", clip, 0.0, 1e9);
  in("threads", threads, 0, limits::max_threads);
  in("limit", limit, 0, limits::max_reviews);
  in("validation", validation, 0, limits::max_reviews);
  in("save_every", save_every, 0, limits::max_reviews);
  in("stop_after", stop_after, 0, limits::max_reviews);
  in("log_every", log_every, 1, limits::max_reviews);
  in("bucket_kb", bucket_kb, 1, limits::max_bucket_kb);
  in("length_buckets", length_buckets, 0, limits::max_reviews);
  real_in("dist_timeout", dist_timeout, 0.0, limits::max_dist_timeout);
  EMBER_CHECK(schedule == "linear" || schedule == "cosine" || schedule == "constant",
              "setting schedule = '{}': expected linear, cosine or constant", schedule);
  EMBER_CHECK(precision == "fp32" || precision == "bf16", "setting precision = '{}': expected fp32 or bf16", precision);
  EMBER_CHECK(cuda_graph.empty() || cuda_graph == "on" || cuda_graph == "off",
              "setting cuda_graph = '{}': expected on or off", cuda_graph.substr(0, 40));
  EMBER_CHECK(model.dim % model.heads == 0, "setting dim = {} is not divisible by heads = {}", model.dim, model.heads);
  EMBER_CHECK(is_truncation(truncate), "setting truncate = '{}': expected head, tail or head+tail", truncate);
  in("attention window", model.attention_window, -1, model.max_len);
  in("attention global", model.attention_global, 0, model.max_len);
  EMBER_CHECK(model.attention_window >= 0 || model.attention_global == 0,
              "setting attention: global tokens ({}) need a window (window:W,global:G)", model.attention_global);
}

bool TrainConfig::uses_cuda_graph() const {
  return cuda_graph == "on" || (cuda_graph.empty() && device.rfind("cuda", 0) == 0);
}

std::map<std::string, std::string> TrainConfig::to_metadata() const {
  return {{"vocab_size", std::to_string(model.vocab_size)}, {"max_len", std::to_string(model.max_len)},
          {"dim", std::to_string(model.dim)},               {"heads", std::to_string(model.heads)},
          {"layers", std::to_string(model.layers)},         {"ffn_dim", std::to_string(model.ffn_dim)},
          {"classes", std::to_string(model.classes)},       {"dropout", exact(model.dropout)},
          {"batch_size", std::to_string(batch_size)},       {"epochs", std::to_string(epochs)},
          {"lr", exact(lr)},                                {"weight_decay", exact(weight_decay)},
          {"warmup", exact(warmup)},                        {"schedule", schedule},
          {"clip", exact(clip)},                            {"seed", std::to_string(seed)},
          {"limit", std::to_string(limit)},                 {"vocab_words", std::to_string(vocab_words)},
          {"truncate", truncate},
          {"attention", attention_text({model.attention_window, model.attention_global})},
          {"checkpoint", model.checkpoint ? "1" : "0"},
          {"precision", precision},
          {"length_buckets", std::to_string(length_buckets)},
          {"validation", std::to_string(validation)},
          {"cuda_graph", uses_cuda_graph() ? "on" : "off"}};
}

std::map<std::string, std::string> TrainConfig::shared_settings() const {
  std::map<std::string, std::string> m = to_metadata();
  m["data"] = data;
  m["data_dir"] = data_dir;
  m["out"] = out;
  m["device"] = device;
  m["save_every"] = std::to_string(save_every);
  m["log_every"] = std::to_string(log_every);
  m["stop_after"] = std::to_string(stop_after);
  m["resume"] = resume ? "true" : "false";
  m["init"] = init;
  m["bucket_kb"] = std::to_string(bucket_kb);
  m["overlap"] = overlap ? "true" : "false";
  m["zero"] = zero ? "true" : "false";
  m["dist_timeout"] = exact(dist_timeout);
  return m;
}

TrainConfig TrainConfig::from_metadata(const std::map<std::string, std::string>& m) {
  auto get = [&](const char* key) -> const std::string& {
    auto it = m.find(key);
    EMBER_CHECK(it != m.end(), "checkpoint metadata has no '{}': not a checkpoint written by this trainer", key);
    return it->second;
  };
  auto integer = [&](const char* key, int64_t min, int64_t max) {
    std::optional<int64_t> value = parse_integer(get(key), min, max);
    EMBER_CHECK(value.has_value(), "checkpoint metadata '{}' = '{}' is not an integer in [{}, {}]", key,
                get(key).substr(0, 40), min, max);
    return *value;
  };
  auto real = [&](const char* key, double min, double max) {
    std::optional<double> value = parse_real(get(key), min, max);
    EMBER_CHECK(value.has_value(), "checkpoint metadata '{}' = '{}' is not a number in [{}, {}]", key,
                get(key).substr(0, 40), min, max);
    return *value;
  };
  TrainConfig c;
  c.model.vocab_size = integer("vocab_size", 2, limits::max_vocab_words + 2);
  c.model.max_len = integer("max_len", 1, limits::max_len);
  c.model.dim = integer("dim", 1, limits::max_dim);
  c.model.heads = integer("heads", 1, limits::max_heads);
  c.model.layers = integer("layers", 0, limits::max_layers);
  c.model.ffn_dim = integer("ffn_dim", 1, limits::max_ffn);
  c.model.classes = integer("classes", 2, 2);
  c.model.dropout = real("dropout", 0.0, 0.99);
  c.batch_size = integer("batch_size", 1, limits::max_batch_size);
  c.epochs = integer("epochs", 1, limits::max_epochs);
  c.lr = real("lr", 0.0, 10.0);
  c.weight_decay = real("weight_decay", 0.0, 10.0);
  c.warmup = real("warmup", 0.0, 1.0);
  c.schedule = get("schedule");
  c.clip = real("clip", 0.0, 1e9);
  std::optional<uint64_t> seed = parse_unsigned(get("seed"));
  EMBER_CHECK(seed.has_value(), "checkpoint metadata 'seed' = '{}' is not an unsigned integer", get("seed").substr(0, 40));
  c.seed = *seed;
  c.limit = integer("limit", 0, limits::max_reviews);
  c.vocab_words = integer("vocab_words", 1, limits::max_vocab_words);
  // NOTE: written since issue 15; a file without them is a run of the defaults (head, full, no checkpointing).
  if (m.count("truncate")) c.truncate = get("truncate");
  if (m.count("attention")) {
    std::optional<AttentionSetting> attention = parse_attention(get("attention"), limits::max_len);
    EMBER_CHECK(attention.has_value(), "checkpoint metadata 'attention' = '{}': expected full or window:W[,global:G]",
                get("attention").substr(0, 40));
    c.model.attention_window = attention->window;
    c.model.attention_global = attention->global;
  }
  if (m.count("checkpoint")) {
    EMBER_CHECK(get("checkpoint") == "0" || get("checkpoint") == "1", "checkpoint metadata 'checkpoint' = '{}' is not "
                "0 or 1", get("checkpoint").substr(0, 40));
    c.model.checkpoint = get("checkpoint") == "1";
  }
  if (m.count("precision")) c.precision = get("precision");  // files from before --precision: fp32
  if (m.count("length_buckets")) c.length_buckets = integer("length_buckets", 0, limits::max_reviews);  // or: 0
  if (m.count("validation")) c.validation = integer("validation", 0, limits::max_reviews);  // files from before: 0
  c.cuda_graph = m.count("cuda_graph") ? get("cuda_graph") : "off";  // files from before --cuda-graph: off
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
