// A communicator for device buffers over a host communicator: every device span is copied to
// host memory, handed to the host communicator (MPI), and the result copied back.
//
// Why it exists. NCCL refuses two ranks of one communicator on the same GPU ("Duplicate GPU
// detected", docs/sources.md, "NCCL", before NCCL 2.30), so a single-GPU machine cannot run a
// 4-rank layout over NCCL. Staging through the host is slower — two PCIe copies per transfer — but
// it lets a 4-rank PP×CP layout train on one H100 with the same step structure a cluster has, which
// is what Fulcrum needs to show imbalance on such a machine. On a cluster, each rank on its own
// GPU, the engine uses NCCL instead (nccl_communicator.h).
//
// Which spans are staged. The engine hands communicators both device buffers (activations,
// gradients, K/V) and a few host ones (gather_parameters' vectors, the loss and norm scalars).
// A span inside a live allocation of the backend (Backend::holds) is staged; any other span
// is passed through untouched. On the CPU backend "device" memory is host memory, and staging
// is a memcpy each way: that is how CI checks this class without a GPU (tests/train, the
// `--comm staged` layouts must match the 1-rank run).
//
// Ordering. `download` waits for the compute stream, so the host copy holds the data the
// kernels produced; `upload` is issued on the compute stream, so later kernels see the result.
// Nothing here is asynchronous: a staged transfer costs the device its idle time, which the
// trace shows as it is.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/communicator.h"

namespace fulcrum::engine {

class StagedCommunicator final : public Communicator {
public:
    // `host` carries the data; `backend` owns the device buffers and moves them.
    StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend);

    int rank() const override { return host_->rank(); }
    int size() const override { return host_->size(); }
    const std::string& name() const override { return host_->name(); }

    void all_reduce_sum(std::span<float> values) override;
    void all_reduce_sum(std::span<double> values) override;  // host values: passed through
    // A device span is copied to its own host buffer, reduced there by the host communicator
    // in the background, and copied back by wait_all_reduces().
    void start_all_reduce_sum(std::span<float> values) override;
    void wait_all_reduces() override;
    void all_gather(std::span<const float> local, std::span<float> out,
                    const std::vector<int>& counts) override;
    void reduce_scatter_sum(std::span<const float> in, std::span<float> out,
                            const std::vector<int>& counts) override;
    void all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                    std::span<float> out, const std::vector<int>& recv_counts) override;
    // Device spans go to their own host buffers, traded there by the host communicator in the
    // background, and `out` is copied back by wait_all_to_all().
    std::int64_t start_all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                                  std::span<float> out,
                                  const std::vector<int>& recv_counts) override;
    void wait_all_to_all(std::int64_t ticket) override;
    void send(std::span<const float> values, int peer) override;
    void post_send(std::span<const float> values, int peer) override;
    void wait_sends() override;
    void recv(std::span<float> values, int peer) override;
    void send_recv(std::span<const float> send_values, int send_peer, std::span<float> recv_values,
                   int recv_peer) override;
    void broadcast(std::span<float> values, int root) override;
    void broadcast_bytes(std::span<std::byte> bytes, int root) override;  // host bytes
    void barrier() override;
    std::unique_ptr<Communicator> split(int color, int key, std::string name) override;

    // Bytes copied device -> host and host -> device so far by this communicator and every
    // communicator split from it (fulcrum-train reports it; tests check staging happened).
    std::int64_t bytes_staged() const { return *bytes_staged_; }

private:
    // A host view of `values`: the span itself when it is host memory, else `staging` filled
    // from the device (`fill` false leaves it unfilled, for outputs).
    std::span<float> to_host(std::span<const float> values, std::vector<float>& staging, bool fill);
    // Copies `host` back into `values` when `host` is a staging copy of it.
    void to_device(std::span<float> values, std::span<const float> host);
    bool on_device(std::span<const float> values) const;
    StagedCommunicator(std::unique_ptr<Communicator> host, Backend& backend,
                       std::shared_ptr<std::int64_t> bytes_staged);

    std::unique_ptr<Communicator> host_;
    Backend& backend_;
    std::vector<float> staging_in_, staging_out_;
    struct Started {
        std::span<float> device;
        std::vector<float> host;
    };
    struct StartedExchange {
        std::int64_t ticket;
        std::span<float> device_out;
        std::vector<float> host_in, host_out;
    };
    std::deque<StartedExchange> exchanges_;  // as started_
    std::deque<Started> started_;  // a deque: host buffers never move while MPI works on them
    std::shared_ptr<std::int64_t> bytes_staged_;  // shared with the splits
};

}  // namespace fulcrum::engine
