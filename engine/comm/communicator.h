// Communicator: the collectives and point-to-point transfers the 4D engine needs, behind one
// interface with one file per backend (MPI here; NCCL with the CUDA backend). Buffers are
// fp32 spans; on a device backend they are device pointers.
//
// Every call is blocking from the caller's point of view and must be made by every member of
// the group in the same order, as in MPI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace fulcrum::engine {

class Communicator {
public:
    virtual ~Communicator() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;
    // "world", "tp", "cp", ... for messages and trace names.
    virtual const std::string& name() const = 0;

    virtual void all_reduce_sum(std::span<float> values) = 0;
    virtual void all_reduce_sum(std::span<double> values) = 0;
    // An all-reduce the caller does not wait for, so that it overlaps what comes next (the
    // trainer reduces each layer's gradients while the backward pass goes on to the layers
    // below). `values` must be left alone until wait_all_reduces(), which returns when every
    // started one holds its sums. Members start them in the same order, as for blocking calls.
    // The default is the blocking call, with nothing left to wait for.
    virtual void start_all_reduce_sum(std::span<float> values) { all_reduce_sum(values); }
    virtual void wait_all_reduces() {}
    // out = concat over members of their `local`; counts[i] = member i's length.
    virtual void all_gather(std::span<const float> local, std::span<float> out,
                            const std::vector<int>& counts) = 0;
    // out = this member's slice (counts[rank()] long) of the element-wise sum of every
    // member's `in`.
    virtual void reduce_scatter_sum(std::span<const float> in, std::span<float> out,
                                    const std::vector<int>& counts) = 0;
    // Member i's `in` holds send_counts[j] elements for each member j, in member order; `out`
    // receives recv_counts[i] from each member i, in member order (MPI_Alltoallv without
    // displacements: every block follows the one before). DeepSpeed-Ulysses' exchange of
    // sequence shards for head shards (engine/model/context_parallel.h).
    virtual void all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                            std::span<float> out, const std::vector<int>& recv_counts) = 0;
    // An all-to-all the caller does not wait for, so that it overlaps what comes next (FPDT
    // trades chunk i + 1's Q, K and V while chunk i's attention computes, Yao et al. 2024,
    // §3.2). `in` and `out` must be left alone until wait_all_to_all(ticket), after which `out`
    // holds what all_to_all would have written; on a device backend "after" means for the work
    // the caller issues next on its compute stream. Several may be in flight, waited for in any
    // order; members start them in the same order, as for blocking calls. The default is the
    // blocking call, whose ticket waits for nothing.
    virtual std::int64_t start_all_to_all(std::span<const float> in,
                                          const std::vector<int>& send_counts, std::span<float> out,
                                          const std::vector<int>& recv_counts) {
        all_to_all(in, send_counts, out, recv_counts);
        return kNoTicket;
    }
    virtual void wait_all_to_all(std::int64_t ticket) { (void)ticket; }
    static constexpr std::int64_t kNoTicket = -1;
    virtual void send(std::span<const float> values, int peer) = 0;
    // A send that returns at once: `values` is copied, and the transfer completes while the
    // caller goes on; wait_sends() waits for every posted send. Pipeline stages post their
    // sends so that two neighbours sending to each other never both block (1F1B's steady
    // state does exactly that).
    virtual void post_send(std::span<const float> values, int peer) = 0;
    virtual void wait_sends() = 0;
    virtual void recv(std::span<float> values, int peer) = 0;
    // Sends to one peer while receiving from another, without the deadlock two blocking
    // sends can cause (1F1B's steady state does exactly that between neighbours).
    virtual void send_recv(std::span<const float> send_values, int send_peer,
                           std::span<float> recv_values, int recv_peer) = 0;
    virtual void broadcast(std::span<float> values, int root) = 0;
    // Bytes from `root` to everyone; every member passes a buffer of the same size.
    virtual void broadcast_bytes(std::span<std::byte> bytes, int root) = 0;
    virtual void barrier() = 0;

    // A sub-communicator of the members that pass the same `color`, ordered by `key`. Every
    // member must call it.
    virtual std::unique_ptr<Communicator> split(int color, int key, std::string name) = 0;
};

// Whether `counts` (one length per member of a group of `size`) gives member `rank` its `own`
// elements and adds up to `total`: the shape all_gather and reduce_scatter_sum need. A wrong
// count makes MPI or NCCL read or write past a buffer, so communicators check it in every build.
inline bool counts_match(const std::vector<int>& counts, int rank, int size, std::size_t own,
                         std::size_t total) {
    return static_cast<int>(counts.size()) == size &&
           counts[static_cast<std::size_t>(rank)] == static_cast<int>(own) &&
           std::accumulate(counts.begin(), counts.end(), std::size_t{0}) == total;
}

// Whether an all-to-all's counts (one per member of a group of `size`) add up to its buffers.
inline bool all_to_all_counts_match(const std::vector<int>& send_counts, std::size_t in,
                                    const std::vector<int>& recv_counts, std::size_t out,
                                    int size) {
    return static_cast<int>(send_counts.size()) == size &&
           static_cast<int>(recv_counts.size()) == size &&
           std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0}) == in &&
           std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0}) == out;
}

}  // namespace fulcrum::engine
