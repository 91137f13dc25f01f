// Whole-file reading and crash-safe (atomic) whole-file writing: checkpoints, vocabularies, results.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ember {

// Reads the whole file as bytes. `what` names the file's role in error messages
// (e.g. "reviews file"); throws ember::Error if it is missing or unreadable.
std::string read_whole_file(const std::string& path, std::string_view what);

// Writes `contents` to path + ".tmp.<pid>", fsyncs it, renames it over `path`, then fsyncs the
// folder so that the rename itself survives a power cut.
// NOTE: rename() within one directory is atomic on POSIX: readers see the old file or
// the new one, never half of one; if anything fails the old file is left untouched.
void write_file_atomically(const std::string& path, std::string_view contents);
// The same for a file written in pieces (a header, then each tensor's bytes), without joining them.
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& pieces);

// Fault injection for the kill tests (tests/kill_during_save.sh). With EMBER_FAULT_PAUSE=POINT:MS
// in the environment, fault_pause(POINT) prints "fault pause: POINT" to stderr and sleeps MS
// milliseconds, so that a kill lands there for sure (the points: "evaluation", halfway through
// an epoch's evaluation; "metrics.jsonl", halfway through writing a line of it). Otherwise, and
// for any other point, it does nothing; fault_pause_armed says which.
bool fault_pause_armed(std::string_view point);
void fault_pause(std::string_view point);

}  // namespace ember
