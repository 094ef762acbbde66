#include "engine/comm/mpi_communicator.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

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

bool napping = false;

// A wait first tests and yields a few times (a partner already running answers within them),
// then sleeps between tests: long enough that a waiting rank costs its core nothing, short
// against a pass (milliseconds on the CPU backend).
constexpr int kYieldingTests = 32;
constexpr std::chrono::microseconds kNap{50};

void wait(MPI_Request& request) {
    int done = 0;
    for (int i = 0; i < kYieldingTests && done == 0; ++i) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (done == 0) {
            sched_yield();
        }
    }
    while (done == 0) {
        std::this_thread::sleep_for(kNap);
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    }
}

// A collective: with napping, its ranks first meet at a barrier they wait for napping
// (MPI_Ibarrier), then run MPI's blocking collective together, which then waits little. Its
// non-blocking twin would progress only at each test, a nap apart.
template <typename Blocking>
void collective(MPI_Comm comm, Blocking&& blocking) {
    if (napping) {
        MPI_Request arrived = MPI_REQUEST_NULL;
        MPI_Ibarrier(comm, &arrived);
        wait(arrived);
    }
    blocking();
}

// A point-to-point call: the blocking one, or with napping its non-blocking twin (`start`
// fills the request) and a napping wait.
template <typename Blocking, typename Start>
void point_to_point(Blocking&& blocking, Start&& start) {
    if (!napping) {
        blocking();
        return;
    }
    MPI_Request request = MPI_REQUEST_NULL;
    start(&request);
    wait(request);
}

}  // namespace

void MpiCommunicator::nap_while_waiting(bool nap) {
    napping = nap;
}

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
        const int n = static_cast<int>(values.size());
        collective(comm_, [&] {
            MPI_Allreduce(MPI_IN_PLACE, values.data(), n, MPI_FLOAT, MPI_SUM, comm_);
        });
    }
}

void MpiCommunicator::all_reduce_sum(std::span<double> values) {
    if (size_ > 1) {
        const int n = static_cast<int>(values.size());
        collective(comm_, [&] {
            MPI_Allreduce(MPI_IN_PLACE, values.data(), n, MPI_DOUBLE, MPI_SUM, comm_);
        });
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
    if (napping) {
        for (MPI_Request& request : reductions_) {
            wait(request);
        }
    } else {
        MPI_Waitall(static_cast<int>(reductions_.size()), reductions_.data(), MPI_STATUSES_IGNORE);
    }
    reductions_.clear();
}

void MpiCommunicator::all_gather(std::span<const float> local, std::span<float> out,
                                 const std::vector<int>& counts) {
    FULCRUM_CHECK(counts_match(counts, rank_, size_, local.size(), out.size()),
                  "all_gather: counts do not match the buffers");
    const auto offsets = displacements(counts);
    const int n = static_cast<int>(local.size());
    collective(comm_, [&] {
        MPI_Allgatherv(local.data(), n, MPI_FLOAT, out.data(), counts.data(), offsets.data(),
                       MPI_FLOAT, comm_);
    });
}

void MpiCommunicator::reduce_scatter_sum(std::span<const float> in, std::span<float> out,
                                         const std::vector<int>& counts) {
    FULCRUM_CHECK(counts_match(counts, rank_, size_, out.size(), in.size()),
                  "reduce_scatter_sum: counts do not match the buffers");
    collective(comm_, [&] {
        MPI_Reduce_scatter(in.data(), out.data(), counts.data(), MPI_FLOAT, MPI_SUM, comm_);
    });
}

void MpiCommunicator::all_to_all(std::span<const float> in, const std::vector<int>& send_counts,
                                 std::span<float> out, const std::vector<int>& recv_counts) {
    FULCRUM_CHECK(all_to_all_counts_match(send_counts, in.size(), recv_counts, out.size(), size_),
                  "all_to_all: counts do not match the buffers");
    const auto send_offsets = displacements(send_counts);
    const auto recv_offsets = displacements(recv_counts);
    collective(comm_, [&] {
        MPI_Alltoallv(in.data(), send_counts.data(), send_offsets.data(), MPI_FLOAT, out.data(),
                      recv_counts.data(), recv_offsets.data(), MPI_FLOAT, comm_);
    });
}

std::int64_t MpiCommunicator::start_all_to_all(std::span<const float> in,
                                               const std::vector<int>& send_counts,
                                               std::span<float> out,
                                               const std::vector<int>& recv_counts) {
    FULCRUM_CHECK(all_to_all_counts_match(send_counts, in.size(), recv_counts, out.size(), size_),
                  "start_all_to_all: counts do not match the buffers");
    StartedExchange& x = exchanges_.emplace_back(StartedExchange{
        next_ticket_++,
        {send_counts, displacements(send_counts), recv_counts, displacements(recv_counts)},
        MPI_REQUEST_NULL});
    // Open MPI's non-blocking collectives (coll/libnbc) take a send buffer equal to the
    // receive buffer for MPI_IN_PLACE, and then send the receive counts: an empty half that
    // starts where the other does must point elsewhere.
    static const float nothing_sent = 0;
    static float nothing_received = 0;
    FULCRUM_CHECK(in.empty() || out.empty() || in.data() != out.data(),
                  "start_all_to_all: the send and receive buffers are the same");
    const float* send = in.empty() ? &nothing_sent : in.data();
    float* receive = out.empty() ? &nothing_received : out.data();
    MPI_Ialltoallv(send, x.counts[0].data(), x.counts[1].data(), MPI_FLOAT, receive,
                   x.counts[2].data(), x.counts[3].data(), MPI_FLOAT, comm_, &x.request);
    return x.ticket;
}

void MpiCommunicator::wait_all_to_all(std::int64_t ticket) {
    const auto x = std::find_if(exchanges_.begin(), exchanges_.end(),
                                [&](const StartedExchange& e) { return e.ticket == ticket; });
    if (x == exchanges_.end()) {
        return;  // kNoTicket, or waited for already
    }
    if (napping) {
        wait(x->request);
    } else {
        MPI_Wait(&x->request, MPI_STATUS_IGNORE);
    }
    exchanges_.erase(x);
}

void MpiCommunicator::send(std::span<const float> values, int peer) {
    const int n = static_cast<int>(values.size());
    point_to_point(
        [&] { MPI_Send(values.data(), n, MPI_FLOAT, peer, kTag, comm_); },
        [&](MPI_Request* r) { MPI_Isend(values.data(), n, MPI_FLOAT, peer, kTag, comm_, r); });
}

void MpiCommunicator::post_send(std::span<const float> values, int peer) {
    auto& posted = posted_.emplace_back();
    posted.data.assign(values.begin(), values.end());
    MPI_Isend(posted.data.data(), static_cast<int>(posted.data.size()), MPI_FLOAT, peer, kTag,
              comm_, &posted.request);
}

void MpiCommunicator::wait_sends() {
    for (auto& posted : posted_) {
        if (napping) {
            wait(posted.request);
        } else {
            MPI_Wait(&posted.request, MPI_STATUS_IGNORE);
        }
    }
    posted_.clear();
}

void MpiCommunicator::recv(std::span<float> values, int peer) {
    const int n = static_cast<int>(values.size());
    point_to_point(
        [&] { MPI_Recv(values.data(), n, MPI_FLOAT, peer, kTag, comm_, MPI_STATUS_IGNORE); },
        [&](MPI_Request* r) { MPI_Irecv(values.data(), n, MPI_FLOAT, peer, kTag, comm_, r); });
}

void MpiCommunicator::send_recv(std::span<const float> send_values, int send_peer,
                                std::span<float> recv_values, int recv_peer) {
    const int sent = static_cast<int>(send_values.size());
    const int received = static_cast<int>(recv_values.size());
    if (!napping) {
        MPI_Sendrecv(send_values.data(), sent, MPI_FLOAT, send_peer, kTag, recv_values.data(),
                     received, MPI_FLOAT, recv_peer, kTag, comm_, MPI_STATUS_IGNORE);
        return;
    }
    MPI_Request requests[2];
    MPI_Irecv(recv_values.data(), received, MPI_FLOAT, recv_peer, kTag, comm_, &requests[0]);
    MPI_Isend(send_values.data(), sent, MPI_FLOAT, send_peer, kTag, comm_, &requests[1]);
    wait(requests[0]);
    wait(requests[1]);
}

void MpiCommunicator::broadcast(std::span<float> values, int root) {
    const int n = static_cast<int>(values.size());
    collective(comm_, [&] { MPI_Bcast(values.data(), n, MPI_FLOAT, root, comm_); });
}

void MpiCommunicator::broadcast_bytes(std::span<std::byte> bytes, int root) {
    const int n = static_cast<int>(bytes.size());
    collective(comm_, [&] { MPI_Bcast(bytes.data(), n, MPI_BYTE, root, comm_); });
}

void MpiCommunicator::barrier() {
    if (napping) {
        MPI_Request request = MPI_REQUEST_NULL;
        MPI_Ibarrier(comm_, &request);
        wait(request);
    } else {
        MPI_Barrier(comm_);
    }
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
    // Every rank joins the reduction, an empty mask where it cannot read its own.
    cpu_set_t own, all;
    CPU_ZERO(&own);
    if (sched_getaffinity(0, sizeof own, &own) != 0) {
        CPU_ZERO(&own);
    }
    MPI_Allreduce(&own, &all, static_cast<int>(sizeof own), MPI_BYTE, MPI_BOR, node);
    ranks.cores = CPU_COUNT(&all);
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
