// Whole-file I/O helpers; the atomic write uses POSIX open/write/fsync/rename.
#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"

namespace ember {

std::string read_whole_file(const std::string& path, std::string_view what) {
  std::error_code error;
  EMBER_CHECK(std::filesystem::exists(path, error), "{} '{}' does not exist", what, path);
  EMBER_CHECK(std::filesystem::is_regular_file(path, error), "{} '{}' is not a regular file", what, path);
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "{} '{}' cannot be opened for reading", what, path);
  // Streamed in chunks until the end, not sized from the file's length: files such as those of
  // /proc report a size of 0 (or a wrong one) and still have contents.
  std::string bytes;
  const auto size_hint = std::filesystem::file_size(path, error);
  if (!error && size_hint < (uint64_t(1) << 40)) bytes.reserve(size_t(size_hint));  // a hint only
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) bytes.append(chunk, size_t(in.gcount()));
  EMBER_CHECK(in.eof() && !in.bad(), "{} '{}': read error", what, path);
  return bytes;
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  write_file_atomically(path, std::vector<std::string_view>{contents});
}

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces) {
  std::string temp_path = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EMBER_CHECK(fd >= 0, "cannot write '{}': cannot create temporary file '{}': {}", path, temp_path,
              std::strerror(errno));

  // Any failure below removes the temporary file and leaves `path` as it was.
  auto give_up = [&](const char* step) {
    std::string reason = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    ::unlink(temp_path.c_str());
    fail("cannot write '{}': {} failed: {} (the previous file, if any, is unchanged)", path, step, reason);
  };
  auto write_all = [&](const char* data, size_t size) {
    size_t written = 0;
    while (written < size) {
      ssize_t n = ::write(fd, data + written, size - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) give_up("write");
      written += size_t(n);
    }
  };
  // Fault injection for tests/kill_during_save.sh: EMBER_FAULT_PAUSE_MID_WRITE=NAME:MS makes the
  // write of a file named NAME stop for MS milliseconds halfway through its bytes, so that a kill
  // lands mid-write for sure.
  size_t total = 0;
  for (std::string_view contents : pieces) total += contents.size();
  size_t pause_at = SIZE_MAX, offset = 0;
  long pause_ms = 0;
  if (const char* fault = std::getenv("EMBER_FAULT_PAUSE_MID_WRITE")) {
    std::string_view spec(fault);
    size_t colon = spec.rfind(':');
    if (colon != std::string_view::npos && std::filesystem::path(path).filename() == spec.substr(0, colon)) {
      pause_at = total / 2;
      pause_ms = std::atol(fault + colon + 1);
    }
  }
  for (std::string_view contents : pieces) {
    if (pause_at >= offset && pause_at < offset + contents.size()) {
      const size_t first = pause_at - offset;
      write_all(contents.data(), first);
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      write_all(contents.data() + first, contents.size() - first);
    } else {
      write_all(contents.data(), contents.size());
    }
    offset += contents.size();
  }
  if (::fsync(fd) != 0) give_up("fsync");
  int close_result = ::close(fd);
  fd = -1;
  if (close_result != 0) give_up("close");
  if (::rename(temp_path.c_str(), path.c_str()) != 0) give_up("rename");
  // The rename is only durable once the directory entry is on disk: fsync the folder too.
  // (After the rename the new file is in place; a failure here is reported, nothing is undone.)
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string folder = parent.empty() ? std::string(".") : parent.string();
  int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  EMBER_CHECK(dir_fd >= 0, "wrote '{}' but cannot open its folder '{}' to fsync it: {}", path, folder,
              std::strerror(errno));
  int sync_result = ::fsync(dir_fd);
  int sync_errno = errno;
  ::close(dir_fd);
  EMBER_CHECK(sync_result == 0, "wrote '{}' but fsync of its folder '{}' failed: {}", path, folder,
              std::strerror(sync_errno));
}

bool fault_pause_armed(std::string_view point) {
  static const std::string spec = [] {
    const char* env = std::getenv("EMBER_FAULT_PAUSE");
    return std::string(env != nullptr ? env : "");
  }();
  const size_t colon = spec.rfind(':');
  return colon != std::string::npos && std::string_view(spec).substr(0, colon) == point;
}

void fault_pause(std::string_view point) {
  if (!fault_pause_armed(point)) return;
  const char* spec = std::getenv("EMBER_FAULT_PAUSE");
  std::fprintf(stderr, "fault pause: %.*s\n", int(point.size()), point.data());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(std::strrchr(spec, ':') + 1)));
}

}  // namespace ember
