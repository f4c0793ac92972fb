#!/usr/bin/env python3
"""Lists gradix's public headers, one path a line, relative to the include directory.

usage: list_headers.py INCLUDE_DIR [--cuda | --mpi]

Without an option: the headers a C++ compiler must accept on their own (every .hpp except the
CUDA umbrella cuda.hpp, the CUDA backend and the MPI headers). With --cuda: those that need
nvcc (.cuh files, cuda.hpp, backend/cuda/). With --mpi: those that need MPI's headers
(dist.hpp, dist/). dist/nccl.hpp, which needs all three (nvcc, MPI, NCCL), is in no list:
tests/cuda/nccl_test.cu compiles it. Every installed header counts, detail/ included. Sorted,
'/'-separated.
"""

import os
import sys


def needs_cuda(rel):
    return (rel.endswith(".cuh") or rel == "gradix/cuda.hpp" or rel.startswith("gradix/backend/cuda/")
            or rel == "gradix/dist/nccl.hpp")


def needs_mpi(rel):
    return rel == "gradix/dist.hpp" or rel.startswith("gradix/dist/")


def kind(rel):
    if rel == "gradix/dist/nccl.hpp":
        return "nccl"  # nvcc, MPI and NCCL: compiled by tests/cuda/nccl_test.cu only
    return "cuda" if needs_cuda(rel) else "mpi" if needs_mpi(rel) else ""


def main(argv):
    args = [a for a in argv if a not in ("--cuda", "--mpi")]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    include_dir = args[0]
    want = "cuda" if "--cuda" in argv else "mpi" if "--mpi" in argv else ""
    found = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(include_dir, "gradix")):
        for name in filenames:
            if not (name.endswith(".hpp") or name.endswith(".cuh")):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), include_dir).replace(os.sep, "/")
            if kind(rel) == want:
                found.append(rel)
    for rel in sorted(found):
        print(rel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
