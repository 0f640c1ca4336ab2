// Communicator: the collectives a tensor-parallel rank needs, on f32 host
// buffers (a device communicator, e.g. NCCL, implements the same calls on its
// stream). Every rank of a group must make the same calls in the same order
// with the same counts; a call returns when this rank's part is done.
//
// Header only, on purpose: model/transformer.h takes a Communicator* (null =
// no tensor parallelism) and sees nothing but this interface, so the model
// layer does not link the parallel layer that sits above it.
#pragma once

#include <cstdint>

namespace specstack {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[i] = sum over ranks of data[i], in place.   data [count]
  virtual void all_reduce_sum(float* data, int64_t count) = 0;

  // Concatenates every rank's block in rank order: recv[r * count + i] =
  // send of rank r [i].   send [count], recv [size() * count]
  virtual void all_gather(const float* send, int64_t count, float* recv) = 0;

  // Returns once every rank has called it.
  virtual void barrier() = 0;
};

}  // namespace specstack
