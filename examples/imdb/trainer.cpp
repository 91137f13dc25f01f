// The IMDb trainer: data preparation, the training loop, evaluation, checkpoints and prediction.
#include "examples/imdb/trainer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/distributed/agreement.h"
#include "core/distributed/nccl.h"
#include "core/distributed/world.h"
#include "core/file_io.h"
#include "core/parallel.h"
#include "core/precision.h"
#include "examples/imdb/dataset.h"
#include "examples/imdb/digest.h"
#include "examples/imdb/graph_step.h"
#include "examples/imdb/prefetch.h"
#include "examples/imdb/progress.h"
#include "examples/imdb/report.h"
#include "examples/imdb/truncation.h"
#include "examples/imdb/run_folder.h"
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
                                         int64_t max_len, const std::string& truncate) {
  std::vector<std::vector<int32_t>> encoded;
  encoded.reserve(reviews.size());
  for (const Review& review : reviews) encoded.push_back(encode_truncated(vocabulary, review.text, max_len, truncate));
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

// --validation's shuffle: a seed of its own, so that every run (whatever its --seed) holds out the same reviews.
constexpr uint64_t kValidationSeed = 0x7A11DA7E;

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

// ---- Data

Data prepare_data(const TrainConfig& config, const Vocabulary* vocabulary) {
  std::string path = config.data;
  if (path.empty()) path = ensure_imdb_downloaded(config.data_dir.empty() ? default_data_dir() : config.data_dir);
  ImdbSplit split = load_imdb(path);
  if (config.limit > 0) {
    split.train = balanced_prefix(split.train, config.limit);
    split.test = balanced_prefix(split.test, config.limit);
  }
  std::vector<Review> validation;
  if (config.validation > 0) {
    const int64_t count = int64_t(split.train.size());
    EMBER_CHECK(config.validation < count, "--validation {}: there are only {} training reviews to hold it out from",
                config.validation, count);
    // The last N of a shuffle with a seed of its own (not --seed): every run and seed holds out the same reviews.
    const std::vector<int64_t> order = shuffled_order(count, kValidationSeed, 0);
    std::vector<bool> held_out(size_t(count), false);
    for (int64_t i = count - config.validation; i < count; ++i) held_out[size_t(order[size_t(i)])] = true;
    std::vector<Review> kept;
    for (int64_t i = 0; i < count; ++i) (held_out[size_t(i)] ? validation : kept).push_back(std::move(split.train[size_t(i)]));
    split.train = std::move(kept);
  }
  Data data{vocabulary ? *vocabulary : Vocabulary::build(split.train, config.vocab_words), {}, {}, {}, {}, {}, {}};
  data.train_tokens = encode(data.vocabulary, split.train, config.model.max_len, config.truncate);
  data.test_tokens = encode(data.vocabulary, split.test, config.model.max_len, config.truncate);
  data.validation_tokens = encode(data.vocabulary, validation, config.model.max_len, config.truncate);
  data.train_labels = labels_of(split.train);
  data.test_labels = labels_of(split.test);
  data.validation_labels = labels_of(validation);
  return data;
}

std::string data_fingerprint(const Data& data) {
  Digest digest(DigestKind::Sha256);
  for (const std::string& token : data.vocabulary.tokens()) digest.update(token + "\n");
  auto add = [&](const std::vector<std::vector<int32_t>>& reviews, const std::vector<int>& labels) {
    const int64_t count = int64_t(reviews.size());
    digest.update(&count, sizeof count);
    for (const auto& ids : reviews) {
      const int64_t length = int64_t(ids.size());
      digest.update(&length, sizeof length);
      digest.update(ids.data(), ids.size() * sizeof(int32_t));
    }
    digest.update(labels.data(), labels.size() * sizeof(int));
  };
  add(data.train_tokens, data.train_labels);
  add(data.test_tokens, data.test_labels);
  if (!data.validation_tokens.empty()) add(data.validation_tokens, data.validation_labels);  // (runs without: as before)
  return digest.hex_digest();
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
  // On a GPU the tokens and labels stay on the host: the embedding and cross-entropy check them there
  // and upload them without the host waiting for the GPU (docs/cuda.md, the step without waits).
  if (!device.is_cpu()) t.padding_mask = t.padding_mask.to(device);
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
    correct += int64_t(sum(eq(predicted, t.labels.to(predicted.device())).to(Dtype::Float64)).item<double>());
  }
  model.train(was_training);
  if (ranks > 1) {
    Tensor count = from_vector(std::vector<int64_t>{correct});
    world->all_reduce(count, distributed::ReduceOp::Sum);
    correct = count.item<int64_t>();
  }
  return double(correct) / double(reviews.size());
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
  config.validate();
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

nlohmann::ordered_json step_record(int64_t step, int64_t epoch, double loss, double lr) {
  return {{"kind", "step"}, {"step", step}, {"epoch", epoch}, {"loss", loss}, {"lr", lr}};
}

nlohmann::ordered_json epoch_record(const EpochResult& er, int64_t step, size_t test_reviews,
                                    size_t validation_reviews) {
  nlohmann::ordered_json record = {{"kind", "epoch"},
          {"epoch", er.epoch},
          {"step", step},
          {"train_loss", er.train_loss},
          {"test_accuracy", er.test_accuracy},
          {"test_reviews", test_reviews},
          {"train_seconds", er.seconds},
          {"eval_seconds", er.eval_seconds},
          {"real_tokens_per_s", er.real_tokens_per_s},
          {"padded_tokens_per_s", er.padded_tokens_per_s},
          {"peak_tensor_bytes", er.peak_bytes},
          {"peak_rss_bytes", er.peak_rss_bytes}};
  if (validation_reviews > 0) {
    record["validation_accuracy"] = er.validation_accuracy;
    record["validation_reviews"] = validation_reviews;
  }
  return record;
}

constexpr const char* kModelFormat = "ember-imdb-model-v2";

// model.safetensors: the weights, the settings, the vocabulary's fingerprint and the checksum.
void save_model(const std::string& path, const TrainConfig& config, const nn::TransformerClassifier& model,
                const Vocabulary& vocabulary) {
  nn::TensorMap weights = model.state_dict();
  nn::Metadata meta = config.to_metadata();
  meta["format"] = kModelFormat;
  meta["vocab_sha256"] = vocabulary_fingerprint(vocabulary);
  meta[kContentKey] = content_fingerprint(weights, meta);
  nn::save_tensors(path, weights, meta);
}

// Runs fn on every rank. Its inputs are the same on every rank (the settings, the data, the
// checkpoint rank 0 read), so an error it raises is raised by every rank at once: an agreed one,
// which ends the job normally with rank 0 reporting it.
template <typename Fn>
void on_every_rank_alike(distributed::ProcessGroup& world, Fn&& fn) {
  try {
    fn();
  } catch (const distributed::AgreedError&) {
    throw;
  } catch (const Error& e) {
    if (world.size() > 1) throw distributed::AgreedError(e.what());
    throw;
  }
}

}  // namespace

std::string vocabulary_fingerprint(const Vocabulary& vocabulary) {
  Digest digest(DigestKind::Sha256);
  for (const std::string& token : vocabulary.tokens()) digest.update(token + "\n");
  return digest.hex_digest();
}

RunResult train(const TrainConfig& config_in, const Data& data, distributed::ProcessGroup& world) {
  TrainConfig config = config_in;
  config.model.vocab_size = data.vocabulary.size();
  config.validate();
  const bool lead = world.rank() == 0;  // prints, and writes every file
  const bool several = world.size() > 1;
  if (!lead) config.quiet = true;
  distributed::check_same_settings(world, config.shared_settings());
  Device device = checked_device(config.device);
  EMBER_CHECK(!config.uses_cuda_graph() || device.is_cuda(), "--cuda-graph on: CUDA graphs need a GPU (--device cuda), "
              "not --device {}", config.device);
  // Under mpirun, "cuda" is each rank's own GPU: cuda:(local rank % GPUs).
  if (device.is_cuda() && several && config.device == "cuda")
    device = distributed::device_for_local_rank(distributed::launch_info().local_rank);
  EMBER_CHECK(!data.train_tokens.empty(), "train: there are no training reviews");
  std::optional<RunLock> lock;  // one trainer (job) per folder, from here until the end
  distributed::on_root(world, [&] {
    check_output_folder(config.out);
    lock.emplace(config.out);
  });
  StopSignals signals;  // SIGINT / SIGTERM: checkpoint at the next step boundary, then stop
  if (config.threads > 0) {
    set_num_threads(config.threads);
  } else if (several) {  // the ranks on this machine share its cores
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    set_num_threads(std::max(1, cores / std::max(1, distributed::launch_info().local_size)));
  }
  // --precision bf16: every product of training and evaluation in bfloat16, the rest float32.
  MixedPrecisionGuard precision(parse_precision(config.precision));

  Generator gen(config.seed);  // initialisation, then dropout masks
  nn::TransformerClassifier model(config.model, gen);
  model.to(device);  // initialised on the CPU, so the same seed gives the same weights on every device
  // Gradients travel over MPI between CPUs, over NCCL between GPUs (its id sent over MPI).
  std::unique_ptr<distributed::ProcessGroup> nccl;
  distributed::ProcessGroup* group = &world;
  if (device.is_cuda() && several) {
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
  int64_t total_steps = 0;
  EMBER_CHECK(!__builtin_mul_overflow(steps_per_epoch, config.epochs, &total_steps) &&
                  total_steps <= optim::Optimizer::max_steps,
              "train: {} epochs of {} steps are more steps than a run can count", config.epochs, steps_per_epoch);
  optim::Schedule schedule{optim::parse_schedule(config.schedule), config.lr,
                           int64_t(std::llround(config.warmup * double(total_steps))), total_steps};

  // The run's state between steps: what a checkpoint holds besides the tensors.
  CheckpointInfo state;
  state.total_steps = total_steps;
  state.data_fingerprint = data_fingerprint(data);
  const std::string checkpoint_path = config.out + "/checkpoint.safetensors";
  const std::string model_path = config.out + "/model.safetensors";
  if (config.resume) {
    // Everything is checked before any file of the folder is written: a refused resume changes
    // nothing. Rank 0 reads the file and sends it to every rank; it holds whole tensors (the
    // optimiser's too, under ZeRO-1), so any number of ranks can resume it.
    CheckpointInfo saved = restore_checkpoint(checkpoint_path, config, model, *optimizer, world);  // onto the model's device
    on_every_rank_alike(world, [&] {
      EMBER_CHECK(saved.data_fingerprint == state.data_fingerprint,
                  "resume: {} was trained on other data (its vocabulary or reviews differ from these); give the same "
                  "--data and --limit, or a new --out", checkpoint_path);
      EMBER_CHECK(saved.total_steps == total_steps, "resume: {} is of a run of {} steps, these settings and data make {}",
                  checkpoint_path, saved.total_steps, total_steps);
    });
    state = saved;
    gen.set_state(config.seed, state.generator_offset);
  }
  std::optional<MetricsLog> metrics;
  distributed::on_root(world, [&] {
    data.vocabulary.save(config.out + "/vocab.txt");
    metrics.emplace(config.out + "/metrics.jsonl", config.resume, state.step);
  });
  // Rank 0's parameters to every rank (equal already: same seed, same checkpoint); gradients
  // averaged over the ranks during backward. Nothing to send on one process.
  nn::DataParallel dp(model, *group, {.bucket_bytes = config.bucket_kb * 1024, .overlap = config.overlap,
                                      .reduce_gradients = !config.zero});
  int64_t& step = state.step;
  // --cuda-graph on: batches padded to a multiple of 32 tokens, and on one process the step runs as
  // CUDA graphs, one per padded shape (graph_step.h). On several ranks (or under ZeRO-1) the step
  // stays op by op (the all-reduce is not captured), with the same padding: the same numbers.
  const bool pad_for_graph = config.uses_cuda_graph();
  std::optional<GraphStep> graph_step;
  auto* adam = dynamic_cast<optim::Adam*>(optimizer.get());
  if (pad_for_graph && !several && adam != nullptr)
    graph_step.emplace(model, *adam, gen, device, config.clip, config.quiet);
  // On one GPU each batch goes up on the copy stream while the step before it runs (prefetch.h);
  // the step reads it there (gpu_step, or the graph's inputs copied from it on the GPU).
  std::optional<BatchPrefetcher> prefetcher;
  if (device.is_cuda() && !several && !config.zero) prefetcher.emplace(device, config.model, config.batch_size);
  // The steps' losses not read yet. On a GPU reading one makes the host wait for the step, so they
  // are read on logging steps and before a save (on a CPU, and on several ranks, every step).
  struct PendingLoss {
    int64_t step, epoch;
    double lr;
    Tensor loss;                   // this process's loss, read when needed
    std::optional<double> value;   // several ranks: the whole batch's, already read
  };
  std::vector<PendingLoss> pending;
  RunResult result;
  auto read_losses = [&]() {
    for (const PendingLoss& p : pending) {
      const double loss_value = p.value ? *p.value : double(p.loss.item<float>());
      // Several ranks read the same whole-batch loss: they fail together, rank 0 reports it.
      on_every_rank_alike(world, [&] {
        EMBER_CHECK(std::isfinite(loss_value), "training diverged: the loss at step {} (epoch {}) is {}; that step is "
                    "not saved and the last checkpoint is kept (lower --lr, or clip with --clip)", p.step, p.epoch,
                    loss_value);
      });
      result.step_losses.push_back(loss_value);
      state.epoch_loss_sum += loss_value;
      if (lead) metrics->write(step_record(p.step, p.epoch, loss_value, p.lr));
    }
    pending.clear();
  };
  // Collective: every rank gathers the state (ZeRO-1's moments live in shards); rank 0 writes it.
  auto save = [&]() {
    read_losses();
    if (several) dp.check_replicas_agree();
    state.generator_offset = gen.offset();
    const nn::TensorMap optimizer_state = optimizer->state_dict();
    distributed::on_root(world, [&] {
      metrics->flush();  // every step the checkpoint covers is in metrics.jsonl first (a resume keeps exactly those)
      save_checkpoint(checkpoint_path, config, state, model, optimizer_state);
    });
  };

  result.parameters = model.num_parameters();
  result.total_steps = total_steps;
  if (!config.quiet)
    fmt::print(stderr, "Model: {} heads, {} layers, dim {}, {} parameters; {} train / {} test reviews; {} steps; {}{} threads\n",
               config.model.heads, config.model.layers, config.model.dim, result.parameters, data.train_tokens.size(),
               data.test_tokens.size(), total_steps,
               several ? fmt::format("{} ranks ({}{}) x ", world.size(), group->backend(), config.zero ? ", ZeRO-1" : "")
                       : std::string(),
               num_threads());
  if (!config.quiet && config.precision == "bf16")
    fmt::print(stderr, "Precision: {}, float32 weights and optimiser\n",
               device.is_cpu() ? fmt::format("products and activations in bfloat16 (CPU kernel {})", bf16_product_kernel())
                               : std::string("products in bfloat16"));

  Progress progress(config.quiet ? Progress::Mode::Silent : Progress::detect(), config.log_every);
  const auto run_start = Clock::now();
  int agreed_signal = 0;  // several ranks: a signal any rank received, agreed on after each step
  while (step < total_steps) {
    const int64_t epoch = step / steps_per_epoch;
    std::vector<int64_t> order = config.length_buckets > 0
                                     ? batcher.length_bucketed_order(config.seed, epoch, config.length_buckets)
                                     : batcher.shuffled_order(config.seed, epoch);
    model.train();
    reset_peak_memory();
    if (device.is_cuda()) reset_peak_memory(device);
    int64_t real_tokens = 0, padded_tokens = 0;  // the whole batches' (every rank's) tokens, for throughput
    bool stop = false;
    const auto epoch_start = Clock::now();
    progress.start_epoch(epoch + 1, config.epochs, steps_per_epoch);
    // This rank's rows of the global batch b, padded as the whole batch is.
    auto batch_at = [&](int64_t b) {
      const distributed::Range rows = distributed::shard_range(batcher.rows_in(b), world.rank(), world.size());
      Batch batch = batcher.batch_rows(order, b, rows.begin, rows.size());
      return pad_for_graph ? pad_for_graphs(batch, config.model.max_len) : batch;
    };
    std::optional<Batch> next_batch;  // batch b + 1, already on its way to the GPU (prefetcher)
    for (int64_t b = step % steps_per_epoch; b < steps_per_epoch; ++b) {
      // NOTE: on several ranks each stops at the same step (a signal reaches the ranks at different
      // moments; one that stopped alone would leave the others waiting in an all-reduce).
      if (const int signal = several ? agreed_signal : StopSignals::received()) {
        result.stopped_by_signal = signal;
        stop = true;
        break;
      }
      // This rank's rows of the global batch b, padded as the whole batch is; dropout draws by
      // global example (core/random.h, BatchSlice), so the ranks together compute one process's step.
      const int64_t batch_rows = batcher.rows_in(b);
      const distributed::Range rows = distributed::shard_range(batch_rows, world.rank(), world.size());
      Batch batch = next_batch ? std::move(*next_batch) : batch_at(b);
      next_batch.reset();
      if (several) gen.set_batch_slice({batch_rows, rows.begin, rows.size()});
      optimizer->set_lr(schedule.lr_at(step));
      Tensor loss;
      if (prefetcher) {
        if (!prefetcher->has_prefetched()) prefetcher->prefetch(batch);  // an epoch's first: uploaded now
        const DeviceBatch& inputs = prefetcher->take();  // the step waits (on the GPU) for its upload
        loss = graph_step ? graph_step->run(inputs) : gpu_step(model, *optimizer, inputs, config.clip);
        prefetcher->release();
        if (b + 1 < steps_per_epoch) {  // the next batch, uploaded while this step runs
          next_batch = batch_at(b + 1);
          prefetcher->prefetch(*next_batch);
        }
      } else if (graph_step) {
        loss = graph_step->run(batch);  // the inputs uploaded, then one graph launch (after each shape's first step)
      } else {
        BatchTensors t = to_tensors(batch, device);
        loss = cross_entropy(model.forward(t.tokens, t.padding_mask), t.labels);
        optimizer->zero_grad();
        // Each rank's mean weighs rows / batch_rows of the whole batch's; DataParallel averages (/ size).
        if (several) (loss * (double(rows.size()) * world.size() / double(batch_rows))).backward();
        else loss.backward();
        dp.synchronize_gradients();
        if (config.clip > 0 && !config.zero) optim::clip_grad_norm_(model.parameters(), config.clip);  // the norm stays on the GPU
        optimizer->step();
      }
      int64_t batch_real_tokens = batch.real_tokens;
      std::optional<double> whole_batch_loss;
      if (several) {  // the whole batch's loss and tokens, for the log; and any rank's signal
        Tensor sums = from_vector(std::vector<double>{double(loss.item<float>()) * double(rows.size()),
                                                      double(batch.real_tokens), double(StopSignals::received())});
        world.all_reduce(sums, distributed::ReduceOp::Sum);
        std::vector<double> totals = sums.to_vector<double>();
        whole_batch_loss = totals[0] / double(batch_rows);
        batch_real_tokens = int64_t(totals[1]);
        if (totals[2] > 0) agreed_signal = StopSignals::received() != 0 ? StopSignals::received() : SIGTERM;
      }
      ++step;
      pending.push_back({step, epoch + 1, optimizer->lr(), loss, whole_batch_loss});

      real_tokens += batch_real_tokens;
      padded_tokens += batch_rows * batch.seq_len;
      // An epoch's last step is checkpointed after its evaluation (below), not here.
      const bool save_now = config.save_every > 0 && step % config.save_every == 0 && step % steps_per_epoch != 0;
      const bool stop_now = config.stop_after > 0 && step >= config.stop_after;
      if (!device.is_cuda() || several || (b + 1) % config.log_every == 0 || b + 1 == steps_per_epoch || save_now ||
          stop_now) {
        read_losses();
        double elapsed = seconds_since(epoch_start);
        progress.update(b + 1, state.epoch_loss_sum / double(b + 1), double(real_tokens) / elapsed, elapsed);
      }
      if (save_now) save();
      if (stop_now) {
        stop = true;
        break;
      }
    }
    const double train_seconds = seconds_since(epoch_start);
    progress.finish_epoch();
    if (step != (epoch + 1) * steps_per_epoch) {  // stopped part-way through the epoch
      save();
      break;
    }
    const auto eval_start = Clock::now();
    EpochResult er;
    er.epoch = epoch + 1;
    er.train_loss = state.epoch_loss_sum / double(steps_per_epoch);  // every step of the epoch, resumed or not
    er.test_accuracy = evaluate(model, data.test_tokens, data.test_labels, 64, &world);
    if (!data.validation_tokens.empty())
      er.validation_accuracy = evaluate(model, data.validation_tokens, data.validation_labels, 64, &world);
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
      nlohmann::ordered_json record = epoch_record(er, step, data.test_tokens.size(), data.validation_tokens.size());
      if (several) {  // this rank's share of the communication (nn/data_parallel.h)
        const nn::DataParallelStats& comm = dp.stats();
        record["ranks"] = world.size();
        record["allreduce_seconds"] = comm.comm_seconds;
        record["allreduce_exposed_seconds"] = comm.exposed_seconds;
        record["allreduce_bytes"] = comm.bytes;
      }
      metrics->write(record);
      if (device.is_cuda())
        metrics->write({{"kind", "gpu_memory"}, {"epoch", er.epoch}, {"device", device.str()},
                        {"allocated_bytes", er.gpu_allocated_bytes}, {"peak_bytes", er.gpu_peak_bytes},
                        {"reserved_bytes", er.gpu_reserved_bytes}});
    }
    if (!config.quiet)
      fmt::print(stderr,
                 "epoch {}/{}: train loss {:.4f} | test accuracy {:.2f}% ({} reviews){} | {:.1f}s train + {:.1f}s eval | "
                 "{:.0f} real tok/s ({:.0f} padded) | peak {:.0f} MiB tensors, {:.0f} MiB RSS\n",
                 er.epoch, config.epochs, er.train_loss, 100 * er.test_accuracy, data.test_tokens.size(),
                 data.validation_tokens.empty() ? std::string()
                     : fmt::format(" | validation {:.2f}% ({} reviews)", 100 * er.validation_accuracy,
                                   data.validation_tokens.size()),
                 er.seconds, er.eval_seconds, er.real_tokens_per_s, er.padded_tokens_per_s, er.peak_bytes / 1048576.0,
                 er.peak_rss_bytes / 1048576.0);
    if (!config.quiet && several && dp.stats().steps > 0)
      fmt::print(stderr, "epoch {}/{}: all-reduce {:.1f} ms per step, {:.0f}% of it hidden behind backward, {:.1f} MB "
                 "per step (rank 0)\n", er.epoch, config.epochs, 1e3 * dp.stats().comm_seconds / double(dp.stats().steps),
                 100 * dp.stats().hidden_share(), double(dp.stats().bytes) / double(dp.stats().steps) / 1e6);
    if (!config.quiet && device.is_cuda())
      fmt::print(stderr, "epoch {}/{}: {} memory: {:.1f} MiB allocated, {:.1f} MiB peak, {:.1f} MiB reserved\n", er.epoch,
                 config.epochs, device.str(), er.gpu_allocated_bytes / 1048576.0, er.gpu_peak_bytes / 1048576.0,
                 er.gpu_reserved_bytes / 1048576.0);
    // The model, then the checkpoint: a checkpoint at an epoch's end always has its evaluation line
    // in metrics.jsonl and its model.safetensors beside it (a kill between the two redoes the epoch's
    // end from the checkpoint before).
    distributed::on_root(world, [&] {
      metrics->flush();
      save_model(model_path, config, model, data.vocabulary);
    });
    state.epoch_loss_sum = 0;
    save();
    if (stop) break;
  }
  result.steps = step;
  if (graph_step) result.graph_replays = graph_step->counts().replays;
  const EpochResult* best = nullptr;  // --validation: the epoch it would choose (the first of equals)
  for (const EpochResult& er : result.epochs)
    if (!std::isnan(er.validation_accuracy) && (best == nullptr || er.validation_accuracy > best->validation_accuracy))
      best = &er;
  if (best != nullptr) {
    result.best_validation_epoch = best->epoch;
    if (!config.quiet)
      fmt::print(stderr, "best epoch by validation accuracy: {} (validation {:.2f}%, test {:.2f}%)\n", best->epoch,
                 100 * best->validation_accuracy, 100 * best->test_accuracy);
  }
  result.wall_seconds = seconds_since(run_start);
  result.finished = step == total_steps;
  if (result.stopped_by_signal != 0) return result;  // checkpointed; the report can wait for the resume
  if (result.finished) {
    // A resume of a finished run: the last evaluation from metrics.jsonl, else evaluated again
    // (collective: rank 0 says whether it is needed).
    double recorded_accuracy = NAN;
    if (!result.epochs.empty()) {
      recorded_accuracy = result.epochs.back().test_accuracy;
    } else {
      distributed::on_root(world, [&] {
        metrics->flush();
        std::error_code error;
        if (!fs::exists(model_path, error))  // its model file was lost
          save_model(model_path, config, model, data.vocabulary);
        nlohmann::json last = last_epoch_record(metrics->path());
        if (last.is_object() && last.value("epoch", int64_t(0)) == config.epochs && last["test_accuracy"].is_number())
          recorded_accuracy = last["test_accuracy"].get<double>();
      });
      if (several) {
        Tensor value = from_vector(std::vector<double>{lead ? recorded_accuracy : 0.0});
        world.broadcast(value, 0);
        recorded_accuracy = value.item<double>();
      }
    }
    result.final_test_accuracy = std::isnan(recorded_accuracy)
                                     ? evaluate(model, data.test_tokens, data.test_labels, 64, &world)
                                     : recorded_accuracy;
  }
  if (!lead) return result;
  metrics->flush();
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
  const std::string path = folder + "/model.safetensors";
  nn::Metadata meta;
  nn::TensorMap weights = nn::load_tensors(path, &meta);  // its size is bounded by the file's
  auto format = meta.find("format");
  EMBER_CHECK(format != meta.end() && format->second == kModelFormat, "model file '{}' has format '{}', expected {} "
              "(written by an older trainer? train again)", path,
              format == meta.end() ? "(none)" : format->second.substr(0, 60), kModelFormat);
  TrainConfig config;
  try {
    config = TrainConfig::from_metadata(meta);
  } catch (const Error& e) {
    fail("model file '{}': {}", path, e.what());
  }
  check_settings_match_tensors(config.model, weights, path);  // before building: the sizes are the file's
  auto recorded = meta.find("vocab_sha256");
  EMBER_CHECK(recorded != meta.end(), "model file '{}' has no 'vocab_sha256' in its metadata", path);
  SavedRun run{config, Vocabulary::load(folder + "/vocab.txt"), nullptr};
  EMBER_CHECK(run.vocabulary.size() == run.config.model.vocab_size,
              "{}: vocab.txt has {} tokens but the model was trained with {}", folder, run.vocabulary.size(),
              run.config.model.vocab_size);
  EMBER_CHECK(recorded->second == vocabulary_fingerprint(run.vocabulary),
              "{}: vocab.txt is not the vocabulary the model was trained with (its SHA-256 differs from the one "
              "model.safetensors records)", folder);
  Generator gen(0);
  run.model = std::make_shared<nn::TransformerClassifier>(run.config.model, gen);
  try {
    run.model->load_state_dict(weights);
  } catch (const Error& e) {
    fail("model file '{}': {}", path, e.what());
  }
  check_content_fingerprint(weights, meta, "model file '" + path + "'");  // last: what no check above can see
  run.model->eval();
  return run;
}

double predict_positive(const SavedRun& run, const std::string& review) {
  NoGradGuard no_grad;
  std::vector<int32_t> ids = encode_truncated(run.vocabulary, review, run.config.model.max_len, run.config.truncate);
  if (ids.empty()) ids.push_back(Vocabulary::unk_id);
  Tensor tokens = from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {1, int64_t(ids.size())});
  Tensor padding = zeros({1, int64_t(ids.size())}, Dtype::Bool);
  std::vector<float> probabilities = softmax(run.model->forward(tokens, padding), 1).to_vector<float>();
  EMBER_CHECK(probabilities.size() == 2, "predict: the model gives {} classes, expected 2 (negative, positive)",
              probabilities.size());
  return probabilities[1];
}

}  // namespace ember::imdb
