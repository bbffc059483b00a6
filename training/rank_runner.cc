#include "training/rank_runner.h"

#include <sched.h>
#include <unistd.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>

#include "common/allocator.h"
#include "common/steady_clock.h"
#include "training/batch_loader.h"
#include "training/checkpoint.h"
#include "training/ensemble_trainer.h"
#include "training/fashion_mnist.h"
#include "training/gradient_reducer.h"
#include "training/synthetic_data.h"
#include "training/train_metrics.h"
#include "training/trained_repository.h"

namespace es {
namespace {

constexpr int64_t kSampleRows = 8;       // test rows kept with their outputs in eval_samples.json
constexpr uint64_t kSyntheticTestSeed = 0x7e57;  // test rows differ from the training rows
// Rows per forward when the test set is evaluated, by the members and by
// the packed variant alike (so their times per row compare).
constexpr int64_t kEvaluationBatchRows = 1000;

struct Data {
  Dataset train;
  Dataset test;
};

StatusOr<Data> LoadData(const DataSpec& spec, uint64_t seed) {
  if (spec.dataset == "synthetic") {
    return Data{MakeSyntheticDataset(spec.synthetic_train_rows, seed),
                MakeSyntheticDataset(spec.synthetic_test_rows, seed ^ kSyntheticTestSeed)};
  }
  ES_ASSIGN_OR_RETURN(Dataset train, LoadFashionMnist(spec.path, DataSplit::kTrain));
  ES_ASSIGN_OR_RETURN(Dataset test, LoadFashionMnist(spec.path, DataSplit::kTest));
  return Data{std::move(train), std::move(test)};
}

// Intra-op threads: the CPUs this process may run on, shared with the other
// local ranks unless the launcher pinned each rank to its own.
int ThreadsForRank(const RankEnv& env) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  const char* pinned = std::getenv("ES_TRAIN_PINNED");
  if (pinned == nullptr || std::string(pinned) != "1") cpus /= std::max(1, env.local_world_size);
  return std::max(1, cpus);
}

// This rank's device: the CPU, or the GPU of --devices at its local rank
// (cuda:0,1 -> local rank 1 trains on cuda:1), which becomes the process's
// current device before NCCL creates its communicators there.
StatusOr<c10::Device> RankDevice(const TrainOptions& options, const RankEnv& env) {
  if (options.devices.rfind("cuda", 0) != 0) return c10::Device(c10::DeviceType::CPU);
  ES_ASSIGN_OR_RETURN(std::vector<std::string> devices, ParseDevices(options.devices));
  if (env.local_rank >= static_cast<int>(devices.size())) {
    return Status::InvalidArgument("--devices " + options.devices + " names " +
                                   std::to_string(devices.size()) + " GPU(s), but this is local rank " +
                                   std::to_string(env.local_rank));
  }
  const std::string& name = devices[static_cast<size_t>(env.local_rank)];
  if (!torch::cuda::is_available()) {
    return Status::FailedPrecondition("rank " + std::to_string(env.rank) + " wants " + name +
                                      " but this LibTorch has no CUDA or no GPU is visible");
  }
  const c10::Device device(name);
  if (device.index() >= static_cast<int64_t>(torch::cuda::device_count())) {
    return Status::FailedPrecondition("rank " + std::to_string(env.rank) + " wants " + name + " but only " +
                                      std::to_string(torch::cuda::device_count()) + " GPU(s) are visible");
  }
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
  return device;
}

void SetUpLogging(const TrainOptions& options, int rank) {
  // On a terminal, rank 0 redraws a progress line (TrainMetrics); every log
  // line first clears it ("\r" + erase line), so the two never share a line.
  const std::string clear = isatty(STDERR_FILENO) ? "\r\033[K" : "";
  spdlog::set_pattern(clear + "[%H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%l] %v");
  spdlog::set_level(spdlog::level::from_str(options.log_level));
}

// The run's time, this process's part added to what earlier (resumed)
// processes of the same run spent.
struct RunTimes {
  double train_seconds = 0;
  double step_seconds_sum = 0;
  double allreduce_seconds_sum = 0;
  int64_t steps_timed = 0;
};

// Where the training loop stands, for checkpoints, and what that position
// means (schedule length, global batch, data order).
CheckpointData MakeCheckpoint(const EnsembleTrainer& trainer, const OptimSpec& optim,
                              int64_t total_steps, int64_t epoch, int64_t next_batch,
                              int64_t batches_per_epoch, const RunTimes& times) {
  CheckpointData data;
  data.train_seconds = times.train_seconds;
  data.step_seconds_sum = times.step_seconds_sum;
  data.allreduce_seconds_sum = times.allreduce_seconds_sum;
  data.steps_timed = times.steps_timed;
  data.total_steps = total_steps;
  data.global_batch = optim.batch_size;
  data.seed = static_cast<int64_t>(optim.seed);
  data.step = trainer.step();
  data.epoch = epoch;
  data.batch_in_epoch = next_batch;
  if (next_batch >= batches_per_epoch) {  // the epoch is over: continue with the next
    data.epoch = epoch + 1;
    data.batch_in_epoch = 0;
  }
  data.tensors = trainer.Snapshot();
  return data;
}

class RankRun {
 public:
  RankRun(const TrainOptions& options, const TrainConfig& config, const RankEnv& env)
      : options_(options), config_(config), env_(env) {}

  int Run();

 private:
  Status Prepare();
  Status CheckSameRun(const CheckpointData& saved, const std::string& path) const;
  Status Train();
  // Every rank compares its final parameters with all the others' (a
  // collective): the check that data-parallel training kept them identical.
  Status CheckRanksAgree();
  Status Finish();
  // The whole run's times so far: the earlier processes' plus this one's.
  RunTimes TimesSoFar(SteadyClock::time_point train_start) const;

  const TrainOptions& options_;
  const TrainConfig& config_;
  const RankEnv& env_;
  c10::Device device_ = c10::Device(c10::DeviceType::CPU);
  Data data_;
  c10::intrusive_ptr<CollectiveGroup> group_;
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<EnsembleTrainer> trainer_;
  std::unique_ptr<CheckpointWriter> checkpoints_;  // rank 0 only
  std::unique_ptr<TrainMetrics> metrics_;
  int64_t start_epoch_ = 0;
  int64_t start_batch_ = 0;
  int64_t total_steps_ = 0;
  RunTimes before_;           // what the processes this one resumed spent
  RunTimes run_times_;        // the whole run's, once Train() is done
  bool stopped_early_ = false;
  bool nothing_left_ = false;  // resumed a finished run
  double divergence_ = 0;      // CheckRanksAgree()'s
};

RunTimes RankRun::TimesSoFar(SteadyClock::time_point train_start) const {
  RunTimes t = before_;
  t.train_seconds += SecondsSince(train_start);
  const int64_t n = metrics_->steps_recorded();
  t.step_seconds_sum += metrics_->mean_step_seconds() * static_cast<double>(n);
  t.allreduce_seconds_sum += metrics_->mean_allreduce_seconds() * static_cast<double>(n);
  t.steps_timed += n;
  return t;
}

Status RankRun::Prepare() {
  ES_ASSIGN_OR_RETURN(c10::Device device, RankDevice(options_, env_));
  device_ = device;
  const int threads = ThreadsForRank(env_);
  torch::set_num_threads(threads);
  spdlog::info("rank {} of {} on {} ({} intra-op thread(s)), pid {}, malloc: {}", env_.rank, env_.world_size,
               device_.str(), threads, getpid(), AllocatorInUse());

  ES_ASSIGN_OR_RETURN(Data data, LoadData(config_.data, config_.optim.seed));
  data_ = std::move(data);
  spdlog::info("data: {} ({} training rows, {} test rows)", config_.data.dataset,
               data_.train.size(), data_.test.size());

  const auto timeout = std::chrono::milliseconds(config_.distributed.collective_timeout_ms);
  ES_ASSIGN_OR_RETURN(c10::intrusive_ptr<c10d::Store> store, Rendezvous(env_, config_.run, timeout));
  ES_ASSIGN_OR_RETURN(c10::intrusive_ptr<CollectiveGroup> group, MakeProcessGroup( store, env_.rank, env_.world_size, device_.is_cuda() ? "cuda" : "cpu", env_.master_addr, timeout));
  group_ = std::move(group);

  ShardSpec shard{env_.rank, env_.world_size, config_.optim.batch_size, config_.optim.seed, config_.data.augment};
  ES_ASSIGN_OR_RETURN(loader_, BatchLoader::Create(data_.train, shard, config_.data.loader_threads,
                                                   config_.data.prefetch_batches));
  total_steps_ = config_.optim.epochs * loader_->batches_per_epoch();

  ES_ASSIGN_OR_RETURN(std::unique_ptr<EnsembleTrainer> trainer, EnsembleTrainer::Create(config_, group_, total_steps_, device_));
  trainer_ = std::move(trainer);

  const std::string checkpoint = CheckpointPath(options_.out);
  if (options_.resume) {
    ES_ASSIGN_OR_RETURN(CheckpointData saved, ReadCheckpoint(checkpoint));
    ES_RETURN_IF_ERROR(CheckSameRun(saved, checkpoint));
    std::map<std::string, at::Tensor> tensors(saved.tensors.begin(), saved.tensors.end());
    ES_RETURN_IF_ERROR(trainer_->Restore(tensors, saved.step));
    // Every rank read its own copy of the file: make sure they agree.
    ES_RETURN_IF_ERROR(trainer_->SyncInitialParameters());
    start_epoch_ = saved.epoch;
    start_batch_ = saved.batch_in_epoch;
    before_ = {saved.train_seconds, saved.step_seconds_sum, saved.allreduce_seconds_sum, saved.steps_timed};
    if (saved.step >= total_steps_) {
      nothing_left_ = true;
      spdlog::info("{} is the end of a finished run (step {} of {}): nothing left to train", checkpoint,
                   saved.step, total_steps_);
    } else {
      spdlog::info("resumed from {}: step {} of {}, epoch {}/{}, batch {}", checkpoint, saved.step, total_steps_,
                   start_epoch_ + 1, config_.optim.epochs, start_batch_);
    }
  } else {
    ES_RETURN_IF_ERROR(trainer_->SyncInitialParameters());
  }
  if (env_.rank == 0) {
    const std::filesystem::path folder = std::filesystem::path(checkpoint).parent_path();
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    if (ec) return Status::Internal("cannot create the checkpoint folder " + folder.string() + ": " + ec.message());
    checkpoints_ = std::make_unique<CheckpointWriter>(checkpoint);
  }

  std::vector<std::string> names;
  for (const MemberSpec& member : config_.members) names.push_back(member.name);
  const int port = options_.metrics_port <= 0 ? options_.metrics_port
                                              : options_.metrics_port + env_.local_rank;
  const TrainMetrics::Progress progress = env_.rank != 0                ? TrainMetrics::Progress::kNone
                                          : isatty(STDERR_FILENO) ? TrainMetrics::Progress::kTerminalLine
                                                                  : TrainMetrics::Progress::kLogLines;
  ES_ASSIGN_OR_RETURN(std::unique_ptr<TrainMetrics> metrics, TrainMetrics::Start(env_.rank, names, options_.metrics_address, port, trainer_->step(), total_steps_, progress, std::chrono::milliseconds(static_cast<int64_t>(options_.progress_every_s * 1000))));
  metrics_ = std::move(metrics);
  if (!metrics_->address().empty()) {
    spdlog::info("metrics listening on {}", metrics_->address());
  }
  const std::vector<std::string> packed = trainer_->PackedGroups();
  std::string packing;
  for (const std::string& unit : packed) packing += (packing.empty() ? "; trained packed: " : ", ") + unit;
  spdlog::info(
      "{} member(s), {} step(s) of {} rows ({} per rank), {} epoch(s), {} gradient "
      "bucket(s){}",
      config_.members.size(), total_steps_, config_.optim.batch_size, loader_->rows_per_batch(), config_.optim.epochs,
      trainer_->reducer().num_buckets(), packing);
  return Status::Ok();
}

// A resume continues the run the checkpoint was written by: the same
// schedule length (epochs), global batch and data seed, or its position
// (step, epoch, batch) would mean something else.
Status RankRun::CheckSameRun(const CheckpointData& saved, const std::string& path) const {
  std::string differences;
  auto compare = [&](const char* what, int64_t then, int64_t now) {
    if (then == now) return;
    differences += std::string(differences.empty() ? "" : ", ") + what + " " +
                   std::to_string(then) + " then, " + std::to_string(now) + " now";
  };
  compare("total steps (epochs x batches per epoch)", saved.total_steps, total_steps_);
  compare("global batch", saved.global_batch, config_.optim.batch_size);
  compare("data seed", saved.seed, static_cast<int64_t>(config_.optim.seed));
  if (differences.empty()) return Status::Ok();
  return Status::InvalidArgument("--resume: " + path + " was written by a run with other settings (" +
                                 differences + "); resume with the same --epochs and config");
}

Status RankRun::Train() {
  if (nothing_left_) return Status::Ok();
  const SteadyClock::time_point start = SteadyClock::now();
  const int64_t every = config_.checkpoint.every_steps;
  for (int64_t epoch = start_epoch_; epoch < config_.optim.epochs && !stopped_early_; ++epoch) {
    metrics_->SetEpoch(epoch);
    loader_->StartEpoch(epoch, epoch == start_epoch_ ? start_batch_ : 0);
    const SteadyClock::time_point epoch_start = SteadyClock::now();
    double loss_sum = 0;
    int64_t correct = 0;
    int64_t rows = 0;
    int64_t steps = 0;
    while (true) {
      ES_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader_->Next());
      if (!batch) break;
      if (options_.max_steps > 0 && trainer_->step() >= options_.max_steps) {
        stopped_early_ = true;  // resumed at (or past) the limit: nothing to do
        break;
      }
      ES_ASSIGN_OR_RETURN(StepStats step, trainer_->Step(batch->images, batch->labels));
      metrics_->Record(step, trainer_->step());
      for (const MemberStep& member : step.members) {
        loss_sum += member.loss;
        correct += member.correct;
      }
      rows += step.rows * static_cast<int64_t>(step.members.size());
      ++steps;
      const bool at_limit = options_.max_steps > 0 && trainer_->step() >= options_.max_steps;
      if (checkpoints_ && (at_limit || (every > 0 && trainer_->step() % every == 0))) {
        // At the limit the checkpoint is the point of stopping: wait for it.
        checkpoints_->Submit(
            MakeCheckpoint(*trainer_, config_.optim, total_steps_, epoch, batch->index + 1,
                           loader_->batches_per_epoch(), TimesSoFar(start)),
            /*wait=*/at_limit);
        metrics_->SetCheckpoints(checkpoints_->written(), checkpoints_->skipped());
      }
      if (at_limit) {
        stopped_early_ = trainer_->step() < total_steps_;  // at the end it is just the end
        break;
      }
    }
    const double seconds = SecondsSince(epoch_start);
    spdlog::info("epoch {}/{}: {} steps in {:.1f} s, mean loss {:.4f}, training accuracy {:.2f}% "
                 "(all members, this rank's rows)",
                 epoch + 1, config_.optim.epochs, steps, seconds,
                 steps > 0 ? loss_sum / (steps * static_cast<double>(config_.members.size())) : 0.0,
                 rows > 0 ? 100.0 * correct / rows : 0.0);
    if (checkpoints_ && !stopped_early_) {
      checkpoints_->Submit(MakeCheckpoint(*trainer_, config_.optim, total_steps_, epoch,
                                          loader_->batches_per_epoch(),
                                          loader_->batches_per_epoch(), TimesSoFar(start)),
                           /*wait=*/true);
    }
  }
  run_times_ = TimesSoFar(start);
  if (checkpoints_) {
    if (Status flushed = checkpoints_->Flush(); !flushed.ok()) {
      // Logged when it happened; the trained members are still worth writing.
      spdlog::warn("{} checkpoint write(s) failed during the run; the first: {}",
                   checkpoints_->failed(), flushed.message());
    }
    metrics_->SetCheckpoints(checkpoints_->written(), checkpoints_->skipped());
    spdlog::info("checkpoints: {} written, {} skipped (a write was in flight), latest {}",
                 checkpoints_->written(), checkpoints_->skipped(), checkpoints_->path());
  }
  return Status::Ok();
}

Status RankRun::CheckRanksAgree() {
  ES_ASSIGN_OR_RETURN(double divergence, trainer_->reducer().ParameterDivergence());
  divergence_ = divergence;
  if (env_.rank != 0) return Status::Ok();
  if (divergence_ == 0) {
    spdlog::info("all {} rank(s) hold identical parameters", env_.world_size);
  } else {
    spdlog::warn("the ranks' parameters differ by up to {:.3g} (each rank should hold the same weights)",
                 divergence_);
  }
  return Status::Ok();
}

Status RankRun::Finish() {
  metrics_->EndProgressLine();
  if (env_.rank != 0) return Status::Ok();
  if (stopped_early_) {
    spdlog::info("stopped at step {} (--max-steps); continue with --resume", trainer_->step());
    return Status::Ok();
  }
  if (nothing_left_) {
    std::cout << "nothing left to do: the run in " << options_.out << " had finished (step " << trainer_->step()
              << " of " << total_steps_ << "); its report.json and model repository are left as they were\n";
    return Status::Ok();
  }
  Evaluation evaluation = trainer_->Evaluate(data_.test.images, kEvaluationBatchRows);
  TrainReport report = ScoreEvaluation(config_, evaluation, data_.test.labels);
  report.dataset = config_.data.dataset;
  report.world_size = env_.world_size;
  report.epochs = config_.optim.epochs;
  report.steps = trainer_->step();
  report.global_batch = config_.optim.batch_size;
  // The whole run's figures, over every resume.
  report.train_seconds = run_times_.train_seconds;
  const double timed = static_cast<double>(std::max<int64_t>(run_times_.steps_timed, 1));
  report.mean_step_seconds = run_times_.step_seconds_sum / timed;
  report.mean_allreduce_seconds = run_times_.allreduce_seconds_sum / timed;
  report.parameter_divergence = divergence_;

  ES_ASSIGN_OR_RETURN(std::vector<std::string> devices, ParseDevices(options_.devices));
  trainer_->MoveToCpu();  // the served repository loads on any host
  TrainedVariants variants;
  variants.cascade = ChosenCascade(report);  // ordered by rank 0's timings
  variants.overload_yaml = OverloadLadderYaml(config_, report, variants.cascade);
  // One packed model per serving host and architecture: the hosts share a call as they share separate members.
  ES_ASSIGN_OR_RETURN(variants.packed, PackTrainedMembers(config_, trainer_->modules(), devices.size()));
  if (variants.packed) {
    ES_ASSIGN_OR_RETURN(PackedCheck check, CheckPackedVariant(*variants.packed, data_.test.images, evaluation.members,
                                                              kEvaluationBatchRows));
    AddPackedCheck(*variants.packed, check, evaluation, &report);
  }
  ES_RETURN_IF_ERROR(WriteTrainedRepository(options_.out, config_, trainer_->modules(), devices, variants));
  ES_RETURN_IF_ERROR(WriteReport(options_.out, report, evaluation, data_.test.images,
                                 data_.test.labels, kSampleRows));
  std::cout << "\nTest set (" << data_.test.size() << " rows):\n" << FormatReport(report)
            << "wrote the model repository " << options_.out << " (serve it with: ensemble-server "
            << "--config " << (std::filesystem::path(options_.out) / "server.yaml").string()
            << ")\n";
  if (!options_.publish.empty()) {
    ES_ASSIGN_OR_RETURN(std::vector<std::string> published,
                        options_.shadow_percent > 0
                            ? PublishAsCandidate(options_.publish, config_, trainer_->modules(), options_.shadow_percent)
                            : PublishTrained(options_.publish, config_, trainer_->modules(), variants));
    std::cout << "published into " << options_.publish << ":\n";
    for (const std::string& line : published) std::cout << "  " << line << "\n";
  }
  std::cout.flush();
  return Status::Ok();
}

int RankRun::Run() {
  Status status = Prepare();
  if (status.ok()) status = Train();
  if (status.ok()) status = CheckRanksAgree();
  if (status.ok()) status = Finish();
  if (!status.ok()) {
    spdlog::error("{}", status.message());
    return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

}  // namespace

int RunRank(const TrainOptions& options, const TrainConfig& config, const RankEnv& env) {
  SetUpLogging(options, env.rank);
  try {
    RankRun run(options, config, env);
    return run.Run();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}

}  // namespace es
