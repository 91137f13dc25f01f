# The rival: times torch.matmul at the same shapes as matmul_bench.cpp and prints JSON.
#
# Usage: /usr/bin/python3 bench/matmul_torch.py [--threads N] [--reps R] [--transposed]
# Prints one JSON object: {"blas": ..., "openblas_core": ..., "threads": N, "results": [...]},
# each result {"name", "M", "N", "K", "batch", "gflops"} with the median time of R runs.
import argparse
import ctypes
import json
import statistics
import time

import torch

# (name, batch, M, N, K); keep in sync with bench/matmul_bench.cpp.
MAIN_SHAPES = [
    ("8192x384x128", 1, 8192, 384, 128),
    ("8192x128x128", 1, 8192, 128, 128),
    ("8192x512x128", 1, 8192, 512, 128),
    ("8192x128x512", 1, 8192, 128, 512),
    ("1024x1024x1024", 1, 1024, 1024, 1024),
]
ATTENTION_SHAPES = [
    ("attn 128x(256x256x32)", 128, 256, 256, 32),
    ("attn 128x(256x32x256)", 128, 256, 32, 256),
    ("attn 256x(256x256x16)", 256, 256, 256, 16),
    ("attn 256x(256x16x256)", 256, 256, 16, 256),
]


def shape_list(transposed):
    shapes = [(name, b, m, n, k, False, False) for name, b, m, n, k in MAIN_SHAPES]
    if transposed:
        for name, b, m, n, k in MAIN_SHAPES:
            shapes.append((name + " AtB", b, m, n, k, True, False))
            shapes.append((name + " ABt", b, m, n, k, False, True))
        # Weight gradients of the 8192-row layers, X^T dY: a small output and a long K.
        shapes += [("dW 128x384x8192 AtB", 1, 128, 384, 8192, True, False),
                   ("dW 128x512x8192 AtB", 1, 128, 512, 8192, True, False),
                   ("dW 512x128x8192 AtB", 1, 512, 128, 8192, True, False)]
    shapes += [(name, b, m, n, k, False, False) for name, b, m, n, k in ATTENTION_SHAPES]
    return shapes


def make_operands(batch, m, n, k, transpose_a, transpose_b):
    """A (M,K) and B (K,N) as views; a transposed operand is the .t() of a contiguous tensor."""
    lead = (batch,) if batch > 1 else ()
    a = torch.randn(*lead, k, m).transpose(-1, -2) if transpose_a else torch.randn(*lead, m, k)
    b = torch.randn(*lead, n, k).transpose(-1, -2) if transpose_b else torch.randn(*lead, k, n)
    return a, b


def time_matmul(a, b, reps):
    out = torch.matmul(a, b)
    for _ in range(2):  # warm-up
        torch.matmul(a, b, out=out)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def loaded_openblas_path():
    """The libopenblas this process actually mapped (torch may load it lazily via libblas)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "openblas" in path and ".so" in path:
                    return path
    except OSError:
        pass
    return None


def openblas_core(path):
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        return {"core": lib.openblas_get_corename().decode(),
                "config": lib.openblas_get_config().decode(),
                "threads": lib.openblas_get_num_threads()}
    except (OSError, AttributeError):
        return None


def blas_description():
    config = torch.__config__.show()
    for line in config.splitlines():
        if "BLAS_INFO" in line or "LAPACK_INFO" in line:
            return line.strip().rstrip(",")
    return "unknown (see torch.__config__.show())"


def threadpool_info():
    try:
        from threadpoolctl import threadpool_info as info
        return [{"api": p.get("internal_api"), "path": p.get("filepath"),
                 "threads": p.get("num_threads"), "arch": p.get("architecture")} for p in info()]
    except ImportError:
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--transposed", action="store_true", help="also time A^T B and A B^T")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    results = []
    for name, batch, m, n, k, transpose_a, transpose_b in shape_list(args.transposed):
        a, b = make_operands(batch, m, n, k, transpose_a, transpose_b)
        seconds = time_matmul(a, b, args.reps)
        gflops = 2.0 * batch * m * n * k / seconds / 1e9
        results.append({"name": name, "batch": batch, "M": m, "N": n, "K": k,
                        "seconds": seconds, "gflops": gflops})

    path = loaded_openblas_path()  # after the matmuls, so a lazily loaded BLAS is mapped
    print(json.dumps({
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "blas": blas_description(),
        "openblas_path": path,
        "openblas": openblas_core(path),
        "threadpoolctl": threadpool_info(),
        "results": results,
    }, indent=1))


if __name__ == "__main__":
    main()
