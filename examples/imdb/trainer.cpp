// The IMDb trainer: data preparation, the training loop, evaluation, checkpoints and prediction.
#include "examples/imdb/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/distributed/agreement.h"
#include "core/distributed/nccl.h"
#include "core/distributed/world.h"
#include "core/file_io.h"
#include "core/parallel.h"
#include "examples/imdb/dataset.h"
#include "examples/imdb/progress.h"
#include "examples/imdb/report.h"
#include "nn/checkpoint.h"
#include "nn/data_parallel.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/sharded_adamw.h"

namespace ember::imdb {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

// The first n/2 negative and n/2 positive reviews, in their original order.
std::vector<Review> balanced_prefix(const std::vector<Review>& reviews, int64_t n) {
  std::vector<Review> out;
  int64_t want[2] = {n / 2, n - n / 2}, have[2] = {0, 0};
  for (const Review& r : reviews)
    if (have[r.label] < want[r.label]) {
      out.push_back(r);
      ++have[r.label];
    }
  return out;
}

std::vector<std::vector<int32_t>> encode(const Vocabulary& vocabulary, const std::vector<Review>& reviews,
                                         int64_t max_len) {
  auto encoded = vocabulary.encode_all(reviews, max_len);
  // NOTE: a review with no tokens would leave attention nothing to attend to: give it one [UNK].
  for (auto& ids : encoded)
    if (ids.empty()) ids.push_back(Vocabulary::unk_id);
  return encoded;
}

}  // namespace

std::vector<optim::ParamGroup> parameter_groups(const nn::Module& model, double weight_decay) {
  optim::ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (auto& [name, p] : model.named_parameters()) {
    bool is_matrix = p.dim() >= 2 && name.find("embedding") == std::string::npos;
    (is_matrix ? decay : no_decay).params.push_back(p);
  }
  return {decay, no_decay};
}

namespace {

std::string json_line(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out = "{";
  for (size_t i = 0; i < fields.size(); ++i)
    out += fmt::format("{}\"{}\": {}", i ? ", " : "", fields[i].first, fields[i].second);
  return out + "}\n";
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "null"; }

// On resume: keeps only the complete lines of metrics.jsonl that the checkpoint at `step`
// covers. A run killed after logging steps it never checkpointed (or part-way through a
// line) would otherwise leave them twice, or a broken line, once the resumed run appends.
void trim_metrics(const std::string& path, int64_t step) {
  std::error_code error;
  if (!fs::exists(path, error)) return;
  std::string text = read_whole_file(path, "metrics file");
  std::string kept;
  std::istringstream lines(text);
  std::string line;
  size_t consumed = 0;
  while (std::getline(lines, line)) {
    consumed += line.size() + 1;
    if (consumed > text.size()) break;  // the last line has no newline: cut off by a crash
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object() || !record.contains("step") ||
        !record["step"].is_number_integer())
      continue;
    if (record["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  write_file_atomically(path, kept);
}

void check_output_folder(const std::string& out) {
  std::error_code error;
  fs::create_directories(out, error);
  EMBER_CHECK(!error, "cannot create output folder '{}': {}", out, error.message());
  std::string probe = out + "/.ember-write-test";
  {
    std::ofstream f(probe);
    EMBER_CHECK(f.good(), "output folder '{}' is not writable", out);
  }
  fs::remove(probe, error);
}

}  // namespace

// ---- Settings <-> checkpoint metadata

std::map<std::string, std::string> TrainConfig::to_metadata() const {
  return {{"vocab_size", std::to_string(model.vocab_size)}, {"max_len", std::to_string(model.max_len)},
          {"dim", std::to_string(model.dim)},               {"heads", std::to_string(model.heads)},
          {"layers", std::to_string(model.layers)},         {"ffn_dim", std::to_string(model.ffn_dim)},
          {"classes", std::to_string(model.classes)},       {"dropout", num(model.dropout)},
          {"batch_size", std::to_string(batch_size)},       {"epochs", std::to_string(epochs)},
          {"lr", num(lr)},                                  {"weight_decay", num(weight_decay)},
          {"warmup", num(warmup)},                          {"schedule", schedule},
          {"clip", num(clip)},                              {"seed", std::to_string(seed)},
          {"limit", std::to_string(limit)},                 {"vocab_words", std::to_string(vocab_words)}};
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
  m["bucket_kb"] = std::to_string(bucket_kb);
  m["overlap"] = overlap ? "true" : "false";
  m["zero"] = zero ? "true" : "false";
  m["dist_timeout"] = num(dist_timeout);
  return m;
}

TrainConfig TrainConfig::from_metadata(const std::map<std::string, std::string>& m) {
  auto get = [&](const char* key) -> const std::string& {
    auto it = m.find(key);
    EMBER_CHECK(it != m.end(), "checkpoint metadata has no '{}': not a checkpoint written by this trainer", key);
    return it->second;
  };
  auto integer = [&](const char* key) {
    try {
      return std::stoll(get(key));
    } catch (const std::logic_error&) {
      fail("checkpoint metadata '{}' = '{}' is not an integer", key, get(key));
    }
  };
  auto real = [&](const char* key) {
    try {
      return std::stod(get(key));
    } catch (const std::logic_error&) {
      fail("checkpoint metadata '{}' = '{}' is not a number", key, get(key));
    }
  };
  TrainConfig c;
  c.model.vocab_size = integer("vocab_size");
  c.model.max_len = integer("max_len");
  c.model.dim = integer("dim");
  c.model.heads = integer("heads");
  c.model.layers = integer("layers");
  c.model.ffn_dim = integer("ffn_dim");
  c.model.classes = integer("classes");
  c.model.dropout = real("dropout");
  c.batch_size = integer("batch_size");
  c.epochs = integer("epochs");
  c.lr = real("lr");
  c.weight_decay = real("weight_decay");
  c.warmup = real("warmup");
  c.schedule = get("schedule");
  c.clip = real("clip");
  c.seed = uint64_t(integer("seed"));
  c.limit = integer("limit");
  c.vocab_words = integer("vocab_words");
  return c;
}

// ---- Data

Data prepare_data(const TrainConfig& config, const Vocabulary* vocabulary) {
  std::string path = config.data;
  if (path.empty()) path = ensure_imdb_downloaded(config.data_dir.empty() ? default_data_dir() : config.data_dir);
  ImdbSplit split = load_imdb(path);
  if (config.limit > 0) {
    split.train = balanced_prefix(split.train, config.limit);
    split.test = balanced_prefix(split.test, config.limit);
  }
  Data data{vocabulary ? *vocabulary : Vocabulary::build(split.train, config.vocab_words), {}, {}, {}, {}};
  data.train_tokens = encode(data.vocabulary, split.train, config.model.max_len);
  data.test_tokens = encode(data.vocabulary, split.test, config.model.max_len);
  data.train_labels = labels_of(split.train);
  data.test_labels = labels_of(split.test);
  return data;
}

Device checked_device(const std::string& name) {
  Device device = Device::parse(name);
  if (device.is_cuda()) {
    const int count = cuda_device_count();
    EMBER_CHECK(device.index < count, "--device {}: {}", name,
                count == 0 ? std::string("no CUDA device is available (no NVIDIA GPU or driver here, or Ember was built "
                                         "without CUDA)")
                           : fmt::format("there are only {} CUDA devices", count));
  }
  return device;
}

BatchTensors to_tensors(const Batch& batch, Device device) {
  BatchTensors t;
  t.tokens = from_vector(batch.tokens, {batch.batch, batch.seq_len});
  t.padding_mask = Tensor::empty({batch.batch, batch.seq_len}, Dtype::Bool);
  bool* mask = t.padding_mask.data<bool>();
  for (size_t i = 0; i < batch.key_mask.size(); ++i) mask[i] = batch.key_mask[i] == 0;
  t.labels = from_vector(batch.labels, {batch.batch});
  if (!device.is_cpu()) {
    t.tokens = t.tokens.to(device);
    t.padding_mask = t.padding_mask.to(device);
    t.labels = t.labels.to(device);
  }
  return t;
}

// ---- Evaluation

double evaluate(nn::TransformerClassifier& model, const std::vector<std::vector<int32_t>>& reviews,
                const std::vector<int>& labels, int64_t batch_size, distributed::ProcessGroup* world) {
  if (reviews.empty()) return 0.0;
  const int rank = world != nullptr ? world->rank() : 0, ranks = world != nullptr ? world->size() : 1;
  NoGradGuard no_grad;
  bool was_training = model.is_training();
  model.eval();
  // Sorted by length so that batches carry little padding (padding never changes a prediction).
  std::vector<int64_t> order = in_order(int64_t(reviews.size()));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return reviews[a].size() < reviews[b].size(); });
  Batcher batcher(reviews, labels, batch_size);
  const Device device = model.parameters().front().device();
  int64_t correct = 0;
  for (int64_t b = rank; b < batcher.num_batches(); b += ranks) {  // whole batches, shared out in turn
    BatchTensors t = to_tensors(batcher.batch(order, b), device);
    Tensor predicted = argmax(model.forward(t.tokens, t.padding_mask), 1);
    correct += int64_t(sum(eq(predicted, t.labels).to(Dtype::Float64)).item<double>());
  }
  model.train(was_training);
  if (ranks > 1) {
    Tensor count = from_vector(std::vector<int64_t>{correct});
    world->all_reduce(count, distributed::ReduceOp::Sum);
    correct = count.item<int64_t>();
  }
  return double(correct) / double(reviews.size());
}

// ---- Checkpoints

namespace {
CheckpointInfo restore_checkpoint(const std::string& path, const nn::TensorMap& state, const nn::Metadata& meta,
                                  nn::TransformerClassifier& model, optim::Optimizer& optimizer) {
  auto field = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    EMBER_CHECK(it != meta.end(), "checkpoint '{}' has no '{}' in its metadata (not a trainer checkpoint?)", path, key);
    return it->second;
  };
  EMBER_CHECK(field("format") == "ember-imdb-checkpoint-v1", "checkpoint '{}' has format '{}', expected "
              "ember-imdb-checkpoint-v1", path, field("format"));
  CheckpointInfo info;
  try {
    info.step = std::stoll(field("step"));
    info.generator_offset = std::stoull(field("generator_offset"));
  } catch (const std::logic_error&) {
    fail("checkpoint '{}': step '{}' or generator_offset '{}' is not a number", path, field("step"),
         field("generator_offset"));
  }
  EMBER_CHECK(info.step >= 0, "checkpoint '{}': negative step {}", path, info.step);
  try {
    model.load_state_dict(nn::with_prefix_removed(state, "model."));
    optimizer.load_state_dict(nn::with_prefix_removed(state, "optim."));
  } catch (const Error& e) {
    fail("checkpoint '{}': {}", path, e.what());
  }
  return info;
}
}  // namespace

CheckpointInfo check_checkpoint(const std::string& path) {
  nn::Metadata meta;
  nn::TensorMap state = nn::load_tensors(path, &meta);
  CheckpointInfo info;
  info.config = TrainConfig::from_metadata(meta);
  Generator gen(0);
  nn::TransformerClassifier model(info.config.model, gen);
  optim::AdamW optimizer(parameter_groups(model, info.config.weight_decay), info.config.lr);
  CheckpointInfo restored = restore_checkpoint(path, state, meta, model, optimizer);
  info.step = restored.step;
  info.generator_offset = restored.generator_offset;
  return info;
}

// ---- Training

RunResult train(const TrainConfig& config) {
  std::unique_ptr<distributed::ProcessGroup> one = distributed::make_single_process_group();
  return train(config, *one);
}

RunResult train(const TrainConfig& config, const Data& data) {
  std::unique_ptr<distributed::ProcessGroup> one = distributed::make_single_process_group();
  return train(config, data, *one);
}

RunResult train(const TrainConfig& config, distributed::ProcessGroup& world) {
  distributed::check_same_settings(world, config.shared_settings());  // before anything slow
  distributed::on_root(world, [&] { check_output_folder(config.out); });
  checked_device(config.device);  // before the data is loaded: a missing GPU fails at once
  if (!config.quiet && world.rank() == 0) fmt::print(stderr, "Loading IMDb...\n");
  // Rank 0 downloads first (when --data is not given); the others then find the download cached.
  if (config.data.empty() && world.size() > 1)
    distributed::on_root(world, [&] {
      ensure_imdb_downloaded(config.data_dir.empty() ? default_data_dir() : config.data_dir);
    });
  Data data = prepare_data(config);
  return train(config, data, world);
}

namespace {

// The checkpoint's metadata, from rank 0 to every rank (as JSON text).
nn::Metadata broadcast_metadata(distributed::ProcessGroup& world, const nn::Metadata& meta) {
  std::string text = distributed::broadcast_string(world, nlohmann::json(meta).dump());
  return nlohmann::json::parse(text).get<nn::Metadata>();
}

}  // namespace

RunResult train(const TrainConfig& config_in, const Data& data, distributed::ProcessGroup& world) {
  TrainConfig config = config_in;
  config.model.vocab_size = data.vocabulary.size();
  const bool lead = world.rank() == 0;  // prints, and writes every file
  if (!lead) config.quiet = true;
  distributed::check_same_settings(world, config.shared_settings());
  Device device = checked_device(config.device);
  // Under mpirun, "cuda" is each rank's own GPU: cuda:(local rank % GPUs).
  if (device.is_cuda() && world.size() > 1 && config.device == "cuda")
    device = distributed::device_for_local_rank(distributed::launch_info().local_rank);
  EMBER_CHECK(config.batch_size > 0 && config.epochs > 0, "train: batch size and epochs must be positive");
  if (config.threads > 0) {
    set_num_threads(config.threads);
  } else if (world.size() > 1) {  // the ranks on this machine share its cores
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    set_num_threads(std::max(1, cores / std::max(1, distributed::launch_info().local_size)));
  }
  distributed::on_root(world, [&] {
    check_output_folder(config.out);
    data.vocabulary.save(config.out + "/vocab.txt");
  });

  Generator gen(config.seed);  // initialisation, then dropout masks
  nn::TransformerClassifier model(config.model, gen);
  model.to(device);  // initialised on the CPU, so the same seed gives the same weights on every device
  // Gradients travel over MPI between CPUs, over NCCL between GPUs (its id sent over MPI).
  std::unique_ptr<distributed::ProcessGroup> nccl;
  distributed::ProcessGroup* group = &world;
  if (device.is_cuda() && world.size() > 1) {
    nccl = distributed::make_nccl_group(world, device, config.dist_timeout);
    group = nccl.get();
  }
  std::unique_ptr<optim::Optimizer> optimizer;
  if (config.zero)  // ZeRO-1: clips by the global norm itself, over every rank's shard
    optimizer = std::make_unique<optim::ShardedAdamW>(parameter_groups(model, config.weight_decay), *group, config.lr,
                                                      config.clip);
  else
    optimizer = std::make_unique<optim::AdamW>(parameter_groups(model, config.weight_decay), config.lr);
  Batcher batcher(data.train_tokens, data.train_labels, config.batch_size);
  const int64_t steps_per_epoch = batcher.num_batches();
  const int64_t total_steps = steps_per_epoch * config.epochs;
  optim::Schedule schedule{optim::parse_schedule(config.schedule), config.lr,
                           int64_t(std::llround(config.warmup * double(total_steps))), total_steps};

  RunResult result;
  result.parameters = model.num_parameters();
  const std::string checkpoint_path = config.out + "/checkpoint.safetensors";
  int64_t step = 0;
  if (config.resume) {
    // Rank 0 reads and checks the checkpoint; every rank loads what it read. The checkpoint holds
    // whole tensors (the optimiser's too, under ZeRO-1): any number of ranks can resume it.
    nn::Metadata meta;
    nn::TensorMap state;
    distributed::on_root(world, [&] {
      state = nn::load_tensors(checkpoint_path, &meta);
      TrainConfig saved = TrainConfig::from_metadata(meta);
      EMBER_CHECK(saved.to_metadata() == config.to_metadata(), "resume: {} was written with other settings",
                  checkpoint_path);
    });
    if (world.size() > 1) {
      distributed::broadcast_tensors(world, state);
      meta = broadcast_metadata(world, meta);
    }
    // Loaded onto the model's device (load_state_dict copies).
    CheckpointInfo info = restore_checkpoint(checkpoint_path, state, meta, model, *optimizer);
    step = info.step;
    gen.set_state(config.seed, info.generator_offset);
    if (lead) trim_metrics(config.out + "/metrics.jsonl", step);
  }
  // Rank 0's parameters to every rank (equal already: same seed, same checkpoint); gradients
  // averaged over the ranks during backward. Nothing to send on one process.
  nn::DataParallel dp(model, *group, {.bucket_bytes = config.bucket_kb * 1024, .overlap = config.overlap,
                                      .reduce_gradients = !config.zero});
  std::ofstream metrics;
  if (lead) {
    metrics.open(config.out + "/metrics.jsonl", config.resume ? std::ios::app : std::ios::trunc);
    EMBER_CHECK(metrics.good(), "cannot write {}/metrics.jsonl", config.out);
  }
  // Collective: every rank gathers the state (ZeRO-1's moments live in shards); rank 0 writes it.
  auto save_checkpoint = [&]() {
    if (lead) {  // every step the checkpoint covers is in metrics.jsonl first (a resume keeps exactly those)
      metrics.flush();
      EMBER_CHECK(metrics.good(), "cannot write {}/metrics.jsonl", config.out);
    }
    if (world.size() > 1) dp.check_replicas_agree();
    nn::Metadata meta = config.to_metadata();
    meta["format"] = "ember-imdb-checkpoint-v1";
    meta["step"] = std::to_string(step);
    meta["generator_offset"] = std::to_string(gen.offset());
    nn::TensorMap state = nn::with_prefix_added(model.state_dict(), "model.");
    for (auto& [name, t] : nn::with_prefix_added(optimizer->state_dict(), "optim.")) state.emplace(name, t);
    if (lead) nn::save_tensors(checkpoint_path, state, meta);
  };

  if (!config.quiet)
    fmt::print(stderr, "Model: {} heads, {} layers, dim {}, {} parameters; {} train / {} test reviews; {} steps; {}{} threads\n",
               config.model.heads, config.model.layers, config.model.dim, result.parameters, data.train_tokens.size(),
               data.test_tokens.size(), total_steps,
               world.size() > 1 ? fmt::format("{} ranks ({}{}) x ", world.size(), group->backend(),
                                              config.zero ? ", ZeRO-1" : "") : std::string(),
               num_threads());

  Progress progress(config.quiet ? Progress::Mode::Silent : Progress::detect(), config.log_every);
  const auto run_start = Clock::now();
  while (step < total_steps) {
    const int64_t epoch = step / steps_per_epoch;
    std::vector<int64_t> order = batcher.shuffled_order(config.seed, epoch);
    model.train();
    reset_peak_memory();
    if (device.is_cuda()) reset_peak_memory(device);
    double loss_sum = 0;
    int64_t loss_count = 0, real_tokens = 0, padded_tokens = 0;
    const auto epoch_start = Clock::now();
    progress.start_epoch(epoch + 1, config.epochs, steps_per_epoch);
    for (int64_t b = step % steps_per_epoch; b < steps_per_epoch; ++b) {
      // This rank's rows of the global batch b, padded as the whole batch is; dropout draws by
      // global example (core/random.h, BatchSlice), so the ranks together compute one process's step.
      const int64_t batch_rows = batcher.rows_in(b);
      const distributed::Range rows = distributed::shard_range(batch_rows, world.rank(), world.size());
      Batch batch = batcher.batch_rows(order, b, rows.begin, rows.size());
      if (world.size() > 1) gen.set_batch_slice({batch_rows, rows.begin, rows.size()});
      BatchTensors t = to_tensors(batch, device);
      optimizer->set_lr(schedule.lr_at(step));
      Tensor loss = cross_entropy(model.forward(t.tokens, t.padding_mask), t.labels);
      optimizer->zero_grad();
      // Each rank's mean weighs rows / batch_rows of the whole batch's; DataParallel averages (/ size).
      if (world.size() > 1) (loss * (double(rows.size()) * world.size() / double(batch_rows))).backward();
      else loss.backward();
      dp.synchronize_gradients();
      if (config.clip > 0 && !config.zero) optim::clip_grad_norm(model.parameters(), config.clip);
      optimizer->step();
      ++step;

      double loss_value = loss.item<float>();
      int64_t batch_real_tokens = batch.real_tokens;
      if (world.size() > 1) {  // the whole batch's loss and tokens, for the log
        Tensor sums = from_vector(std::vector<double>{loss_value * double(rows.size()), double(batch.real_tokens)});
        world.all_reduce(sums, distributed::ReduceOp::Sum);
        std::vector<double> totals = sums.to_vector<double>();
        loss_value = totals[0] / double(batch_rows);
        batch_real_tokens = int64_t(totals[1]);
      }
      result.step_losses.push_back(loss_value);
      loss_sum += loss_value;
      ++loss_count;
      real_tokens += batch_real_tokens;
      padded_tokens += batch_rows * batch.seq_len;
      double elapsed = seconds_since(epoch_start);
      progress.update(b + 1, loss_sum / double(loss_count), double(real_tokens) / elapsed, elapsed);
      if (lead)
        metrics << json_line({{"kind", "\"step\""}, {"step", std::to_string(step)}, {"epoch", std::to_string(epoch + 1)},
                              {"loss", fmt::format("{:.9g}", loss_value)}, {"lr", num(optimizer->lr())}});
      if (config.save_every > 0 && step % config.save_every == 0) save_checkpoint();
      if (config.stop_after > 0 && step >= config.stop_after) break;
    }
    const double train_seconds = seconds_since(epoch_start);
    progress.finish_epoch();
    if (config.stop_after > 0 && step >= config.stop_after && step % steps_per_epoch != 0) {
      save_checkpoint();
      if (lead) metrics.flush();
      break;
    }
    const auto eval_start = Clock::now();
    EpochResult er;
    er.epoch = epoch + 1;
    er.train_loss = loss_count ? loss_sum / double(loss_count) : NAN;
    er.test_accuracy = evaluate(model, data.test_tokens, data.test_labels, 64, &world);
    er.seconds = train_seconds;
    er.eval_seconds = seconds_since(eval_start);
    er.real_tokens_per_s = double(real_tokens) / train_seconds;
    er.padded_tokens_per_s = double(padded_tokens) / train_seconds;
    er.peak_bytes = memory_stats().peak_allocated;
    er.peak_rss_bytes = peak_rss_bytes();
    if (device.is_cuda()) {
      MemoryStats gpu = memory_stats(device);
      er.gpu_allocated_bytes = gpu.allocated;
      er.gpu_peak_bytes = gpu.peak_allocated;
      er.gpu_reserved_bytes = gpu.reserved;
    }
    result.epochs.push_back(er);
    if (lead) {
      std::vector<std::pair<std::string, std::string>> fields{
          {"kind", "\"epoch\""}, {"epoch", std::to_string(er.epoch)}, {"step", std::to_string(step)},
          {"train_loss", num(er.train_loss)}, {"test_accuracy", num(er.test_accuracy)},
          {"test_reviews", std::to_string(data.test_tokens.size())},
          {"train_seconds", num(er.seconds)}, {"eval_seconds", num(er.eval_seconds)},
          {"real_tokens_per_s", num(er.real_tokens_per_s)},
          {"padded_tokens_per_s", num(er.padded_tokens_per_s)},
          {"peak_tensor_bytes", std::to_string(er.peak_bytes)},
          {"peak_rss_bytes", std::to_string(er.peak_rss_bytes)}};
      if (world.size() > 1) {  // this rank's share of the communication (nn/data_parallel.h)
        const nn::DataParallelStats& comm = dp.stats();
        fields.push_back({"ranks", std::to_string(world.size())});
        fields.push_back({"allreduce_seconds", num(comm.comm_seconds)});
        fields.push_back({"allreduce_exposed_seconds", num(comm.exposed_seconds)});
        fields.push_back({"allreduce_bytes", std::to_string(comm.bytes)});
      }
      metrics << json_line(fields);
    }
    if (lead && device.is_cuda())
      metrics << json_line({{"kind", "\"gpu_memory\""}, {"epoch", std::to_string(er.epoch)},
                            {"device", "\"" + device.str() + "\""},
                            {"allocated_bytes", std::to_string(er.gpu_allocated_bytes)},
                            {"peak_bytes", std::to_string(er.gpu_peak_bytes)},
                            {"reserved_bytes", std::to_string(er.gpu_reserved_bytes)}});
    if (lead) metrics.flush();
    if (!config.quiet)
      fmt::print(stderr,
                 "epoch {}/{}: train loss {:.4f} | test accuracy {:.2f}% ({} reviews) | {:.1f}s train + {:.1f}s eval | "
                 "{:.0f} real tok/s ({:.0f} padded) | peak {:.0f} MiB tensors, {:.0f} MiB RSS\n",
                 er.epoch, config.epochs, er.train_loss, 100 * er.test_accuracy, data.test_tokens.size(), er.seconds,
                 er.eval_seconds, er.real_tokens_per_s, er.padded_tokens_per_s, er.peak_bytes / 1048576.0,
                 er.peak_rss_bytes / 1048576.0);
    if (!config.quiet && world.size() > 1 && dp.stats().steps > 0)
      fmt::print(stderr, "epoch {}/{}: all-reduce {:.1f} ms per step, {:.0f}% of it hidden behind backward, {:.1f} MB "
                 "per step (rank 0)\n", er.epoch, config.epochs, 1e3 * dp.stats().comm_seconds / double(dp.stats().steps),
                 100 * dp.stats().hidden_share(), double(dp.stats().bytes) / double(dp.stats().steps) / 1e6);
    if (!config.quiet && device.is_cuda())
      fmt::print(stderr, "epoch {}/{}: {} memory: {:.1f} MiB allocated, {:.1f} MiB peak, {:.1f} MiB reserved\n", er.epoch,
                 config.epochs, device.str(), er.gpu_allocated_bytes / 1048576.0, er.gpu_peak_bytes / 1048576.0,
                 er.gpu_reserved_bytes / 1048576.0);
    save_checkpoint();
    if (lead) nn::save_tensors(config.out + "/model.safetensors", model.state_dict(), config.to_metadata());
    if (config.stop_after > 0 && step >= config.stop_after) break;
  }
  result.steps = step;
  result.wall_seconds = seconds_since(run_start);
  if (!lead) return result;
  metrics.flush();
  // The report is a by-product: when it cannot be written, the run has still succeeded.
  try {
    model.to(Device::cpu());  // the report's attention maps are computed on the CPU
    write_run_report(config.out, config, model, data);
    if (!config.quiet) fmt::print(stderr, "Report: {}/report.html\n", config.out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "warning: could not write {}/report.html: {}\n", config.out, e.what());
  }
  return result;
}

// ---- Using a saved run

SavedRun load_run(const std::string& folder) {
  nn::Metadata meta;
  nn::TensorMap weights = nn::load_tensors(folder + "/model.safetensors", &meta);
  SavedRun run{TrainConfig::from_metadata(meta), Vocabulary::load(folder + "/vocab.txt"), nullptr};
  EMBER_CHECK(run.vocabulary.size() == run.config.model.vocab_size,
              "{}: vocab.txt has {} tokens but the model was trained with {}", folder, run.vocabulary.size(),
              run.config.model.vocab_size);
  Generator gen(0);
  run.model = std::make_shared<nn::TransformerClassifier>(run.config.model, gen);
  run.model->load_state_dict(weights);
  run.model->eval();
  return run;
}

double predict_positive(const SavedRun& run, const std::string& review) {
  NoGradGuard no_grad;
  std::vector<int32_t> ids = run.vocabulary.encode(review, run.config.model.max_len);
  if (ids.empty()) ids.push_back(Vocabulary::unk_id);
  Tensor tokens = from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {1, int64_t(ids.size())});
  Tensor padding = zeros({1, int64_t(ids.size())}, Dtype::Bool);
  Tensor probabilities = softmax(run.model->forward(tokens, padding), 1);
  return probabilities.to_vector<float>()[1];
}

}  // namespace ember::imdb
