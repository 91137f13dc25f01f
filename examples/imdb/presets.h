// Named settings: `imdb train --preset NAME` (and compare, and flops) is the command line with the
// preset's flags written first, so an explicit flag overrides its preset wherever it stands (the
// flags keep their last value) and every value goes through the flag table's own checks.
#pragma once
#include <string>
#include <vector>

namespace ember::imdb {

struct Preset {
  std::string name;
  std::vector<std::string> flags;  // what it sets, as the flags that set it
  std::string why;                 // one line, for --help
};

// Every preset, in the order --help lists them.
const std::vector<Preset>& presets();

// "head+tail-512, head+tail-512-bigrams, ...": the names, for messages.
std::string preset_names();

// args (a command line without the program's name: the command, then its flags) with each
// `--preset NAME` / `--preset=NAME` taken out and the last named preset's flags put right after the
// command. Throws ember::Error naming the known presets for an unknown name or a missing one.
std::vector<std::string> expand_preset(const std::vector<std::string>& args);

}  // namespace ember::imdb
