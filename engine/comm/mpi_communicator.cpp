#include "engine/comm/mpi_communicator.h"

#include "engine/backend/backend.h"

namespace fulcrum::engine {
namespace {

// Counts -> displacements for the v-variants of MPI collectives.
std::vector<int> displacements(const std::vector<int>& counts) {
    std::vector<int> offsets(counts.size(), 0);
    for (std::size_t i = 1; i < counts.size(); ++i) {
        offsets[i] = offsets[i - 1] + counts[i - 1];
    }
    return offsets;
}

constexpr int kTag = 7;

}  // namespace

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
    return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(MPI_COMM_WORLD, "world", false));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, bool owned)
    : comm_(comm), name_(std::move(name)), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) {
        MPI_Comm_free(&comm_);
    }
}

void MpiCommunicator::all_reduce_sum(std::span<float> values) {
    if (size_ > 1) {
        MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_FLOAT,
                      MPI_SUM, comm_);
    }
}

void MpiCommunicator::all_reduce_sum(std::span<double> values) {
    if (size_ > 1) {
        MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                      MPI_SUM, comm_);
    }
}

void MpiCommunicator::start_all_reduce_sum(std::span<float> values) {
    if (size_ > 1) {
        MPI_Request request = MPI_REQUEST_NULL;
        MPI_Iallreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_FLOAT,
                       MPI_SUM, comm_, &request);
        reductions_.push_back(request);
    }
}

void MpiCommunicator::wait_all_reduces() {
    MPI_Waitall(static_cast<int>(reductions_.size()), reductions_.data(), MPI_STATUSES_IGNORE);
    reductions_.clear();
}

void MpiCommunicator::all_gather(std::span<const float> local, std::span<float> out,
                                 const std::vector<int>& counts) {
    FULCRUM_CHECK(counts_match(counts, rank_, size_, local.size(), out.size()),
                  "all_gather: counts do not match the buffers");
    const auto offsets = displacements(counts);
    MPI_Allgatherv(local.data(), static_cast<int>(local.size()), MPI_FLOAT, out.data(),
                   counts.data(), offsets.data(), MPI_FLOAT, comm_);
}

void MpiCommunicator::reduce_scatter_sum(std::span<const float> in, std::span<float> out,
                                         const std::vector<int>& counts) {
    FULCRUM_CHECK(counts_match(counts, rank_, size_, out.size(), in.size()),
                  "reduce_scatter_sum: counts do not match the buffers");
    MPI_Reduce_scatter(in.data(), out.data(), counts.data(), MPI_FLOAT, MPI_SUM, comm_);
}

void MpiCommunicator::send(std::span<const float> values, int peer) {
    MPI_Send(values.data(), static_cast<int>(values.size()), MPI_FLOAT, peer, kTag, comm_);
}

void MpiCommunicator::post_send(std::span<const float> values, int peer) {
    auto& posted = posted_.emplace_back();
    posted.data.assign(values.begin(), values.end());
    MPI_Isend(posted.data.data(), static_cast<int>(posted.data.size()), MPI_FLOAT, peer, kTag,
              comm_, &posted.request);
}

void MpiCommunicator::wait_sends() {
    for (auto& posted : posted_) {
        MPI_Wait(&posted.request, MPI_STATUS_IGNORE);
    }
    posted_.clear();
}

void MpiCommunicator::recv(std::span<float> values, int peer) {
    MPI_Recv(values.data(), static_cast<int>(values.size()), MPI_FLOAT, peer, kTag, comm_,
             MPI_STATUS_IGNORE);
}

void MpiCommunicator::send_recv(std::span<const float> send_values, int send_peer,
                                std::span<float> recv_values, int recv_peer) {
    MPI_Sendrecv(send_values.data(), static_cast<int>(send_values.size()), MPI_FLOAT, send_peer,
                 kTag, recv_values.data(), static_cast<int>(recv_values.size()), MPI_FLOAT,
                 recv_peer, kTag, comm_, MPI_STATUS_IGNORE);
}

void MpiCommunicator::broadcast(std::span<float> values, int root) {
    MPI_Bcast(values.data(), static_cast<int>(values.size()), MPI_FLOAT, root, comm_);
}

void MpiCommunicator::broadcast_bytes(std::span<std::byte> bytes, int root) {
    MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, root, comm_);
}

void MpiCommunicator::barrier() {
    MPI_Barrier(comm_);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, std::string name) {
    MPI_Comm sub;
    MPI_Comm_split(comm_, color, key, &sub);
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub, std::move(name), true));
}

NodeRanks node_ranks() {
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    NodeRanks ranks;
    MPI_Comm_rank(node, &ranks.local_rank);
    MPI_Comm_size(node, &ranks.local_size);
    MPI_Comm_free(&node);
    return ranks;
}

MpiSession::MpiSession(int* argc, char*** argv) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
}

MpiSession::~MpiSession() {
    MPI_Finalize();
}

}  // namespace fulcrum::engine
