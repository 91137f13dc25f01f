# Sourced by the benchmarks: installs PyTorch (Debian's python3-torch, on OpenBLAS's openmp build)
# when missing, and sets `python` and `torch_env`, the command prefix that runs it with `threads`
# threads (set `threads` before sourcing).
# NOTE: Debian's torch is built for the system interpreter, not a pyenv `python3` on PATH.
python=/usr/bin/python3

missing=()
for package in python3-torch libopenblas0-openmp; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "installing ${missing[*]} ..." >&2
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >&2
fi

openblas_dir=""
for dir in /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp; do
  [[ -d "$dir" ]] && openblas_dir="$dir" && break
done
# OpenBLAS 0.3.21 does not recognize this CPU model on its own: name the core explicitly.
# glibc's malloc gives large freed blocks back to the OS, so PyTorch (whose CPU allocator is malloc)
# page-faults every step's large tensors in again: 0.99 s against 0.63 s a recipe step without it
# (docs/performance.md). Keeping them, as the jemalloc or tcmalloc PyTorch users preload would, is
# PyTorch at its best. (Ember's own caching allocator keeps its blocks.)
malloc_keep=(MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=1073741824)
torch_env=(env LD_LIBRARY_PATH="${openblas_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OPENBLAS_CORETYPE=SkylakeX
           OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" "${malloc_keep[@]}")
