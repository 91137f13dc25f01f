# Sourced by the perf profiles (bench/profile.sh, bench/profile_ops.sh): from the repository root,
# installs Debian's linux-perf when perf is missing, builds train_step_bench in $EMBER_BUILD_DIR
# (default build/, configured as Release when new) and writes the recipe's initial weights for H
# heads: sets `build` and `init` (the weights file), in the folder WORK.
#   source bench/perf_common.sh; prepare_profile WORK H
prepare_profile() {
  local work=$1 heads=$2
  if ! command -v perf >/dev/null; then
    local sudo_cmd=""
    [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq linux-perf >&2
  fi
  build="${EMBER_BUILD_DIR:-build}"
  [[ -f "$build/CMakeCache.txt" ]] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >&2
  cmake --build "$build" --target train_step_bench -j 2 >&2
  mkdir -p "$work"
  init="$work/init_h$heads.safetensors"
  "$build/train_step_bench" --write-init "$init" --heads "$heads"
}
