#pragma once
/// \file
/// Sinks of a backward with a fused optimizer step (training/fused.hpp): the rows of a
/// gradient handed to the optimizer as the scatter kernel finishes them, never stored.
///
/// A fused call registers, on its thread, one sink per optimizer parameter: the call buffer
/// its uses are redirected into, `begin(ctx)`, called once before the first row, and
/// `apply(ctx, slice, row)`, the optimizer's update of one slice from its full gradient row
/// (called from several threads at once for distinct slices). The plan runner (exec/run.hpp) arms a sink when exactly
/// one kernel of the plan writes its buffer (arm_sinks); the host executor then runs that
/// kernel in its row-by-row form when the kernel's map allows it (backend/host/fused_rows.hpp),
/// which reserves nothing in the buffer, calls apply once per touched slice with the slice's
/// gradient summed in the order the plain kernel would add it (the same bits), and marks the
/// sink applied. The fused call's step then skips applied sinks' parameters. Host only; never
/// in constant evaluation.

#include "gradix/config.hpp"
#include "gradix/core/shape.hpp"

#include <cstddef>

namespace gradix::detail {

struct fused_sink {
  void const* storage = nullptr;  // the call buffer
  void (*begin)(void* ctx) = nullptr;  // once, before the first row of a call (serially)
  void (*apply)(void* ctx, index_t slice, void const* row) = nullptr;  // distinct slices may run concurrently
  void* ctx = nullptr;
  int writers = 0;       // kernels of the running plan that write the buffer
  bool armed = false;    // exactly one: a kernel may apply rows
  bool applied = false;  // a kernel applied every row of this call
  index_t rows = 0;      // rows applied (tests check the path ran)
};
struct fused_sinks {
  fused_sink* sinks;
  std::size_t n;
};
[[gnu::noinline]] inline fused_sinks const*& current_fused_sinks() {
  thread_local fused_sinks const* s = nullptr;
  return s;
}
/// The sink of buffer g when one is registered on this thread (armed or not), or null.
inline fused_sink* sink_of(void const* g) {
  fused_sinks const* s = current_fused_sinks();
  if (!s) return nullptr;
  for (std::size_t k = 0; k < s->n; ++k)
    if (s->sinks[k].storage == g) return &s->sinks[k];
  return nullptr;
}
/// The armed sink of buffer g, or null.
inline fused_sink* armed_sink(void const* g) {
  fused_sink* s = sink_of(g);
  return s && s->armed ? s : nullptr;
}

}  // namespace gradix::detail
