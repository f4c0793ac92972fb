#pragma once
/// \file
/// Training across processes on MPI (docs/distributed.md): row-sharded embedding tables,
/// data parallelism for dense parameters, and results with the same bits at any rank count.
///
///     gx::dist::environment env(argc, argv);             // MPI_Init_thread / MPI_Finalize
///     gx::dist::communicator world;                      // a private copy of MPI_COMM_WORLD
///     gx::dist::block_split split(world, 4096, 256);     // the global batch in blocks of 256
///     gx::dist::sharded_table<float> E(world, rows, dim, gx::dist::placement::block, init);
///     gx::optim::lazy_adam opt({.lr = 1e-2}, E.local()); // steps the rows this rank owns
///     gx::dist::data_parallel dp(world, split, W);       // dense parameters, replicated
///
///     auto look = E.fetch(ids, offsets, split);          // one all-to-all-v: ids, then rows
///     for (index_t j = split.first_block(); j < split.end_block(); ++j) {
///       auto l = gx::backward(loss(gx::gather<0>(look.rows(), look.block(j)), W) / n);
///       losses.push_back(l);
///       dp.keep(j);                                      // block j's dense gradients
///     }
///     E.push(look);      // each touched row's gradient to its owner, summed in block order
///     dp.reduce();       // dense gradients summed in block order, on every rank
///     opt.step(); ...
///
/// **Same bits at any rank count.** The global batch is cut into blocks of a fixed number of
/// samples (block_split), each rank takes a contiguous run of blocks, and every sum over the
/// batch is a sum over blocks in global block order of per-block partial sums, whatever the
/// number of ranks: a table row's gradient is the sum of its per-block gradients (each block
/// has its own rows in the lookup, so backward sums a block's duplicates on its own), a dense
/// gradient likewise (`keep` after each block's backward), and the loss with `ordered_sum`.
/// So losses, gradients and parameters come out bit-identical for 1, 2, 3 or 4 ranks, and
/// equal to one process that accumulates the blocks' gradients in order. The option
/// `data_parallel_options::exact = false` trades that for one MPI_Allreduce.
///
/// The parts, each of which includes what it uses (this header includes them all):
///
/// - `dist/mpi.hpp`: `<mpi.h>` (C only) and `environment` (MPI_Init_thread / MPI_Finalize);
/// - `dist/communicator.hpp`: `communicator` (a private copy of an MPI communicator, on which
///   every exchange runs with a deadline), `communicator_options`, `traffic`; how errors
///   surface (a gradix::error on every rank, never a hang);
/// - `dist/block_split.hpp`: `block_split`, `ordered_sum`;
/// - `dist/sharded_table.hpp`: `sharded_table`, `lookup`, `placement`, `push_options`; what
///   fetch and push send;
/// - `dist/data_parallel.hpp`: `data_parallel`, `data_parallel_options`.
///
/// Not included here: `dist/checkpoint.hpp` (checkpoints loadable at any rank count) and
/// `dist/nccl.hpp` (device parameters over NCCL; needs nvcc and NCCL).
///
/// **Traffic.** Nothing is proportional to the table's size: a rank holds only the rows it
/// owns, and fetch and push send only the ids and rows of its blocks
/// (dist/sharded_table.hpp). `communicator::traffic()` counts bytes and messages sent to
/// other ranks.
///
/// **Errors.** A failing MPI call is a gradix::error naming the call and the rank; a rank that
/// died or skipped a collective makes the others throw at the communicator's deadline; bad
/// input on one rank makes every rank throw with nothing changed (dist/communicator.hpp).
#include "gradix/dist/block_split.hpp"
#include "gradix/dist/communicator.hpp"
#include "gradix/dist/data_parallel.hpp"
#include "gradix/dist/mpi.hpp"
#include "gradix/dist/sharded_table.hpp"
