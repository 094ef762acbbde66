// The Open MPI backend of Communicator (the CPU engine's only one; NCCL comes with CUDA).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/comm/communicator.h"

namespace fulcrum::engine {

class MpiCommunicator final : public Communicator {
public:
    // Wraps MPI_COMM_WORLD; MPI must be initialised (see MpiSession).
    static std::unique_ptr<MpiCommunicator> world();

    // Where a node's ranks outnumber its cores (NodeRanks), a rank waiting in MPI would spin
    // on a core another rank needs (Open MPI polls, even with mpi_yield_when_idle): with
    // `nap` on, every wait of every communicator of this process tests its request and
    // sleeps between tests instead, so a waiting rank takes no core (docs/simulate.md, "Ranks
    // that share cores"). Off (the default) every wait is MPI's own.
    static void nap_while_waiting(bool nap);
    ~MpiCommunicator() override;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const std::string& name() const override { return name_; }

    void all_reduce_sum(std::span<float> values) override;
    void all_reduce_sum(std::span<double> values) override;
    void start_all_reduce_sum(std::span<float> values) override;  // MPI_Iallreduce
    void wait_all_reduces() override;
    void all_gather(std::span<const float> local, std::span<float> out,
                    const std::vector<int>& counts) override;
    void reduce_scatter_sum(std::span<const float> in, std::span<float> out,
                            const std::vector<int>& counts) override;
    void all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                    std::span<float> out, const std::vector<int>& recv_counts) override;
    std::int64_t start_all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                                  std::span<float> out,
                                  const std::vector<int>& recv_counts) override;  // MPI_Ialltoallv
    void wait_all_to_all(std::int64_t ticket) override;
    void send(std::span<const float> values, int peer) override;
    void post_send(std::span<const float> values, int peer) override;
    void wait_sends() override;
    void recv(std::span<float> values, int peer) override;
    void send_recv(std::span<const float> send_values, int send_peer, std::span<float> recv_values,
                   int recv_peer) override;
    void broadcast(std::span<float> values, int root) override;
    void broadcast_bytes(std::span<std::byte> bytes, int root) override;
    void barrier() override;
    std::unique_ptr<Communicator> split(int color, int key, std::string name) override;

private:
    MpiCommunicator(MPI_Comm comm, std::string name, bool owned);
    MPI_Comm comm_;
    std::string name_;
    bool owned_;
    int rank_ = 0;
    int size_ = 1;
    struct PostedSend {
        std::vector<float> data;
        MPI_Request request;
    };
    std::deque<PostedSend> posted_;  // a deque: elements never move while MPI reads them
    std::vector<MPI_Request> reductions_;
    // Started all-to-alls: MPI reads the counts and displacements until the request completes.
    struct StartedExchange {
        std::int64_t ticket;
        std::vector<int>
            counts[4];  // send counts, send displacements, receive counts, receive displacements
        MPI_Request request;
    };
    std::deque<StartedExchange> exchanges_;
    std::int64_t next_ticket_ = 0;
};

// This process's place among the ranks on its own node (MPI_COMM_TYPE_SHARED): which GPU it
// takes, and whether the node's ranks outnumber its GPUs; and the cores the node's ranks may
// run on together (the union of their affinity masks), which a CPU-backend run shares among
// its ranks when they outnumber them (docs/simulate.md, "Ranks that share cores").
struct NodeRanks {
    int local_rank = 0;
    int local_size = 1;
    int cores = 0;  // 0: unknown
};
NodeRanks node_ranks();

// MPI_Init_thread / MPI_Finalize for the lifetime of main().
class MpiSession {
public:
    MpiSession(int* argc, char*** argv);
    ~MpiSession();
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;
};

}  // namespace fulcrum::engine
